"""Collective and point-to-point times (dse/formulas/comm.py) against the algorithms'
textbook costs, written out here in float64 numpy.

References:
- ring all-reduce of S bytes over g devices: 2(g-1) steps, each moving S/g bytes and
  paying one link latency: 2(g-1)/g S / bw + 2(g-1) latency (Patarasuk & Yuan 2009,
  "Bandwidth optimal all-reduce algorithms for clusters of workstations"; Thakur,
  Rabenseifner & Gropp 2005, "Optimization of collective communication operations in
  MPICH", Sec. 4). A reduce-scatter or an all-gather is one half of it: (g-1) steps.
- hierarchical all-reduce across nodes (NCCL's hierarchical/tree algorithms, Horovod):
  reduce-scatter inside each node, all-reduce the 1/g_in shard across the n nodes,
  all-gather inside the node again.
- pipeline stages of tp consecutive devices: a stage boundary crosses nodes when the
  last device of one stage and the first of the next sit in different nodes.
- all-to-all: each device keeps 1/g of its data and sends (g_in - 1)/g over the
  intra-node link and (g - g_in)/g over the network at once (NCCL posts every peer's
  send together), one latency per kind of link used.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dse.formulas import comm
from dse.formulas.types import Rates

INTRA_BW, INTRA_LAT = 300e9, 2e-6  # bytes/s per direction, seconds per hop
INTER_BW, INTER_LAT = 50e9, 10e-6
PER_NODE = 8.0
S = 64.0 * 2**20  # a 64 MiB tensor


def rates(devices_per_node=PER_NODE) -> Rates:
    f = np.float64
    return Rates(gemm_flops_per_s=f(1e15), attention_flops_per_s=f(1e15),
                 vector_flops_per_s=f(1e14), hbm_bw_bytes_per_s=f(3e12),
                 intra_bw_bytes_per_s=f(INTRA_BW), intra_latency_s=f(INTRA_LAT),
                 inter_bw_bytes_per_s=f(INTER_BW), inter_latency_s=f(INTER_LAT),
                 devices_per_node=f(devices_per_node))


def jit64(fn, *args):
    """``fn(*args)`` under ``jax.jit`` with 64-bit floats, as numpy."""
    with jax.enable_x64(True):
        out = jax.jit(fn)(*(np.float64(a) if isinstance(a, (int, float)) else a
                            for a in args))
        return jax.tree_util.tree_map(np.asarray, out)


def ring(steps_per_phase, phases, size, g, bw, latency):
    """``phases`` passes of a g-device ring, each (g-1) steps of size/g bytes."""
    return phases * steps_per_phase * (size / g / bw + latency)


# --- all-reduce -----------------------------------------------------------------------


@pytest.mark.parametrize("g", [2, 3, 4, 8])
def test_ring_all_reduce_inside_a_node(g):
    expected = 2 * (g - 1) / g * S / INTRA_BW + 2 * (g - 1) * INTRA_LAT
    got = jit64(comm.all_reduce_s, S, g, rates())
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # the same, as 2(g-1) steps of S/g bytes
    np.testing.assert_allclose(got, ring(g - 1, 2, S, g, INTRA_BW, INTRA_LAT), rtol=1e-12)


def test_a_group_of_one_communicates_nothing():
    for fn in (comm.all_reduce_s, comm.all_gather_s, comm.reduce_scatter_s, comm.all_to_all_s):
        assert jit64(fn, S, 1.0, rates()) == 0.0


@pytest.mark.parametrize("g, nodes", [(16, 2), (32, 4), (64, 8)])
def test_hierarchical_all_reduce_across_nodes(g, nodes):
    """g = nodes x 8 consecutive devices: reduce-scatter over the 8 of a node, ring
    all-reduce of the S/8 shard over the nodes, all-gather over the 8 again."""
    inner = 8
    reduce_scatter = (inner - 1) * (S / inner / INTRA_BW + INTRA_LAT)
    shard = S / inner
    across = 2 * (nodes - 1) / nodes * shard / INTER_BW + 2 * (nodes - 1) * INTER_LAT
    all_gather = reduce_scatter
    expected = reduce_scatter + across + all_gather
    np.testing.assert_allclose(jit64(comm.all_reduce_s, S, g, rates()), expected, rtol=1e-12)


def test_strided_groups_count_only_the_members_sharing_a_node():
    """A data-parallel group strided by tp: tp = 8 fills the node, so every peer is in
    another node (a flat ring over the network); tp = 2 leaves 4 peers per node."""
    g = 4
    flat = 2 * (g - 1) / g * S / INTER_BW + 2 * (g - 1) * INTER_LAT
    np.testing.assert_allclose(jit64(lambda s, g, r: comm.all_reduce_s(s, g, r, 8.0),
                                     S, g, rates()), flat, rtol=1e-12)
    # a stride beyond the node size: still one member per node
    np.testing.assert_allclose(jit64(lambda s, g, r: comm.all_reduce_s(s, g, r, 16.0),
                                     S, g, rates()), flat, rtol=1e-12)
    # stride 2, g = 8: 4 members per node, 2 nodes
    inner, nodes = 4, 2
    expected = (2 * (inner - 1) * (S / inner / INTRA_BW + INTRA_LAT)
                + 2 * (nodes - 1) * (S / inner / nodes / INTER_BW + INTER_LAT))
    np.testing.assert_allclose(jit64(lambda s, g, r: comm.all_reduce_s(s, g, r, 2.0),
                                     S, 8.0, rates()), expected, rtol=1e-12)


def test_members_per_node():
    # (group, stride) -> members of the group in one 8-device node, by listing devices
    for group, stride in [(8, 1), (16, 1), (4, 2), (8, 2), (4, 8), (2, 16), (3, 1)]:
        devices = np.arange(group) * stride
        expected = np.bincount(devices // 8).max()
        got = jit64(comm.members_per_node, float(group), float(stride), rates())
        assert got == expected, (group, stride)


@pytest.mark.parametrize("g", [2, 4, 8, 16, 32])
def test_all_gather_and_reduce_scatter_are_half_an_all_reduce(g):
    r = rates()
    full = jit64(comm.all_reduce_s, S, g, r)
    gather = jit64(comm.all_gather_s, S, g, r)
    scatter = jit64(comm.reduce_scatter_s, S, g, r)
    np.testing.assert_allclose(gather, full / 2, rtol=1e-12)
    np.testing.assert_allclose(scatter, full / 2, rtol=1e-12)
    if g <= 8:  # one node: (g-1) steps of S/g bytes
        np.testing.assert_allclose(gather, (g - 1) / g * S / INTRA_BW + (g - 1) * INTRA_LAT,
                                   rtol=1e-12)


def test_all_reduce_broadcasts_over_arrays():
    sizes = np.array([[1e3], [1e6], [1e9]])  # [3, 1]
    groups = np.array([[1.0, 2.0, 8.0, 16.0]])  # [1, 4]
    got = jit64(comm.all_reduce_s, sizes, groups, rates())
    assert got.shape == (3, 4)
    for i, s in enumerate(sizes[:, 0]):
        for j, g in enumerate(groups[0]):
            inner = min(g, 8.0)
            nodes = np.ceil(g / inner)
            expected = (2 * (inner - 1) * (s / inner / INTRA_BW + INTRA_LAT)
                        + 2 * (nodes - 1) * (s / inner / nodes / INTER_BW + INTER_LAT))
            np.testing.assert_allclose(got[i, j], expected, rtol=1e-12)


# --- pipeline hops --------------------------------------------------------------------


def brute_force_hops(pp: int, tp: int, per_node: int) -> tuple[int, int]:
    """Stage i holds devices [i tp, (i+1) tp); count boundaries inside / across nodes."""
    inter = sum((((i + 1) * tp - 1) // per_node) != (((i + 1) * tp) // per_node)
                for i in range(pp - 1))
    return pp - 1 - inter, inter


@pytest.mark.parametrize("pp, tp", [(1, 1), (2, 1), (8, 1), (8, 2), (16, 4), (4, 8),
                                    (3, 16), (16, 1), (5, 2)])
def test_pipeline_hops_follow_the_placement_of_stages(pp, tp):
    intra, inter = jit64(comm.pipeline_hops, float(pp), float(tp), rates())
    assert (intra, inter) == brute_force_hops(pp, tp, 8)


@pytest.mark.parametrize("pp, tp", [(8, 2), (4, 8), (2, 1), (1, 4)])
def test_pipeline_transfer_pays_each_hop_at_its_link(pp, tp):
    size = 4096.0 * 2 * 512  # one micro-batch's hidden states
    intra, inter = brute_force_hops(pp, tp, 8)
    expected = (intra * (INTRA_LAT + size / INTRA_BW) + inter * (INTER_LAT + size / INTER_BW))
    np.testing.assert_allclose(jit64(comm.pipeline_transfer_s, size, float(pp), float(tp),
                                     rates()), expected, rtol=1e-12, atol=0)


# --- all-to-all -----------------------------------------------------------------------


def test_all_to_all_inside_a_node():
    g = 4  # all in one node: 3/4 of the data over NVLink, one intra latency
    expected = S * (g - 1) / g / INTRA_BW + INTRA_LAT
    np.testing.assert_allclose(jit64(comm.all_to_all_s, S, g, rates()), expected, rtol=1e-12)


def test_all_to_all_across_nodes_overlaps_the_two_links():
    g = 16  # 8 per node: 7/16 over NVLink and 8/16 over the network at once
    intra = S * 7 / 16 / INTRA_BW
    inter = S * 8 / 16 / INTER_BW
    expected = max(intra, inter) + INTRA_LAT + INTER_LAT
    np.testing.assert_allclose(jit64(comm.all_to_all_s, S, g, rates()), expected, rtol=1e-12)


def test_all_to_all_with_one_device_per_node_uses_only_the_network():
    g = 8
    expected = S * (g - 1) / g / INTER_BW + INTER_LAT  # no intra-node latency
    np.testing.assert_allclose(jit64(comm.all_to_all_s, S, g, rates(devices_per_node=1.0)),
                               expected, rtol=1e-12)
    assert jit64(comm.all_to_all_s, S, 1.0, rates(devices_per_node=1.0)) == 0.0


def test_float32_agrees_with_float64():
    """The engine runs in float32 by default: the same formulas to float32 rounding."""
    r32 = Rates(*(np.float32(x) for x in rates()))
    for fn, args in ((comm.all_reduce_s, (S, 32.0)), (comm.all_to_all_s, (S, 16.0)),
                     (comm.pipeline_transfer_s, (S, 8.0, 2.0))):
        narrow = np.asarray(jax.jit(fn)(*(np.float32(a) for a in args), r32))
        assert narrow.dtype == np.float32
        np.testing.assert_allclose(narrow, jit64(fn, *args, rates()), rtol=1e-6)

"""Collective and point-to-point communication times over a two-level network.

Devices sit in nodes of ``devices_per_node``; inside a node they talk over the
intra-node link (NVLink, xGMI, ICI), across nodes over the inter-node network, both
given per device and per direction. Groups are laid out on consecutive devices.

A ring all-reduce of S bytes over g devices moves 2(g-1)/g S bytes per device in
2(g-1) latency-bound steps (Patarasuk & Yuan 2009; Thakur et al. 2005). Across nodes
the hierarchical algorithm (NCCL's tree/hierarchical, Horovod) reduce-scatters inside
each node, all-reduces the 1/g_in shard across the n nodes, and all-gathers inside the
node again.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import Rates


def members_per_node(group, stride, rates: Rates):
    """Devices of a group whose members sit ``stride`` devices apart that share a node.

    Megatron-LM orders ranks tp, cp, dp, pp (innermost first): a tensor-parallel group
    is consecutive (stride 1), a data-parallel group strides by tp x cp, so with tp = 8
    on 8-device nodes every data-parallel peer is in another node.
    """
    return jnp.clip(jnp.floor(rates.devices_per_node / stride), 1.0, group)


def _two_level(bytes_, group, rates: Rates, phases, stride=1.0):
    """``phases`` = 2 for all-reduce, 1 for reduce-scatter or all-gather."""
    inner = members_per_node(group, stride, rates)
    nodes = jnp.ceil(group / inner)
    intra = phases * (inner - 1.0) * (bytes_ / inner / rates.intra_bw_bytes_per_s
                                      + rates.intra_latency_s)
    inter = phases * (nodes - 1.0) * (bytes_ / inner / nodes / rates.inter_bw_bytes_per_s
                                      + rates.inter_latency_s)
    return intra + inter


def all_reduce_s(bytes_, group, rates: Rates, stride=1.0):
    """Seconds to all-reduce ``bytes_`` (the full tensor size) over ``group`` devices."""
    return _two_level(bytes_, group, rates, 2.0, stride)


def all_gather_s(bytes_, group, rates: Rates, stride=1.0):
    """Seconds to all-gather a tensor of ``bytes_`` in total (each device holds 1/group)."""
    return _two_level(bytes_, group, rates, 1.0, stride)


def reduce_scatter_s(bytes_, group, rates: Rates, stride=1.0):
    """Seconds to reduce-scatter a tensor of ``bytes_`` over ``group`` devices."""
    return _two_level(bytes_, group, rates, 1.0, stride)


def pipeline_hops(pp, tp, rates: Rates):
    """Stage boundaries that stay inside a node and that cross nodes: (intra, inter).

    Stages of ``tp`` devices are placed consecutively; a node holds
    max(floor(devices_per_node / tp), 1) stages (exact when tp divides the node size or
    the node size divides tp).
    """
    per_node = jnp.maximum(jnp.floor(rates.devices_per_node / tp), 1.0)
    inter = jnp.floor((pp - 1.0) / per_node)
    return pp - 1.0 - inter, inter


def pipeline_transfer_s(bytes_, pp, tp, rates: Rates):
    """Seconds for one activation tensor of ``bytes_`` to cross all pp - 1 stage boundaries."""
    intra, inter = pipeline_hops(pp, tp, rates)
    return (intra * (rates.intra_latency_s + bytes_ / rates.intra_bw_bytes_per_s)
            + inter * (rates.inter_latency_s + bytes_ / rates.inter_bw_bytes_per_s))


def all_to_all_s(bytes_, group, rates: Rates):
    """Seconds for each of ``group`` devices to exchange ``bytes_`` spread evenly over all.

    A device keeps 1/g of its data and sends the rest, (g_in - 1)/g over the intra-node
    link and (g - g_in)/g over the network, both at once (NCCL all-to-all posts every
    peer's send together); one latency per kind of link used.
    """
    inner = jnp.minimum(group, rates.devices_per_node)
    intra = bytes_ * (inner - 1.0) / group / rates.intra_bw_bytes_per_s
    inter = bytes_ * (group - inner) / group / rates.inter_bw_bytes_per_s
    latency = (jnp.where(inner > 1.0, rates.intra_latency_s, 0.0)
               + jnp.where(group > inner, rates.inter_latency_s, 0.0))
    return jnp.where(group > 1.0, jnp.maximum(intra, inter) + latency, 0.0)

"""Parts (dse/formulas/parts.py): roofline timing of one operator, the binding roof, sums
and scalings of parts, and the exact mean over a range of contexts.

References: the roofline T = max(FLOPs / peak, bytes / bandwidth) (Williams, Waterman &
Patterson 2009; scaling-book "All About Rooflines"), computed here with numpy; the mean
of a per-step time over a generation as the brute-force mean of the per-step roofline
over the integers [lo, hi].
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dse.formulas import parts
from dse.formulas.types import Cost, Hints, Part, Rates

GEMM, ATTENTION, VECTOR, HBM = 400e12, 200e12, 50e12, 2e12


def rates() -> Rates:
    f = np.float64
    return Rates(f(GEMM), f(ATTENTION), f(VECTOR), f(HBM), f(300e9), f(2e-6), f(50e9), f(1e-5),
                 f(8.0))


def jit64(fn, *args):
    with jax.enable_x64(True):
        out = jax.jit(fn)(*args)
        return jax.tree_util.tree_map(np.asarray, out)


def timed(flops, bytes_, unit):
    return jit64(lambda f, b, r: parts.of(Cost(f, b, unit), r), np.float64(flops),
                 np.float64(bytes_), rates())


# --- one operator ---------------------------------------------------------------------


def test_a_memory_bound_operator_takes_its_memory_time():
    # 4e12 FLOPs at 400 TFLOP/s = 10 ms; 1e11 bytes at 2 TB/s = 50 ms
    p = timed(4e12, 1e11, "gemm")
    assert (float(p.compute_s), float(p.memory_s), float(p.time_s)) == (0.01, 0.05, 0.05)
    assert (float(p.flops), float(p.bytes), float(p.comm_s)) == (4e12, 1e11, 0.0)
    assert jit64(parts.bound_code, p.time_s, p.compute_s, p.memory_s, p.comm_s) == 1


def test_a_compute_bound_operator_runs_at_its_units_peak():
    # the same FLOPs take 10 ms on the GEMM peak, 20 ms on attention, 80 ms on vectors
    for unit, peak in (("gemm", GEMM), ("attention", ATTENTION), ("vector", VECTOR)):
        p = timed(4e12, 1e9, unit)
        np.testing.assert_allclose(p.compute_s, 4e12 / peak, rtol=1e-15)
        np.testing.assert_allclose(p.time_s, max(4e12 / peak, 1e9 / HBM), rtol=1e-15)
        assert jit64(parts.bound_code, p.time_s, p.compute_s, p.memory_s, p.comm_s) == 0


@pytest.mark.parametrize("time, compute, memory, comm, code", [
    (1.0, 1.0, 0.5, 0.0, 0),  # compute
    (1.0, 0.5, 1.0, 0.0, 1),  # memory
    (1.0, 1.0, 1.0, 0.0, 0),  # a tie on the ridge counts as compute
    (1.0, 0.0, 0.0, 1.0, 2),  # communication
    (0.0, 0.0, 0.0, 0.0, 3),  # absent: no time at all
])
def test_bound_code_names_the_binding_roof(time, compute, memory, comm, code):
    assert int(jax.jit(parts.bound_code)(time, compute, memory, comm)) == code


def test_bound_code_of_a_comm_part():
    c = parts.comm(np.float64(0.003))
    assert tuple(float(x) for x in c) == (0.003, 0.0, 0.0, 0.0, 0.0, 0.003)
    assert jit64(parts.bound_code, c.time_s, c.compute_s, c.memory_s, c.comm_s) == 2


# --- arithmetic on parts --------------------------------------------------------------


def part(*values) -> Part:
    return Part(*(np.float64(v) for v in values))


A = part(1.0, 10.0, 100.0, 0.5, 1.0, 0.0)
B = part(2.0, 20.0, 200.0, 2.0, 0.25, 0.0)
C = part(0.5, 0.0, 0.0, 0.0, 0.0, 0.5)


def test_add_and_scale_are_field_by_field():
    np.testing.assert_array_equal(jit64(parts.add, A, B, C), [3.5, 30.0, 300.0, 2.5, 1.25, 0.5])
    np.testing.assert_array_equal(jit64(lambda p: parts.scale(p, 3.0), A),
                                  [3.0, 30.0, 300.0, 1.5, 3.0, 0.0])


def test_combine_sums_each_component_over_the_groups():
    """sum_i k_i parts_i per component: the prefill once and 9 decode steps, say, where
    only some components appear in each group."""
    groups = [(1.0, {"mlp": A, "attention": B}), (9.0, {"mlp": B, "tp_comm": C})]
    assert list(parts.combine(groups)) == ["mlp", "attention", "tp_comm"]  # first seen first
    got = jit64(lambda: parts.combine(groups))
    a, b, c = (np.array(list(x)) for x in (A, B, C))
    np.testing.assert_array_equal(got["mlp"], a + 9 * b)
    np.testing.assert_array_equal(got["attention"], b)
    np.testing.assert_array_equal(got["tp_comm"], 9 * c)


def test_total_with_sum_last_changes_only_the_order():
    """Generic values: both orders agree with an exactly rounded sum (math.fsum) to
    float32 rounding. Values where float32 addition is not associative: the sum with
    ``sum_last`` is exactly a left-to-right float32 sum in the order it names."""
    rng = np.random.default_rng(0)
    names = ["embed", "qkv_proj", "attention", "mlp", "kv_cache", "lm_head"]
    fields = rng.random((len(names), 6)).astype(np.float32) * 10.0 ** rng.integers(
        -6, 0, (len(names), 1)).astype(np.float32)
    comps = {n: Part(*(jnp.float32(x) for x in row)) for n, row in zip(names, fields)}
    hints = Hints(sum_last=("kv_cache", "attention"))
    plain = jax.jit(lambda c: parts.total(c))(comps)
    last = jax.jit(lambda c: parts.total(c, hints))(comps)
    for k in range(6):
        exact = math.fsum(float(x) for x in fields[:, k])
        np.testing.assert_allclose([float(plain[k]), float(last[k])], exact, rtol=4e-7)
    # 1e8 + 1 rounds to 1e8 in float32: the order decides whether the 1 survives
    tricky = {"a": Part(*[jnp.float32(1e8)] * 6), "b": Part(*[jnp.float32(1.0)] * 6),
              "c": Part(*[jnp.float32(-1e8)] * 6)}
    in_order = jax.jit(lambda c: parts.total(c))(tricky)
    b_last = jax.jit(lambda c: parts.total(c, Hints(sum_last=("b",))))(tricky)
    f32 = np.float32
    assert float(in_order.time_s) == float((f32(1e8) + f32(1.0)) + f32(-1e8)) == 0.0
    assert float(b_last.time_s) == float((f32(1e8) + f32(-1e8)) + f32(1.0)) == 1.0
    # a name in sum_last that is not among the parts is skipped
    missing = jax.jit(lambda c: parts.total(c, Hints(sum_last=("nope", "b"))))(tricky)
    assert float(missing.time_s) == 1.0


# --- mean over a range of contexts ----------------------------------------------------

# decode attention of one layer at context x: F(x) = 4 D x FLOPs (scores and values, 16
# heads x 128 dims folded into D = 2048), bytes B(x) = 16 KiB + 2 D x (K and V, 8 bits)
D = 2048.0


def cost_at(x):
    return Cost(4.0 * D * x, 16384.0 + 2.0 * D * x, "attention")


def brute_force_mean(lo, hi, window, r):
    """Mean over the integers x in [lo, hi] of the roofline at context min(x, W)."""
    xs = np.arange(lo, hi + 1, dtype=np.float64)
    ctx = np.minimum(xs, window) if window > 0 else xs
    flops, bytes_ = 4.0 * D * ctx, 16384.0 + 2.0 * D * ctx
    compute, memory = flops / r.attention_flops_per_s, bytes_ / r.hbm_bw_bytes_per_s
    return (np.mean(np.maximum(compute, memory)), np.mean(flops), np.mean(bytes_),
            np.mean(compute), np.mean(memory))


@pytest.mark.parametrize("lo, hi, window", [(90, 150, 0), (1, 1, 0), (5, 400, 0),
                                            (90, 150, 100), (90, 150, 60), (90, 150, 500),
                                            (100, 100, 100)])
def test_mean_of_is_the_mean_roofline_over_the_steps(lo, hi, window):
    # an attention peak that puts the ridge at x = 120: 4 D x / P = (16384 + 2 D x) / BW
    peak = 4.0 * D * 120.0 * HBM / (16384.0 + 2.0 * D * 120.0)
    r = rates()._replace(attention_flops_per_s=np.float64(peak))
    got = jit64(lambda lo, hi, w, r: parts.mean_of(cost_at, r, lo, hi, w), np.float64(lo),
                np.float64(hi), np.float64(window), r)
    time, flops, bytes_, compute, memory = brute_force_mean(lo, hi, window, r)
    np.testing.assert_allclose(got.time_s, time, rtol=1e-12)
    np.testing.assert_allclose([got.flops, got.bytes, got.compute_s, got.memory_s],
                               [flops, bytes_, compute, memory], rtol=1e-12)
    assert got.comm_s == 0.0
    if window == 0 and lo < 120 < hi:  # the roofline at the mean context is not the mean
        assert abs(float(got.time_s) - max(compute, memory)) > 1e-6 * time

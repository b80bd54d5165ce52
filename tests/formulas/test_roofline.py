"""Roofline primitives (dse/formulas/roofline.py) on hand-made numbers.

References: the roofline T = max(FLOPs / peak, bytes / bandwidth) (Williams, Waterman &
Patterson 2009); arithmetic of b-bit operands runs on the narrowest of the 4/8/16/32-bit
units that holds them; the mean of min(x, W) over the integers in [lo, hi] by brute
force. The exact mean of max of two affine functions is a property test
(properties/test_roofline.py).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dse.formulas import roofline
from dse.formulas.types import Cost, Rates


def jit64(fn, *args):
    with jax.enable_x64(True):
        out = jax.jit(fn)(*args)
        return jax.tree_util.tree_map(np.asarray, out)


def rates(gemm_half_rows=0.0) -> Rates:
    f = np.float64
    return Rates(f(1e15), f(5e14), f(6e13), f(3e12), f(3e11), f(2e-6), f(5e10), f(1e-5), f(8.0),
                 f(gemm_half_rows))


@pytest.mark.parametrize("bits, width", [(2, 4), (4, 4), (4.84, 8), (8, 8), (12, 16), (16, 16),
                                         (24, 32), (32, 32)])
def test_compute_width_is_the_narrowest_unit_that_holds_the_operands(bits, width):
    assert jit64(roofline.compute_width, np.float64(bits)) == width


def test_peak_at_width_picks_that_units_peak():
    peaks = tuple(np.float64(p) for p in (4e15, 2e15, 1e15, 6e13))
    for width, expected in ((4, 4e15), (8, 2e15), (16, 1e15), (32, 6e13)):
        assert jit64(roofline.peak_at_width, np.float64(width), *peaks) == expected


def test_roofline_time_is_the_larger_side():
    cost = Cost(np.float64(2e12), np.float64(3e9), "gemm")  # 2 ms of math, 1 ms of memory
    fields = jit64(lambda f, b, r: (roofline.compute_time_s(Cost(f, b, "gemm"), r),
                                    roofline.memory_time_s(Cost(f, b, "gemm"), r),
                                    roofline.roofline_time_s(Cost(f, b, "gemm"), r)),
                   cost.flops, cost.bytes, rates())
    np.testing.assert_allclose(fields, [2e-3, 1e-3, 2e-3], rtol=1e-15)
    # the same FLOPs on the vector units (60 TFLOP/s): 33 ms
    vector = jit64(lambda f, r: roofline.compute_time_s(Cost(f, 0.0, "vector"), r),
                   cost.flops, rates())
    np.testing.assert_allclose(vector, 2e12 / 6e13, rtol=1e-15)


def test_shaped_gemm_rate_saturates_with_rows():
    """rate x rows / (rows + R_half): half the rate at R_half rows, the plain rate at
    R_half = 0; the other rates are left alone."""
    rows = np.array([1.0, 64.0, 192.0, 1e6])
    r = jit64(roofline.shaped, rates(gemm_half_rows=64.0), rows)
    np.testing.assert_allclose(r.gemm_flops_per_s, 1e15 * rows / (rows + 64.0), rtol=1e-15)
    assert r.gemm_flops_per_s[1] == 0.5e15
    assert r.attention_flops_per_s == 5e14 and r.hbm_bw_bytes_per_s == 3e12
    plain = jit64(roofline.shaped, rates(), rows)
    np.testing.assert_array_equal(plain.gemm_flops_per_s, np.full(4, 1e15))


@pytest.mark.parametrize("lo, hi, window", [(1, 10, 0), (90, 150, 0), (90, 150, 100),
                                            (90, 150, 60), (90, 150, 150), (7, 7, 3),
                                            (1, 1000, 4096)])
def test_mean_context_is_the_mean_of_the_capped_lengths(lo, hi, window):
    xs = np.arange(lo, hi + 1)
    expected = np.mean(np.minimum(xs, window) if window > 0 else xs)
    got = jit64(roofline.mean_context, np.float64(lo), np.float64(hi), np.float64(window))
    np.testing.assert_allclose(got, expected, rtol=1e-14)

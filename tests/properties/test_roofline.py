"""Roofline primitives against brute force (formulas/roofline.py, formulas/comm.py)."""

import jax
import numpy as np
from hypothesis import given, settings, strategies as st

from dse.formulas.roofline import mean_max_affine

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(a0=finite, a1=finite, b0=finite, b1=finite, lo=st.integers(0, 500),
       n=st.integers(1, 400))
def test_mean_max_affine_equals_brute_force(a0, a1, b0, b1, lo, n):
    hi = lo + n - 1
    x = np.arange(lo, hi + 1, dtype=np.float64)
    expected = np.mean(np.maximum(a0 + a1 * x, b0 + b1 * x))
    with jax.enable_x64(True):
        got = float(jax.jit(mean_max_affine)(np.float64(a0), np.float64(a1), np.float64(b0),
                                             np.float64(b1), np.float64(lo), np.float64(hi)))
    scale = max(1.0, np.max(np.abs([a0 + a1 * x, b0 + b1 * x])))
    assert abs(got - expected) <= 1e-9 * scale

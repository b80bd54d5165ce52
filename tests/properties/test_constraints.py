"""Property: a constraint's violation is <= 0 exactly where it holds, and always finite
(dse/study/constraints.py; optuna's constraints_func convention), for any value,
bound and comparison, equality and NaN included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from dse.study.constraints import Constraint

OPS = ("<=", "<", ">=", ">")
bounds = st.floats(-1e30, 1e30, allow_nan=False, allow_infinity=False)
values = st.floats(allow_nan=True, allow_infinity=True)


def comparison(x, op, bound) -> bool:
    """IEEE comparison in plain Python (NaN compares false)."""
    return {"<=": x <= bound, "<": x < bound, ">=": x >= bound, ">": x > bound}[op]


@settings(max_examples=300, deadline=None)
@given(x=values, bound=bounds, op=st.sampled_from(OPS), at_bound=st.booleans(),
       single=st.booleans())
def test_violation_is_nonpositive_exactly_where_the_constraint_holds(x, bound, op, at_bound,
                                                                     single):
    if at_bound:
        x = bound
    c = Constraint("ttft_s", op, bound)
    # huge values overflow float32, and (x - bound) / |bound| may overflow to inf (then
    # capped at BIG): expected here, not a failure
    with np.errstate(over="ignore"):
        arr = np.array([x], np.float32 if single else np.float64)
        holds = c.holds(arr)
        violation = c.violation(arr)
    assert np.isfinite(violation).all()
    np.testing.assert_array_equal(violation <= 0.0, holds)
    if not single:  # in float64 the comparison is the plain one
        assert bool(holds[0]) == comparison(x, op, bound)
    if np.isnan(x):
        assert not holds[0]


@settings(max_examples=100, deadline=None)
@given(xs=st.lists(values, min_size=1, max_size=20), bound=bounds, op=st.sampled_from(OPS))
def test_violation_of_arrays_elementwise(xs, bound, op):
    c = Constraint("tpot_s", op, bound)
    arr = np.array(xs + [bound])
    with np.errstate(over="ignore"):  # (x - bound) / |bound| may overflow: capped at BIG
        violation = c.violation(arr)
    assert violation.shape == arr.shape and np.isfinite(violation).all()
    np.testing.assert_array_equal(violation <= 0.0,
                                  [comparison(x, op, bound) for x in arr.tolist()])

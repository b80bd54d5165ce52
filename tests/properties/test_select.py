"""Property: ``pareto_mask`` (dse/results/select.py) keeps exactly the points no other
point dominates, by the O(n^2) definition written here (Deb 2001, Def. 2.5): the
two-objective O(n log n) path and the general one, on data with ties and duplicates."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from dse.results.select import pareto_front, pareto_mask


def brute_force_mask(points: np.ndarray) -> np.ndarray:
    """Row i survives unless some row j is <= in every objective and < in one."""
    n = len(points)
    keep = np.ones(n, bool)
    for i in range(n):
        for j in range(n):
            if np.all(points[j] <= points[i]) and np.any(points[j] < points[i]):
                keep[i] = False
                break
    return keep


coarse = st.integers(-3, 3).map(float)  # few values: many ties and duplicates
fine = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(coarse, coarse), min_size=1, max_size=40)
       | st.lists(st.tuples(fine, fine), min_size=1, max_size=40))
def test_two_objective_fast_path_equals_the_definition(rows):
    points = np.array(rows, float).reshape(-1, 2)
    np.testing.assert_array_equal(pareto_mask(points), brute_force_mask(points))
    # pareto_front: x minimized, y maximized
    np.testing.assert_array_equal(pareto_front(points[:, 0], -points[:, 1]),
                                  brute_force_mask(points))


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(coarse, coarse, coarse), min_size=1, max_size=30))
def test_general_path_equals_the_definition(rows):
    points = np.array(rows, float)
    np.testing.assert_array_equal(pareto_mask(points), brute_force_mask(points))

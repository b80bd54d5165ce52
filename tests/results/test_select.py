"""Choosing points (dse/results/select.py): the k best scores, the signed score, Pareto
fronts and the hypervolume, on hand-made arrays whose answers are worked out here.

References: Pareto dominance as defined in Deb, "Multi-Objective Optimization using
Evolutionary Algorithms" (2001), Def. 2.5 (checked by comparing every pair); the
hypervolume (Zitzler & Thiele 1999) of integer points by counting the unit cells they
dominate.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dse.results.select import hypervolume, pareto_front, pareto_mask, score, top

from ..helpers import brute_force_front

NINF = -np.inf


# --- top ------------------------------------------------------------------------------


def test_top_is_best_first_with_ties_in_c_order():
    scores = np.array([3.0, 5.0, 5.0, NINF, 1.0, 5.0])
    np.testing.assert_array_equal(top(scores, 1), [1])
    np.testing.assert_array_equal(top(scores, 3), [1, 2, 5])
    np.testing.assert_array_equal(top(scores, 4), [1, 2, 5, 0])
    # more than there are finite scores: the -inf one is never returned
    np.testing.assert_array_equal(top(scores, 10), [1, 2, 5, 0, 4])


def test_top_ties_at_the_boundary_go_to_the_first_in_c_order():
    np.testing.assert_array_equal(top(np.array([2.0, 1.0, 1.0, 1.0]), 2), [0, 1])
    np.testing.assert_array_equal(top(np.array([1.0, 1.0, 2.0, 1.0]), 3), [2, 0, 1])


def test_top_of_a_grid_gives_flat_c_order_indices():
    scores = np.array([[1.0, 7.0], [7.0, 0.0]])
    np.testing.assert_array_equal(top(scores, 2), [1, 2])
    assert np.unravel_index(top(scores, 2)[1], scores.shape) == (1, 0)


def test_top_with_nothing_finite_is_empty():
    assert top(np.full(4, NINF), 3).size == 0
    assert top(np.array([]), 1).size == 0


# --- score ----------------------------------------------------------------------------


def test_score_is_signed_and_minus_inf_where_infeasible_or_nan():
    values = np.array([1.0, np.nan, 3.0, 4.0])
    ok = np.array([True, True, False, True])
    np.testing.assert_array_equal(score(values, ok, "maximize"), [1.0, NINF, NINF, 4.0])
    np.testing.assert_array_equal(score(values, ok, "minimize"), [-1.0, NINF, NINF, -4.0])
    on_jax = jax.jit(lambda v, k: score(v, k, "minimize", jnp))(values.astype(np.float32), ok)
    np.testing.assert_array_equal(on_jax, [-1.0, NINF, NINF, -4.0])
    # NaN and infeasible points are never best
    np.testing.assert_array_equal(top(score(values, ok, "minimize"), 2), [0, 3])


# --- Pareto ---------------------------------------------------------------------------


def test_pareto_front_by_hand():
    """x minimized, y maximized: (3, 2) is beaten by (2, 3); the duplicates (2, 3) are
    both kept (neither is better than the other in any objective)."""
    x = np.array([1.0, 2.0, 3.0, 2.0, 4.0])
    y = np.array([1.0, 3.0, 2.0, 3.0, 5.0])
    np.testing.assert_array_equal(pareto_front(x, y), [True, True, False, True, True])


def test_pareto_mask_by_hand_in_three_objectives():
    points = np.array([[1, 2, 3], [2, 2, 3], [3, 1, 1], [1, 2, 3], [0, 5, 5]], float)
    # [2, 2, 3] is dominated by [1, 2, 3]; the duplicate [1, 2, 3] stays twice
    np.testing.assert_array_equal(pareto_mask(points), [True, False, True, True, True])


@pytest.mark.parametrize("seed", range(5))
def test_pareto_front_is_the_non_dominated_set(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 12, 200).astype(float)  # coarse values: ties and duplicates
    y = rng.integers(0, 12, 200).astype(float)
    np.testing.assert_array_equal(pareto_front(x, y), brute_force_front(x, y))


def test_pareto_edges_empty_and_infinite():
    """No points: no front. A point with the smallest first objective is undominated
    whatever its second, +inf included ((1, 0) is worse in the first); two copies of it
    are both kept, as any duplicates are."""
    assert pareto_mask(np.zeros((0, 2))).tolist() == []
    assert pareto_mask(np.array([[0.0, np.inf], [1.0, 0.0]])).tolist() == [True, True]
    assert pareto_mask(np.array([[0.0, np.inf], [0.0, np.inf], [1.0, 0.0]])).tolist() == [
        True, True, True]
    # dominated by (0, 5): same second objective, smaller first
    assert pareto_mask(np.array([[0.0, 5.0], [1.0, np.inf], [1.0, 5.0]])).tolist() == [
        True, False, False]


# --- hypervolume ----------------------------------------------------------------------


def test_hypervolume_of_a_staircase():
    """(1, 3), (2, 2), (3, 1) up to (4, 4): columns [1, 2) x [3, 4], [2, 3) x [2, 4] and
    [3, 4) x [1, 4]: 1 + 2 + 3 = 6."""
    points = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]])
    assert hypervolume(points, np.array([4.0, 4.0])) == 6.0
    # a dominated point and a point outside the box add nothing
    more = np.vstack([points, [[3.0, 3.0], [5.0, 0.0]]])
    assert hypervolume(more, np.array([4.0, 4.0])) == 6.0


def test_hypervolume_in_one_and_three_dimensions():
    assert hypervolume(np.array([[2.0], [3.0]]), np.array([5.0])) == 3.0
    assert hypervolume(np.array([[1.0, 1.0, 1.0]]), np.array([2.0, 3.0, 4.0])) == 6.0
    assert hypervolume(np.array([[9.0, 9.0]]), np.array([4.0, 4.0])) == 0.0


def dominated_cells(points, reference) -> int:
    """Unit cells of the integer box below ``reference`` that some point dominates."""
    ranges = [range(int(r)) for r in reference]
    return sum(any(np.all(p <= np.array(cell)) for p in points)
               for cell in itertools.product(*ranges))


@pytest.mark.parametrize("seed, dims", [(0, 2), (1, 2), (2, 3), (3, 3)])
def test_hypervolume_counts_the_dominated_cells(seed, dims):
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 8, (12, dims)).astype(float)
    reference = np.full(dims, 8.0)
    assert hypervolume(points, reference) == dominated_cells(points, reference)


def test_utilization_prints_as_a_percentage():
    from dse.results.summary import format_value

    assert format_value("mfu", 0.44761) == "44.8%" and format_value("hfu", 0.5) == "50.0%"
    assert format_value("n_devices", 16.0) == "16"

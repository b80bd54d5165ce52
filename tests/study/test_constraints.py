"""Constraints on outputs (dse/study/constraints.py): where they hold, how far a point is
from meeting them (optuna's convention: a violation <= 0 means met), feasibility, and
the parse errors a study file gets.

Expected values are written by hand: IEEE 754 comparisons (NaN compares false), the
relative violation (x - bound) / |bound| of optuna's constrained samplers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dse.errors import InputError
from dse.schema.outputs import OUTPUTS
from dse.study.constraints import (BIG, Constraint, feasible, parse_constraint,
                                   parse_constraints, variables)

NAN = float("nan")
X = np.array([1.0, 2.0, 3.0, NAN])  # below, at, above the bound 2, and NaN


@pytest.mark.parametrize("op, expected", [
    ("<=", [True, True, False, False]),
    ("<", [True, False, False, False]),  # strict: equality does not hold
    (">=", [False, True, True, False]),
    (">", [False, False, True, False]),
])
def test_holds_for_each_comparison(op, expected):
    c = Constraint("ttft_s", op, 2.0)
    np.testing.assert_array_equal(c.holds(X), expected)
    # the same inside jit, on JAX arrays
    np.testing.assert_array_equal(jax.jit(lambda x: c.holds(x, jnp))(X.astype(np.float32)),
                                  expected)


def test_boolean_outputs_hold_where_true():
    c = Constraint("fits")
    assert c.bound is None and str(c) == "fits"
    np.testing.assert_array_equal(c.holds(np.array([True, False, True])), [True, False, True])
    np.testing.assert_array_equal(c.holds(np.array([1.0, 0.0])), [True, False])
    np.testing.assert_array_equal(jax.jit(lambda x: c.holds(x, jnp))(np.array([False, True])),
                                  [False, True])


def test_violation_is_relative_to_the_bound():
    v = Constraint("ttft_s", "<=", 2.0).violation(np.array([3.0, 2.5, 2.0, 1.0]))
    np.testing.assert_array_equal(v, [0.5, 0.25, 0.0, -0.5])  # (x - 2) / 2
    v = Constraint("throughput_tok_s", ">=", 100.0).violation(np.array([50.0, 150.0]))
    np.testing.assert_array_equal(v, [0.5, -0.5])  # (100 - x) / 100
    v = Constraint("ttft_s", "<=", -4.0).violation(np.array([-2.0, -6.0]))
    np.testing.assert_array_equal(v, [0.5, -0.5])  # the scale is |bound|
    v = Constraint("ttft_s", "<=", 0.0).violation(np.array([0.25, -0.25]))
    np.testing.assert_array_equal(v, [0.25, -0.25])  # bound 0: absolute


def test_strict_comparison_met_with_equality_is_violated():
    for op in ("<", ">"):
        v = Constraint("ttft_s", op, 2.0).violation(np.array([2.0]))
        assert v[0] > 0.0 and v[0] < 1e-300
    for op in ("<=", ">="):
        assert Constraint("ttft_s", op, 2.0).violation(np.array([2.0]))[0] == 0.0


def test_nan_never_holds_and_violates_by_a_finite_amount():
    for op in ("<=", "<", ">=", ">"):
        c = Constraint("ttft_s", op, 2.0)
        assert not c.holds(np.array([NAN]))[0]
        assert c.violation(np.array([NAN]))[0] == BIG
    v = Constraint("ttft_s", "<=", 2.0).violation(np.array([np.inf, -np.inf]))
    assert v[0] == BIG and v[1] == -BIG and np.isfinite(v).all()


def test_violation_of_a_boolean_output():
    np.testing.assert_array_equal(Constraint("fits").violation(np.array([True, False])),
                                  [0.0, 1.0])


def test_feasible_is_valid_and_every_constraint():
    outputs = {"valid": np.array([[True], [False]]),  # [2, 1]
               "ttft_s": np.array([[0.5, 1.5, NAN]]),  # [1, 3]
               "fits": np.array([[True, True, True]])}
    cs = (Constraint("ttft_s", "<=", 1.0), Constraint("fits"))
    expected = [[True, False, False], [False, False, False]]
    np.testing.assert_array_equal(feasible(outputs, cs), expected)
    np.testing.assert_array_equal(feasible(outputs, ()), [[True], [False]])  # valid alone
    on_jax = jax.jit(lambda o: feasible(o, cs, jnp))(
        {"valid": np.array([True, True, False]), "ttft_s": np.array([0.5, 1.5, 0.5], np.float32),
         "fits": np.array([True, True, True])})
    np.testing.assert_array_equal(on_jax, [True, False, False])
    assert variables(cs + (Constraint("valid"), Constraint("ttft_s", ">", 0.1))) == (
        "valid", "ttft_s", "fits")


# --- parsing --------------------------------------------------------------------------

REGISTRY = OUTPUTS["inference"]


@pytest.mark.parametrize("text, expected", [
    ("ttft_s <= 2", Constraint("ttft_s", "<=", 2.0)),
    ("  tpot_s<0.05 ", Constraint("tpot_s", "<", 0.05)),
    ("throughput_tok_s >= 1e4", Constraint("throughput_tok_s", ">=", 1e4)),
    ("cost_per_mtok > -1.5E-2", Constraint("cost_per_mtok", ">", -0.015)),
    ("fits", Constraint("fits")),
    ("valid", Constraint("valid")),
])
def test_parse_constraint(text, expected):
    assert parse_constraint(text, "s.toml", REGISTRY, "search.constraints") == expected


@pytest.mark.parametrize("text, problem", [
    ("ttft <= 2", "unknown output 'ttft'"),
    ("speed", "unknown output 'speed'"),
    ("ttft_s", "not a boolean output"),  # a number needs a bound
    ("ttft_s << 2", "unknown output"),  # not NAME op NUMBER: read as one name
    ("ttft_s <= fast", "unknown output"),
    ("component_s <= 1", "not a number per configuration"),  # an output with its own axes
    ("fits <= 1", "not a number per configuration"),
    (3, "is not valid"),
])
def test_parse_constraint_errors_name_the_key(text, problem):
    with pytest.raises(InputError) as err:
        parse_constraint(text, "s.toml", REGISTRY, "output.reduce.constraints")
    assert err.value.key == "output.reduce.constraints" and err.value.file == "s.toml"
    message = str(err.value)
    assert message.startswith("s.toml: output.reduce.constraints: ") and "\n" not in message
    assert problem in message


def test_unknown_output_suggests_the_close_name():
    with pytest.raises(InputError, match="did you mean 'ttft_s'"):
        parse_constraint("ttft <= 2", "s.toml", REGISTRY, "search.constraints")


def test_parse_constraints_takes_a_list():
    assert parse_constraints(["fits", "ttft_s <= 1"], "f", REGISTRY, "k") == (
        Constraint("fits"), Constraint("ttft_s", "<=", 1.0))
    with pytest.raises(InputError, match="k: value 'fits' is not valid"):
        parse_constraints("fits", "f", REGISTRY, "k")

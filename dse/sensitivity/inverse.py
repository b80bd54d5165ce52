"""Inverse questions: how much of a resource does a goal need?

"How much HBM bandwidth is needed for tpot_s <= 0.03?" The metric is monotone in the
resource (more bandwidth never slows a step; more memory never un-fits a point), so the
smallest multiplier s of the resource meeting the goal is found by bisection in log s
over [1e-3, 1e3], all points at once inside one jitted loop. When the goal fails even
at 1000x, another roof binds: no amount suffices (``attainable`` false, NaN answer).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..core.evaluator import Evaluator
from ..study.sensitivity import INVERSE, Inverse

LOW, HIGH, STEPS = 1e-3, 1e3, 60


def required_scale(point, models, hardware, query: Inverse, mode: str, features: frozenset):
    """(smallest multiplier meeting the goal, attainable) per point."""
    knob = INVERSE[query.param]
    base = getattr(point, knob)
    goal = query.goal
    evaluator = Evaluator(mode, models, hardware, features=features, names=(goal.variable,))

    def ok(scale):
        p = dataclasses.replace(point, **{knob: base * scale})
        return goal.holds(evaluator.traced(p)[goal.variable], jnp)

    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in jax.tree_util.tree_leaves(point)))
    lo = jnp.full(shape, jnp.log(LOW), base.dtype)
    hi = jnp.full(shape, jnp.log(HIGH), base.dtype)
    attainable = ok(jnp.exp(hi))

    def step(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        good = ok(jnp.exp(mid))
        return jnp.where(good, lo, mid), jnp.where(good, mid, hi)

    lo, hi = jax.lax.fori_loop(0, STEPS, step, (lo, hi))
    return jnp.where(attainable, jnp.exp(hi), jnp.nan), attainable

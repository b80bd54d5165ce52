"""Elasticities d log(metric) / d log(parameter) through the one jitted evaluator.

Each parameter is scaled by a multiplier: parameter p of the point's device (or a knob
such as an efficiency) becomes p x u_p. At u = 1, dm/du_p = dm/dlog p, so a forward-mode
JVP along the unit vector e_p gives the elasticity after division by m, at every grid
point at once; ``vmap`` over the unit vectors gives all parameters in one compiled call.

The roofline max is not differentiable where two roofs tie; JAX would return the
0.5/0.5 average there. dse takes one-sided derivatives instead, as JVPs at
u = 1 +- eps e_p, and reports the elasticity only where they agree (NaN otherwise, with
the two sides in ``<metric>_up`` / ``<metric>_down`` and ``kink_at_point`` set).

Beside the derivative: the exact re-evaluation at u = 1 +- delta e_p, and a ``kink``
flag where the binding roof of any component (compute, memory, communication) or the
feasibility changes between the two, so the linear prediction cannot be trusted there.

Memory capacity acts only through discrete outputs (fits, max_batch): its entry is the
central finite difference over +-delta, not a derivative (continuous metrics have
elasticity 0 to it, which the finite difference also shows). So is every entry of a
closed loop of agentic sessions (``sessions`` > 0): its turn rate is found by bisection,
which has no derivative, and a derivative at the rate held misses the loop's answer to
the hardware (a faster device serves more turns, which queue more; at the engine's limit
Little's law turns the saved time into waiting). A study of such loops
(``Spec.differences``) compiles no JVP at all.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..core.evaluator import Evaluator
from ..core.fusion import jit
from ..study.sensitivity import KINK_SIGNATURE, PARAMS

EPS = {"float64": 1e-7, "float32": 1e-3}


def scaled_evaluate(u, point, models, hardware, params, mode, names, features):
    """The evaluator with parameter ``params[i]`` multiplied by ``u[i]`` (in pipeline mode
    a device parameter scales every stage's device)."""
    updates = {"hardware": {}, "point": {}, "links": {}}
    pipeline = mode == "pipeline"
    devices = hardware.hardware if pipeline else hardware
    for i, name in enumerate(params):
        param = PARAMS[name]
        table = {"hardware": devices, "point": point,
                 "links": hardware.links if pipeline else None}[param.source]
        updates[param.source][param.field] = getattr(table, param.field) * u[i]
    devices = dataclasses.replace(devices, **updates["hardware"])
    if pipeline:
        hardware = dataclasses.replace(hardware, hardware=devices, links=dataclasses.replace(
            hardware.links, **updates["links"]))
    else:
        hardware = devices
    point = dataclasses.replace(point, **updates["point"])
    return Evaluator(mode, models, hardware, features=features, names=names).traced(point)


class Spec(NamedTuple):
    """What to compute (static: hashable, part of the compilation key)."""

    mode: str
    metrics: tuple[str, ...]
    params: tuple[str, ...]
    delta: float
    eps: float
    features: frozenset
    differences: bool = False  # closed session loops: finite differences only


@jit(static_argnames=("spec",))
def sensitivities(point, models, hardware, spec: Spec) -> dict:
    """Every sensitivity output for one block of points; outputs lead with hw_param."""
    metrics, params, delta, eps = spec.metrics, spec.params, spec.delta, spec.eps
    n = len(params)
    dtype = jnp.result_type(point.hbm_bw_scale)
    eye = jnp.eye(n, dtype=dtype)
    ones = jnp.ones((n, n), dtype)  # row p: every multiplier 1 ...
    mode, features = spec.mode, spec.features

    # The base point and the exact what-ifs at 1 +- delta (with every component's
    # binding roof), as the rows of one vmapped evaluation, and the JVPs of both sides
    # as the rows of another: two copies of the evaluator in the program rather than
    # five (XLA's compile time grows with the copies; the arithmetic is the same).
    signature = KINK_SIGNATURE[mode]
    whatif_names = metrics + ("valid",) + signature

    def whatif(u):
        return scaled_evaluate(u, point, models, hardware, params, mode, whatif_names, features)

    # ... but parameter p at 1 + delta (rows 0..n-1), at 1 - delta (n..2n-1); the base last
    rows = jnp.concatenate([ones + delta * eye, ones - delta * eye, ones[:1]])
    values = jax.vmap(whatif)(rows)
    plus = {k: v[:n] for k, v in values.items()}
    minus = {k: v[n:2 * n] for k, v in values.items()}
    base = {k: v[2 * n] for k, v in values.items() if k in metrics}

    # one-sided derivatives: JVPs along e_p at 1 + eps e_p (rows 0..n-1), 1 - eps e_p
    def slope(u, direction):
        f = lambda v: scaled_evaluate(v, point, models, hardware, params, mode, metrics,
                                      features)
        value, tangent = jax.jvp(f, (u,), (direction,))
        return {m: tangent[m] * jnp.dot(u, direction) / value[m] for m in metrics}

    # central finite differences over +-delta, every parameter
    fd = {m: (jnp.log(plus[m]) - jnp.log(minus[m])) / (jnp.log1p(delta) - jnp.log1p(-delta))
          for m in metrics}
    if spec.differences:
        up, down = fd, fd
    else:
        slopes = jax.vmap(slope)(jnp.concatenate([ones + eps * eye, ones - eps * eye]),
                                 jnp.concatenate([eye, eye]))
        up = {m: v[:n] for m, v in slopes.items()}
        down = {m: v[n:] for m, v in slopes.items()}
    if "memory" in params:  # a discrete effect: central finite difference over +-delta
        i = params.index("memory")
        up = {m: up[m].at[i].set(fd[m][i]) for m in metrics}
        down = {m: down[m].at[i].set(fd[m][i]) for m in metrics}

    out = {}
    split = jnp.zeros((), bool)
    for m in metrics:
        # smooth curvature moves the slope by O(eps) between the two sides; a kink by O(1)
        agree = jnp.abs(up[m] - down[m]) <= 10.0 * eps * jnp.maximum(jnp.abs(up[m]), 1e-3)
        split = split | ~agree
        out[m] = jnp.where(agree, 0.5 * (up[m] + down[m]), jnp.nan)
        out[m + "_up"], out[m + "_down"] = up[m], down[m]
        out[m + "_plus"] = plus[m] / base[m][None] - 1.0
        out[m + "_minus"] = minus[m] / base[m][None] - 1.0
        # the linear prediction dm/m = e x (+-delta), each side with its own slope
        out[m + "_linear_plus"] = up[m] * delta
        out[m + "_linear_minus"] = -down[m] * delta
        out["base_" + m] = base[m]
    kink = plus["valid"] != minus["valid"]
    for name in signature:  # (bound_signature leads with the phase after the parameter)
        changed = plus[name] != minus[name]
        kink = kink | (jnp.any(changed, axis=1) if name == "bound_signature" else changed)
    out["kink"] = kink
    out["kink_at_point"] = split
    shape = jnp.broadcast_shapes(*(jnp.shape(v) for k, v in out.items() if not k.startswith("base_")))
    return {k: v if k.startswith("base_") else jnp.broadcast_to(v, shape) for k, v in out.items()}

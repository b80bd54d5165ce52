"""Constraints in optuna's convention: one value per constraint, <= 0 where it holds.

The values come from :meth:`dse.study.constraints.Constraint.violation` (relative to the
bound, so constraints of different units weigh alike in the sampler; a strict bound met
with equality violates), plus one for validity: 0 for a valid point, 1 for one with any
``reason`` flag (out of memory, indivisible parallelism, ...). A trial is feasible when
every value is <= 0, which is exactly where :func:`dse.study.constraints.feasible` holds.
"""

from __future__ import annotations

import numpy as np

from ..study.constraints import Constraint

VALID = "valid"


def violations(constraints: tuple[Constraint, ...], outputs: dict) -> np.ndarray:
    """Array (n_constraints + 1, ...): the study's constraints, then validity."""
    rows = [c.violation(outputs[c.variable]) for c in constraints]
    rows.append(1.0 - np.asarray(outputs["valid"], np.float64))
    return np.stack(np.broadcast_arrays(*rows))


def names(constraints: tuple[Constraint, ...]) -> list[str]:
    return [str(c) for c in constraints] + [VALID]

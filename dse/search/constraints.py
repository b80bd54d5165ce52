"""Constraint violations in optuna's convention: every value <= 0 means feasible.

``x <= b`` becomes (x - b) / |b|, ``x >= b`` becomes (b - x) / |b| (relative, so
constraints of different units weigh alike in the sampler); a boolean output that must
hold gives 0 when true and 1 when false. The structural feasibility of a point
(divisible parallelism, enough layers for the stages, ...) is always required: the
``reason`` flags other than ``oom``, which the ``fits`` constraint covers when asked.
"""

from __future__ import annotations

import numpy as np

from ..schema.outputs import REASON_BITS
from ..study.constraints import Constraint

STRUCTURAL = "structurally_valid"
BIG = 1e9
_STRUCTURAL_MASK = sum(bit for name, bit in REASON_BITS.items() if name != "oom")


def variables(constraints: tuple[Constraint, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([c.variable for c in constraints] + ["reason"]))


def violations(constraints: tuple[Constraint, ...], outputs: dict) -> np.ndarray:
    """Array (n_constraints + 1, ...): the user's constraints, then structural validity."""
    rows = []
    for c in constraints:
        x = np.asarray(outputs[c.variable], dtype=np.float64)
        scale = abs(c.bound) if c.bound else 1.0
        if c.bound is None:
            rows.append(1.0 - x)
        elif c.op in ("<=", "<"):
            rows.append((x - c.bound) / scale)
        else:
            rows.append((c.bound - x) / scale)
    reason = np.asarray(outputs["reason"]).astype(np.int64)
    rows.append(((reason & _STRUCTURAL_MASK) != 0).astype(np.float64))
    rows = np.broadcast_arrays(*rows)
    # NaN or infinite (e.g. a latency that diverges) is a violation, never feasible;
    # samplers need finite numbers.
    return np.nan_to_num(np.stack(rows), nan=BIG, posinf=BIG, neginf=-BIG)


def names(constraints: tuple[Constraint, ...]) -> list[str]:
    return [str(c) for c in constraints] + [STRUCTURAL]

"""Constraints on outputs, and what it means for a point to satisfy them: the one
definition every consumer uses (``[output.reduce]``, ``[search]``, inverse questions,
the summary, reports).

A constraint is ``"NAME op NUMBER"`` (op one of ``<=``, ``<``, ``>=``, ``>``; strict
comparisons are strict) or ``"NAME"`` for a boolean output that must hold (``fits``,
``valid``). A point is **feasible** when it is valid (no ``reason`` flag: it fits
memory, its parallelism divides the model, ...) and every constraint holds. A value that
is NaN satisfies no comparison, so a NaN point is never feasible under a constraint on
that output.

The functions take an array namespace (``numpy`` by default, ``jax.numpy`` inside jit),
so a streamed reduction and a search decide feasibility with the same arithmetic.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from ..errors import InputError, suggest
from ..schema.outputs import renamed

ALLOWED = "'NAME' for a boolean output (fits, valid) or 'NAME <= NUMBER' (also >=, <, >)"
_PATTERN = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|<|>)\s*([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*$")
# optuna's violation scale: a violation that never reaches a sampler as inf or NaN
BIG = 1e9
# a strict comparison met with equality violates by this much (optuna counts <= 0 as met)
_AT_BOUND = float(np.finfo(np.float64).tiny)


@dataclasses.dataclass(frozen=True)
class Constraint:
    """``variable op bound``, or a boolean output that must be true (``bound`` None)."""

    variable: str
    op: str = "true"
    bound: float | None = None

    def __str__(self) -> str:
        return self.variable if self.bound is None else f"{self.variable} {self.op} {self.bound:g}"

    def holds(self, x, xp=np):
        """Where the constraint holds on values ``x`` (NaN never holds)."""
        if self.bound is None:
            return xp.asarray(x).astype(bool)
        return {"<=": lambda: x <= self.bound, "<": lambda: x < self.bound,
                ">=": lambda: x >= self.bound, ">": lambda: x > self.bound}[self.op]()

    def violation(self, x) -> np.ndarray:
        """How far ``x`` is from meeting the constraint, relative to the bound: <= 0
        exactly where :meth:`holds` (optuna's convention; finite, NaN -> BIG)."""
        x = np.asarray(x)
        ok = self.holds(x)  # in the values' own precision, as everywhere else
        x = x.astype(np.float64)
        if self.bound is None:
            amount = 1.0 - x
        else:
            scale = abs(self.bound) if self.bound else 1.0
            amount = (x - self.bound if self.op in ("<=", "<") else self.bound - x) / scale
        amount = np.where(ok, np.minimum(amount, 0.0), np.maximum(amount, _AT_BOUND))
        return np.nan_to_num(amount, nan=BIG, posinf=BIG, neginf=-BIG)


def parse_constraint(text, file, outputs, key: str) -> Constraint:
    """A constraint string over the mode's ``outputs`` (a registry)."""
    if not isinstance(text, str):
        raise InputError(file, key, f"value {text!r} is not valid", ALLOWED)
    match = _PATTERN.match(text)
    name = match.group(1) if match else text.strip()
    if name not in outputs:
        raise InputError(file, key, f"{text!r}: unknown output {name!r}" + suggest(name, outputs),
                         ", ".join(outputs))
    renamed(outputs, name, file, key)
    if match is None:
        if outputs[name].kind != "bool":
            raise InputError(file, key, f"{text!r} is not a boolean output", ALLOWED)
        return Constraint(name)
    if outputs[name].kind != "float" or outputs[name].dims:
        raise InputError(file, key, f"{text!r}: {name} is not a number per configuration", ALLOWED)
    return Constraint(name, match.group(2), float(match.group(3)))


def parse_constraints(raw, file, outputs, key: str) -> tuple[Constraint, ...]:
    """A list of constraint strings."""
    if not isinstance(raw, list):
        raise InputError(file, key, f"value {raw!r} is not valid",
                         "a list of constraint strings such as \"ttft_s <= 2\"")
    return tuple(parse_constraint(c, file, outputs, key) for c in raw)


def variables(constraints) -> tuple[str, ...]:
    """The outputs feasibility under ``constraints`` reads (``valid`` included)."""
    return tuple(dict.fromkeys(["valid"] + [c.variable for c in constraints]))


def feasible(outputs, constraints, xp=np):
    """Where a point is feasible: valid and every constraint holds (broadcast)."""
    ok = xp.asarray(outputs["valid"]).astype(bool)
    for c in constraints:
        ok = ok & c.holds(outputs[c.variable], xp)
    return ok

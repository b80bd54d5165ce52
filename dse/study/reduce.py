"""The ``[output.reduce]`` section: stream the grid into the best point per group.

``by`` keeps some axes and reduces every other one: per group, the best feasible point
by ``objective`` (:mod:`dse.study.constraints` says what feasible means), counts of
valid and feasible points and of each infeasibility reason, and optionally a histogram
of one output over the feasible points. :mod:`dse.run.reduction` computes it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import checks
from ..errors import InputError, suggest
from ..schema.outputs import OUTPUTS, PRIMARY_METRIC, renamed
from .constraints import Constraint, parse_constraints

KEYS = ("by", "objective", "direction", "constraints", "histogram")
HISTOGRAM_KEYS = ("variable", "bins", "range", "log")
DIRECTIONS = ("maximize", "minimize")


@dataclasses.dataclass(frozen=True)
class Histogram:
    variable: str
    bins: int
    low: float
    high: float
    log: bool

    def edges(self) -> np.ndarray:
        if self.log:
            return np.logspace(math.log10(self.low), math.log10(self.high), self.bins + 1)
        return np.linspace(self.low, self.high, self.bins + 1)


@dataclasses.dataclass(frozen=True)
class ReduceSpec:
    by: tuple[str, ...]
    objective: str
    direction: str
    constraints: tuple[Constraint, ...]
    histogram: Histogram | None = None

    @property
    def inputs(self) -> tuple[str, ...]:
        """The outputs a chunk reduction evaluates."""
        names = [self.objective, "valid", "reason"] + [c.variable for c in self.constraints]
        if self.histogram:
            names.append(self.histogram.variable)
        return tuple(dict.fromkeys(names))


def numeric_outputs(mode: str) -> list[str]:
    """Outputs with one number per configuration (objectives, metrics, histograms)."""
    return [k for k, v in OUTPUTS[mode].items() if v.kind == "float" and not v.dims]


def parse_reduce(raw, file: str, mode: str, axes: tuple[str, ...]) -> ReduceSpec:
    """Validate ``[output.reduce]`` for a study of ``mode`` with grid ``axes``."""
    key = "output.reduce"
    if not isinstance(raw, dict):
        raise checks.invalid(file, key, raw,
                             "a table: by, objective, direction, constraints, histogram")
    checks.known_keys(raw, KEYS, file, key)
    by = raw.get("by", [])
    if isinstance(by, str):
        by = [by]
    if not isinstance(by, list) or any(b not in axes for b in by) or len(set(by)) != len(by):
        raise checks.invalid(file, f"{key}.by", raw.get("by"),
                             "a list of distinct study axes: " + (", ".join(axes) or "(none)"))
    numeric = numeric_outputs(mode)
    objective = raw.get("objective", PRIMARY_METRIC[mode])
    if objective not in numeric:
        raise InputError(file, f"{key}.objective", f"{objective!r} is not a numeric output"
                         + suggest(str(objective), numeric), ", ".join(numeric))
    renamed(OUTPUTS[mode], objective, file, f"{key}.objective")
    direction = checks.choice(raw, "direction", OUTPUTS[mode][objective].direction, DIRECTIONS,
                              file, key, "maximize or minimize")
    constraints = parse_constraints(raw.get("constraints", []), file, OUTPUTS[mode],
                                    f"{key}.constraints")
    histogram = raw.get("histogram")
    if histogram is not None:
        histogram = _parse_histogram(histogram, file, f"{key}.histogram", numeric, mode)
    # Axes are ordered as in the study, whatever order ``by`` lists them in.
    return ReduceSpec(tuple(a for a in axes if a in by), objective, direction, constraints,
                      histogram)


def _parse_histogram(raw, file, key, numeric, mode) -> Histogram:
    allowed = "{ variable = NAME, range = [LOW, HIGH], bins = N, log = true|false }"
    if isinstance(raw, str):
        raw = {"variable": raw}
    if not isinstance(raw, dict):
        raise checks.invalid(file, key, raw, allowed)
    checks.known_keys(raw, HISTOGRAM_KEYS, file, key)
    variable = raw.get("variable")
    if variable not in numeric:
        raise InputError(file, f"{key}.variable", f"{variable!r} is not a numeric output"
                         + suggest(str(variable), numeric), ", ".join(numeric))
    renamed(OUTPUTS[mode], variable, file, f"{key}.variable")
    bins = checks.integer(raw, "bins", 50, file, key, low=1, high=10_000)
    log = checks.boolean(raw, "log", False, file, key)
    rng = raw.get("range")
    ok = (isinstance(rng, list) and len(rng) == 2
          and all(checks.is_number(v) and math.isfinite(v) for v in rng)
          and rng[0] < rng[1] and (not log or rng[0] > 0))
    if not ok:
        raise checks.invalid(file, f"{key}.range", rng,
                             "[LOW, HIGH] with LOW < HIGH, in the variable's SI units"
                             + (" and LOW > 0 for log bins" if log else ""))
    return Histogram(variable, bins, float(rng[0]), float(rng[1]), log)

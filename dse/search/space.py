"""The searched space: a study's axes as optuna distributions (trials become evaluator
input through :func:`dse.core.encoding.trial_point`).

A list is a categorical choice (tp in {1, 2, 4, 8} stays a set of allowed values); an
integer range with a step is an integer distribution; a float range is continuous
(log-uniform with ``log = true``), so search may land between the points a sweep would
take. Geometric integer ranges (``factor``, ``log``) stay categorical: the values
between them (tp = 3) are not wanted.
"""

from __future__ import annotations

import numpy as np
from optuna.distributions import (BaseDistribution, CategoricalDistribution,
                                  FloatDistribution, IntDistribution)

from ..schema.knobs import fields
from ..study.study import Axis, Study


def distribution(study: Study, axis: Axis) -> BaseDistribution:
    kind = fields(study.point_type)[axis.name].metadata["kind"]
    spec = axis.spec
    if isinstance(spec, dict):
        start, stop = spec["start"], spec["stop"]
        if kind in ("int", "int0") and "step" in spec and float(spec["step"]).is_integer():
            return IntDistribution(int(start), int(stop), step=int(spec["step"]))
        if kind not in ("int", "int0") and start < stop:
            if "step" in spec:
                return FloatDistribution(float(start), float(stop), step=float(spec["step"]))
            return FloatDistribution(float(start), float(stop),
                                     log=bool(spec.get("log")) or "factor" in spec)
    return CategoricalDistribution(list(axis.values))


def distributions(study: Study, keys) -> dict[str, BaseDistribution]:
    return {a.name: distribution(study, a) for a in study.dims if a.name in keys}


def enumerable(dists: dict[str, BaseDistribution]) -> bool:
    """Whether the space is a finite grid that a sweep covers exactly."""
    return all(isinstance(d, (CategoricalDistribution, IntDistribution)) for d in dists.values())


def pad(columns: dict[str, list], size: int) -> dict[str, list]:
    """Repeat the first trial so every batch has one shape (one compilation)."""
    return {k: list(v) + [v[0]] * (size - len(v)) for k, v in columns.items()}


def as_python(value):
    """optuna parameter values as plain Python scalars."""
    if isinstance(value, np.generic):
        return value.item()
    return value

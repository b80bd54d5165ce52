"""``dse calibrate``: fit a calibration to measured runs by gradient descent through the
evaluator (:mod:`dse.validate.fit`).

    >>> from dse.validate import calibrate
    >>> cal, history = calibrate("measured_public.csv")     # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..catalogue import calibration as C
from . import fit as F
from ..errors import InputError
from .rows import KINDS, UNFITTED, pooled, read
from .validation import build_problem, fitting


def calibrate(data, steps: int = F.STEPS, framework: str | None = None
              ) -> tuple[C.Calibration, np.ndarray]:
    """Fit a calibration on every expressible, unflagged row of ``data`` of the kinds a
    calibration describes (not ``serving_latency``: the load model runs on the fitted
    engine, its rows check it); ``framework`` pools every row under that one name
    (``generic``: the shipped default calibration).

    Returns (calibration with covariance, loss per Adam step).
    """
    cases, skips = read(data)
    cases = [c for c in cases if c.kind not in UNFITTED]
    cases, misses = fitting(pooled(cases, framework))
    skips = skips + misses
    if not cases:
        raise InputError(str(data), "rows", "no row a calibration can be fitted on",
                         "rows of the kinds " + ", ".join(k for k in KINDS
                                                          if k not in UNFITTED))
    prob = build_problem(cases, None)
    return F.fit(prob, steps=steps, info=dict(
        data=str(Path(data).name), rows=len(cases), skipped=len(skips),
        flagged=sum(bool(c.flag) for c in cases)))

"""The serving stack's frontend, fitted on serving-latency rows (``dse calibrate``:
:func:`dse.validate.calibrate.fit_frontend`).

Under a request load a request's TTFT is the engine's (the load model's steps) plus the
time it spends outside the engine steps: the HTTP server, the tokenizer, admission, the
detokenizer of its first token and the benchmark client itself. That time is the
calibration parameter ``request_overhead_s`` (output ``frontend_s``), one per framework,
whatever the device. No static row sees it; the mean TTFT of serving-latency rows does,
additively: predicted TTFT = engine TTFT + f exactly. So it is fitted in closed form
after the static fit, per framework, as the f that minimizes the median absolute log
error of engine + f against the measured TTFT (robust to the rows whose engine TTFT is
off for other reasons), on a log grid from 0.1 ms to 10 s.

A framework with serving rows but no fit of its own (SGLang, whose kernels the
calibration fits as vLLM's) joins the calibration as a copy of the fit a study would
give it, with its own frontend.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..catalogue import calibration as C
from ..catalogue.frameworks import fit_of

GRID = np.geomspace(1e-4, 10.0, 481)
NAME = "request_overhead_s"
INDEX = C.NAMES.index(NAME)
ZERO = 1e-9  # seconds: no frontend (the log transform has no 0)


def fit_offset(engine_s: np.ndarray, measured_s: np.ndarray) -> float:
    """The f on ``GRID`` minimizing the median of |log((engine + f) / measured)|."""
    engine_s, measured_s = np.asarray(engine_s, float), np.asarray(measured_s, float)
    err = np.abs(np.log((engine_s[None] + GRID[:, None]) / measured_s[None]))
    return float(GRID[np.argmin(np.median(err, 1))])


def fits_on(c) -> bool:
    """A row a frontend is fitted on: the mean TTFT of a serving-latency row, a whole
    deployment (not one pool at its limit), not flagged."""
    return (c.kind == "serving_latency" and c.metric == "ttft_ms" and not c.flag
            and "pool" not in c.knobs)


def rows_of(cases) -> list:
    """The rows of ``cases`` a frontend is fitted on (:func:`fits_on`)."""
    return [c for c in cases if fits_on(c)]


def with_frameworks(cal: C.Calibration, frameworks) -> C.Calibration:
    """``cal`` with a fit for each of ``frameworks`` it lacks: a copy of the fit a study
    would give that framework (its engine's chain), covariance included (the copy moves
    with its source); one that has none is left out."""
    add = [(fw, fit) for fw in dict.fromkeys(frameworks) if fw not in cal.frameworks
           and (fit := fit_of(fw, cal.frameworks)) is not None]
    if not add:
        return cal
    n_p = len(C.NAMES)
    old_fw = list(cal.frameworks)
    base = np.vstack([cal.base] + [cal.base[old_fw.index(fit)][None] for _, fit in add])
    cov = cal.covariance
    if cov is not None:
        # theta = base.ravel() ++ offset.ravel(): each new framework's block is its
        # source fit's (cross terms with the offsets too)
        n_old = len(old_fw) * n_p
        source = list(range(n_old))
        for _, fit in add:
            i = old_fw.index(fit)
            source += list(range(i * n_p, (i + 1) * n_p))
        source += list(range(n_old, cov.shape[0]))
        # a copy is its source, perfectly correlated with it (so the matrix stays
        # positive semidefinite)
        cov = cov[np.ix_(source, source)]
    return dataclasses.replace(cal, frameworks=tuple(old_fw) + tuple(fw for fw, _ in add),
                               base=base, covariance=cov)


def set_frontend(cal: C.Calibration, values: dict[str, float],
                 variances: dict[str, float] | None = None) -> C.Calibration:
    """``cal`` with ``request_overhead_s`` = values[framework] (seconds) for those
    frameworks, its family offsets 0 (host software, not the device), and, given
    ``variances`` (of log f), those as its variance, uncorrelated, and the offsets'
    variance 0."""
    base, offset = cal.base.copy(), cal.offset.copy()
    for fw, value in values.items():
        base[cal.frameworks.index(fw), INDEX] = C.to_unconstrained(NAME, max(value, ZERO))
    offset[:, INDEX] = 0.0
    cov = cal.covariance
    if cov is not None and variances:
        cov = cov.copy()
        n_p = len(C.NAMES)
        n_base = len(cal.frameworks) * n_p
        # the family offsets of the frontend are 0 and stay so in every draw
        for j in n_base + INDEX + n_p * np.arange(len(cal.families)):
            cov[j, :] = 0.0
            cov[:, j] = 0.0
        for fw, var in variances.items():
            j = cal.frameworks.index(fw) * n_p + INDEX
            cov[j, :] = 0.0
            cov[:, j] = 0.0
            cov[j, j] = var
    return dataclasses.replace(cal, base=base, offset=offset, covariance=cov)

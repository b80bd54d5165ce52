"""``dse calibrate``: fit a calibration to measured runs by gradient descent through the
evaluator (:mod:`dse.validate.fit`).

    >>> from dse.validate import calibrate
    >>> cal, history = calibrate("measured_public.csv")     # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np
from statistics import NormalDist

from ..catalogue import calibration as C, kernels
from ..catalogue.frameworks import fit_of
from . import fit as F
from . import frontend
from ..errors import InputError
from .rows import KINDS, UNFITTED, pooled, read
from .predict import predict_with_reasons
from .validation import build_problem, calibration_vector, fitting


def calibrate(data, steps: int = F.STEPS, framework: str | None = None,
              moe_surfaces: bool = False) -> tuple[C.Calibration, np.ndarray]:
    """Fit a calibration on every expressible, unflagged row of ``data`` (one CSV or
    several) of the kinds a calibration describes by gradient descent (not
    ``serving_latency``: the load model runs on the fitted engine), then each
    framework's frontend (``request_overhead_s``, :mod:`dse.validate.frontend`) on the
    mean TTFT of the ``serving_latency`` rows; ``framework`` pools every row under that
    one name (``generic``: the shipped default calibration); ``moe_surfaces``: a device's
    routed experts priced by the measured MoE surfaces (dse.catalogue.kernels), recorded
    in the calibration's ``kernels`` so that studies under it do the same.

    Returns (calibration with covariance, loss per Adam step).
    """
    paths = [data] if isinstance(data, (str, Path)) else list(data)
    cases, skips = [], []
    for path in paths:
        c, s = read(path)
        cases += c
        skips += s
    serving = pooled([c for c in cases if c.kind in UNFITTED], framework)
    cases = [c for c in cases if c.kind not in UNFITTED]
    cases, misses = fitting(pooled(cases, framework))
    skips = skips + misses
    if not cases:
        raise InputError(", ".join(map(str, paths)), "rows", "no row a calibration can be "
                         "fitted on", "rows of the kinds " + ", ".join(
                             k for k in KINDS if k not in UNFITTED))
    surfaces = {"kernels": kernels.source(moe_surfaces)} if kernels.source() else {}
    prob = build_problem(cases, None, moe=moe_surfaces and bool(surfaces))
    cal, history = F.fit(prob, steps=steps, info=dict(
        data=", ".join(Path(p).name for p in paths), rows=len(cases), skipped=len(skips),
        flagged=sum(bool(c.flag) for c in cases), **surfaces))
    cal, fitted = fit_frontend(cal, serving)
    return dataclasses.replace(cal, info=dict(cal.info, **fitted)), history


def engine_ttft_s(cal: C.Calibration, cases) -> tuple[list, np.ndarray, np.ndarray]:
    """(rows, engine TTFT in s, measured TTFT in s) of the ``cases`` that ``cal`` can
    predict, without a frontend."""
    cases, _ = fitting(list(cases))
    if not cases:
        return [], np.zeros(0), np.zeros(0)
    zero = frontend.set_frontend(cal, {fw: frontend.ZERO for fw in cal.frameworks})
    prob = build_problem(cases, zero)
    with jax.enable_x64(True):
        pred, _ = predict_with_reasons(calibration_vector(prob, zero), prob)
    pred = np.asarray(pred) * 1e-3
    ok = np.isfinite(pred) & (pred > 0.0)
    return ([c for c, k in zip(prob.cases, ok) if k], pred[ok],
            np.asarray([c.measured for c in prob.cases])[ok] * 1e-3)


def fit_frontend(cal: C.Calibration, cases) -> tuple[C.Calibration, dict]:
    """``cal`` with each framework's frontend (dse.validate.frontend) fitted on its
    serving-latency TTFT rows among ``cases`` (a framework with rows but no fit joins as
    a copy of its chain's; frameworks without rows keep theirs), and what was fitted."""
    ttft = frontend.rows_of(cases)
    if not ttft:
        return cal, {}
    cal = frontend.with_frameworks(cal, {c.framework for c in ttft})
    scored, engine, measured = engine_ttft_s(cal, ttft)
    fits = np.asarray([fit_of(c.framework, cal.frameworks) for c in scored])
    values, variances, info = {}, {}, {}
    residuals = []
    for fw in dict.fromkeys(fits):
        sel = fits == fw
        f = frontend.fit_offset(engine[sel], measured[sel])
        resid = np.log((engine[sel] + f) / measured[sel])
        residuals.append(resid)
        values[fw] = f
        # the variance of a median of n log residuals (normal approximation)
        variances[fw] = float(np.pi / 2.0 * np.var(resid) / sel.sum())
        info[f"frontend_rows_{fw}"] = int(sel.sum())
    # TTFT's own error scale for --bands: the sigma whose +-1.645 sigma holds 90% of the
    # fitted TTFT rows' log errors (a frontend per framework is all that is fitted on
    # them; heavy tails make the RMS no guide to a 90% band)
    info["ttft_residual_log_sd"] = float(np.quantile(np.abs(np.concatenate(residuals)), 0.9)
                                         / NormalDist().inv_cdf(0.95))
    return frontend.set_frontend(cal, values, variances), info

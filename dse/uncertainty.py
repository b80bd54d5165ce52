"""Uncertainty bands: a study evaluated under its calibration's parameter uncertainty
and the model's own error.

The calibration file keeps the fit's covariance (Laplace approximation). :func:`bands`
draws calibrations from it and evaluates the whole grid once per draw, the draws as a
``jax.vmap`` axis over the hardware table's calibration leaves, and reports quantiles
of every metric: ``dims = ("quantile", *study axes)``. Times and the rates, energies
and costs that follow from them also carry the model's error, the fit's residual
log-SD sigma (``residual_log_sd`` in the calibration file; TTFTs their own,
``ttft_residual_log_sd``, where the calibration was fitted with serving rows): a
lognormal whose log variance is the draws' plus sigma^2. The parameter draws alone are far narrower than
the model's misses on data the fit never saw; how often these bands hold held-out rows
is in ``dse validate --holdout`` (docs/validation.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from statistics import NormalDist

import jax
import numpy as np
import xarray as xr

from .catalogue.calibration import sample_specs
from .catalogue.hardware import CALIBRATION_FIELDS, HardwareSpec
from .core.evaluator import Evaluator
from .core.fusion import jit
from .core.tables import hardware_spec
from .errors import InputError
from .results.dataset import coords, provenance
from .run.chunks import chunk_point, plan
from .schema.outputs import OUTPUTS
from .study.study import Study, load_study

MAX_EVALUATIONS = 2e8  # grid points x samples kept in memory at once
# units of the outputs the model's timing error reaches (times and what follows from them)
TIMED_UNITS = frozenset({"s", "tokens/s", "requests/s", "J", "USD", "requests/USD", "days",
                         "h"})


def band_metrics(study: Study) -> tuple[str, ...]:
    """Float outputs without extra dimensions (the metrics a band makes sense for)."""
    meta = OUTPUTS[study.mode]
    return tuple(n for n in study.variables if meta[n].kind == "float" and not meta[n].dims)


def bands(study: Study | str | Path, samples: int = 64, quantiles=(0.05, 0.5, 0.95),
          seed: int = 0, names: tuple[str, ...] | None = None,
          model_error: bool = True) -> xr.Dataset:
    """Quantiles of each metric over ``samples`` draws of the study's calibration; with
    ``model_error`` the timed metrics' quantiles also carry the calibration's residual
    log-SD (lognormal, log variance of the draws + sigma^2, where every draw is
    positive)."""
    if not isinstance(study, Study):
        study = load_study(study)
    if study.calibration is None:
        raise InputError(study.file, "study.calibration", "uncertainty bands need a calibration",
                         'calibration = "calibrations/public.toml" in [study]')
    if study.calibration.covariance is None:
        raise InputError(study.calibration.file, "uncertainty.covariance", "missing",
                         "a calibration written by dse calibrate (it keeps the covariance)")
    if samples < 2:
        raise InputError("--bands", str(samples), "too few samples", "an integer >= 2")
    if study.size * samples > MAX_EVALUATIONS:
        raise InputError(study.file, "axes", f"{study.size:,} points x {samples} samples is too "
                         "many for one evaluation", f"at most {MAX_EVALUATIONS:.0e} in all")
    names = names or band_metrics(study)
    dtype = np.float64 if study.dtype == "float64" else np.float32
    evaluator = Evaluator.of(study, names)
    # each device as the study's table has it (framework caps, measured GEMM surfaces);
    # the draws replace its calibration
    specs = [hardware_spec(study, c, study.frameworks[0]) for c in study.hardware]
    hardware = sample_specs(specs, [c.name for c in study.hardware],
                            study.calibration, study.calibration_fit(study.frameworks[0]), samples, seed)
    hardware = jax.tree_util.tree_map(lambda x: np.asarray(x, dtype), hardware)
    axes = HardwareSpec(**{f.name: 0 if f.name in CALIBRATION_FIELDS else None
                           for f in dataclasses.fields(HardwareSpec)})
    point = chunk_point(study, plan(study.shape, max(study.size, 1))[0])
    with evaluator.precision():
        out = jit(jax.vmap(lambda hw: evaluator.traced(point, hardware=hw),
                               in_axes=(axes,)))(hardware)
    dims = ("quantile",) + tuple(a.name for a in study.dims)
    q = np.asarray(quantiles, np.float64)
    info = study.calibration.info
    sigma = float(info.get("residual_log_sd", 0.0)) if model_error else 0.0
    # TTFT's own scale where the calibration fitted one (dse calibrate with serving rows)
    sigma_ttft = float(info.get("ttft_residual_log_sd", sigma)) if model_error else 0.0
    z = np.asarray([NormalDist().inv_cdf(v) for v in np.clip(q, 1e-12, 1.0 - 1e-12)])
    z = z.reshape((-1,) + (1,) * len(study.shape))
    data = {}
    for name in names:
        draws = np.asarray(out[name], np.float64)
        values = np.quantile(draws, q, axis=0)
        meta = OUTPUTS[study.mode][name]
        comment = f"quantiles over {samples} draws of the calibration"
        sd = sigma_ttft if name.startswith("ttft") else sigma
        if sd > 0.0 and meta.units in TIMED_UNITS:
            positive = np.all(np.isfinite(draws) & (draws > 0.0), axis=0)
            logs = np.log(np.where(positive, draws, 1.0))
            wide = np.exp(logs.mean(0) + z * np.sqrt(logs.var(0) + sd ** 2))
            values = np.where(positive, wide, values)
            comment += f" and the model's error (residual log-SD {sd:.3f})"
        values = np.broadcast_to(values, (len(q),) + study.shape)
        data[name] = xr.Variable(dims, values.astype(dtype), {
            "units": meta.units, "long_name": meta.long_name, "comment": comment})
    ds = xr.Dataset(data, coords=dict(coords(study), quantile=("quantile", q)),
                    attrs=dict(provenance(study), bands_samples=samples, bands_seed=seed))
    return ds

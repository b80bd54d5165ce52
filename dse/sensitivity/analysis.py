"""What each hardware parameter is worth, by exact derivatives (:func:`dse.sensitivity`).

For every grid point and parameter: the elasticity d log(metric) / d log(parameter)
(variables named as the sweep's metrics), its one-sided values, the exact +-delta
re-evaluation beside the linear prediction, a kink flag, inverse answers ("how much
bandwidth for tpot_s <= x?") and weighted workload mixes.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import xarray as xr

from ..core import programs
from ..core.evaluate import take
from ..core.evaluator import Evaluator
from ..core.fusion import jit
from ..core.trace import dependencies, function_dependencies
from ..results.dataset import coords, provenance
from ..run.memory import run_function
from ..schema.outputs import OUTPUTS
from ..study.output import DEFAULT_CHUNK_POINTS
from ..study.sensitivity import INVERSE, KINK_SIGNATURE, PARAMS, SensitivityConfig
from ..study.study import Study
from .elasticity import EPS, Spec, sensitivities
from .inverse import required_scale

_VALUE_FIELD = {"hbm_bw": ("hbm_bw_bytes_per_s", "bytes/s", "memory bandwidth"),
                "tflops": ("flops_per_s_16", "FLOP/s", "16-bit peak (every peak scales alike)"),
                "link_bw": ("intra_bw_bytes_per_s", "bytes/s", "intra-node link bandwidth"),
                "memory": ("memory_bytes", "bytes", "memory capacity")}


def elasticity_variables(cfg: SensitivityConfig, mode: str) -> dict[str, tuple[int, str, str]]:
    """name -> (leading axes, units, long name)."""
    out = {}
    for m in cfg.metrics:
        info = OUTPUTS[mode][m]
        d = f"{100 * cfg.delta:g}%"
        out[m] = (1, "1", f"elasticity of {info.long_name} (d log / d log)")
        out[m + "_up"] = (1, "1", f"elasticity of {info.long_name}, parameter increasing")
        out[m + "_down"] = (1, "1", f"elasticity of {info.long_name}, parameter decreasing")
        out[m + "_plus"] = (1, "1", f"relative change of {info.long_name} at +{d} (exact)")
        out[m + "_minus"] = (1, "1", f"relative change of {info.long_name} at -{d} (exact)")
        out[m + "_linear_plus"] = (1, "1", f"relative change of {info.long_name} at +{d} "
                                   "predicted by the elasticity")
        out[m + "_linear_minus"] = (1, "1", f"relative change of {info.long_name} at -{d} "
                                    "predicted by the elasticity")
        out["base_" + m] = (0, info.units, info.long_name)
    out["kink"] = (1, "1", f"binding roof or feasibility changes within +-{100 * cfg.delta:g}%")
    out["kink_at_point"] = (1, "1", "roofs tie at the point: one-sided elasticities differ")
    return out


def analyze(study: Study, progress=None) -> xr.Dataset:
    """Elasticities, what-ifs, inverse answers and mixes for ``study``'s grid, with each
    point's regime (``regime``, and ``dominant_phase`` in inference); for a calibrated
    study also the plain roofline's elasticities (``roofline_<metric>``) and regime
    (``roofline_regime``), so a reader sees where the fitted parts decide the answer."""
    cfg = study.sensitivity_config()
    ds = _elasticities(study, cfg, progress)
    ds = ds.assign(_regimes(study, ""))
    if study.calibration is not None:
        from ..run.regime import roofline_twin

        twin = roofline_twin(study)
        roof = _elasticities(twin, cfg, progress)
        ds = ds.assign({"roofline_" + m: roof[m].assign_attrs(
            long_name=roof[m].attrs["long_name"] + ", plain roofline") for m in cfg.metrics})
        ds = ds.assign(_regimes(twin, "roofline_"))
    if cfg.inverse:
        evaluator = Evaluator.of(study, cfg.metrics + ("valid",) + KINK_SIGNATURE[study.mode])
        ds = ds.merge(_inverse(study, evaluator, cfg, progress))
    if cfg.mix:
        ds = ds.merge(_mix(ds, cfg))
    return ds


def _regimes(study: Study, prefix: str) -> dict[str, xr.Variable]:
    """The regime outputs of ``study``'s grid (a sweep of those alone), names prefixed."""
    from ..run.sweep import sweep

    if study.mode not in ("inference", "training"):
        return {}
    names = ("regime", "dominant_phase") if study.mode == "inference" else ("regime",)
    only = dataclasses.replace(study, output=dataclasses.replace(
        study.output, variables=names, path=None, reduce=None, breakdown=False))
    out = sweep(only, progress=False)
    return {prefix + n: out[n].variable for n in names}


def _elasticities(study: Study, cfg: SensitivityConfig, progress=None) -> xr.Dataset:
    """The elasticities and exact what-ifs of ``study``'s grid (no inverse, no mix)."""
    # every point is evaluated ~6 x (parameters) times at once: smaller blocks
    budget = max(1, (study.output.chunk_points or DEFAULT_CHUNK_POINTS)
                 // (6 * len(cfg.params)))
    study = dataclasses.replace(study, output=dataclasses.replace(study.output, chunk_points=budget))
    # (a study's session load is one kind, closed or open: dse.study checks it)
    closed = study.has_sessions and any(v > 0 for v in study.values("sessions"))
    spec = Spec(study.mode, cfg.metrics, cfg.params, cfg.delta, EPS[study.dtype], study.features,
                closed)
    fn = kept(functools.partial(sensitivities, spec=spec),
              "sensitivities|" + programs.canonical(spec))
    meta = elasticity_variables(cfg, study.mode)
    lead = {name: k for name, (k, _, _) in meta.items()}
    evaluator = Evaluator.of(study, cfg.metrics + ("valid",) + KINK_SIGNATURE[study.mode])
    arrays, deps = run_function(study, evaluator, fn, lead,
                                elasticity_dependencies(study, evaluator, lead), progress)
    variables = {}
    for name, (k, units, long_name) in meta.items():
        dims = ("hw_param",) * k + deps[name]
        variables[name] = xr.Variable(dims, arrays[name], {"units": units, "long_name": long_name})
    ds = xr.Dataset(coords=coords(study), attrs=provenance(study))
    ds = ds.assign_coords(hw_param=("hw_param", list(cfg.params)))
    ds["hw_param_units"] = ("hw_param", [PARAMS[p].units for p in cfg.params])
    ds["hw_param_long_name"] = ("hw_param", [PARAMS[p].long_name for p in cfg.params])
    ds = ds.assign(variables)
    ds.attrs.update(delta=cfg.delta, title=f"dse sensitivity of study {study.name!r}",
                    method="forward-mode autodiff (one-sided JVPs at p(1 +- eps)); memory "
                           "capacity and closed loops of agentic sessions: central finite "
                           "difference over +-delta")
    return ds


def kept(fn, identity: str):
    """``fn(point, models, hardware)`` through its kept program (dse.core.programs)."""
    return functools.partial(programs.run, fn, identity)


def elasticity_dependencies(study: Study, evaluator: Evaluator, lead
                            ) -> dict[str, tuple[str, ...]]:
    """The axes each output of :func:`sensitivities` varies along.

    A base value varies as its metric does; every other output is broadcast to one
    shape, that of the metrics, validity and bound signature together (the multipliers
    scale the parameters in place, and a JVP's tangent has its value's shape). Read off
    the evaluator's own (cached) dependency trace of ``evaluator``'s outputs, which is
    much cheaper than a shape trace of the differentiated program.
    """
    deps = dependencies(study, evaluator)
    together = tuple(a.name for a in study.dims
                     if any(a.name in deps[n] for n in evaluator.names))
    return {name: deps[name.removeprefix("base_")] if name.startswith("base_") else together
            for name in lead}


def _inverse(study: Study, evaluator: Evaluator, cfg: SensitivityConfig, progress
             ) -> xr.Dataset:
    scales, values, ok = [], [], []
    for q in cfg.inverse:
        identity = "inverse|" + programs.canonical((q, study.mode, study.features))
        fn = kept(functools.partial(_answer, query=q, mode=study.mode, features=study.features),
                  identity)
        lead = {"scale": 0, "value": 0, "attainable": 0}
        arrays, deps = run_function(
            study, evaluator, fn, lead,
            function_dependencies(study, evaluator, fn, lead, identity), progress)
        dims = tuple(a.name for a in study.dims)

        def full(name):
            a = arrays[name]
            index = tuple(slice(None) if d in deps[name] else None for d in dims)
            return np.broadcast_to(a[index] if a.ndim else a, study.shape)

        scales.append(full("scale"))
        values.append(full("value"))
        ok.append(full("attainable"))
    dims = ("query",) + tuple(a.name for a in study.dims)
    labels = [q.label for q in cfg.inverse]
    units = [_VALUE_FIELD[q.param][1] for q in cfg.inverse]
    return xr.Dataset({
        "required_scale": (dims, np.stack(scales), {
            "units": "1", "long_name": "smallest multiplier of the resource meeting the goal "
            "(NaN: no amount suffices)"}),
        "required_value": (dims, np.stack(values), {
            "units": "SI (see query_units)", "long_name": "the resource at that multiplier"}),
        "attainable": (dims, np.stack(ok), {"units": "1", "long_name": "some amount of the "
                                            "resource meets the goal"}),
        "query_units": ("query", units),
    }, coords={"query": labels})


@jit(static_argnames=("query", "mode", "features"))
def _answer(point, models, hardware, query, mode, features):
    scale, attainable = required_scale(point, models, hardware, query, mode, features)
    field = _VALUE_FIELD[query.param][0]
    base = getattr(take(hardware, point.hardware), field) * getattr(point, INVERSE[query.param])
    return {"scale": scale, "value": base * scale, "attainable": attainable}


def _mix(ds: xr.Dataset, cfg: SensitivityConfig) -> xr.Dataset:
    """Aggregate elasticities of a weighted mix of workloads.

    For a mix whose total is sum_i w_i m_i, d log(total) = sum_i (w_i m_i / total) e_i:
    each workload's elasticity weighted by its share of the total (exact for additive
    metrics such as time; a share-weighted average for rates).
    """
    weights = None
    for axis, table in cfg.mix.items():
        labels = [str(v) for v in ds[axis].values]
        w = xr.DataArray([float(table.get(label, 0.0)) for label in labels], dims=axis,
                         coords={axis: ds[axis].values})
        weights = w if weights is None else weights * w
    out = {}
    for m in cfg.metrics:
        share = weights * ds["base_" + m]
        total = share.sum(list(cfg.mix))
        mixed = (share * ds[m]).sum(list(cfg.mix), skipna=False) / total
        out[m + "_mix"] = mixed.assign_attrs(
            units="1", long_name=f"elasticity of the weighted mix's {m} "
            f"({', '.join(f'{a}: {t}' for a, t in cfg.mix.items())})")
    return xr.Dataset(out)

"""Labelled results: grid arrays -> an xarray Dataset with units and provenance."""

from __future__ import annotations

import datetime as _dt
import json

import numpy as np
import xarray as xr

from .._version import __version__
from ..catalogue import kernels
from ..schema.knobs import fields
from ..schema.outputs import (BOUND_CODES, EXTRA_COORDS, OUTPUTS, REASON_BITS, REASONS,
                              REGIME_CODES)
from ..study.study import Study
from . import lazydask

lazydask.install()


def knob_attrs(study: Study, key: str) -> dict:
    """``units`` and ``long_name`` of a study key, for its coordinate."""
    meta = fields(study.point_type)[key].metadata
    return {"units": meta["units"], "long_name": meta["long_name"]}


def provenance(study: Study) -> dict:
    """Dataset attrs that make a result reproducible: study text, version, specs."""
    return {
        "title": f"dse {study.mode} study {study.name!r}",
        "study_name": study.name,
        "study_file": study.file,
        "study": study.text,
        "mode": study.mode,
        "dtype": study.dtype,
        "dse_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hardware_specs": json.dumps({c.name: dict(c.fields) for c in study.hardware}),
        "model_specs": json.dumps({c.name: dict(c.fields) for c in study.models}),
        "Conventions": "CF-1.8",
        **calibration_attrs(study),
    }


def calibration_attrs(study: Study) -> dict:
    """The calibration a study ran under: file, framework and each device's values."""
    if study.calibration is None:
        return {"calibration": "none (plain roofline: an upper bound, every efficiency 1)"}
    fits = {fw: study.calibration_fit(fw) for fw in study.frameworks}
    single = len(set(fits.values())) == 1
    framework = next(iter(fits.values())) if single else ", ".join(
        f"{fw}: {fit}" for fw, fit in fits.items())
    values = {c.name: study.calibration.values(fit, c.name) for c in study.hardware
              for fit in [next(iter(fits.values()))]} if single else {
        f"{fw}/{c.name}": study.calibration.values(fit, c.name) for fw, fit in fits.items()
        for c in study.hardware}
    out = {"calibration": study.calibration.file, "calibration_framework": framework,
           "calibration_values": json.dumps(values)}
    fallbacks = [line for c in study.hardware
                 if (line := study.calibration.fallback(c.name)) is not None]
    borrowed = [f"framework {fw} runs under the {fit!r} fit" for fw, fit in fits.items()
                if study.framework is None and fit != fw and not (fw == "trtllm"
                                                                  and fit == "tensorrt-llm")]
    fallbacks += borrowed
    if fallbacks:
        out["calibration_fallback"] = "; ".join(fallbacks)
    out.update(kernel_attrs(study))
    return out


def kernel_attrs(study: Study) -> dict:
    """The measured GEMM tables that priced each device's matmuls (``kernel_tables``:
    framework/device -> 'system backend version'; a device of none keeps the calibrated
    rate), and their source, where the calibration was fitted with them."""
    if not kernels.uses_kernels(study.calibration):
        return {}
    surf = kernels.surfaces()
    used = {}
    for fw in study.frameworks:
        for c in study.hardware:
            found = surf.table_of(c.name, fw, c.fields.get("kernel_tables"), c.file)
            used[f"{fw}/{c.name}"] = (surf.describe(found[0]) if found is not None
                                      else "none (the calibration's fitted GEMM rate)")
    out = {"kernel_tables": json.dumps(used), "kernel_source": surf.manifest["licence"]}
    if kernels.uses_moe(study.calibration):  # the routed experts by the MoE tables too
        out["kernel_source"] += " " + surf.manifest["moe"]["licence"]
    return out


def coords(study: Study) -> dict:
    out = {}
    for axis in study.dims:
        text = any(isinstance(v, str) for v in axis.values)
        values = np.asarray([str(v) for v in axis.values] if text else axis.values)
        out[axis.name] = xr.Variable(axis.name, values, knob_attrs(study, axis.name))
    for key, value in study.fixed.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = int(value)
        out[key] = xr.Variable((), value, knob_attrs(study, key))
    return out


def to_dataset(study: Study, arrays: dict[str, np.ndarray],
               deps: dict[str, tuple[str, ...]]) -> xr.Dataset:
    """Wrap evaluated arrays (over their dependency dims) into a labelled Dataset."""
    meta = OUTPUTS[study.mode]
    data = {}
    for name, array in arrays.items():
        info = meta[name]
        attrs = {"units": info.units, "long_name": info.long_name}
        if info.kind == "flags":
            attrs.update(flag_masks=np.asarray(list(REASON_BITS.values()), np.uint16),
                         flag_meanings=" ".join(REASONS),
                         comment="; ".join(f"{k}: {v}" for k, v in REASONS.items()))
        elif info.kind == "pool":
            attrs.update(flag_values=np.asarray([0.0, 1.0]), flag_meanings="prefill decode")
        elif info.kind == "regime":
            attrs.update(flag_values=np.asarray(list(REGIME_CODES.values()), np.uint8),
                         flag_meanings=" ".join(REGIME_CODES))
        elif info.kind == "codes":
            attrs.update(flag_values=np.asarray(list(BOUND_CODES.values()), np.uint8),
                         flag_meanings=" ".join(BOUND_CODES))
        data[name] = xr.Variable(info.dims + deps[name], array, attrs)
    extra = {d for name in arrays for d in meta[name].dims}
    # Coordinates first: a Dataset orders its dims by first appearance, and the
    # result's dims must follow the study's axes.
    ds = xr.Dataset(coords=coords(study), attrs=provenance(study))
    labels = dict(EXTRA_COORDS)
    if study.pipeline is not None:
        labels.update(study.pipeline.coords())
    ds = ds.assign_coords({d: (d, list(labels[d])) for d in sorted(extra)})
    return ds.assign(data)

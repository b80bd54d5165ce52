"""What a result file holds: a sweep, a streamed reduction, a search or a sensitivity.

Every figure asks the :class:`Result` rather than the file: which axes it spans, which
points are feasible, each point's knob values and hardware. The kind is read from the
Dataset itself (dims and attrs dse writes), never from the file name.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from functools import cached_property
from pathlib import Path

import numpy as np
import xarray as xr

from ..errors import InputError
from ..schema.knobs import POINT_TYPES, fields
from ..schema.outputs import EXTRA_COORDS, PRIMARY_METRIC, REASON_BITS

KINDS = ("sweep", "reduced", "search", "sensitivity")
READABLE = (".nc", ".zarr")


@dataclasses.dataclass(frozen=True, eq=False)
class Result:
    """A dse result Dataset and what kind of result it is (one of :data:`KINDS`)."""

    ds: xr.Dataset
    kind: str
    file: str

    @property
    def mode(self) -> str:
        if "mode" in self.ds.attrs:
            return str(self.ds.attrs["mode"])
        try:  # a search's trials keep the study text, not the mode
            study = tomllib.loads(str(self.ds.attrs.get("study", "")))
        except tomllib.TOMLDecodeError:
            study = {}
        return str(study.get("study", {}).get("mode", "inference"))

    @property
    def name(self) -> str:
        return str(self.ds.attrs.get("study_name") or self.ds.attrs.get("optuna_study")
                   or Path(self.file).stem)

    @property
    def axes(self) -> list[str]:
        """The grid's axes: dims of the study (a reduction: its ``by`` axes)."""
        if self.kind == "reduced":
            return [d for d in str(self.ds.attrs.get("reduce_by", "")).split() if d in self.ds.dims]
        if self.kind == "search":
            return ["trial"]
        skip = set(EXTRA_COORDS) | {"hw_param", "query"}
        return [d for d in self.ds.dims if d not in skip]

    @property
    def primary_metric(self) -> str:
        if self.kind == "reduced":
            return str(self.ds.attrs["reduction"]).split()[2]
        if "slo_rank" in self.ds:  # a serving sweep with SLOs (dse.results.summary)
            return "goodput_per_device_req_s"
        return PRIMARY_METRIC.get(self.mode, "throughput_tok_s")

    def full(self, name: str) -> xr.DataArray:
        """Variable ``name`` broadcast over every axis (leading extra dims kept)."""
        var = self.ds[name]
        missing = [d for d in self.axes if d not in var.dims]
        if missing:
            var = var.expand_dims({d: self.ds.sizes[d] for d in missing})
        extra = [d for d in var.dims if d not in self.axes]
        return var.transpose(*extra, *self.axes)

    @cached_property
    def feasible(self) -> xr.DataArray:
        """True where a point is feasible (a reduction: where its group has a feasible point)."""
        if self.kind == "reduced":
            return self.full("n_feasible") > 0
        if self.kind == "search":
            return self.ds["feasible"]
        if "valid" in self.ds:
            return self.full("valid").astype(bool)
        return xr.ones_like(self.full(self.primary_metric), dtype=bool)

    def value(self, point: dict, key: str):
        """A knob's value at ``point`` (index per axis): its coordinate, else the default."""
        if key in self.ds.coords:
            coord = self.ds[key]
            if coord.ndim == 0:
                return coord.item()
            if coord.dims[0] in point:
                return coord.values[point[coord.dims[0]]].item()
        knobs = fields(POINT_TYPES[self.mode])
        return knobs[key].default if key in knobs else None

    def hardware(self, name: str | None) -> dict:
        """Catalogue fields (human units) of device ``name`` from the Dataset's attrs."""
        specs = json.loads(self.ds.attrs.get("hardware_specs", "{}"))
        if name is None and len(specs) == 1:
            return next(iter(specs.values()))
        return specs.get(name, {})

    @property
    def reason_bits(self) -> dict[str, int]:
        """Infeasibility flag name -> bit, from the ``reason`` variable's CF attrs."""
        if "reason" in self.ds:
            attrs = self.ds["reason"].attrs
            if "flag_meanings" in attrs:
                return dict(zip(str(attrs["flag_meanings"]).split(),
                                (int(b) for b in np.atleast_1d(attrs["flag_masks"]))))
        return dict(REASON_BITS)


def _kind(ds: xr.Dataset) -> str | None:
    if "hw_param" in ds.dims and any(k.startswith("base_") for k in ds.data_vars):
        return "sensitivity"
    if "trial" in ds.dims and "objectives" in ds.attrs and "feasible" in ds:
        return "search"
    if "reduction" in ds.attrs and "n_feasible" in ds:
        return "reduced"
    if "study" in ds.attrs and "mode" in ds.attrs and "valid" in ds:
        return "sweep"
    if "study" in ds.attrs and "mode" in ds.attrs and ds.attrs.get("title", "").startswith("dse"):
        return "sweep"  # an [output] variables list without valid/reason
    return None


def open_result(result: str | Path | xr.Dataset) -> Result:
    """Open a result file written by ``dse sweep``, ``dse search`` or ``dse sensitivity``
    (``.nc`` or ``.zarr``), or wrap a Dataset already in memory."""
    if isinstance(result, xr.Dataset):
        ds, file = result, "<dataset>"
    else:
        path = Path(result)
        file = str(path)
        if not path.exists():
            raise InputError(file, None, "no such file", "a result written by dse sweep, "
                             "dse search or dse sensitivity")
        if path.suffix not in READABLE:
            raise InputError(file, None, f"unsupported extension {path.suffix!r}",
                             ", ".join(READABLE))
        try:
            if path.suffix == ".zarr":
                ds = xr.open_zarr(path).load()
            else:
                with xr.open_dataset(path) as opened:
                    ds = opened.load()
        except Exception as err:  # noqa: BLE001 - any unreadable file is bad input
            raise InputError(file, None, f"not a readable dataset ({type(err).__name__})",
                             "a .nc or .zarr result written by dse") from None
    kind = _kind(ds)
    if kind is None:
        raise InputError(file, None, "not a dse result (no study, trials or sensitivity "
                         "variables)", "a result written by dse sweep, dse search or "
                         "dse sensitivity")
    if kind == "sweep":
        # a serving study with SLOs: its best points are those with the most goodput per
        # device at the SLOs (as the sweep's summary ranks them)
        from ..results.summary import slo_ranked

        ranked = slo_ranked(ds)
        if ranked is not None:
            ds = ranked
            ds["goodput_per_device_req_s"].attrs.update(
                units="requests/s", long_name="goodput per device at the SLOs")
            ds["slo_met"].attrs.update(units="1", long_name="share of requests within the SLOs")
            ds["slo_rank"].attrs.update(units="requests/s", long_name="goodput per device, "
                                        "points under 99% within the SLOs last")
    return Result(ds, kind, file)

"""Breakdown bars at each model x hardware's best configuration: memory per device
(weights, KV cache, activations; gradients and optimizer when training) against the
usable capacity, and time per component for prefill and decode (training: per step;
pipeline: per stage and link)."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from ..units import GIB
from .display import fmt, label, scale
from .figures import NotApplicable, pick_metric
from .facets import FACETS, at_best, at_point, best_points
from .result import Result

MAX_BARS = 16
MEMORY_PARTS = {"inference": ("weight_bytes", "kv_cache_bytes", "activation_bytes"),
                "training": ("weight_bytes", "grad_bytes", "optimizer_bytes",
                             "activation_bytes")}


def _groups(res: Result, metric: str):
    groups = best_points(res, metric, list(FACETS))
    if len(groups) > MAX_BARS:
        raise NotApplicable(f"more than {MAX_BARS} model x hardware groups")
    return groups


def config_label(res: Result, point: dict) -> str:
    """The configuration of a bar: the non-facet axes (a reduction: its best_* values)."""
    if res.kind == "reduced":
        one = at_point(res, point)
        names = str(res.ds.attrs.get("reduced_axes", "")).split()
        return " ".join(f"{a}={fmt(one[f'best_{a}'].item())}" for a in names)
    return " ".join(f"{a}={fmt(res.ds[a].values[i].item())}" for a, i in point.items()
                    if a not in FACETS and res.ds.sizes[a] > 1)


def _bar_label(res: Result, labels: dict, point: dict, feasible: bool) -> str:
    head = " / ".join(str(v) for v in labels.values()) or res.name
    config = textwrap.fill(config_label(res, point), 48)
    return f"{head}{'' if feasible else ' (infeasible)'}\n{config}"


def _capacity(res: Result, point: dict) -> float:
    """Usable device memory at ``point``: catalogue memory x memory_scale x (1 - reserve)."""
    spec = res.hardware(res.value(point, "hardware"))
    if "memory_gib" not in spec:
        return float("nan")
    return (spec["memory_gib"] * GIB * float(res.value(point, "memory_scale") or 1.0)
            * (1.0 - float(res.value(point, "memory_reserve") or 0.0)))


def _stack(ax, rows: list[list[float]], names: list[str], colours) -> None:
    left = np.zeros(len(rows))
    for k, name in enumerate(names):
        width = np.asarray([r[k] for r in rows])
        if np.any(width > 0):
            ax.barh(range(len(rows)), width, left=left, color=colours[k % len(colours)],
                    label=name)
        left += width


def memory(res: Result, metric: str | None = None):
    parts = MEMORY_PARTS.get(res.mode, ())
    if res.kind not in ("sweep", "reduced") or not parts or any(
            p not in res.ds for p in parts + ("memory_bytes",)):
        raise NotApplicable("no per-device memory breakdown in the result")
    metric = pick_metric(res, metric)
    groups = _groups(res, metric)
    rows, caps, names = [], [], []
    for labels, point, feasible in groups:
        one = at_point(res, point)
        values = [float(one[p]) for p in parts]
        values.append(max(float(one["memory_bytes"]) - sum(values), 0.0))
        rows.append(values)
        caps.append(_capacity(res, point))
        names.append(_bar_label(res, labels, point, feasible))
    factor, unit = scale("bytes", [sum(r) for r in rows])
    rows = [[v / factor for v in r] for r in rows]
    fig, ax = plt.subplots(figsize=(8.5, 1.2 + 0.55 * len(rows)), layout="constrained")
    legends = [res.ds[p].attrs.get("long_name", p).replace(" per device", "")
               for p in parts] + ["other"]
    _stack(ax, rows, legends, plt.get_cmap("tab10").colors)
    caps = np.asarray(caps) / factor
    ax.scatter(caps, range(len(rows)), marker="|", s=600, c="red", zorder=3,
               label="usable capacity")
    ax.set_yticks(range(len(rows)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(label(res.ds["memory_bytes"], unit), fontsize=8)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), markerscale=0.4)
    ax.grid(axis="x", alpha=0.3)
    return fig, ("Memory per device (heaviest pipeline stage) " + at_best(res, metric)
                 + "; red ticks: usable capacity, device memory x memory_scale x "
                 "(1 - memory_reserve). A group with no feasible point shows its smallest "
                 "configuration, marked infeasible.")


def _pipeline_parts(ds: xr.Dataset, phase: str) -> xr.DataArray:
    stages = ds[f"stage_{phase}_s"].rename(stage="part")
    links = ds[f"link_{phase}_s"].rename(link="part")
    stages["part"] = [f"stage {s}" for s in ds["stage"].values]
    links["part"] = [f"link {s}" for s in ds["link"].values]
    return xr.concat([stages, links], "part")


def breakdown(res: Result) -> dict[str, xr.DataArray]:
    """Time per part (dim ``part``) for each phase, or {} when the result has none."""
    ds = res.ds
    if "component_s" in ds:
        return {str(p): ds["component_s"].sel(phase=p).rename(component="part")
                for p in ds["phase"].values}
    if "stage_decode_s" in ds and "link_decode_s" in ds:
        return {p: _pipeline_parts(ds, p) for p in ("prefill", "decode")}
    if res.mode == "training" and "compute_s" in ds and "comm_s" in ds:
        comm = ds["comm_s"].rename(comm_kind="part")
        comm["part"] = [f"{k} comm" for k in ds["comm_kind"].values]
        fixed = [ds[k].expand_dims(part=[k.removesuffix("_s")]) for k in ("compute_s", "bubble_s")]
        return {"step": xr.concat(fixed + [comm], "part", coords="minimal")}
    return {}


def latency(res: Result, metric: str | None = None):
    phases = breakdown(res)
    if res.kind != "sweep" or not phases:
        raise NotApplicable("no per-component times (sweep with [output] breakdown = true)")
    metric = pick_metric(res, metric)
    groups = _groups(res, metric)
    height = 1.4 + (0.5 * len(groups) + 0.6) * len(phases)
    fig, axs = plt.subplots(len(phases), 1, figsize=(9, height), squeeze=False,
                            layout="constrained")
    names = [_bar_label(res, *g) for g in groups]
    for ax, (phase, parts) in zip(axs[:, 0], phases.items()):
        rows = [parts.isel({a: i for a, i in point.items() if a in parts.dims})
                .transpose("part").values.astype(float) for _, point, _ in groups]
        factor, unit = scale("s", [r.sum() for r in rows])
        _stack(ax, [r / factor for r in rows], [str(p) for p in parts["part"].values],
               plt.get_cmap("tab20").colors)
        ax.set_yticks(range(len(rows)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"{PER.get(phase, phase)} [{unit}]", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    what = {"training": "compute, pipeline bubble and exposed communication by kind",
            "pipeline": "each stage's compute and each link's transfer"}.get(
        res.mode, "each component's roofline time")
    return fig, (f"Latency breakdown of {', '.join(PER.get(p, p) for p in phases)}: {what}, "
                 f"{at_best(res, metric)}.")


PER = {"prefill": "prefill of the batch (TTFT)", "decode": "one decode step (TPOT)",
       "step": "one optimizer step"}

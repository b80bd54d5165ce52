"""Printed summaries of results (human units, converted here and nowhere else)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from ..schema.outputs import EXTRA_COORDS, REASON_BITS, REGIME_CODES
from ..units import human_bytes, human_count, human_seconds
from .select import axes, best_points, score, top


def points(ds: xr.Dataset) -> int:
    return int(np.prod([ds.sizes[d] for d in axes(ds)]))


def reason_counts(ds: xr.Dataset) -> dict[str, int]:
    """Infeasible points per reason over the whole grid (a point may have several)."""
    reason = ds["reason"]
    repeat = int(np.prod([ds.sizes[d] for d in axes(ds) if d not in reason.dims]))
    values = reason.values
    return {name: int(np.count_nonzero(values & bit)) * repeat
            for name, bit in REASON_BITS.items()}


# what a summary ranks by, and shows of each point: deployments are compared per device
RANKED_BY = {"inference": "throughput_per_device_tok_s",
             "training": "throughput_per_device_tok_s", "pipeline": "throughput_tok_s"}
SHOWN = ("throughput_per_device_tok_s", "throughput_tok_s", "tokens_per_s_per_user", "ttft_s",
         "tpot_s", "step_s", "mfu", "memory_bytes", "n_devices")
PERCENT = ("mfu", "hfu", "slo_met")
HEADERS = {"throughput_per_device_tok_s": "tok/s/device", "throughput_tok_s": "tok/s",
           "tokens_per_s_per_user": "tok/s/user", "memory_bytes": "memory/device",
           "n_devices": "devices", "goodput_per_device_req_s": "goodput req/s/device",
           "slo_met": "within SLOs"}
SLO_KEYS = ("ttft_slo_s", "tpot_slo_s")
COLLAPSE = 8  # candidates looked at per row shown (alike points collapse into one)
MEETS = 0.99  # share of requests within the SLOs for a point to meet them (P99, as dse plan)


def slos(ds: xr.Dataset) -> dict[str, float]:
    """The study's service-level objectives (those above 0; the largest where an axis)."""
    out = {}
    for k in SLO_KEYS:
        if k in ds.coords or k in ds:
            v = float(np.nanmax(np.asarray(ds[k].values, np.float64)))
            if v > 0.0:
                out[k] = v
    return out


def slo_ranked(ds: xr.Dataset) -> xr.Dataset | None:
    """``ds`` with goodput per device and the share of requests within the SLOs, where
    the study states SLOs and has goodput (serving under load); else None."""
    if not slos(ds) or not {"goodput_req_s", "n_devices", "request_throughput_req_s"} <= set(
            ds.data_vars):
        return None
    served = ds["request_throughput_req_s"]
    per_device = ds["goodput_req_s"] / ds["n_devices"]
    met = (ds["goodput_req_s"] / served).where(served > 0.0)
    # points whose requests meet the SLOs (MEETS of them) rank first, by goodput per
    # device; the rest after them, in the same order
    rank = per_device.where(met >= MEETS, per_device - 1e12)
    return ds.assign(goodput_per_device_req_s=per_device, slo_met=met, slo_rank=rank)


def best(ds: xr.Dataset, metric: str | None = None, k: int = 5, direction: str | None = None,
         constraints=()) -> list[dict]:
    """The ``k`` best feasible points by ``metric`` (default: throughput per device,
    :data:`RANKED_BY`; for a serving study with SLOs, goodput per device at them, so a
    point that misses them ranks by the requests that meet them; :mod:`dse.results.select`):
    their axis values, key outputs and regime (``bound``: the dominant phase and the roof
    with the most seconds in it)."""
    return [row for _, row in ranked(ds, metric, k, direction, constraints)]


def ranked(ds: xr.Dataset, metric: str | None = None, k: int = 5, direction: str | None = None,
           constraints=()) -> list[tuple[dict, dict]]:
    """:func:`best`'s rows, each with its grid index ({axis: index})."""
    shown = SHOWN
    if metric is None and (ranked_ds := slo_ranked(ds)) is not None:
        ds, metric, direction = ranked_ds, "slo_rank", "maximize"
        shown = ("goodput_per_device_req_s", "slo_met") + SHOWN
    metric = metric or RANKED_BY.get(str(ds.attrs.get("mode", "inference")))
    out, seen = [], {}
    # points alike in every output shown differ only in axes they do not depend on (an
    # aggregated deployment's decode_* keys): one row, those axes shown as "any"
    for index in best_points(ds, metric, direction, tuple(constraints), k * COLLAPSE):
        point = ds.isel(index)
        row = {d: point[d].item() for d in index}
        values = {name: float(point[name]) for name in shown if name in point}
        key = tuple(np.round(np.asarray(list(values.values()), np.float64), 9).tolist())
        if key in seen:
            first = seen[key]
            for d in index:
                if first[d] != row[d]:
                    first[d] = "any"
            continue
        if len(out) == k:
            continue
        row.update(values)
        if "regime" in point:
            row["bound"] = regime_label(point)
        out.append((index, row))
        seen[key] = row
    return out


def regime_label(point: xr.Dataset) -> str:
    """``"decode: memory"``: a point's dominant phase and the roof with the most seconds
    in it (training: the step's roof)."""
    regime = list(REGIME_CODES)[int(point["regime"])]
    if "dominant_phase" in point:
        return f"{EXTRA_COORDS['phase'][int(point['dominant_phase'])]}: {regime}"
    return regime


def format_value(key: str, value) -> str:
    """A value in human units, chosen by the unit suffix of its name."""
    if isinstance(value, str):  # a label ("any": the row holds for every value of an axis)
        return value
    if key.endswith("_bytes"):
        return human_bytes(value)
    if key in PERCENT:
        return f"{100 * value:.1f}%"
    if key == "tokens_per_s_per_user":
        return f"{value:,.1f}"
    if key.endswith("_tok_s"):
        return f"{value:,.0f}"
    if key.endswith("_req_s"):
        return f"{value:,.3g}"
    if key.endswith("_s"):
        return human_seconds(value)
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() else f"{value:g}"
    return str(value)


def table(rows: list[dict]) -> str:
    """A plain aligned text table of ``rows`` (dicts with the same keys)."""
    if not rows:
        return "  (none)"
    keys = list(rows[0])
    cells = [[format_value(k, r[k]) for k in keys] for r in rows]
    header = [HEADERS.get(k, k) for k in keys]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    lines = ["  " + "  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def calibration_line(ds: xr.Dataset) -> str:
    """Which numbers these are: calibrated (the file and framework) or a plain roofline,
    which is an upper bound."""
    calibration = str(ds.attrs.get("calibration", ""))
    if not calibration or calibration.startswith("none"):
        return ("numbers: plain roofline, an upper bound (every efficiency 1.0; "
                "calibration = \"none\")")
    framework = ds.attrs.get("calibration_framework", "")
    line = f"numbers: calibrated ({_short(calibration)}, framework {framework})"
    if ds.attrs.get("calibration_fallback"):
        line += f"\n  no calibration data for: {ds.attrs['calibration_fallback']}"
    return line


def _short(path: str) -> str:
    """``path`` relative to the working directory when it lies under it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def sweep_summary(ds: xr.Dataset, seconds: float) -> str:
    n = points(ds)
    lines = [f"{ds.attrs.get('study_name', 'study')}: {n:,} points in {seconds:.3g} s "
             f"({human_count(n / max(seconds, 1e-9))} points/s)", calibration_line(ds)]
    if "reason" in ds:
        counts = reason_counts(ds)
        repeat = int(np.prod([ds.sizes[d] for d in axes(ds) if d not in ds["reason"].dims]))
        infeasible = int(np.count_nonzero(ds["reason"].values)) * repeat
        lines.append(f"infeasible: {infeasible:,} ({100.0 * infeasible / n:.1f}%)")
        for name, count in counts.items():
            if count:
                lines.append(f"  {name:<20} {count:,}")
    rows = best(ds)
    if rows:
        objectives = slos(ds) if slo_ranked(ds) is not None else {}
        if objectives:
            said = ", ".join(f"{k} = {human_seconds(v)}" for k, v in objectives.items())
            lines.append(f"best feasible configurations by goodput per device at the SLOs "
                         f"({said}; 'within SLOs': the share of requests that meet them; "
                         f"those under {MEETS:.0%} rank after the rest):")
        else:
            metric = RANKED_BY.get(str(ds.attrs.get("mode", "inference")))
            lines.append(f"best feasible configurations by {metric}:")
        lines.append(table(rows))
    elif "valid" in ds:
        lines.append("no feasible configuration")
    return "\n".join(lines)


def reduce_summary(ds: xr.Dataset, seconds: float, k: int = 10) -> str:
    """Summary of a streamed reduction: totals, then the best point of each group."""
    by = ds.attrs.get("reduce_by", "").split()
    groups = int(np.prod([ds.sizes[d] for d in by])) if by else 1
    n = int(ds["n_points"]) * groups
    lines = [f"{ds.attrs.get('study_name', 'study')}: {n:,} points streamed in {seconds:.3g} s "
             f"({human_count(n / max(seconds, 1e-9))} points/s), reduced to {groups:,} "
             f"group{'s' if groups != 1 else ''} by {', '.join(by) or 'nothing'}",
             f"valid: {int(ds['n_valid'].sum()):,}; feasible"
             + (f" ({ds.attrs['constraints']})" if ds.attrs.get("constraints") else "")
             + f": {int(ds['n_feasible'].sum()):,}"]
    counts = ds["reason_count"].sum([d for d in ds["reason_count"].dims if d != "reason_flag"])
    for name, count in zip(ds["reason_flag"].values, counts.values):
        if count:
            lines.append(f"  {name:<20} {int(count):,}")
    objective = ds.attrs["reduction"].split()[2]
    direction = "maximize" if "maximize" in ds.attrs["reduction"] else "minimize"
    flat = ds.stack(group=by) if by else ds.expand_dims(group=[0])
    values = flat[objective].values
    rows = []
    for i in top(score(values, np.isfinite(values), direction), k):
        g = flat.isel(group=int(i))
        row = {d: g[d].item() for d in by}
        for name in ds.attrs["reduced_axes"].split():
            value = g[f"best_{name}"].item()
            row[name] = value.item() if hasattr(value, "item") else value
        for name in dict.fromkeys((objective,) + SHOWN):
            if name in g:
                row[name] = float(g[name])
        rows.append(row)
    lines.append(f"best feasible point per group by {ds.attrs['reduction'].split(' over ')[0][8:]}"
                 + (f" (top {k} of {groups})" if groups > k else "") + ":")
    lines.append(table(rows))
    return "\n".join(lines)

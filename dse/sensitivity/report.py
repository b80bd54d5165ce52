"""The sensitivity report for chip architects: Markdown + HTML, tornado charts as PNG.

One tornado chart per workload (a grid point; for large grids, each model x hardware x
use case with the other axes at their median), tables of elasticities and of the exact
+-delta effects next to the linear prediction, inverse answers and mix elasticities.
"""

from __future__ import annotations

import html
import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from ..schema.outputs import EXTRA_COORDS, REGIME_CODES  # noqa: E402

MAX_WORKLOADS = 24
KEY_AXES = ("model", "hardware", "usecase")


REGIME_VARIABLES = ("regime", "dominant_phase", "roofline_regime", "roofline_dominant_phase")
FACTOR = 2.0  # calibrated and roofline elasticities this far apart are reported
FLOOR = 0.05  # elasticities smaller than this (both) are not compared


def workloads(ds: xr.Dataset) -> list[tuple[str, xr.Dataset]]:
    """(label, Dataset of one workload) pairs; over more than :data:`MAX_WORKLOADS`
    points, the other axes reduced to their median (regime codes: to their mode)."""
    axes = [d for d in ds["base_" + _metrics(ds)[0]].dims]
    sizes = [ds.sizes[a] for a in axes]
    if int(np.prod(sizes)) > MAX_WORKLOADS:
        reduce = [a for a in axes if a not in KEY_AXES]
        if reduce:
            codes = {k: _mode(ds[k], reduce) for k in REGIME_VARIABLES if k in ds}
            ds = ds.drop_vars(list(codes)).median(reduce, skipna=True).assign(codes)
        axes = [a for a in axes if a in KEY_AXES]
    out = []
    for index in itertools.product(*(range(ds.sizes[a]) for a in axes)):
        sel = dict(zip(axes, index))
        one = ds.isel(sel)
        label = ", ".join(f"{a}={one[a].item()}" for a in axes) or "all"
        out.append((label, one))
    return out[:MAX_WORKLOADS]


def _mode(codes: xr.DataArray, dims: list[str]) -> xr.DataArray:
    """The most common code over ``dims`` (the lowest of a tie)."""
    dims = [d for d in dims if d in codes.dims]
    if not dims:
        return codes
    flat = codes.stack(_reduced=dims).transpose(..., "_reduced")
    values = flat.values.astype(np.int64)
    counts = np.stack([(values == c).sum(-1) for c in range(int(values.max(initial=0)) + 1)])
    return xr.DataArray(np.argmax(counts, 0).astype(np.uint8),
                        dims=[d for d in flat.dims if d != "_reduced"],
                        coords={d: flat[d] for d in flat.dims if d != "_reduced"},
                        attrs=codes.attrs)


def regime_text(one: xr.Dataset) -> str | None:
    """"decode, memory-bound (calibrated); decode, memory-bound on the plain roofline"
    for one workload (None without regime outputs)."""
    def label(prefix):
        regime = list(REGIME_CODES)[int(one[prefix + "regime"])]
        if prefix + "dominant_phase" in one:
            return f"{EXTRA_COORDS['phase'][int(one[prefix + 'dominant_phase'])]}, {regime}-bound"
        return f"{regime}-bound"

    if "regime" not in one:
        return None
    if "roofline_regime" not in one:
        return f"Regime: {label('')} (the roof with the most seconds in the dominant phase)."
    return (f"Regime: {label('')} calibrated; {label('roofline_')} on the plain roofline "
            "(the roof with the most seconds in the dominant phase).")


def disagreements(one: xr.Dataset) -> list[tuple[str, str, float, float]]:
    """(metric, parameter, calibrated, roofline) where one workload's calibrated and
    plain-roofline elasticities differ by more than :data:`FACTOR` (or in sign), the
    larger at least :data:`FLOOR` in magnitude; largest gap first."""
    out, seen = [], set()
    for m in _metrics(one):
        if "roofline_" + m not in one:
            continue
        for p in one["hw_param"].values:  # an efficiency scales as its peak: said once
            cal = float(one[m].sel(hw_param=p))
            roof = float(one["roofline_" + m].sel(hw_param=p))
            if not (np.isfinite(cal) and np.isfinite(roof)) or max(abs(cal), abs(roof)) < FLOOR:
                continue
            small, large = sorted((abs(cal), abs(roof)))
            key = (m, round(cal, 6), round(roof, 6))
            if (cal * roof < 0.0 or large > FACTOR * small) and key not in seen:
                out.append((m, str(p), cal, roof))
                seen.add(key)
    return sorted(out, key=lambda r: -abs(r[2] - r[3]))


def disagreement_line(one: xr.Dataset) -> str | None:
    """The one line that says where a workload's calibrated and roofline elasticities
    part by more than 2x (None where they agree)."""
    found = disagreements(one)
    if not found:
        return None
    said = "; ".join(f"{m} to {p}: {cal:+.3f} calibrated, {roof:+.3f} on the roofline"
                     for m, p, cal, roof in found[:4])
    more = f" (and {len(found) - 4} more)" if len(found) > 4 else ""
    return (f"Calibrated and plain-roofline elasticities differ by more than {FACTOR:g}x: "
            f"{said}{more}. Fitted efficiencies and host overheads, not the roofs alone, set "
            "these answers (docs/validation.md#the-calibration).")


def _metrics(ds: xr.Dataset) -> list[str]:
    return [k.removeprefix("base_") for k in ds.data_vars if k.startswith("base_")]


def tornado(one: xr.Dataset, label: str, path: Path, delta: float) -> Path:
    fig = tornado_figure(one, label, delta)
    fig.savefig(path)
    plt.close(fig)
    return path


def tornado_figure(one: xr.Dataset, label: str, delta: float):
    """The tornado chart of one workload: +-delta of each parameter, a panel per metric."""
    metrics = _metrics(one)
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 4.2), dpi=110,
                             squeeze=False)
    for ax, m in zip(axes[0], metrics):
        plus = 100 * one[m + "_plus"].values
        minus = 100 * one[m + "_minus"].values
        names = list(one["hw_param"].values)
        order = np.argsort(np.maximum(np.abs(plus), np.abs(minus)))
        y = np.arange(len(names))
        ax.barh(y, plus[order], color="tab:blue", label=f"+{100 * delta:g}%")
        ax.barh(y, minus[order], color="tab:orange", label=f"-{100 * delta:g}%")
        kink = one["kink"].values[order]
        ax.set_yticks(y, [n + (" *" if k else "") for n, k in zip(np.array(names)[order], kink)],
                      fontsize=7)
        ax.axvline(0, c="k", lw=0.8)
        ax.set_xlabel(f"change of {m} [%]")
        ax.set_title(m, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"+-{100 * delta:g}% of each hardware parameter: {label}", fontsize=9)
    fig.tight_layout()
    return fig


def _fmt(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else ""
    if isinstance(x, (float, np.floating)):
        return "n/a" if not np.isfinite(x) else f"{x:+.3f}" if abs(x) < 100 else f"{x:.3g}"
    return str(x)


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return lines


def markdown(ds: xr.Dataset, figures: dict[str, Path], base: Path) -> str:
    delta = float(ds.attrs["delta"])
    metrics = _metrics(ds)
    d = f"{100 * delta:g}%"
    lines = [f"# Hardware sensitivity: {ds.attrs.get('study_name', '')}", "",
             "Elasticity = d log(metric) / d log(parameter): -1 means +1% of the parameter "
             "gives -1% of the metric. Computed by forward-mode autodiff through the model "
             "(one-sided at roofline ties); memory capacity by a finite difference over "
             f"+-{d}. Next to each elasticity: the exact re-evaluation at +-{d} and the "
             "linear prediction; `*` marks parameters whose binding roof or feasibility "
             "changes inside the interval (trust the exact column there).", ""]
    for label, one in workloads(ds):
        lines += [f"## {label}", ""]
        if label in figures:
            lines += [f"![tornado {label}]({figures[label].relative_to(base.parent)})", ""]
        lines += ["Base: " + ", ".join(f"{m} = {float(one['base_' + m]):.4g}" for m in metrics), ""]
        lines += [t for t in (regime_text(one), disagreement_line(one)) if t]
        lines += [""] if lines[-1] else []
        params = list(one["hw_param"].values)
        col = {name: one[name].transpose("hw_param", ...).values.reshape(len(params))
               for name in ["kink"] + [m + s for m in metrics for s in (
                   "", "_plus", "_linear_plus", "_minus", "_linear_minus")]}
        header = ["parameter"] + metrics
        rows = [[p] + [float(col[m][i]) for m in metrics] for i, p in enumerate(params)]
        lines += ["Elasticities:", ""] + _table(header, rows) + [""]
        header = ["parameter"] + [f"{m} {s}" for m in metrics for s in (f"+{d}", "linear",
                                                                          f"-{d}", "linear")]
        header.append("kink")
        rows = []
        for i, p in enumerate(params):
            row = [p]
            for m in metrics:
                row += [100 * float(col[m + s][i])
                        for s in ("_plus", "_linear_plus", "_minus", "_linear_minus")]
            row.append(bool(col["kink"][i]))
            rows.append(row)
        lines += [f"Effect of +-{d} (% change; exact, then linear):", ""] + _table(header, rows)
        lines.append("")
    if "required_scale" in ds:
        lines += ["## Inverse questions", "",
                  "The smallest multiple of the resource (all else equal) that meets the goal; "
                  "'no amount' when another roof binds.", ""]
        axes = [d for d in ds["required_scale"].dims if d != "query"]
        rows = []
        for q, units in zip(ds["query"].values, ds["query_units"].values):
            for index in itertools.product(*(range(ds.sizes[a]) for a in axes)):
                sel = dict(zip(axes, index), query=list(ds["query"].values).index(q))
                one = ds.isel(sel)
                point = ", ".join(f"{a}={one[a].item()}" for a in axes if ds.sizes[a] > 1)
                scale = float(one["required_scale"])
                rows.append([q, point, "no amount" if not np.isfinite(scale) else f"{scale:.4g}x",
                             "" if not np.isfinite(scale) else
                             f"{float(one['required_value']):.4g} {units}"])
        lines += _table(["goal", "point", "multiplier", "value"], rows[:200]) + [""]
    mixes = [m for m in metrics if m + "_mix" in ds]
    if mixes:
        lines += ["## Workload mix", "", ds[mixes[0] + "_mix"].attrs["long_name"], ""]
        mix = ds[[m + "_mix" for m in mixes]]
        other = [a for a in mix.dims if a != "hw_param"]
        mix = mix.median(other) if other else mix
        rows = [[p] + [float(mix[m + "_mix"].sel(hw_param=p)) for m in mixes]
                for p in ds["hw_param"].values]
        lines += _table(["parameter"] + mixes, rows) + [""]
    return "\n".join(lines)


def to_html(md: str, title: str) -> str:
    """Minimal Markdown (headings, images, tables, paragraphs) to a standalone page."""
    body, table = [], []

    def flush():
        if table:
            rows = [r.strip().strip("|").split("|") for r in table if not r.startswith("|---")]
            cells = ["<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{html.escape(c.strip())}"
                                      f"</{'th' if i == 0 else 'td'}>" for c in row) + "</tr>"
                     for i, row in enumerate(rows)]
            body.append("<table>" + "".join(cells) + "</table>")
            table.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("!["):
            alt, src = line[2:].split("](")
            body.append(f'<img src="{html.escape(src.rstrip(")"))}" alt="{html.escape(alt)}">')
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    flush()
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "table{border-collapse:collapse;font-size:12px;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{style}</style></head><body>{''.join(body)}</body></html>")


def write_report(ds: xr.Dataset, out: Path) -> dict[str, Path]:
    """Markdown, HTML and tornado PNGs beside ``out`` (the Dataset's path)."""
    out = Path(out)
    figures = {}
    for i, (label, one) in enumerate(workloads(ds)):
        figures[label] = tornado(one, label, out.with_name(f"{out.stem}-tornado-{i}.png"),
                                 float(ds.attrs["delta"]))
    md = markdown(ds, figures, out)
    paths = {"markdown": out.with_suffix(".md"), "html": out.with_suffix(".html")}
    paths["markdown"].write_text(md)
    paths["html"].write_text(to_html(md, ds.attrs.get("title", "dse sensitivity")))
    return dict(paths, **{f"tornado {k}": v for k, v in figures.items()})

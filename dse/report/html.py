"""The report page: the study, the best configurations per model x hardware (or the
search's best trials, or the sensitivity tables), then the figures with captions.

One standalone HTML file; the figures are PNG files beside it, referenced relatively.
"""

from __future__ import annotations

import html
import json

import numpy as np

from ..results import select
from ..results.summary import SHOWN, format_value, reason_counts, regime_label
from .bars import config_label
from .facets import FACETS, at_point, best_points
from .figures import NotApplicable, pick_metric
from .result import Result

GENERATOR = "dse report"
TITLES = {"heatmap": "Heatmap", "pareto": "Throughput vs latency: Pareto fronts",
          "roofline": "Roofline", "memory": "Memory breakdown",
          "latency": "Latency breakdown", "tornado": "Tornado chart",
          "history": "Optimization history"}
STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;"
         "color:#222}table{border-collapse:collapse;font-size:12px;margin:0.5em 0 1.5em}"
         "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#f3f3f3}"
         "figure{margin:1.5em 0}img{max-width:100%;border:1px solid #eee}"
         "figcaption{font-size:13px;color:#444;margin-top:0.3em}pre{background:#f7f7f7;"
         "padding:0.8em;font-size:12px;overflow:auto}.note{color:#666;font-size:13px}")


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(key: str, value) -> str:
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        return "n/a"
    return format_value(key, float(value) if isinstance(value, np.floating) else value)


def _grid_summary(res: Result) -> list[str]:
    out = []
    ds = res.ds
    if res.kind == "sweep" and "reason" in ds:
        n = int(np.prod([ds.sizes[a] for a in res.axes]))
        feasible = int(res.feasible.sum())
        out.append(f"<p>{n:,} points, {feasible:,} feasible ({100 * feasible / max(n, 1):.1f}%)."
                   "</p>")
        counts = {k: v for k, v in reason_counts(ds).items() if v}
        if counts:
            out.append(_table(["infeasible because", "points"],
                              [[k.replace("_", " "), f"{v:,}"] for k, v in counts.items()]))
    elif res.kind == "reduced":
        out.append(f"<p>Streamed reduction: {html.escape(str(ds.attrs['reduction']))}"
                   + (f"; constraints: {html.escape(str(ds.attrs['constraints']))}"
                      if ds.attrs.get("constraints") else "")
                   + f". {int(ds['n_feasible'].sum()):,} feasible of "
                   f"{int(ds['n_points']) * int(np.prod([ds.sizes[a] for a in res.axes])):,}"
                   " points.</p>")
    try:
        metric = pick_metric(res, None)
    except NotApplicable:
        return out
    rows = []
    shown = [k for k in dict.fromkeys((metric,) + SHOWN) if k in ds.data_vars]
    for labels, point, feasible in best_points(res, metric, list(FACETS))[:64]:
        one = at_point(res, point)
        row = [str(v) for v in labels.values()]
        row.append((config_label(res, point) or "the study's fixed values") if feasible
                   else "no feasible configuration")
        row += [_cell(k, one[k].item()) if feasible else "" for k in shown]
        if "regime" in ds.data_vars:  # the dominant phase and its roof (outputs.md#regime)
            row.append(regime_label(one) if feasible else "")
        rows.append(row)
    header = ([a for a in FACETS if a in res.axes] + ["configuration"] + shown
              + (["bound"] if "regime" in ds.data_vars else []))
    out.append(f"<h2>Best configuration per {' x '.join(a for a in FACETS if a in res.axes) or 'study'}"
               f" (by {html.escape(metric)}, feasible)</h2>" + _table(header, rows))
    return out


def _search_summary(res: Result) -> list[str]:
    ds = res.ds
    objectives = str(ds.attrs["objectives"]).split()
    directions = str(ds.attrs["directions"]).split()
    axes = [k for k in ds.data_vars if ds[k].dims == ("trial",)
            and k not in objectives and k not in ("number", "feasible")]
    feasible = ds["feasible"].values.astype(bool)
    out = [f"<p>{ds.sizes['trial']} trials, {int(feasible.sum())} feasible; objectives: "
           + ", ".join(f"{o} ({d})" for o, d in zip(objectives, directions)) + "; storage: "
           f"{html.escape(str(ds.attrs.get('storage', '')))}.</p>"]
    exhaustive = json.loads(ds.attrs.get("exhaustive", "{}"))
    if "regret" in exhaustive:
        out.append(f"<p>Exhaustive optimum over {exhaustive['points']:,} points: "
                   f"{exhaustive['optimum']:.6g} (regret {100 * exhaustive['regret']:.2f}%)</p>")
    order = select.top(select.score(ds[objectives[0]].values, feasible, directions[0]), 10)
    rows = [[int(ds["number"].values[i])] + [format_value(a, ds[a].values[i].item())
                                              for a in axes + objectives] for i in order]
    out.append(f"<h2>Best feasible trials by {objectives[0]}</h2>"
               + _table(["trial"] + axes + objectives, rows))
    return out


def _sensitivity_summary(res: Result) -> list[str]:
    from ..sensitivity.report import workloads

    ds = res.ds
    metrics = [k.removeprefix("base_") for k in ds.data_vars if k.startswith("base_")]
    out = ["<p>Elasticity = d log(metric) / d log(parameter): -1 means +1% of the parameter "
           f"gives -1% of the metric (exact derivatives; +-{100 * float(ds.attrs['delta']):g}% "
           "what-ifs in the tornado charts).</p>"]
    for label, one in workloads(ds):
        rows = [[p] + [_elasticity(one[m].sel(hw_param=p).item()) for m in metrics]
                for p in one["hw_param"].values]
        base = ", ".join(f"{m} = {format_value(m, float(one['base_' + m]))}" for m in metrics)
        out.append(f"<h3>{html.escape(label)}</h3><p>{html.escape(base)}</p>"
                   + _table(["parameter"] + metrics, rows))
    return out


def _elasticity(x: float) -> str:
    return "n/a (kink)" if not np.isfinite(x) else f"{x:+.3f}"


def page(res: Result, figures: list[tuple[str, str, str]], omitted: list[tuple[str, str]]) -> str:
    """The HTML page; ``figures``: (file name, kind, caption); ``omitted``: (kind, why)."""
    ds = res.ds
    title = str(ds.attrs.get("title") or f"dse {res.kind} {res.name}")
    facts = [["result", f"{res.kind} ({res.mode})"], ["file", res.file],
             ["study", res.name]]
    facts += [[k.replace("_", " "), str(ds.attrs[k])] for k in ("study_file", "dse_version",
                                                                   "created") if k in ds.attrs]
    facts.append(["dimensions", ", ".join(f"{d} {n}" for d, n in ds.sizes.items())])
    body = [f"<h1>{html.escape(title)}</h1>", _table(["", ""], facts)]
    summary = {"search": _search_summary, "sensitivity": _sensitivity_summary}.get(
        res.kind, _grid_summary)
    body += summary(res)
    for name, kind, caption in figures:
        body.append(f"<h2>{TITLES.get(kind, kind)}</h2><figure><img src=\"{html.escape(name)}\" "
                    f"alt=\"{html.escape(kind)}\"><figcaption>{html.escape(caption)}"
                    "</figcaption></figure>")
    if omitted:
        body.append("<p class='note'>Not drawn (nothing to show for this result): "
                    + "; ".join(f"{html.escape(k)}: {html.escape(w)}" for k, w in omitted)
                    + ".</p>")
    if ds.attrs.get("study"):
        body.append("<h2>Study</h2><pre>" + html.escape(str(ds.attrs["study"])) + "</pre>")
    return (f"<!doctype html><html><head><meta charset='utf-8'>"
            f"<meta name='generator' content='{GENERATOR}'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")

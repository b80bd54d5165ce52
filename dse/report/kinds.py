"""The figure kinds: name -> drawing function and the options it takes.

Every drawing function takes a :class:`~dse.report.result.Result` and options, and
returns ``(matplotlib Figure, caption)`` or raises
:class:`~dse.report.figures.NotApplicable`. A report draws every kind that applies
(tornado charts: one per workload).
"""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np

from ..errors import InputError
from ..search.plots import draw_history
from ..sensitivity.report import MAX_WORKLOADS, tornado_figure, workloads
from .bars import latency, memory
from .figures import NotApplicable, heatmap, pareto
from .load import frontier, hockey
from .result import Result
from .roofline import roofline
from .tiers import tiers


def _workloads(res: Result) -> list:
    if res.kind != "sensitivity":
        raise NotApplicable("not a sensitivity result")
    return workloads(res.ds)


def tornado(res: Result, workload: int | None = None):
    """Tornado chart of workload number ``workload`` (0-based, default 0)."""
    items = _workloads(res)
    index = 0 if workload is None else int(workload)
    if not 0 <= index < len(items):
        raise InputError(res.file, "--workload", f"no workload {index}",
                         f"0 to {len(items) - 1}: " + "; ".join(label for label, _ in items))
    label, one = items[index]
    delta = float(res.ds.attrs["delta"])
    axes = [d for d in res.ds["base_" + _first_metric(res)].dims]
    median = [a for a in axes if a not in ("model", "hardware", "usecase")] if int(
        np.prod([res.ds.sizes[a] for a in axes])) > MAX_WORKLOADS else []
    return tornado_figure(one, label, delta), (
        f"Tornado chart, workload {label}"
        + (f" (median over {', '.join(median)})" if median else "")
        + f": relative change of each metric when each hardware parameter moves by "
        f"+-{100 * delta:g}% (exact re-evaluation), largest effect at the top; * marks a "
        "parameter whose binding roof or feasibility changes inside the interval.")


def _first_metric(res: Result) -> str:
    return next(k.removeprefix("base_") for k in res.ds.data_vars if k.startswith("base_"))


def history(res: Result):
    if res.kind != "search":
        raise NotApplicable("not a search result")
    if res.ds.sizes.get("trial", 0) == 0:
        raise NotApplicable("the search has no completed trial")
    optimum = json.loads(res.ds.attrs.get("exhaustive", "{}")).get("optimum")
    fig, ax = plt.subplots(figsize=(7.5, 4.5), layout="constrained")
    drawn = draw_history(ax, res.ds, res.mode, res.name, optimum)
    n, feasible = res.ds.sizes["trial"], int(res.ds["feasible"].sum())
    if drawn == "history":
        text = (f"Optimization history: the objective of each of the {n} trials ({feasible} "
                "feasible, grey: infeasible) and the best feasible value so far (red)"
                + ("; dashed: the exhaustive optimum over the grid" if optimum is not None
                   else "") + ".")
    else:
        text = (f"Pareto front of the search: the first two objectives of each of the {n} "
                f"trials ({feasible} feasible, grey: infeasible); red: the non-dominated "
                "feasible trials.")
    return fig, text


# name -> (drawing function, options it takes). Report order (dse.report.KINDS).
KINDS = {
    "heatmap": (heatmap, ("metric", "x", "y")),
    "pareto": (pareto, ("metric", "x")),
    "roofline": (roofline, ("metric",)),
    "memory": (memory, ("metric",)),
    "latency": (latency, ("metric",)),
    "load": (hockey, ()),
    "frontier": (frontier, ()),
    "tiers": (tiers, ()),
    "tornado": (tornado, ("workload",)),
    "history": (history, ()),
}


def report_figures(res: Result) -> list[tuple[str, str, dict]]:
    """(file stem, kind, options) of every figure a report of ``res`` tries to draw."""
    out = [(kind, kind, {}) for kind in KINDS if kind != "tornado"]
    if res.kind == "sensitivity":
        out += [(f"tornado-{i}", "tornado", {"workload": i})
                for i in range(len(_workloads(res)))]
    return out

"""Figures of serving under load: latency against load with P50/P90/P99 bands (the
"hockey stick"), and the front of tokens/s per device against tokens/s per user.

Both take a sweep whose study has a ``request_rate`` or ``concurrency`` axis (the load
outputs of docs/serving.md).
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from ..results.select import pareto_front  # noqa: E402
from .display import label, scale  # noqa: E402
from .figures import NotApplicable, grid  # noqa: E402
from .result import Result  # noqa: E402

LOAD_AXES = ("request_rate", "concurrency")
MAX_LINES = 6
MAX_COLUMNS = 4


def _load_axis(res: Result) -> str:
    if res.kind != "sweep":
        raise NotApplicable(f"a {res.kind} result has no load axis")
    axis = next((a for a in LOAD_AXES if a in res.axes and res.ds.sizes[a] >= 3), None)
    if axis is None or "ttft_p99_s" not in res.ds:
        raise NotApplicable("no request_rate or concurrency axis of three or more values "
                            "with latency percentiles")
    return axis


def hockey(res: Result):
    """TTFT and TPOT against the load: the mean, P90 dashed, the P50-P99 band; a line per
    combination of the other axes (the first few), a column per model."""
    axis = _load_axis(res)
    facets = [a for a in ("model",) if a in res.axes]
    others = [a for a in res.axes if a not in facets + [axis]]
    models = list(res.ds["model"].values) if facets else [res.name]
    models = models[:MAX_COLUMNS]
    fig, axs = plt.subplots(2, len(models), figsize=(4.4 * len(models), 6.4), squeeze=False,
                            layout="constrained")
    x = res.ds[axis].values.astype(float)
    feasible = res.feasible
    drawn = 0
    for col, model in enumerate(models):
        sel = {"model": col} if facets else {}
        combos = list(itertools.product(*(range(res.ds.sizes[a]) for a in others)))
        lines = 0
        for combo in combos:
            pick = dict(sel, **dict(zip(others, combo)))
            ok = feasible.isel(pick).transpose(axis).values
            if ok.sum() < 2:
                continue
            if lines == MAX_LINES:
                break
            name = ", ".join(f"{a} {res.ds[a].values[i]}" for a, i in zip(others, combo))
            colour = f"C{lines}"
            for row, metric in enumerate(("ttft", "tpot")):
                ax = axs[row][col]
                values = {q: res.full(f"{metric}_{q}").isel(pick).transpose(axis).values
                          for q in ("s", "p50_s", "p90_s", "p99_s")}
                f, unit = scale("s", np.concatenate([v[ok] for v in values.values()]))
                ax.fill_between(x[ok], values["p50_s"][ok] / f, values["p99_s"][ok] / f,
                                color=colour, alpha=0.15, linewidth=0)
                ax.plot(x[ok], values["s"][ok] / f, "o-", ms=3, color=colour,
                        label=name or res.name)
                ax.plot(x[ok], values["p90_s"][ok] / f, "--", lw=1, color=colour)
                ax.set_ylabel(f"{metric.upper()} ({unit})", fontsize=8)
            lines += 1
            drawn += 1
        for row in range(2):
            ax = axs[row][col]
            ax.set_xscale("log" if x.min() > 0 and x.max() / x.min() > 20 else "linear")
            ax.set_yscale("log")
            for which in (ax.xaxis, ax.yaxis):
                which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                which.set_minor_formatter(NullFormatter())
            ax.set_xlabel(label(res.ds[axis], res.ds[axis].attrs.get("units", "")), fontsize=8)
            ax.grid(alpha=0.3)
            ax.set_title(str(model), fontsize=9)
        axs[0][col].legend(fontsize=6)
    if not drawn:
        plt.close(fig)
        raise NotApplicable("no configuration feasible at two or more loads")
    stop = ("; a curve ends where the load reaches the deployment's capacity (overloaded)"
            if axis == "request_rate" else "")
    return fig, (f"Time to first token (top) and time per output token (bottom) against "
                 f"{axis.replace('_', ' ')}: mean (solid), P90 (dashed) and the band from P50 "
                 f"to P99, a line per configuration (the first {MAX_LINES} per model)" + stop
                 + ".")


def frontier(res: Result):
    """Tokens/s per device against tokens/s per user (1 / TPOT): every feasible point and
    the non-dominated front per hardware (the serving engineer's trade-off curve)."""
    if res.kind != "sweep":
        raise NotApplicable(f"a {res.kind} result has no grid")
    need = ("throughput_per_device_tok_s", "tokens_per_s_per_user")
    if any(n not in res.ds for n in need):
        raise NotApplicable("no tokens_per_s_per_user output")
    if not any(a in res.axes for a in LOAD_AXES + ("batch",)):
        raise NotApplicable("no load or batch axis to trade throughput for speed")
    # a front per hardware and, in a study of both, per aggregated/disaggregated serving
    colours = [a for a in ("hardware", "serving") if a in res.axes]
    order = colours + [a for a in res.axes if a not in colours]
    n = int(np.prod([res.ds.sizes[a] for a in colours])) if colours else 1

    def grouped(da):
        v = da.transpose(*order).values
        return v.reshape((n,) + v.shape[len(colours):]) if colours else v

    y = grouped(res.full(need[0])).astype(float)
    x = grouped(res.full(need[1])).astype(float)
    ok = grouped(res.feasible) & np.isfinite(x) & np.isfinite(y)
    labels = [" ".join(map(str, combo)) for combo in itertools.product(
        *(res.ds[a].values for a in colours))]
    groups = range(n) if colours else [None]
    fig, (ax,) = grid(1, width=6.0, height=4.4, cols=1)
    fronts = 0
    for g in groups:
        xs, ys, keep = (a[g] if g is not None else a for a in (x, y, ok))
        px, py = xs[keep], ys[keep]
        if px.size < 2:
            continue
        name = labels[g] if colours else res.name
        cloud = ax.scatter(px, py, s=5, alpha=0.3, linewidths=0)
        front = pareto_front(-px, py)
        fronts += int(front.sum())
        o = np.argsort(px[front])
        ax.plot(px[front][o], py[front][o], "o-", ms=3, color=cloud.get_facecolor()[0][:3],
                label=name)
    if not fronts:
        plt.close(fig)
        raise NotApplicable("fewer than two feasible points")
    ax.set_xlabel(label(res.ds[need[1]], "tokens/s"), fontsize=8)
    ax.set_ylabel(label(res.ds[need[0]], "tokens/s"), fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig, ("Output tokens/s per device against tokens/s each user sees (1 / TPOT): each "
                 "dot a feasible configuration, lines the non-dominated ones"
                 + (" per " + " and ".join(colours) if colours else "") + " (no other point is faster for "
                 "the user and more productive per device).")

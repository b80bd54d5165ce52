"""Grid figures: a metric as a heatmap over two axes, throughput-latency Pareto fronts.

Each figure function takes a :class:`~dse.report.result.Result`, draws one file at
``path`` (PNG or SVG by its extension) and returns the caption. A figure the result
cannot support raises :class:`NotApplicable` (a report omits it; ``dse plot`` says why).
"""

from __future__ import annotations

import math
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm, Normalize, to_rgba  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from ..errors import InputError, suggest  # noqa: E402
from .display import fmt, label, legend, scale  # noqa: E402
from ..results.select import pareto_front  # noqa: E402
from .facets import FACETS, best_over, caption, maximize  # noqa: E402
from .result import Result  # noqa: E402

# Axes a performance engineer puts on a heatmap first ("throughput over tp x batch").
PREFERRED = ("batch", "tp", "micro_batch", "pp", "cp", "ep", "input_len", "output_len",
             "weight_bits", "kv_bits", "act_bits")
METRICS = ("throughput_tok_s", "max_batch", "max_batch_total_tokens")
LATENCY = ("tpot_s", "e2e_s", "ttft_s")
MAX_PANELS = 12
MAX_PARETO = 6
CLOUD = 2500  # dots drawn per series (the front is computed from every point)
DPI = 100
MAX_LABELS = 160  # cells annotated with their value (text is the slow part of a PNG)
INFEASIBLE = ("#c8c8c8", "#f2b8b8", "#d5c4ec", "#ffdca8", "#b9dcef", "#e0e0a0")


class NotApplicable(Exception):
    """The result holds nothing this figure could show."""


def save(fig, path) -> None:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def check_variable(res: Result, name: str, key: str) -> str:
    if name not in res.ds.data_vars:
        numeric = [k for k, v in res.ds.data_vars.items() if v.dtype.kind in "fiu"]
        raise InputError(res.file, key, f"no variable {name!r}{suggest(name, numeric)}",
                         ", ".join(numeric))
    return name


def check_axis(res: Result, name: str, key: str) -> str:
    if name not in res.axes:
        raise InputError(res.file, key, f"no axis {name!r}{suggest(name, res.axes)}",
                         ", ".join(res.axes) or "none (the result has no axes)")
    return name


def pick_metric(res: Result, metric: str | None) -> str:
    if metric is not None:
        return check_variable(res, metric, "--metric")
    for name in (res.primary_metric,) + METRICS:
        if name in res.ds.data_vars:
            return name
    raise NotApplicable("no throughput or capacity variable")


def short(value: float) -> str:
    """A cell label: 3 significant digits, thousands as k and millions as M."""
    for factor, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def grid(n: int, width: float = 3.8, height: float = 3.0, cols: int = 4, share: bool = False):
    """A figure of ``n`` panels (shared axes: tick labels only on the outer panels)."""
    ncols = min(n, cols, max(2, math.ceil(math.sqrt(n))))
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols + 1.2, height * nrows + 0.8),
                             squeeze=False, layout="constrained", sharex=share, sharey=share)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    return fig, axes.ravel()[:n]


def _ticks(ax, axis: str, values) -> None:
    """Label at most ~12 ticks of a categorical axis (every k-th value)."""
    step = max(1, math.ceil(len(values) / 12))
    where = list(range(0, len(values), step))
    labels = [fmt(values[i].item() if hasattr(values[i], "item") else values[i]) for i in where]
    getattr(ax, f"set_{axis}ticks")(where, labels, fontsize=7,
                                    rotation=45 if axis == "x" and len(where) > 6 else 0)


def heatmap(res: Result, metric: str | None = None, x: str | None = None,
            y: str | None = None):
    """``metric`` over axes ``y`` x ``x``, best over the other axes; a panel per model
    and hardware; cells without a feasible point grey and labelled by reason."""
    if res.kind not in ("sweep", "reduced"):
        raise NotApplicable(f"a {res.kind} result has no grid")
    metric = pick_metric(res, metric)
    chosen = [check_axis(res, a, k) for k, a in (("--x", x), ("--y", y)) if a is not None]
    if x is not None and x == y:
        raise InputError(res.file, "--y", f"axis {y!r} is already --x",
                         "another axis: " + (", ".join(a for a in res.axes if a != x) or "none"))
    axes = [a for a in res.axes if res.ds.sizes[a] > 1 and a not in chosen]
    rank = {a: i for i, a in enumerate(PREFERRED)}
    inner = sorted((a for a in axes if a not in FACETS),
                   key=lambda a: (rank.get(a, len(rank)), -res.ds.sizes[a]))
    candidates = inner + [a for a in FACETS if a in axes]
    while len(chosen) < 2 and candidates:
        chosen.append(candidates.pop(0))
    if len(chosen) < 2:
        raise NotApplicable("fewer than two axes with more than one value")
    x, y = chosen
    facets = [a for a in FACETS if a in axes and a not in chosen]
    while facets and math.prod(res.ds.sizes[a] for a in facets) > MAX_PANELS:
        facets.pop()
    best, reasons, reduced, seen = best_over(res, metric, facets + [y, x])
    var = res.ds[metric]
    factor, unit = scale(var.attrs.get("units", ""), best)
    shown = best / factor
    finite = shown[np.isfinite(shown)]
    lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    norm = (LogNorm(lo, hi) if lo > 0 and hi / lo > 100
            else Normalize(lo, hi if hi > lo else lo + 1))
    why_all = sorted({w for w in reasons.ravel() if w} | ({"n/a"} if (
        np.isnan(shown) & (reasons == "")).any() else set()))
    shade = {w: INFEASIBLE[k % len(INFEASIBLE)] for k, w in enumerate(why_all)}
    panels = list(np.ndindex(*best.shape[:len(facets)]))
    annotate = shown.size <= MAX_LABELS
    fig, axs = grid(len(panels), share=True)
    image = None
    for ax, panel in zip(axs, panels):
        cells, why = shown[panel], reasons[panel]
        image = ax.imshow(np.ma.masked_invalid(cells), origin="lower", aspect="auto",
                          cmap="viridis" if maximize(res, metric) else "viridis_r", norm=norm)
        empty = np.zeros(cells.shape + (4,))
        for (i, j), v in np.ndenumerate(cells):
            if np.isnan(v):
                empty[i, j] = to_rgba(shade[why[i, j] or "n/a"])
                if annotate:
                    ax.text(j, i, why[i, j] or "n/a", ha="center", va="center", fontsize=7)
            elif annotate:
                ax.text(j, i, short(v), ha="center", va="center", fontsize=7,
                        color="black" if norm(v) > 0.6 else "white")
        ax.imshow(empty, origin="lower", aspect="auto")
        _ticks(ax, "x", res.ds[x].values)
        _ticks(ax, "y", res.ds[y].values)
        ax.set_title(", ".join(f"{res.ds[a].values[i]}" for a, i in zip(facets, panel))
                     or res.name, fontsize=8)
        ax.label_outer()
    ncols = axs[0].get_gridspec().ncols
    for k, ax in enumerate(axs):
        if k + ncols >= len(axs):  # the lowest panel of its column: keep its x labels
            ax.tick_params(labelbottom=True)
    fig.supxlabel(label(res.ds[x]), fontsize=8)
    fig.supylabel(label(res.ds[y]), fontsize=8)
    if shade:
        fig.legend(handles=[Patch(color=c, label=f"no feasible point: {w}")
                            for w, c in shade.items()], fontsize=7, loc="outside lower center",
                   ncol=min(len(shade), 4))
    bar = fig.colorbar(image, ax=list(axs), shrink=0.9)
    bar.set_label(textwrap.fill(label(var, unit), 40), fontsize=8)
    text = [f"{var.attrs.get('long_name', metric)} ({metric}, {unit}) over {y} x {x}"
            + (f", one panel per {' x '.join(facets)}" if facets else "")]
    reduced = [a for a in reduced if res.ds.sizes[a] > 1]
    how = caption(res, reduced, metric)
    if how:
        text.append(how)
    if seen:
        text.append(f"grey and coloured cells have no feasible point, labelled by reason: "
                    f"{legend(seen)}")
    return fig, "; ".join(text) + "."


def pareto(res: Result, metric: str | None = None, x: str | None = None):
    """``metric`` (a throughput) against latency ``x``: every feasible point and the
    non-dominated set per hardware, a panel per model."""
    if res.kind not in ("sweep", "reduced"):
        raise NotApplicable(f"a {res.kind} result has no grid")
    metric = pick_metric(res, metric)
    if x is None:
        x = next((name for name in LATENCY if name in res.ds.data_vars), None)
        if x is None:
            raise NotApplicable("no latency output (ttft_s, tpot_s, e2e_s)")
    check_variable(res, x, "--x")
    colours = [a for a in ("hardware",) if a in res.axes]
    facets = [a for a in ("model",) if a in res.axes]
    order = facets + colours + [a for a in res.axes if a not in facets + colours]
    yv = res.full(metric).transpose(*order).values.astype(float)
    xv = res.full(x).transpose(*order).values.astype(float)
    ok = res.feasible.transpose(*order).values & np.isfinite(xv) & np.isfinite(yv)
    lead = yv.shape[:len(facets) + len(colours)]
    yv, xv, ok = (a.reshape(lead + (-1,)) for a in (yv, xv, ok))
    if ok.sum(axis=-1).max() < 3:
        raise NotApplicable("no hardware with three or more feasible points")
    panels = list(np.ndindex(*lead[:len(facets)]))
    more = len(panels) > MAX_PARETO
    panels = panels[:MAX_PARETO]
    fig, axs = grid(len(panels), width=4.6, height=3.6, cols=3)
    yf, yunit = scale(res.ds[metric].attrs.get("units", ""), yv[ok])
    xf, xunit = scale(res.ds[x].attrs.get("units", ""), xv[ok])
    rng = np.random.default_rng(0)
    n_front = 0
    for ax, panel in zip(axs, panels):
        for c in range(lead[-1] if colours else 1):
            index = panel + ((c,) if colours else ())
            keep = ok[index]
            px, py = xv[index][keep] / xf, yv[index][keep] / yf
            if not px.size:
                continue
            name = str(res.ds[colours[0]].values[c]) if colours else res.name
            dots = rng.choice(px.size, CLOUD, replace=False) if px.size > CLOUD else slice(None)
            cloud = ax.scatter(px[dots], py[dots], s=5, alpha=0.25, linewidths=0)
            front = pareto_front(px, py)
            n_front += int(front.sum())
            fo = np.argsort(px[front])
            ax.plot(px[front][fo], py[front][fo], "o-", ms=3, lw=1.4,
                    color=cloud.get_facecolor()[0][:3], label=name)
        for name, values in (("x", xv[ok] / xf), ("y", yv[ok] / yf)):
            if values.min() > 0 and values.max() / values.min() > 30:
                getattr(ax, f"set_{name}scale")("log")
                axis = getattr(ax, f"{name}axis")
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(label(res.ds[x], xunit), fontsize=8)
        ax.set_ylabel(label(res.ds[metric], yunit), fontsize=8)
        ax.set_title(", ".join(str(res.ds[a].values[i]) for a, i in zip(facets, panel))
                     or res.name, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    dots = "each dot a group's best point" if res.kind == "reduced" else \
        f"each dot a feasible configuration ({int(ok.sum()):,} of {ok.size:,})"
    text = (f"{res.ds[metric].attrs.get('long_name', metric)} against "
            f"{res.ds[x].attrs.get('long_name', x)}: {dots}; lines join the non-dominated "
            f"points ({n_front} in all: no other point has lower {x} and higher {metric})"
            + (" per hardware" if colours else "")
            + (", a panel per model" if facets else "")
            + (f" (the first {MAX_PARETO} models)" if more else "") + ".")
    if res.kind == "reduced":
        text = text[:-1] + "; " + caption(res, []) + "."
    return fig, text

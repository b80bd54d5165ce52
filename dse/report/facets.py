"""What a figure shows of a grid: the best feasible value over the axes it does not show,
the best configuration per group, why a cell has no feasible point.

Best and feasible mean what they mean everywhere in dse (:mod:`dse.results.select`).
Every reduction says what it did in words, for the figure's caption.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..results import select
from ..schema.outputs import OUTPUTS
from .display import reason_label, reasons
from .result import Result

FACETS = ("model", "hardware")  # a figure shows each of these; other axes are reduced


def direction(res: Result, metric: str) -> str:
    """Whether more of ``metric`` is better: a streamed reduction's own objective as it
    was reduced, else the output registry's word (:func:`dse.results.select.direction`)."""
    if res.kind == "reduced" and metric == res.primary_metric:
        return "maximize" if "maximize" in str(res.ds.attrs["reduction"]) else "minimize"
    if metric in OUTPUTS.get(res.mode, {}):
        return select.direction(res.mode, metric)
    return "maximize"  # a sensitivity or search variable: larger shown as better


def maximize(res: Result, metric: str) -> bool:
    return direction(res, metric) == "maximize"


def caption(res: Result, reduced: list[str], metric: str | None = None) -> str:
    """'best (highest) over tp, pp subject to feasibility', and a stored reduction's words."""
    parts = []
    if res.kind == "reduced":
        constraints = res.ds.attrs.get("constraints")
        parts.append(f"each group's {res.ds.attrs['reduction']} (streamed reduction"
                     + (f"; constraints: {constraints}" if constraints else "") + ")")
    if reduced:
        how = "" if metric is None else " (highest)" if maximize(res, metric) else " (lowest)"
        parts.append(f"best{how} over {', '.join(reduced)} subject to feasibility")
    return "; ".join(parts)


def best_over(res: Result, metric: str, keep: list[str]) -> tuple[np.ndarray, np.ndarray,
                                                                   list[str], list[str]]:
    """Best feasible ``metric`` over every axis not in ``keep``.

    Returns (values over ``keep``, NaN where no feasible point; reason labels over
    ``keep``, '' where feasible; the reduced axes; the flag names that occur).
    """
    reduced = [a for a in res.axes if a not in keep]
    value = res.full(metric).transpose(*keep, *reduced).values.astype(float)
    ok = res.feasible.transpose(*keep, *reduced).values
    shape = value.shape[:len(keep)]
    value, ok = value.reshape(shape + (-1,)), ok.reshape(shape + (-1,))
    d = direction(res, metric)
    score = select.score(value, ok & np.isfinite(value), d)
    best = select.sign(d) * score.max(axis=-1)
    best[~np.isfinite(best)] = np.nan
    labels, seen = _cell_reasons(res, keep, reduced, np.isnan(best))
    return best, labels, reduced, seen


def _cell_reasons(res: Result, keep, reduced, empty) -> tuple[np.ndarray, list[str]]:
    """Why each empty cell has no feasible point: the flags shared by all its points
    (else all flags that occur); a reduction: the commonest flag, or SLO when valid
    points exist but none meets the constraints."""
    labels = np.full(empty.shape, "", dtype=object)
    seen: dict[str, None] = {}
    if res.kind == "reduced":
        counts = res.full("reason_count").transpose("reason_flag", *keep, *reduced).values
        counts = counts.reshape(counts.shape[:1 + len(keep)] + (-1,)).sum(-1)
        n_valid = res.full("n_valid").transpose(*keep, *reduced).values
        n_valid = n_valid.reshape(n_valid.shape[:len(keep)] + (-1,)).sum(-1)
        flags = [str(f) for f in res.ds["reason_flag"].values]
        for index in zip(*np.nonzero(empty)):
            names = (["constraints"] if n_valid[index] > 0
                     else [flags[int(np.argmax(counts[(slice(None),) + index]))]])
            labels[index] = reason_label(names)
            seen.update(dict.fromkeys(names))
        return labels, list(seen)
    if "reason" not in res.ds:
        return labels, []
    code = res.full("reason").transpose(*keep, *reduced).values
    code = code.reshape(code.shape[:len(keep)] + (-1,))
    every = np.bitwise_and.reduce(code, axis=-1)
    cell = np.where(every != 0, every, np.bitwise_or.reduce(code, axis=-1))[empty]
    for value in np.unique(cell):  # one label per distinct flag combination
        names = reasons(value, res.reason_bits)
        index = tuple(i[cell == value] for i in np.nonzero(empty))
        labels[index] = reason_label(names)
        seen.update(dict.fromkeys(names))
    return labels, list(seen)


def best_points(res: Result, metric: str, by: list[str]) -> list[tuple[dict, dict, bool]]:
    """The best feasible point of each group of the ``by`` axes.

    Returns (group labels, index of the point along every axis, feasible) per group, in
    grid order; a group without a feasible point gives its least memory-hungry point
    (or its first) with feasible False.
    """
    by = [a for a in by if a in res.axes]
    rest = [a for a in res.axes if a not in by]
    value = res.full(metric).transpose(*by, *rest).values.astype(float)
    ok = np.broadcast_to(res.feasible.transpose(*by, *rest).values, value.shape)
    score = select.score(value, ok & np.isfinite(value), direction(res, metric))
    fallback = (-res.full("memory_bytes").transpose(*by, *rest).values.astype(float)
                if "memory_bytes" in res.ds and res.kind == "sweep" else np.zeros_like(value))
    groups = score.shape[:len(by)]
    score = score.reshape(groups + (-1,))
    fallback = np.broadcast_to(fallback, value.shape).reshape(groups + (-1,))
    rest_shape = [res.ds.sizes[a] for a in rest]
    out = []
    for group in np.ndindex(*groups):
        feasible = bool(np.isfinite(score[group]).any())
        flat = int(np.argmax(score[group] if feasible else fallback[group]))
        point = dict(zip(by, group))
        point.update(zip(rest, (int(i) for i in np.unravel_index(flat, rest_shape))))
        labels = {a: res.ds[a].values[i].item() for a, i in zip(by, group)}
        out.append((labels, point, feasible))
    return out


def at_point(res: Result, point: dict) -> xr.Dataset:
    """The Dataset at one point (index per axis)."""
    return res.ds.isel({a: i for a, i in point.items() if a in res.ds.dims})


def at_best(res: Result, metric: str) -> str:
    """'at each model x hardware's best feasible configuration by M (best over ...)'."""
    rest = [a for a in res.axes if a not in FACETS and res.ds.sizes[a] > 1]
    groups = " x ".join(a for a in FACETS if a in res.axes and res.ds.sizes[a] > 1)
    where = f"at each {groups}'s" if groups else "at the"
    return (f"{where} best feasible configuration by {metric}"
            + (f" ({caption(res, rest, metric)})" if rest or res.kind == "reduced" else ""))

"""Choosing points: which are feasible, which is best, which are Pareto-optimal, and which
direction is better. One definition of each, used by the printed summary, the reports,
the search's exhaustive comparison and the streamed reduction.

- **feasible**: valid and every constraint holds (:func:`dse.study.constraints.feasible`);
- **direction**: the study's, else the output registry's (``Output.direction``);
- **score**: the objective signed so that larger is better, ``-inf`` where a point is
  infeasible or its objective is NaN, so neither can ever be best;
- **best**: the largest score; ties go to the first point in C (grid) order;
- **Pareto**: the points no other point is at least as good as in every objective and
  better in one (duplicates all kept).

The functions take numpy arrays (``xp=jax.numpy`` inside jit). On a Dataset, the ``dse``
accessor (``ds.dse.best(...)``) works over the study's axes.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..schema.outputs import EXTRA_COORDS, OUTPUTS, PRIMARY_METRIC
from ..study.constraints import Constraint, feasible

DIRECTIONS = ("maximize", "minimize")


def direction(mode: str, name: str, given: str | None = None) -> str:
    """``given``, else whether more of output ``name`` is better (the registry's word)."""
    if given is not None:
        if given not in DIRECTIONS:
            raise ValueError(f"direction {given!r} is not one of {DIRECTIONS}")
        return given
    return OUTPUTS[mode][name].direction


def sign(direction_: str) -> float:
    return 1.0 if direction_ == "maximize" else -1.0


def score(values, ok, direction_: str, xp=np):
    """Signed objective (larger is better), ``-inf`` where not ``ok`` or NaN."""
    values = xp.asarray(values)
    return xp.where(ok & ~xp.isnan(values), sign(direction_) * values, -xp.inf)


def top(scores, k: int = 1) -> np.ndarray:
    """Flat indices of the ``k`` best finite scores, best first, ties in C order."""
    scores = np.asarray(scores).ravel()
    finite = np.flatnonzero(scores > -np.inf)
    k = min(k, len(finite))
    if k == 0:
        return np.zeros(0, np.int64)
    if k < len(finite):
        kth = -np.partition(-scores[finite], k - 1)[k - 1]
        finite = finite[scores[finite] >= kth]  # every tie at the boundary
    order = np.argsort(-scores[finite], kind="stable")  # stable: ties keep C order
    return finite[order][:k]


def pareto_mask(points) -> np.ndarray:
    """Rows of ``points`` [n, objectives] (all minimized) that no other row dominates."""
    points = np.asarray(points, float)
    n = len(points)
    if points.ndim == 2 and points.shape[1] == 2:
        return _pareto_2d(points[:, 0], points[:, 1])
    keep = np.ones(n, bool)
    for i in range(n):
        if keep[i]:
            dominated = np.all(points[i] <= points, axis=1) & np.any(points[i] < points, axis=1)
            keep &= ~dominated
    return keep


def _pareto_2d(a, b) -> np.ndarray:
    """Two minimized objectives in O(n log n): sorted by a (then b), a point survives iff
    its b is its a-group's smallest and below every b at strictly smaller a."""
    keep = np.zeros(len(a), bool)
    if not len(a):
        return keep
    order = np.lexsort((b, a))
    xs, ys = a[order], b[order]
    start = np.r_[True, xs[1:] != xs[:-1]]
    group = np.cumsum(start) - 1
    group_min = ys[start][group]
    before = np.r_[np.inf, np.minimum.accumulate(ys)[:-1]]  # min b over earlier points
    prior = before[np.flatnonzero(start)][group]  # ... over points of strictly smaller a
    # the smallest a has no point before it (its b may be infinite and still undominated)
    keep[order] = (ys == group_min) & ((ys < prior) | (group == 0))
    return keep


def pareto_front(x, y) -> np.ndarray:
    """Mask of the points not dominated when ``x`` is minimized and ``y`` maximized."""
    return pareto_mask(np.stack([np.asarray(x, float), -np.asarray(y, float)], axis=1))


def hypervolume(points, reference) -> float:
    """Volume dominated by ``points`` (minimized) inside the box up to ``reference``."""
    pts = np.minimum(np.asarray(points, float), reference)
    pts = pts[np.all(pts < reference, axis=1)]
    if len(pts) == 0:
        return 0.0
    if pts.shape[1] == 1:
        return float(reference[0] - pts[:, 0].min())
    pts = pts[np.argsort(pts[:, 0])]
    volume = 0.0
    for i in range(len(pts)):
        upper = pts[i + 1, 0] if i + 1 < len(pts) else reference[0]
        volume += (upper - pts[i, 0]) * hypervolume(pts[: i + 1, 1:], reference[1:])
    return volume


# --- on a result Dataset ---------------------------------------------------------------

def axes(ds: xr.Dataset) -> list[str]:
    """The study's axes: the Dataset's dims except an output's own (phase, component, ...)."""
    return [d for d in ds.dims if d not in EXTRA_COORDS]


def full(ds: xr.Dataset, name: str, dims: list[str]) -> np.ndarray:
    """Variable ``name`` broadcast over ``dims``, as a numpy array in that order."""
    var = ds[name]
    missing = {d: ds.sizes[d] for d in dims if d not in var.dims}
    return var.expand_dims(missing).transpose(*dims).values if missing or var.dims != tuple(
        dims) else var.values


def feasible_mask(ds: xr.Dataset, constraints=(), dims: list[str] | None = None) -> np.ndarray:
    """Where each grid point is feasible under ``constraints``, over ``dims``."""
    dims = axes(ds) if dims is None else dims
    names = ["valid"] + [c.variable for c in constraints]
    ok = feasible({n: full(ds, n, dims) for n in names}, constraints)
    return np.broadcast_to(ok, tuple(ds.sizes[d] for d in dims))


def best_points(ds: xr.Dataset, objective: str | None = None, direction_: str | None = None,
                constraints: tuple[Constraint, ...] = (), k: int = 1) -> list[dict]:
    """The ``k`` best feasible points: each as {axis: index} in grid order of preference."""
    mode = str(ds.attrs.get("mode", "inference"))
    objective = objective or PRIMARY_METRIC[mode]
    if objective not in ds or "valid" not in ds:
        return []
    dims = axes(ds)
    d = direction(mode, objective, direction_)
    scores = score(full(ds, objective, dims), feasible_mask(ds, constraints, dims), d)
    shape = tuple(ds.sizes[a] for a in dims)
    return [dict(zip(dims, (int(i) for i in np.unravel_index(flat, shape))))
            for flat in top(scores, k)]


@xr.register_dataset_accessor("dse")
class SelectionAccessor:
    """``ds.dse``: selection over a dse result Dataset's grid.

    >>> ds.dse.best("ttft_s", constraints=["tpot_s <= 0.05"])     # doctest: +SKIP
    """

    def __init__(self, ds: xr.Dataset):
        self._ds = ds

    @property
    def mode(self) -> str:
        return str(self._ds.attrs.get("mode", "inference"))

    def _constraints(self, constraints) -> tuple[Constraint, ...]:
        from ..study.constraints import parse_constraint

        return tuple(c if isinstance(c, Constraint) else parse_constraint(
            c, "<constraints>", OUTPUTS[self.mode], "constraints") for c in constraints)

    def feasible(self, constraints=()) -> xr.DataArray:
        """Where each point is valid and meets ``constraints`` (strings or Constraints)."""
        dims = axes(self._ds)
        mask = feasible_mask(self._ds, self._constraints(constraints), dims)
        return xr.DataArray(mask, dims=dims, coords={d: self._ds[d] for d in dims
                                                     if d in self._ds.coords})

    def best(self, objective: str | None = None, direction: str | None = None,
             constraints=(), k: int = 1) -> xr.Dataset | list[xr.Dataset] | None:
        """The best feasible point (a Dataset over no axes), or the ``k`` best as a list;
        None when no point is feasible. ``direction`` defaults to the registry's."""
        points = best_points(self._ds, objective, direction, self._constraints(constraints), k)
        picked = [self._ds.isel(p) for p in points]
        if k == 1:
            return picked[0] if picked else None
        return picked

    def direction(self, name: str) -> str:
        """Whether more of output ``name`` is better ("maximize") or less ("minimize")."""
        return direction(self.mode, name)

"""Streaming reductions: a grid too big to keep, reduced chunk by chunk in bounded memory.

``[output.reduce]`` keeps the ``by`` axes and reduces every other one: per group, the
best feasible point by ``objective`` (with every output re-evaluated there and the
reduced axes' values that reach it), counts of valid and feasible points and of each
infeasibility reason, and optionally a histogram of one output over the feasible
points. Feasible, best and their ties mean what they mean everywhere in dse
(:mod:`dse.study.constraints`, :mod:`dse.results.select`).

Each chunk is reduced inside the jitted evaluator (the outputs are never written to
memory); chunk partials are combined in grid order with a strict comparison, so ties
go to the first point in C order whatever the chunk size, worker count or completion
order: a streamed result is identical to one reduction of the whole grid.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ..core.encoding import trial_point
from ..core.evaluator import Evaluator
from ..results import select
from ..results.dataset import coords, knob_attrs, provenance
from ..schema.outputs import OUTPUTS, REASON_BITS
from ..study.constraints import feasible as is_feasible
from ..study.reduce import Histogram, ReduceSpec
from .chunks import chunk_region

_NONE = np.iinfo(np.int64).max  # "no feasible point" in the best-index accumulator


# --- the per-chunk kernel -------------------------------------------------------------

def _bin_index(x, h: Histogram):
    """Bin of each value: 0 below the range, 1..bins inside, bins + 1 above."""
    lo, hi = (math.log10(h.low), math.log10(h.high)) if h.log else (h.low, h.high)
    t = jnp.log10(jnp.maximum(x, 1e-300 if x.dtype == jnp.float64 else 1e-38)) if h.log else x
    b = jnp.floor((t - lo) / (hi - lo) * h.bins)
    b = jnp.where(jnp.isnan(b), h.bins, b)  # not finite: counted above the range
    return jnp.clip(b, -1, h.bins).astype(jnp.int32) + 1


def chunk_kernel(study, evaluator: Evaluator, spec: ReduceSpec, axis: int):
    """``fn(point, n_real, models, hardware) -> partial`` reducing one chunk inside jit.

    The chunk block has rank R with the block along ``axis`` (padded past ``n_real``).
    The partial holds, over the chunk's ``by`` sub-block: the best objective value, the
    C-order index of its first occurrence in the block (int32; blocks are bounded by
    the chunk budget), valid/feasible counts and per-reason counts, and the histogram
    bin of every point (host-side bincount). ``evaluator`` computes ``spec.inputs``.
    """
    dims = [a.name for a in study.dims]
    rank = len(dims)
    rest = tuple(i for i, d in enumerate(dims) if d not in spec.by)

    def fn(point, n_real, models, hardware):
        out = evaluator.formulas(point, models, hardware)
        shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in jax.tree_util.tree_leaves(point)))
        full = functools.partial(jnp.broadcast_to, shape=shape)
        by_shape = [shape[i] for i in range(rank) if i not in rest]

        def real(x):
            """``x`` padded to rank R, and a mask of the chunk's real (unpadded) points."""
            x = jnp.reshape(x, (1,) * (rank - jnp.ndim(x)) + jnp.shape(x))
            if rank == 0 or x.shape[axis] == 1:
                return x, True
            return x, jax.lax.broadcasted_iota(jnp.int32, x.shape, axis) < n_real

        def count(x):
            """Points where ``x`` holds, per group, counted at ``x``'s own (un-broadcast)
            shape: flags that do not vary along an axis are not expanded over it."""
            x, mask = real(x)
            weight = jnp.int32(1)
            for i in rest:
                if x.shape[i] == 1:
                    weight = weight * (n_real if i == axis else shape[i])
            total = jnp.sum(x & mask, axis=rest, dtype=jnp.int32, keepdims=True) * weight
            keep = [1 if i in rest else shape[i] for i in range(rank)]
            return jnp.broadcast_to(total, keep).reshape(by_shape)

        reason = out["reason"]
        ok = full(real(out["valid"])[1]) & is_feasible(out, spec.constraints, jnp)
        score = full(select.score(out[spec.objective], ok, spec.direction, jnp))
        # Materialize the score once: every reduction below reads it (XLA otherwise
        # fuses the whole evaluator into each reduction and recomputes it).
        score = jax.lax.optimization_barrier(score)
        feasible = score > -jnp.inf
        best = jnp.max(score, axis=rest, keepdims=True) if rest else score
        flat = jnp.arange(math.prod(shape), dtype=jnp.int32).reshape(shape)
        index = jnp.where((score == best) & feasible, flat, jnp.int32(2**31 - 1))
        part = {
            "best": best.reshape(by_shape),
            "index": jnp.min(index, axis=rest) if rest else index,
            "n_valid": count(out["valid"]),
            "n_feasible": jnp.sum(feasible, axis=rest, dtype=jnp.int32),
            "reason_count": jnp.stack([count((reason & jnp.uint16(bit)) != 0)
                                       for bit in REASON_BITS.values()]),
        }
        if spec.histogram is not None:
            # One integer key per point: group * (bins + 3) + bin, bin bins + 2 marking an
            # infeasible point; the host counts keys with one bincount.
            n = spec.histogram.bins + 3
            key = jnp.where(feasible, _bin_index(full(out[spec.histogram.variable]),
                                                 spec.histogram), n - 1)
            stride = n
            for i in reversed(range(rank)):
                if i not in rest and shape[i] > 1:
                    key = key + jax.lax.broadcasted_iota(jnp.int32, shape, i) * stride
                    stride *= shape[i]
            part["bin"] = key.astype(jnp.uint8) if stride <= 256 else key
        return part

    return fn


# --- combining partials in grid order -------------------------------------------------

class Accumulator:
    """Running reduction over the ``by`` groups; ``add`` chunk partials in grid order."""

    def __init__(self, study, spec: ReduceSpec):
        self.study, self.spec = study, spec
        dims = [a.name for a in study.dims]
        self.by_axes = [i for i, d in enumerate(dims) if d in spec.by]
        shape = tuple(study.shape[i] for i in self.by_axes)
        self.best = np.full(shape, -np.inf, np.float64)
        self.index = np.full(shape, _NONE, np.int64)
        self.n_valid = np.zeros(shape, np.int64)
        self.n_feasible = np.zeros(shape, np.int64)
        self.reason_count = np.zeros((len(REASON_BITS),) + shape, np.int64)
        h = spec.histogram
        self.histogram = np.zeros(shape + (h.bins + 2,), np.int64) if h else None

    def add(self, chunk, part: dict) -> None:
        """Fold one chunk's partial (numpy arrays) into the totals."""
        study = self.study
        dims = study.shape
        block = [1] * len(dims)
        for i in range(len(dims)):
            if i == chunk.axis:
                block[i] = chunk.length
            elif i > chunk.axis:
                block[i] = dims[i]
        # the chunk's by sub-block: in the accumulator (target) and in the partial (source)
        target, source = chunk_region(chunk, self.by_axes)
        best = np.asarray(part["best"], np.float64)[source]
        local = np.asarray(part["index"])[source].astype(np.int64)
        better = best > self.best[target]  # strict: earlier chunks win ties
        found = local < 2**31 - 1
        coords = np.unravel_index(np.where(found, local, 0), block)
        offset = [np.full(local.shape, chunk.outer[i]) if i < chunk.axis
                  else coords[i] + (chunk.start if i == chunk.axis else 0)
                  for i in range(len(dims))]
        flat = np.ravel_multi_index(offset, dims) if dims else np.zeros(local.shape, np.int64)
        self.best[target] = np.where(better, best, self.best[target])
        self.index[target] = np.where(better & found, flat, self.index[target])
        self.n_valid[target] += np.asarray(part["n_valid"])[source]
        self.n_feasible[target] += np.asarray(part["n_feasible"])[source]
        self.reason_count[(slice(None),) + target] += np.asarray(part["reason_count"])[
            (slice(None),) + source]
        if self.histogram is not None:
            self.histogram[target] += np.asarray(part["histogram"])[source]

    def finish(self) -> xr.Dataset:
        return reduced_dataset(self)


def histogram_counts(by_shape: list[int], n_bins: int, keys) -> np.ndarray:
    """Per-group counts of one chunk's histogram keys (group * (n_bins + 1) + bin, the
    bin ``n_bins`` not counted): an array over ``by_shape`` + (n_bins,)."""
    groups = math.prod(by_shape)
    counts = np.bincount(np.asarray(keys).ravel(), minlength=groups * (n_bins + 1))
    return counts.reshape(groups, n_bins + 1)[:, :n_bins].reshape(list(by_shape) + [n_bins])


def reduced_dataset(acc: Accumulator) -> xr.Dataset:
    """The reduction as a Dataset over the ``by`` axes (outputs at each group's best)."""

    study, spec = acc.study, acc.spec
    meta = OUTPUTS[study.mode]
    dims = [a.name for a in study.dims]
    by = list(spec.by)
    shape = acc.best.shape
    reduced = [d for d in dims if d not in by]
    ds = xr.Dataset(coords={k: v for k, v in coords(study).items()
                            if k in by or k not in dims}, attrs=provenance(study))
    total = int(np.prod([study.shape[i] for i, d in enumerate(dims) if d not in by]))
    ds["n_points"] = xr.Variable((), total, {
        "units": "1", "long_name": "grid points per group (over the reduced axes)"})
    ds["n_valid"] = xr.Variable(by, acc.n_valid, {
        "units": "1", "long_name": "valid points (no infeasibility reason) per group"})
    ds["n_feasible"] = xr.Variable(by, acc.n_feasible, {
        "units": "1", "long_name": "feasible points (valid and within the constraints) per group"})
    ds = ds.assign_coords(reason_flag=("reason_flag", list(REASON_BITS)))
    ds["reason_count"] = xr.Variable(("reason_flag",) + tuple(by), acc.reason_count, {
        "units": "1", "long_name": "points flagged with each infeasibility reason per group"})
    found = acc.index != _NONE
    ds["best_index"] = xr.Variable(by, np.where(found, acc.index, -1), {
        "units": "1", "long_name": "C-order flat index of the best feasible point in the "
        "full grid (-1: none)"})
    # The reduced axes' values at the best point, and every output evaluated there.
    flat = acc.index[found]
    columns = best_columns(study, np.where(found, acc.index, 0).ravel())
    columns_found = {d: [v for v, f in zip(c, found.ravel()) if f] for d, c in columns.items()}
    for i, d in enumerate(dims):
        if d in by:
            continue
        values = np.asarray(study.dims[i].values)
        text = values.dtype.kind in "UO"
        out = np.full(shape, "" if text else np.nan, object if text else np.float64)
        out[found] = [str(v) if text else v for v in columns_found[d]]
        ds[f"best_{d}"] = xr.Variable(by, out.astype(str) if text else out, {
            **knob_attrs(study, d), "long_name": f"{knob_attrs(study, d)['long_name']} "
            "at the best feasible point"})
    names = best_outputs(study)
    # every group, found or not, so the evaluation has the shape warm_best compiled
    values = evaluate_points(study, columns, names) if flat.size else {}
    for name in names:
        out = np.full(shape, np.nan, np.float64)
        if flat.size:
            out[found] = values[name].reshape(shape)[found]
        ds[name] = xr.Variable(by, out, {
            "units": meta[name].units,
            "long_name": f"{meta[name].long_name} at the best feasible point by "
                         f"{spec.objective} ({spec.direction})"})
    if spec.histogram is not None:
        h = spec.histogram
        edges = h.edges()
        centers = np.sqrt(edges[1:] * edges[:-1]) if h.log else (edges[1:] + edges[:-1]) / 2
        var = meta[h.variable]
        bin_dim = f"{h.variable}_bin"
        ds = ds.assign_coords({bin_dim: xr.Variable(bin_dim, centers, {
            "units": var.units, "long_name": f"{var.long_name} (bin centre)",
            "bounds": f"{bin_dim}_bounds"})})
        # (CF: a bounds variable takes its units from the coordinate it bounds)
        ds = ds.assign_coords({f"{bin_dim}_bounds": xr.Variable(
            (bin_dim, "bound"), np.stack([edges[:-1], edges[1:]], 1))})
        counts = acc.histogram
        ds[f"{h.variable}_histogram"] = xr.Variable(tuple(by) + (bin_dim,), counts[..., 1:-1], {
            "units": "1", "long_name": f"feasible points per {var.long_name} bin"
            + (" (log-spaced)" if h.log else "")})
        ds[f"{h.variable}_below_range"] = xr.Variable(by, counts[..., 0], {
            "units": "1", "long_name": f"feasible points with {h.variable} below {h.low:g}"})
        ds[f"{h.variable}_above_range"] = xr.Variable(by, counts[..., -1], {
            "units": "1", "long_name": f"feasible points with {h.variable} at or above "
                                       f"{h.high:g} (or not finite)"})
    ds.attrs.update(reduction=f"best by {spec.objective} ({spec.direction}) over "
                    f"{', '.join(reduced) or 'nothing'}", reduced_axes=" ".join(reduced),
                    reduce_by=" ".join(by),
                    constraints="; ".join(str(c) for c in spec.constraints))
    return ds


def best_outputs(study) -> list[str]:
    """The outputs a reduction reports at each group's best point."""
    meta = OUTPUTS[study.mode]
    return [n for n in study.variables if meta[n].kind == "float" and not meta[n].dims]


def best_columns(study, flat: np.ndarray) -> dict[str, list]:
    """Each axis's values at the grid points with C-order indices ``flat``."""
    where = np.unravel_index(flat, study.shape) if study.dims else ()
    return {a.name: [a.values[j] for j in where[i]] for i, a in enumerate(study.dims)}


def warm_best(study, spec: ReduceSpec) -> None:
    """Trace and compile the best-point evaluation ahead (same shapes as at the end:
    one point per group); run in a thread while the chunks stream, it takes the
    ~1.5 s of tracing off the end of the sweep."""
    groups = math.prod(n for a, n in zip(study.dims, study.shape) if a.name in spec.by)
    evaluate_points(study, best_columns(study, np.zeros(groups, np.int64)), best_outputs(study))


def evaluate_points(study, columns: dict[str, list], names: list[str]) -> dict:
    """The outputs ``names`` at a vector of points (``columns``: one list per axis)."""
    evaluator = Evaluator.of(study, names)
    out = evaluator(trial_point(study, columns))
    n = len(next(iter(columns.values()))) if columns else 1
    return {k: np.broadcast_to(np.asarray(v, np.float64), (n,)) for k, v in out.items()}

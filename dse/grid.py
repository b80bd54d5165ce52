"""A study's grid -> chunks of broadcast arrays -> the evaluator -> labelled arrays.

Every axis is an array of rank R (the number of axes) with its values along its own
dimension and length 1 elsewhere, so the evaluator's outputs come out with the
broadcast shape of what they depend on (``n_params`` varies over the model axis
only). Grids larger than ``chunk_points`` are cut into blocks along one axis, padded
to a fixed block length so the jitted function compiles once.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np

from .core.tables import numpy_dtype, tables
from . import hugepages
from .evaluate import evaluate
from .schema.knobs import OPTIMIZERS, RECOMPUTE, fields
from .schema.outputs import OUTPUTS
from .study.output import DEFAULT_CHUNK_POINTS
from .study.study import Study
from .catalogue.usecases import USECASES


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Index ranges of one block: one index on each axis before ``axis``, a block on it."""

    outer: tuple[int, ...]
    axis: int
    start: int
    stop: int  # exclusive, before padding
    length: int  # padded block length


def plan(shape: tuple[int, ...], budget: int) -> list[Chunk]:
    """Blocks of at most ~``budget`` points covering a grid of ``shape`` (C order)."""
    rank = len(shape)
    if rank == 0:
        return [Chunk((), 0, 0, 1, 1)]
    inner = 1
    axis = rank - 1
    # the outermost axis whose inner block still fits the budget
    for axis in range(rank - 1, -1, -1):
        if inner * shape[axis] > budget:
            break
        inner *= shape[axis]
    else:
        return [Chunk((), 0, 0, shape[0], shape[0])]
    length = max(1, min(shape[axis], budget // inner))
    return [Chunk(outer, axis, start, min(start + length, shape[axis]), length)
            for outer in itertools.product(*(range(n) for n in shape[:axis]))
            for start in range(0, shape[axis], length)]


INDEX_KEYS = ("model", "hardware", "draft_model", "usecase")


def _encode(study: Study, key: str, values) -> np.ndarray:
    """Axis values as evaluator input: indices for categorical keys, floats otherwise."""
    if key in ("model", "draft_model"):
        names = [c.name for c in study.models]
        return np.asarray([names.index(v) if v is not None else 0 for v in values], np.int32)
    if key == "hardware":
        names = [c.name for c in study.hardware]
        return np.asarray([names.index(v) for v in values], np.int32)
    if key == "usecase":
        return np.asarray([list(USECASES).index(v) if v is not None else -1 for v in values],
                          np.int32)
    if key == "recompute":
        return np.asarray([RECOMPUTE.index(v) for v in values], numpy_dtype(study))
    if key == "optimizer":
        return np.asarray([OPTIMIZERS[v] if isinstance(v, str) else float(v) for v in values],
                          numpy_dtype(study))
    return np.asarray([float(v) for v in values], numpy_dtype(study))


def _derived(study: Study, leaves: dict) -> dict:
    """Keys set by other keys: a use case sets input_len and output_len."""
    if "usecase" in leaves and study.values("usecase") != (None,):
        index = leaves["usecase"]
        for key, column in (("input_len", 0), ("output_len", 1)):
            table = np.asarray([u[column] for u in USECASES.values()], numpy_dtype(study))
            leaves[key] = table[index]
    return leaves


def chunk_point(study: Study, chunk: Chunk):
    """The knob pytree of one block (rank-R arrays, block axis padded by repetition)."""
    rank = len(study.dims)
    leaves = {}
    for i, axis in enumerate(study.dims):
        values = _encode(study, axis.name, axis.values)
        if i < chunk.axis:
            values = values[chunk.outer[i]:chunk.outer[i] + 1]
        elif i == chunk.axis:
            values = values[chunk.start:chunk.stop]
            values = np.pad(values, (0, chunk.length - len(values)), mode="edge")
        shape = [1] * rank
        shape[i] = len(values)
        leaves[axis.name] = values.reshape(shape)
    for key, value in study.fixed.items():
        leaves[key] = _encode(study, key, [value]).reshape((1,) * rank)
    return study.point_type(**_derived(study, leaves))


_DEPENDENCIES: dict[tuple, dict] = {}


def dependencies(study: Study, names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """For each output, the axes it varies along (cached per axis layout)."""
    key = (study.mode, tuple(a.name for a in study.dims), names, len(study.models),
           len(study.hardware), study.dtype, study.features, study.values("usecase")
           if "usecase" in fields(study.point_type) else None)
    if key not in _DEPENDENCIES:
        features = study.features

        def fn(point, models, hardware):
            return evaluate(point, models, hardware, study.mode, names, features)

        _DEPENDENCIES[key] = function_dependencies(
            study, fn, {n: len(OUTPUTS[study.mode][n].dims) for n in names})
    return _DEPENDENCIES[key]


def run(study: Study, names: tuple[str, ...] | None = None, progress=None
        ) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, ...]]]:
    """Evaluate the whole grid: {output: array over its dependency dims}, and those dims.

    ``progress`` is a callable wrapping the chunk iterator (e.g. ``tqdm``), or None.
    """
    names = names or study.variables
    features = study.features

    def fn(point, models, hardware):
        return evaluate(point, models, hardware, study.mode, names, features)

    extra = {n: len(OUTPUTS[study.mode][n].dims) for n in names}
    return run_function(study, fn, extra, dependencies(study, names), progress)


def template_point(study: Study):
    """Abstract knob pytree with every axis of length 2 (for dependency tracing)."""
    rank = len(study.dims)
    dims = [a.name for a in study.dims]
    usecase = "usecase" in dims and study.values("usecase") != (None,)
    leaves = {}
    for key in fields(study.point_type):
        shape = [1] * rank
        if key in dims:
            shape[dims.index(key)] = 2
        if usecase and key in ("input_len", "output_len"):
            shape[dims.index("usecase")] = 2
        leaves[key] = jax.ShapeDtypeStruct(
            tuple(shape), np.int32 if key in INDEX_KEYS else numpy_dtype(study))
    return study.point_type(**leaves)


def function_dependencies(study: Study, fn, extra: dict[str, int]) -> dict[str, tuple[str, ...]]:
    """The axes each output of ``fn`` varies along (a shape trace with axes of length 2)."""
    models, hardware = tables(study)
    spec = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                                  (models, hardware))
    with jax.enable_x64(study.dtype == "float64"):
        shapes = jax.eval_shape(fn, template_point(study), *spec)
    dims = [a.name for a in study.dims]
    out = {}
    for name, k in extra.items():
        shape = shapes[name].shape[k:]
        shape = (1,) * (len(dims) - len(shape)) + shape
        out[name] = tuple(d for d, n in zip(dims, shape) if n == 2)
    return out


def chunk_pieces(study: Study, chunk: Chunk, out: dict, extra: dict[str, int],
                 deps: dict[str, tuple[str, ...]]):
    """Place one evaluated chunk: ``(name, target index, array, first)`` per output.

    ``target`` indexes the full output array (over its extra axes and dependency
    dims); ``first`` is False when an earlier chunk already covered that region (an
    output that does not vary along the chunk's outer or block axis).
    """
    dims = [a.name for a in study.dims]
    for name, n_extra in extra.items():
        array = np.asarray(out[name])
        lead, grid_shape = array.shape[:n_extra], array.shape[n_extra:]
        grid_shape = (1,) * (len(dims) - len(grid_shape)) + grid_shape
        keep = [i for i, d in enumerate(dims) if d in deps[name]]
        array = array.reshape(lead + tuple(grid_shape[i] for i in keep))
        target, source = chunk_region(chunk, keep)
        everything = (slice(None),) * n_extra
        yield name, everything + target, array[everything + source], owns(chunk, keep)


def owns(chunk: Chunk, axes) -> bool:
    """Whether ``chunk`` is the first to cover the region of an output that varies
    along ``axes`` only (grid axis indices): chunks that differ from it along any
    other axis repeat its values."""
    return not any(i < chunk.axis and chunk.outer[i] != 0 or i == chunk.axis and chunk.start
                   for i in range(len(chunk.outer) + 1) if i not in axes)


def block_shape(study: Study, deps: tuple[str, ...], lead, chunk: Chunk) -> tuple[int, ...]:
    """The shape of the block one chunk owns of an output over ``deps`` (zarr chunks of
    a streamed store, dask blocks of a lazy Dataset): one index on the axes before the
    chunk's block axis, the block on it, everything after."""
    dims = [a.name for a in study.dims]
    sizes = dict(zip(dims, study.shape))
    return tuple(lead) + tuple(
        1 if dims.index(d) < chunk.axis else chunk.length if dims.index(d) == chunk.axis
        else sizes[d] for d in deps)


def chunk_region(chunk: Chunk, axes) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """Where a chunk's block lands along ``axes`` (grid axis indices, in order): the
    index into the full grid (target) and into the padded block (source)."""
    target, source = [], []
    for i in axes:
        if i < chunk.axis:
            target.append(slice(chunk.outer[i], chunk.outer[i] + 1))
            source.append(slice(None))
        elif i == chunk.axis:
            target.append(slice(chunk.start, chunk.stop))
            source.append(slice(0, chunk.stop - chunk.start))
        else:
            target.append(slice(None))
            source.append(slice(None))
    return tuple(target), tuple(source)


def output_shape(study: Study, deps: tuple[str, ...], lead=()) -> tuple[int, ...]:
    """Full shape of an output: its own leading axes, then its dependency dims."""
    sizes = dict(zip([a.name for a in study.dims], study.shape))
    return tuple(lead) + tuple(sizes[d] for d in deps)


ONE_PIECE_POINTS = 1 << 24  # an in-memory sweep's default block with huge pages


def chunk_budget(study: Study, in_memory: bool = False) -> int:
    """Grid points per chunk (pipeline mode evaluates every candidate split per point).

    The study's ``chunk_points``, else 2^22; for an in-memory sweep in a process whose
    XLA buffers get huge pages (:mod:`dse.hugepages`), 2^24, so that a grid of that size
    is one evaluation whose outputs are the results (nothing copied). Not with the
    breakdown: its 28 values per point and output would make one piece's temporaries
    several times the results.
    """
    points = study.output.chunk_points
    if points is None:
        points = DEFAULT_CHUNK_POINTS
        if in_memory and not study.output.breakdown and hugepages.for_malloc():
            points = ONE_PIECE_POINTS
    return max(1, points // study.evaluation_width)


def run_function(study: Study, fn, extra: dict[str, int], deps: dict[str, tuple[str, ...]],
                 progress=None) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, ...]]]:
    """Run ``fn(point, models, hardware) -> {name: array}`` over the grid in blocks.

    Each output leads with ``extra[name]`` axes of its own, then the grid axes it
    depends on (``deps``); blocks are assembled into arrays over those axes.
    """
    models, hardware = tables(study)
    chunks = plan(study.shape, chunk_budget(study, in_memory=True))
    results: dict[str, np.ndarray] = {}
    iterator: Iterator[Chunk] = iter(chunks)
    if progress is not None:
        iterator = progress(iterator, total=len(chunks))

    def place(chunk: Chunk, out: dict, copier: ThreadPoolExecutor) -> None:
        if len(chunks) == 1 and chunk.stop - chunk.start == chunk.length:
            for name, _, array, _ in chunk_pieces(study, chunk, out, extra, deps):
                results[name] = array
            return
        copies = []
        for name, target, array, _ in chunk_pieces(study, chunk, out, extra, deps):
            if name not in results:
                lead = np.shape(out[name])[:extra[name]]
                results[name] = np.empty(output_shape(study, deps[name], lead), array.dtype)
            copies.append((results[name], target, array))
        # numpy copies without the GIL: the outputs go into place side by side, on the
        # cores XLA's threads leave (bench_sweep's grid, 4 chunks: 5-10% off the sweep)
        for _ in copier.map(_assign, copies):  # raises what a copy raised
            pass

    with jax.enable_x64(study.dtype == "float64"), ThreadPoolExecutor(os.cpu_count()) as copier:
        previous = None
        for chunk in iterator:
            # dispatch is asynchronous: this chunk computes while the previous one is
            # copied into place
            out = fn(chunk_point(study, chunk), models, hardware)
            if previous is not None:
                place(*previous, copier)
            previous = chunk, out
        if previous is not None:
            place(*previous, copier)
    return results, deps


def _assign(copy) -> None:
    target, index, array = copy
    target[index] = array


def knob_attrs(study: Study, key: str) -> dict:
    meta = fields(study.point_type)[key].metadata
    return {"units": meta["units"], "long_name": meta["long_name"]}

"""Chunk geometry: a study's grid cut into blocks, each block as evaluator input, and
where each block's outputs land.

Every axis is an array of rank R (the number of axes) with its values along its own
dimension and length 1 elsewhere, so the evaluator's outputs come out with the
broadcast shape of what they depend on (``n_params`` varies over the model axis
only). Grids larger than the chunk budget are cut into blocks along one axis, padded
to a fixed block length so the jitted function compiles once.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from ..core.encoding import complete, encode
from ..study.output import DEFAULT_CHUNK_POINTS
from . import hugepages


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


def chunk_point(study, chunk: Chunk):
    """The knob pytree of one block (rank-R arrays, block axis padded by repetition)."""
    rank = len(study.dims)
    leaves = {}
    for i, axis in enumerate(study.dims):
        values = encode(study, axis.name, axis.values)
        if i < chunk.axis:
            values = values[chunk.outer[i]:chunk.outer[i] + 1]
        elif i == chunk.axis:
            values = values[chunk.start:chunk.stop]
            values = np.pad(values, (0, chunk.length - len(values)), mode="edge")
        shape = [1] * rank
        shape[i] = len(values)
        leaves[axis.name] = values.reshape(shape)
    return complete(study, leaves, rank)


def chunk_pieces(study, chunk: Chunk, out: dict, extra: dict[str, int],
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


def block_shape(study, deps: tuple[str, ...], lead, chunk: Chunk) -> tuple[int, ...]:
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


def output_shape(study, deps: tuple[str, ...], lead=()) -> tuple[int, ...]:
    """Full shape of an output: its own leading axes, then its dependency dims."""
    sizes = dict(zip([a.name for a in study.dims], study.shape))
    return tuple(lead) + tuple(sizes[d] for d in deps)


ONE_PIECE_POINTS = 1 << 24  # an in-memory sweep's default block with huge pages


def chunk_budget(study, in_memory: bool = False) -> int:
    """Grid points per chunk (pipeline mode evaluates every candidate split per point).

    The study's ``chunk_points``, else 2^22; for an in-memory sweep in a process whose
    XLA buffers get huge pages (:mod:`dse.run.hugepages`), 2^24, so that a grid of that size
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

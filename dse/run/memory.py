"""The in-memory runner: a study's grid evaluated chunk by chunk into numpy arrays."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..core.evaluator import Evaluator
from ..core.trace import dependencies, known_layout, layout_of_outputs
from . import xla
from .chunks import chunk_budget, chunk_pieces, chunk_point, output_shape, plan
from .progress import PointsProgress


def run(study, names: tuple[str, ...] | None = None, progress=None
        ) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, ...]]]:
    """Evaluate the whole grid: {output: array over its dependency dims}, and those dims.

    ``progress`` is a bar factory (:func:`dse.run.progress.bar`), or None.
    """
    evaluator = Evaluator.of(study, names)
    # through the kept program (dse.core.programs): a repeated layout traces nothing
    return run_function(study, evaluator, evaluator, evaluator.lead_dims(),
                        _dependencies(study, evaluator), progress)


def _dependencies(study, evaluator):
    """The outputs' dependencies, or where nothing has them yet and the grid is one
    chunk, a function that reads them off that chunk's outputs (one trace, not two)."""
    known = known_layout(study, evaluator)
    if known is not None:
        return {n: o.deps for n, o in known.items()}
    if len(plan(study.shape, chunk_budget(study, in_memory=True))) == 1 and all(
            n >= 2 for n in study.shape):
        def read(out: dict) -> dict[str, tuple[str, ...]]:
            layouts = layout_of_outputs(study, evaluator, out)
            return ({n: o.deps for n, o in layouts.items()} if layouts is not None
                    else dependencies(study, evaluator))
        return read
    return dependencies(study, evaluator)


def run_function(study, evaluator: Evaluator, fn, lead: dict[str, int],
                 deps: dict[str, tuple[str, ...]] | Callable, progress=None
                 ) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, ...]]]:
    """Run ``fn(point, models, hardware) -> {name: array}`` over the grid in blocks, with
    ``evaluator``'s tables and precision.

    Each output leads with ``lead[name]`` axes of its own, then the grid axes it
    depends on (``deps``, or ``deps(outputs of the first block)``); blocks are assembled
    into arrays over those axes.
    """
    xla.configure()
    models, hardware = evaluator.models, evaluator.hardware
    chunks = plan(study.shape, chunk_budget(study, in_memory=True))
    results: dict[str, np.ndarray] = {}
    bar = PointsProgress(progress, study, chunks)

    def place(index: int, out: dict, copier: ThreadPoolExecutor) -> None:
        nonlocal deps
        if callable(deps):
            deps = deps(out)
        chunk = chunks[index]
        bar.update(index)
        if len(chunks) == 1 and chunk.stop - chunk.start == chunk.length:
            for name, _, array, _ in chunk_pieces(study, chunk, out, lead, deps):
                results[name] = array
            return
        copies = []
        for name, target, array, _ in chunk_pieces(study, chunk, out, lead, deps):
            if name not in results:
                shape = output_shape(study, deps[name], np.shape(out[name])[:lead[name]])
                results[name] = np.empty(shape, array.dtype)
            copies.append((results[name], target, array))
        # numpy copies without the GIL: the outputs go into place side by side, on the
        # cores XLA's threads leave
        for _ in copier.map(_assign, copies):  # raises what a copy raised
            pass

    with evaluator.precision(), ThreadPoolExecutor(os.cpu_count()) as copier:
        previous = None
        try:
            for index, chunk in enumerate(chunks):
                # dispatch is asynchronous: this chunk computes while the previous one is
                # copied into place
                out = fn(chunk_point(study, chunk), models, hardware)
                if previous is not None:
                    place(*previous, copier)
                previous = index, out
            if previous is not None:
                place(*previous, copier)
        finally:
            bar.close()
    return results, deps


def _assign(copy) -> None:
    target, index, array = copy
    target[index] = array

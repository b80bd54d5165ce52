"""Which axes each output varies along, read off one shape trace of the evaluator.

Every axis is given length 2 in an abstract point (:func:`template_point`); an output
whose shape keeps a 2 there varies along it. Outputs are then stored over those axes
only (``n_params`` over ``model``), which is what makes a grid of millions of points
cheap to keep. The answer depends only on the study's layout, so it is cached.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from ..schema.knobs import fields
from . import programs
from .encoding import INDEX_KEYS
from .tables import numpy_dtype

_CACHE: dict[tuple, dict] = {}  # study layout -> {output: OutputLayout}


def template_point(study):
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


class OutputLayout(NamedTuple):
    """Where an output lives: the study axes it varies along, the lengths of its own
    leading axes (phase x component, stage, ...), its dtype."""

    deps: tuple[str, ...]
    lead: tuple[int, ...]
    dtype: np.dtype

    def size(self, study) -> int:
        """Elements of the output over the whole grid."""
        sizes = dict(zip((a.name for a in study.dims), study.shape))
        return math.prod(self.lead) * math.prod(sizes[d] for d in self.deps)


def function_layout(study, evaluator, fn, lead: dict[str, int]) -> dict[str, OutputLayout]:
    """The layout of each output of ``fn(point, models, hardware)``, with the evaluator's
    tables and precision; ``lead[name]`` leading axes of its own first."""
    spec = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                                  (evaluator.models, evaluator.hardware))
    with evaluator.precision():
        shapes = jax.eval_shape(fn, template_point(study), *spec)
    dims = [a.name for a in study.dims]
    out = {}
    for name, k in lead.items():
        shape = shapes[name].shape[k:]
        shape = (1,) * (len(dims) - len(shape)) + shape
        out[name] = OutputLayout(tuple(d for d, n in zip(dims, shape) if n == 2),
                                 tuple(shapes[name].shape[:k]), np.dtype(shapes[name].dtype))
    return out


def function_dependencies(study, evaluator, fn, lead: dict[str, int], identity: str | None = None
                          ) -> dict[str, tuple[str, ...]]:
    """The axes each output of ``fn(point, models, hardware)`` varies along. With an
    ``identity`` (what :func:`dse.core.programs.run` keys ``fn`` by) the layout is kept
    on disk like the evaluator's."""
    if identity is None:
        layouts = function_layout(study, evaluator, fn, lead)
    else:
        key = ("function", identity) + _layout_key(study, evaluator)
        if key not in _CACHE:
            _CACHE[key] = _kept(key, lead) or _keep(key, function_layout(
                study, evaluator, fn, lead))
        layouts = _CACHE[key]
    return {n: o.deps for n, o in layouts.items()}


def _layout_key(study, evaluator) -> tuple:
    return (study.mode, tuple(a.name for a in study.dims), evaluator.names, len(study.models),
            len(study.hardware), study.dtype, study.features, study.values("usecase")
            if "usecase" in fields(study.point_type) else None)


def layout(study, evaluator) -> dict[str, OutputLayout]:
    """The layout of each of the evaluator's outputs (cached per axis layout)."""
    key = _layout_key(study, evaluator)
    if key not in _CACHE:
        _CACHE[key] = _kept(key, evaluator.names) or _keep(key, function_layout(
            study, evaluator, evaluator.traced, evaluator.lead_dims()))
    return _CACHE[key]


# Layouts are kept on disk beside the evaluator's programs (dse.core.programs), so a
# later process reads them instead of tracing the evaluator for its shapes.
def _layout_file(key) -> Path | None:
    folder = programs.directory("layouts")
    if folder is None:
        return None
    digest = hashlib.sha256(repr((programs.source(), programs.canonical(key))).encode()
                            ).hexdigest()
    return folder / f"{digest[:32]}.json"


def _kept(key, names) -> dict[str, OutputLayout] | None:
    path = _layout_file(key)
    if path is None or not path.is_file():
        return None
    try:
        kept = json.loads(path.read_text())
        return {n: OutputLayout(tuple(kept[n]["deps"]), tuple(kept[n]["lead"]),
                                np.dtype(kept[n]["dtype"])) for n in names}
    except (ValueError, KeyError, TypeError):  # damaged: trace again and replace it
        return None


def _keep(key, layouts: dict[str, OutputLayout]) -> dict[str, OutputLayout]:
    path = _layout_file(key)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({n: dict(deps=o.deps, lead=o.lead, dtype=o.dtype.str)
                                   for n, o in layouts.items()}))
        os.replace(tmp, path)
    return layouts


def known_layout(study, evaluator) -> dict[str, OutputLayout] | None:
    """The layout if this process or the kept files have it (nothing traced), else None."""
    key = _layout_key(study, evaluator)
    if key not in _CACHE:
        kept = _kept(key, evaluator.names)
        if kept is None:
            return None
        _CACHE[key] = kept
    return _CACHE[key]


def layout_of_outputs(study, evaluator, outputs: dict) -> dict[str, OutputLayout] | None:
    """The layout read off the outputs of one evaluation of the whole grid (kept like a
    traced one), or None where the shapes cannot tell: an axis of length 1.

    Every knob is an array with its values along its own axis and length 1 elsewhere, so
    an output has length n along an axis of n >= 2 values exactly when it varies along
    it: what the shape trace at length 2 (:func:`layout`) reads, without a second trace.
    """
    if any(n < 2 for n in study.shape):
        return None
    dims = [a.name for a in study.dims]
    lead = evaluator.lead_dims()
    out = {}
    for name in evaluator.names:
        shape = np.shape(outputs[name])
        grid = shape[lead[name]:]
        grid = (1,) * (len(dims) - len(grid)) + tuple(grid)
        if any(g not in (1, n) for g, n in zip(grid, study.shape)):
            return None  # not the whole grid
        out[name] = OutputLayout(tuple(d for d, g in zip(dims, grid) if g > 1),
                                 tuple(shape[:lead[name]]), np.dtype(outputs[name].dtype))
    key = _layout_key(study, evaluator)
    _CACHE[key] = _keep(key, out)
    return out


def dependencies(study, evaluator) -> dict[str, tuple[str, ...]]:
    """For each of the evaluator's outputs, the study axes it varies along (cached)."""
    return {n: o.deps for n, o in layout(study, evaluator).items()}

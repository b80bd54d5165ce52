"""The evaluator's programs, traced once and kept on disk between processes.

Tracing the evaluator (Python running the formulas) costs seconds for the larger
programs, every process, before XLA's own persistent cache can answer. Here each
program is exported once (:func:`jax.export.export`: the lowered StableHLO with its
input and output shapes) and serialized under ``$DSE_CACHE_DIR/programs``; a later
process with the same program deserializes it and calls it, and XLA's compilation
cache supplies the compiled executable. Nothing is traced.

A program is keyed by everything that shapes it: dse's source, dse's and JAX's
versions, the backend it is lowered for (an exported program runs on the platform it
was lowered for), what is evaluated (:func:`call`: the mode, the outputs, the features, the
precision; :func:`run`: any top-level function and its static arguments, such as a
sensitivity's differentiated evaluation or an inverse query's bisection), and the
shapes and dtypes of every input leaf (the point's knobs and the spec tables). The
values are arguments, so one program serves every study of the same layout. The
exported program is the one ``jax.jit`` would lower, so its values are the traced
path's, bit for bit (tests/core).

Used at the top level only: sweeps, a search's trial batches, a sensitivity's blocks.
Inside another transformation (a validation fit's grad) the evaluator is traced as
usual. The cache is on where XLA's compilation cache is on
(:func:`dse.run.xla.enable_compilation_cache`: the CLI, the tests); library users who
enable that get both.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
from pathlib import Path

import jax
import numpy as np

from .._version import __version__
from .fusion import jit, tracing

_LOADED: dict[str, object] = {}  # key -> the jitted call of a program in this process


def release() -> None:
    """Drop the compiled programs this process holds (JAX's in-memory compilation caches
    and the kept programs loaded from disk); what is kept on disk stays, and the next
    call loads it again. A long session that evaluates many different studies (a
    notebook, a test run) holds one compiled program per study otherwise: tens of
    megabytes each on XLA:CPU."""
    _LOADED.clear()
    jax.clear_caches()


def directory(kind: str = "programs") -> Path | None:
    """Where programs (and layouts, dse.core.trace) are kept: beside XLA's compilation
    cache (None: not enabled)."""
    path = jax.config.jax_compilation_cache_dir
    return Path(path) / kind if path else None


@functools.cache
def source() -> str:
    """dse's own code as installed (each module's size and time), with dse's and JAX's
    versions: an edited checkout does not read what its former self kept."""
    root = Path(__file__).resolve().parents[1]
    files = sorted((str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns)
                   for f in root.rglob("*.py"))
    return hashlib.sha256(repr((__version__, jax.__version__, files)).encode()).hexdigest()


def canonical(value) -> str:
    """A stable text of a static argument (sets sorted: their iteration order changes
    from process to process with string hashing)."""
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(canonical(v) for v in value)) + "}"
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # NamedTuple
        return type(value).__qualname__ + "(" + ",".join(
            f"{k}={canonical(getattr(value, k))}" for k in value._fields) + ")"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value).__qualname__ + "(" + ",".join(
            f"{f.name}={canonical(getattr(value, f.name))}"
            for f in dataclasses.fields(value)) + ")"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(canonical(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(f"{canonical(k)}:{canonical(v)}"
                              for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))) + "}"
    return repr(value)


def _key(identity: str, leaves, treedef) -> str:
    parts = [source(), identity, jax.default_backend(), str(jax.config.jax_enable_x64),
             str(treedef)]
    parts += [f"{tuple(x.shape)}:{x.dtype}" for x in leaves]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def run(fn, identity: str, *args):
    """``fn(*args)`` through its kept program, exported and saved on first use.

    ``fn`` takes pytrees of arrays and returns a pytree of dicts, lists and arrays;
    ``identity`` names everything else that shapes its program (the function and its
    static arguments, :func:`canonical`). Called with tracers (inside a transformation),
    or without a cache directory, it is ``fn(*args)``.
    """
    folder = directory()
    leaves, treedef = jax.tree_util.tree_flatten(args)
    if folder is None or tracing(leaves):
        return fn(*args)
    leaves = jax.device_put(leaves)  # one transfer (and dtype canonicalization) for all
    key = _key(identity, leaves, treedef)
    call = _LOADED.get(key)
    if call is None:
        call = _LOADED[key] = jit(_program(fn, folder, key, leaves, treedef).call)
    return call(*leaves)


MIN_BATCH = 16  # the smallest batch a vector of trials is padded to
MAX_BATCH = 1 << 12  # larger vectors keep their length (padding would cost up to 2x)


def call(evaluator, point, models, hardware) -> dict:
    """``evaluator.traced(point, models, hardware)`` through the kept program.

    Points of one shape family share one program (:func:`canonical_point`): a single
    point of any rank is evaluated as scalars, and a vector of n trials (validation
    rows, a search's batch) is padded to the next power of two; the outputs come back in
    the shapes the point's own program gives.
    """
    identity = "|".join(["evaluate", evaluator.mode, ",".join(evaluator.names),
                         canonical(evaluator.features), evaluator.dtype])
    if directory() is None or tracing(jax.tree_util.tree_leaves(point)):
        restore = None
    else:
        point, restore = canonical_point(point)
    out = run(evaluator.traced, identity, point, models, hardware)
    return {n: out[n] if restore is None else restore(out[n]) for n in evaluator.names}


def canonical_point(point):
    """``(point', restore)``: a point in the shape its program is kept for, and the map
    from an output of ``point'`` to the output ``point`` gives (None: ``point`` as it is).

    The evaluator is elementwise over the point's axes, so only the shapes change:

    - one point (every leaf of size 1, as a study at fixed values): every leaf a scalar;
      an output gets the point's rank back as trailing axes of length 1;
    - a vector of trials (every leaf of shape (n,) or (1,)): the (n,) leaves padded to
      the next power of two (at least :data:`MIN_BATCH`, for n up to :data:`MAX_BATCH`)
      with their last value, a valid point; an output's trial axis (its last, of that
      length) is cut back to n.

    A validation's row batches, a search's trial batches and the single points of
    small studies so reuse one compiled program across sizes and studies. Grids keep
    their shapes: their outputs are laid out over the axes they vary along.
    """
    leaves, treedef = jax.tree_util.tree_flatten(point)
    shapes = [np.shape(x) for x in leaves]
    if not leaves:
        return point, None
    if all(math.prod(s) == 1 for s in shapes):
        rank = max(len(s) for s in shapes)
        if rank == 0 or any(len(s) != rank for s in shapes):
            return point, None
        scalars = [np.reshape(np.asarray(x), ()) for x in leaves]
        ones = (1,) * rank
        return (jax.tree_util.tree_unflatten(treedef, scalars),
                lambda v: np.reshape(np.asarray(v), np.shape(v) + ones))
    if any(len(s) != 1 for s in shapes):
        return point, None
    n = max(s[0] for s in shapes)
    if n > MAX_BATCH or any(s[0] not in (1, n) for s in shapes):
        return point, None
    size = max(MIN_BATCH, 1 << (n - 1).bit_length())
    if size == n:
        return point, None
    padded = [np.pad(np.asarray(x), (0, size - n), mode="edge") if s[0] == n else x
              for x, s in zip(leaves, shapes)]

    def restore(v):
        v = np.asarray(v)
        return v[..., :n] if v.ndim and v.shape[-1] == size else v

    return jax.tree_util.tree_unflatten(treedef, padded), restore


def _program(fn, folder: Path, key: str, leaves, treedef):
    from jax import export

    path = folder / f"{key}.jaxexport"
    if path.is_file():
        try:
            return export.deserialize(bytearray(path.read_bytes()))
        except Exception:  # a damaged or foreign file: trace again and replace it
            path.unlink(missing_ok=True)

    def flat(*xs):  # the inputs' dataclass pytrees are not serializable: leaves in
        return fn(*jax.tree_util.tree_unflatten(treedef, list(xs)))

    exported = export.export(jax.jit(flat))(
        *(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves))
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.{os.getpid()}.tmp"
    tmp.write_bytes(exported.serialize())
    os.replace(tmp, path)  # whole or not at all, whichever process writes last
    return exported

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
import os
from pathlib import Path

import jax

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


def call(evaluator, point, models, hardware) -> dict:
    """``evaluator.traced(point, models, hardware)`` through the kept program."""
    identity = "|".join(["evaluate", evaluator.mode, ",".join(evaluator.names),
                         canonical(evaluator.features), evaluator.dtype])
    out = run(evaluator.traced, identity, point, models, hardware)
    return {n: out[n] for n in evaluator.names}


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

"""The spec dataclasses as JAX pytrees, without importing JAX to define them.

The catalogue, the study schema and the formulas' small records are frozen dataclasses
that ``jax.jit`` and ``jax.vmap`` take as pytrees (:func:`jax.tree_util.register_dataclass`).
Registering them at class definition would import JAX (0.4-1 s) into every command,
``dse models`` and ``dse hardware`` included, which never evaluate anything.
:func:`register` therefore registers a class at once when JAX is loaded, and otherwise
as soon as ``jax`` finishes importing (a one-shot import hook), before any code can hand
the class to JAX. :func:`stack` and :func:`astype` are the two tree maps the catalogue
needs, in NumPy.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.util
import sys
import threading
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

_pending: list[type] = []
_lock = threading.Lock()


def _register(cls: type) -> None:
    import jax

    jax.tree_util.register_dataclass(cls)


def _flush() -> None:
    with _lock:
        classes, _pending[:] = list(_pending), []
    for cls in classes:
        _register(cls)


class _AfterJax(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``jax`` so that the pending classes are
    registered right after the package has executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "jax":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                run(module)
                _flush()

        spec.loader = Loader()
        return spec


_hook = _AfterJax()


def register(cls: type[T]) -> type[T]:
    """Class decorator: ``cls`` (a dataclass) becomes a JAX pytree whose fields are all
    data (children), registered now if JAX is imported, else when it is."""
    if "jax" in sys.modules and hasattr(sys.modules["jax"], "tree_util"):
        _register(cls)
        return cls
    with _lock:
        _pending.append(cls)
        if _hook not in sys.meta_path:
            sys.meta_path.insert(0, _hook)
    if "jax" in sys.modules:  # imported meanwhile, by another thread
        _flush()
    return cls


def stack(items: list[T], dtype=np.float64) -> T:
    """One dataclass whose every field stacks the items' fields along a new leading axis
    (a field that is None in every item stays None)."""
    first = items[0]
    return dataclasses.replace(first, **{
        f.name: None if all(getattr(x, f.name) is None for x in items)
        else np.asarray([getattr(x, f.name) for x in items], dtype=dtype)
        for f in dataclasses.fields(first)})


def astype(item: T, dtype) -> T:
    """A copy with every field a NumPy array of ``dtype`` (None fields stay None)."""
    return dataclasses.replace(item, **{
        f.name: None if getattr(item, f.name) is None
        else np.asarray(getattr(item, f.name), dtype=dtype) for f in dataclasses.fields(item)})


"""xarray without dask until dask is used.

xarray checks every array it wraps against dask's array type, and its first check
imports ``dask.array`` (about 0.4 s) whenever dask is installed, as it is here for the
cluster runner; its netCDF writer asks for dask's scheduler (importing
``dask.distributed``, another 0.3-0.5 s) to choose a lock. A small sweep then spends a
quarter of its warm run importing what it never uses. :func:`install` gives xarray's
cache of duck-array modules a dask entry whose type check imports nothing: an object
can be a dask array only once ``dask.array`` is loaded, so the check asks
``dask.array.Array`` then and answers no before. :func:`dse.results.io.write_dataset`
opens the netCDF store with xarray's HDF5 lock itself.

xarray keeps that cache in a private module (``xarray.namedarray.pycompat``); where it
is not as expected, nothing is installed and xarray imports dask as before.
"""

from __future__ import annotations

import sys
import types


class _DaskArrayType(type):
    def __instancecheck__(cls, obj) -> bool:
        array = sys.modules.get("dask.array")
        return array is not None and isinstance(obj, array.Array)


class _Dask(types.ModuleType):
    """``dask`` itself, imported when first read (xarray keeps the module in its entry)."""

    def __getattr__(self, name):
        import importlib

        return getattr(importlib.import_module("dask"), name)


class DaskArray(metaclass=_DaskArrayType):
    """Stands for ``dask.array.Array`` in isinstance checks, without importing it."""


def install() -> bool:
    """Put the lazy dask entry in xarray's cache (once); whether it is there."""
    try:
        from xarray.namedarray import pycompat
    except ImportError:
        return False
    cache = getattr(pycompat, "_cached_duck_array_modules", None)
    kind = getattr(pycompat, "DuckArrayModule", None)
    if not isinstance(cache, dict) or kind is None:
        return False
    if "dask" in cache:
        return isinstance(cache["dask"].type, tuple) and DaskArray in cache["dask"].type
    if "dask.array" in sys.modules:
        return False  # loaded already: xarray's own entry costs nothing more
    from importlib import metadata

    try:
        from packaging.version import Version

        version = Version(metadata.version("dask"))  # installed, not imported (0.15 s)
    except (ImportError, metadata.PackageNotFoundError):
        return False  # xarray finds no dask either
    entry = kind.__new__(kind)
    entry.module, entry.version = _Dask("dask"), version
    entry.type, entry.available = (DaskArray,), True
    cache["dask"] = entry
    return True

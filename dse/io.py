"""Write results atomically: a reader never sees a half-written file.

The Dataset goes to a temporary name in the target's directory and is renamed into
place only when complete (``os.replace`` is atomic on POSIX); on any failure the
temporary is removed and an existing result is left untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

import xarray as xr


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def replace_path(source: Path, path: Path) -> None:
    """Move ``source`` to ``path``, replacing what is there (a directory: via a
    hidden aside name, so ``path`` is at every moment either the old or the new store)."""
    if path.exists() and path.is_dir():
        old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(path, old)
        os.replace(source, path)
        _remove(old)
    else:
        os.replace(source, path)


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """A temporary name beside ``path`` to write to; renamed to ``path`` when the block
    completes, removed if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        if tmp.is_dir():
            replace_path(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        _remove(tmp)


def netcdf_encoding(ds: xr.Dataset, compress: bool) -> dict | None:
    """Per-variable netCDF encoding: gzip level 1 for the data variables if asked."""
    if not compress:
        return None
    return {v: {"compression": "gzip", "compression_opts": 1} for v in ds.data_vars}


def write_dataset(ds: xr.Dataset, path: str | Path, compress: bool = False) -> Path:
    """Write ``ds`` to ``path`` (``.nc``: netCDF-4 via h5netcdf; ``.zarr``: zarr v2 store)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix == ".zarr":
            # Zarr format 2 with consolidated metadata: the layout every zarr reader
            # opens, and the one plain ``xarray.open_dataset`` reads without warnings.
            ds.to_zarr(tmp, mode="w", zarr_format=2, consolidated=True)
        else:
            ds.to_netcdf(tmp, engine="h5netcdf", encoding=netcdf_encoding(ds, compress))
    return path

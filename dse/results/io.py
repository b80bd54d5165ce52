"""Write result Datasets atomically (:mod:`dse.atomic`): netCDF-4 or zarr."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from ..atomic import atomic_path


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
            encoding = netcdf_encoding(ds, compress)
            if all(isinstance(v.data, np.ndarray) for v in ds.variables.values()):
                _to_netcdf(ds, tmp, encoding)
            else:  # lazy (dask, or read from a store): xarray computes while it writes
                ds.to_netcdf(tmp, engine="h5netcdf", encoding=encoding)
    return path


def _to_netcdf(ds: xr.Dataset, path: Path, encoding: dict | None) -> None:
    """``ds.to_netcdf(path, engine="h5netcdf")``, with the HDF5 lock given instead of the
    one xarray would choose after asking dask for its scheduler (dse.results.lazydask).
    For Datasets of numpy arrays only: each is written as it is stored, where a lazy
    one would wait for a compute step this skips."""
    from xarray.backends import H5NetCDFStore
    from xarray.backends.locks import HDF5_LOCK

    store = H5NetCDFStore.open(path, mode="w", lock=HDF5_LOCK)
    try:
        ds.dump_to_store(store, encoding=encoding or {})
        store.close()
    except BaseException:
        _abandon(store)
        raise


def _abandon(store) -> None:
    """Close the file of a netCDF write that failed (a full disk) without writing more.

    h5netcdf's close flushes first; on a file HDF5 could not extend the flush raises,
    leaves the file open, and the next attempt (the garbage collector's, at exit) crashed
    the process (a segfault after the clean "disk filled up" line). So: close the HDF5 file
    itself, mark the netCDF one closed, then let xarray drop it."""
    try:
        nc = store._manager.acquire()
        h5 = nc._h5file
    except Exception:  # never opened, or already closed
        return
    try:
        h5.close()
    except Exception:
        pass
    nc._closed = True  # h5netcdf.File: its close (and __del__) skip the flush
    try:
        store._manager.close()
    except Exception:
        pass

"""Write result Datasets atomically (:mod:`dse.atomic`): netCDF-4 or zarr."""

from __future__ import annotations

from pathlib import Path

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
            ds.to_netcdf(tmp, engine="h5netcdf", encoding=netcdf_encoding(ds, compress))
    return path

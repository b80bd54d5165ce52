"""``dse.sweep``: a study's whole grid in one jit-compiled evaluation -> xarray Dataset."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import xarray as xr

from . import grid
from .results.dataset import to_dataset
from .results.io import write_dataset
from .lazy import write_netcdf
from .study.study import Study, load_study


def _progress_bar(enabled: bool | None):
    if enabled is False or (enabled is None and not sys.stderr.isatty()):
        return None
    from tqdm.auto import tqdm

    def wrap(iterator, total):
        return tqdm(iterator, total=total, unit="chunk", disable=total <= 1, leave=False)

    return wrap


def _points_bar(enabled: bool | None):
    """A factory of point-counting bars (streamed sweeps), or None."""
    if enabled is False or (enabled is None and not sys.stderr.isatty()):
        return None
    from tqdm.auto import tqdm

    return lambda total: tqdm(total=total, unit="pt", unit_scale=True, leave=False,
                              smoothing=0.1)


def _points_callback(enabled: bool | None, total: int):
    """``advance(points)`` for a points bar, or None; the bar closes at ``total``."""
    make = _points_bar(enabled)
    if make is None:
        return None
    bar = make(total)

    def advance(points: int) -> None:
        bar.update(points)
        if bar.n >= total:
            bar.close()

    return advance


def sweep(study: Study | str | Path, *, progress: bool | None = None,
          scheduler: str | None = None, workers: int | None = None) -> xr.Dataset:
    """Evaluate every point of ``study``'s grid and return the labelled Dataset.

    ``study`` is a :class:`~dse.study.Study` or the path of a study file. Dimensions are
    the study's list-valued axes in file order; each output variable spans the axes it
    depends on and carries ``units`` and ``long_name``; ``attrs`` hold the study text,
    dse version and the resolved hardware and model specs. Infeasible points are kept,
    flagged by ``valid`` and explained by the ``reason`` bit flags.

    A study with ``[output.reduce]`` streams the grid through the reduction instead and
    returns the reduced Dataset (over the ``by`` axes). ``scheduler`` (a dask
    scheduler address) or ``workers`` (local processes) run the chunks elsewhere; the
    result is the same.

    Start Python with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (Linux, glibc >= 2.35)
    for faster in-memory sweeps: XLA's buffers then get huge pages and a grid of up to
    2^24 points is evaluated in one piece, its outputs kept as the results
    (:mod:`dse.hugepages`; on bench_sweep's grid about a third less time).
    """
    if not isinstance(study, Study):
        study = load_study(study)
    start = time.perf_counter()
    if study.output.reduce is not None:
        from .engine import reduce_grid

        ds = reduce_grid(study, scheduler=scheduler, workers=workers,
                         progress=_points_bar(progress))
    elif scheduler is not None or (workers or 1) > 1:
        import tempfile

        from .engine import write_grid

        with tempfile.TemporaryDirectory(prefix="dse-") as tmp:
            partial = write_grid(study, Path(tmp) / "grid.zarr", scheduler=scheduler,
                                 workers=workers, progress=_points_bar(progress))
            with xr.open_zarr(partial.data) as ds:
                ds = ds.load()
    else:
        arrays, deps = grid.run(study, progress=_progress_bar(progress))
        ds = to_dataset(study, arrays, deps)
    ds.attrs["evaluation_s"] = time.perf_counter() - start
    return ds


def sweep_to_file(study: Study | str | Path, out: str | Path | None = None, *,
                  progress: bool | None = None, scheduler: str | None = None,
                  workers: int | None = None, resume: bool = False
                  ) -> tuple[xr.Dataset, Path]:
    """:func:`sweep` into ``out`` (default: the study's output path), atomically.

    Streamed through a zarr store (chunk by chunk, resumable with ``resume=True``, on
    ``workers`` local processes or a dask ``scheduler``) when the study writes zarr or
    asks for resume, workers or a scheduler; a reduction streams into its reduced
    Dataset; otherwise the chunks are written straight into the netCDF file as they
    are evaluated (:func:`dse.lazy.write_netcdf`: bounded memory, evaluation overlapping
    the write). Either way ``out`` appears only when complete. Returns the Dataset
    (lazily backed by the file for a full grid) and the path.
    """
    from . import engine

    if not isinstance(study, Study):
        study = load_study(study)
    path = Path(out) if out is not None else study.output.path
    if path is None:
        path = Path("results") / f"{study.name}.nc"
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if study.output.reduce is not None:
        ds = engine.reduce_grid(study, target=path, resume=resume, scheduler=scheduler,
                                workers=workers, progress=_points_bar(progress))
        ds.attrs["evaluation_s"] = time.perf_counter() - start
        write_dataset(ds, path, compress=study.output.compress)
        engine.Partial(path).remove()
        return ds, path
    n_workers = engine.resolve_workers(study, "write", workers, scheduler)
    if path.suffix == ".zarr" or resume or scheduler is not None or n_workers > 1:
        partial = engine.write_grid(study, path, resume=resume, scheduler=scheduler,
                                    workers=workers, progress=_points_bar(progress))
        return engine.finish_store(partial, path, study.output.compress), path
    ds = write_netcdf(study, path, compress=study.output.compress,
                      progress=_points_callback(progress, study.size))
    ds.attrs["evaluation_s"] = time.perf_counter() - start
    return ds, path

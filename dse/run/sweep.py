"""``dse.sweep`` and ``dse.sweep_to_file``: a study's grid evaluated -> an xarray Dataset.

A sweep takes one of four paths (:func:`choose`), each a runner of this package:

========== =========================================================================
reduce     ``[output.reduce]``: chunks reduced inside the jitted kernel, in bounded
           memory (:mod:`.reduction`, run by :mod:`.cluster`)
store      chunks written into a zarr store, resumable, on worker processes or a dask
           cluster (:mod:`.cluster`, :mod:`.store`)
netcdf     a ``.nc`` file written chunk by chunk as the next chunks evaluate
           (:mod:`.netcdf`)
memory     the whole grid in memory, in one evaluation or a few chunks (:mod:`.memory`)
========== =========================================================================
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import xarray as xr

from ..atomic import check_writable, no_space
from ..errors import InputError
from ..results.dataset import to_dataset
from ..results.io import write_dataset
from ..study.output import FORMATS
from ..study.study import Study, load_study
from . import budget, chunks, cluster, memory, netcdf, progress as bars, xla
from .store import Partial, finish_store

PATHS = ("reduce", "store", "netcdf", "memory")


def choose(study: Study, path: Path | None = None, *, scheduler: str | None = None,
           workers: int | None = None, resume: bool = False) -> str:
    """Which of :data:`PATHS` a sweep of ``study`` takes; ``path`` is the file it writes
    (None: a sweep into memory, where only an explicit ``workers`` > 1 or ``scheduler``
    moves the work to other processes)."""
    if study.output.reduce is not None:
        return "reduce"
    if path is None:
        return "store" if scheduler is not None or (workers or 1) > 1 else "memory"
    elsewhere = cluster.resolve_workers(study, workers, scheduler) != 1
    if path.suffix == ".zarr" or resume or elsewhere:
        return "store"
    return "netcdf"


def sweep(study: Study | str | Path, *, progress: bool | None = None,
          scheduler: str | None = None, workers: int | None = None,
          force: bool = False) -> xr.Dataset:
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

    A grid whose results would not fit in memory stops before it starts, with an
    :class:`~dse.errors.InputError` naming the estimate (:mod:`dse.run.budget`), unless
    ``force``.

    Start Python with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (Linux, glibc >= 2.35)
    for faster in-memory sweeps: XLA's buffers then get huge pages and a grid of up to
    2^24 points is evaluated in one piece, its outputs kept as the results
    (:mod:`dse.run.hugepages`).
    """
    if not isinstance(study, Study):
        study = load_study(study)
    xla.configure()
    start = time.perf_counter()
    how = choose(study, scheduler=scheduler, workers=workers)
    need = budget.check(study, how, force=force)
    try:
        ds = _sweep(study, how, progress, scheduler, workers)
    except MemoryError:
        need = need or budget.estimate(study)
        raise InputError(study.file, "axes", f"{need.describe()}: out of memory",
                         budget.HOW_TO_REDUCE) from None
    ds.attrs["evaluation_s"] = time.perf_counter() - start
    return ds


def _sweep(study: Study, how: str, progress, scheduler, workers) -> xr.Dataset:
    if how == "reduce":
        ds = cluster.reduce_grid(study, scheduler=scheduler, workers=workers,
                                 progress=bars.bar(progress, desc=study.name))
    elif how == "store":
        with tempfile.TemporaryDirectory(prefix="dse-") as tmp:
            partial = cluster.write_grid(study, Path(tmp) / "grid.zarr", scheduler=scheduler,
                                         workers=workers,
                                         progress=bars.bar(progress, desc=study.name))
            with xr.open_zarr(partial.data) as ds:
                ds = ds.load()
    else:
        arrays, deps = memory.run(study, progress=bars.bar(progress, desc=study.name))
        ds = to_dataset(study, arrays, deps)
    return ds


def default_path(study: Study) -> Path:
    """Where a study's results go: its ``[output] path``, else ``results/NAME.nc``."""
    return study.output.path or Path("results") / f"{study.name}.nc"


def sweep_to_file(study: Study | str | Path, out: str | Path | None = None, *,
                  progress: bool | None = None, scheduler: str | None = None,
                  workers: int | None = None, resume: bool = False, force: bool = False
                  ) -> tuple[xr.Dataset, Path]:
    """:func:`sweep` into ``out`` (default: the study's output path), atomically.

    Streamed through a zarr store (chunk by chunk, resumable with ``resume=True``, on
    ``workers`` local processes or a dask ``scheduler``) when the study writes zarr or
    asks for resume, workers or a scheduler; a reduction streams into its reduced
    Dataset; otherwise the chunks are written straight into the netCDF file as they
    are evaluated (bounded memory, evaluation overlapping the write). Either way
    ``out`` appears only when complete. Returns the Dataset (lazily backed by the file
    for a full grid) and the path.

    Before anything is evaluated the path is checked (a file name where a file can be
    made) and the results' size against its disk (:mod:`dse.run.budget`; ``force``
    skips the size check); a disk that fills up anyway stops the sweep with one
    :class:`~dse.errors.InputError` and leaves nothing behind.
    """
    if not isinstance(study, Study):
        study = load_study(study)
    xla.configure()
    if out is not None:
        path = check_writable(out, "out", None, FORMATS)
    else:
        path = check_writable(default_path(study), study.file, "output.path", FORMATS)
    how = choose(study, path, scheduler=scheduler, workers=workers, resume=resume)
    budget.check(study, how, path, force)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _sweep_to_file(study, path, how, progress, scheduler, workers, resume)
    except Exception as err:
        if not no_space(err):
            raise
        Partial(path).remove()
        raise InputError(study.file, "output.path", f"{path}: the disk filled up (or the file-size "
                         "limit was reached) while the "
                         "results were written; nothing was kept",
                         f"free space, another disk, or a smaller study ({budget.HOW_TO_REDUCE})"
                         ) from None


def _sweep_to_file(study: Study, path: Path, how: str, progress, scheduler, workers, resume
                   ) -> tuple[xr.Dataset, Path]:
    start = time.perf_counter()
    if how == "reduce":
        ds = cluster.reduce_grid(study, target=path, resume=resume, scheduler=scheduler,
                                 workers=workers,
                                 progress=bars.bar(progress, desc=study.name))
        ds.attrs["evaluation_s"] = time.perf_counter() - start
        write_dataset(ds, path, compress=study.output.compress)
        Partial(path).remove()
        return ds, path
    if how == "store":
        partial = cluster.write_grid(study, path, resume=resume, scheduler=scheduler,
                                     workers=workers,
                                     progress=bars.bar(progress, desc=study.name))
        return finish_store(partial, path, study.output.compress), path
    if len(chunks.plan(study.shape, chunks.chunk_budget(study))) == 1:
        # one chunk: evaluated in memory and written in one call (no task graph, no
        # write pipeline to overlap with, nothing of dask imported)
        arrays, deps = memory.run(study, progress=bars.bar(progress, desc=study.name))
        ds = to_dataset(study, arrays, deps)
        write_dataset(ds, path, compress=study.output.compress)
        ds.attrs["evaluation_s"] = time.perf_counter() - start
        return ds, path
    ds = netcdf.write_netcdf(study, path, compress=study.output.compress,
                             progress=bars.bar(progress, desc=study.name))
    ds.attrs["evaluation_s"] = time.perf_counter() - start
    return ds, path

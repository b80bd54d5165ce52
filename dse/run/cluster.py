"""Streamed sweeps: a grid's chunks run in this process, on local worker processes or on
any dask.distributed cluster, into a zarr store or a reduction, resumably.

The grid is cut into chunks once (:func:`dse.run.chunks.plan`); a chunk is a task that any
process can run from the study alone: evaluate it and either write its regions into
the shared zarr store (:func:`write_task`) or reduce it inside the jitted evaluator
(:func:`reduce_task`). Tasks are idempotent, so a task lost with a killed worker is
simply run again, and a result never depends on which process ran what:

- zarr chunks are aligned with the grid's chunks (each task owns whole zarr chunks);
- reduction partials are folded on the client in grid order.

XLA on CPU runs this elementwise work on one core, so one worker process per core is
what uses a machine; a dask cluster extends that to many machines (the store path
must then be on storage every worker sees).
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import xarray as xr

from ..core.evaluator import Evaluator
from ..core.trace import dependencies
from ..errors import InputError
from . import xla
from .chunks import chunk_budget, chunk_pieces, chunk_point, plan
from .devices import local_devices
from .progress import PointsProgress
from .store import Partial, create_store, fingerprint

# --- worker side ----------------------------------------------------------------------

_PREPARED: dict[str, dict] = {}


_LAST: list = [None, None]  # (study, kind, spec) objects last seen, and their key


def _prepared(study, kind: str, spec=None, names=None) -> dict:
    """Per-process cache: the study's evaluator, chunk plan and compiled chunk function."""
    if _LAST[0] is not None and all(a is b for a, b in zip(_LAST[0], (study, kind, spec))):
        key = _LAST[1]  # the same objects as the last call (every chunk of a batch)
    else:
        key = hashlib.sha256(pickle.dumps((study, kind, spec))).hexdigest()
        _LAST[:] = [(study, kind, spec), key]
    if key not in _PREPARED:
        xla.configure()  # a worker of a cluster dse did not start: before JAX starts
        if os.environ.get("DSE_WORKER") == "1":
            xla.enable_compilation_cache()
            _pin_to_core()
        prep = {"chunks": plan(study.shape, chunk_budget(study))}
        if kind == "reduce":
            from ..core.fusion import jit
            from .reduction import chunk_kernel

            prep["evaluator"] = Evaluator.of(study, spec.inputs)
            axis = prep["chunks"][0].axis
            prep["fn"] = jit(chunk_kernel(study, prep["evaluator"], spec, axis))
        else:
            prep["evaluator"] = Evaluator.of(study, names)
        _PREPARED.clear()  # one study at a time per worker
        _PREPARED[key] = prep
    return _PREPARED[key]


def _pin_to_core() -> None:
    """Keep a local worker (and XLA's helper threads) on one core of its own.

    XLA's CPU thread pool spreads a process over more than one core without making this
    elementwise work faster (the same wall time pinned to one core); unpinned worker
    processes then contend and one process per core gains nothing. Pinned, they scale.
    """
    try:
        from distributed import get_worker

        name = get_worker().name
        cores = sorted(os.sched_getaffinity(0))
        if isinstance(name, int) and len(cores) > 1:
            core = {cores[name % len(cores)]}
            for tid in os.listdir("/proc/self/task"):  # every thread, not just this one
                os.sched_setaffinity(int(tid), core)
    except (ImportError, ValueError, AttributeError, OSError):
        pass


def reduce_task(study, spec, index: int) -> dict:
    """Reduce chunk ``index``: small numpy arrays over the chunk's ``by`` sub-block."""
    return _reduce_finish(study, spec, index, _reduce_start(study, spec, index))


def _reduce_start(study, spec, index: int, device=None) -> dict:
    prep = _prepared(study, "reduce", spec)
    chunk, evaluator = prep["chunks"][index], prep["evaluator"]
    point, models, hardware = evaluator.on(chunk_point(study, chunk), device)
    n_real = evaluator.on(np.int32(chunk.stop - chunk.start), device)[0]
    with evaluator.precision():
        return prep["fn"](point, n_real, models, hardware)


def _reduce_finish(study, spec, index: int, part: dict) -> dict:
    from .reduction import histogram_counts

    part = {k: np.asarray(v) for k, v in part.items()}
    if "bin" in part:
        part["histogram"] = histogram_counts(part["best"].shape, spec.histogram.bins + 2,
                                             part.pop("bin"))
    return part


def write_task(study, store: str, done_dir: str, names: tuple[str, ...], deps: dict,
               index: int) -> int:
    """Evaluate chunk ``index``, write the regions it owns into ``store``, mark it done."""
    out = _write_start(study, store, done_dir, names, deps, index)
    return _write_finish(study, store, done_dir, names, deps, index, out)


def _write_start(study, store, done_dir, names, deps, index: int, device=None) -> dict:
    prep = _prepared(study, "write", names=names)
    evaluator = prep["evaluator"]
    return evaluator(*evaluator.on(chunk_point(study, prep["chunks"][index]), device))


def _write_finish(study, store, done_dir, names, deps, index: int, out: dict) -> int:
    import zarr

    prep = _prepared(study, "write", names=names)
    chunk, lead = prep["chunks"][index], prep["evaluator"].lead_dims()
    group = zarr.open_group(store, mode="r+", zarr_format=2)
    for name, target, array, first in chunk_pieces(study, chunk, out, lead, deps):
        if first:
            group[name][target] = array
    Partial.mark_in(Path(done_dir), index)
    return index


# A task's two halves: dispatching the chunk's evaluation returns at once (JAX dispatch
# is asynchronous), so the next chunks compute while this one's host work (copying
# results out, histogram counts, writing the store, markers) runs.
STAGES = {reduce_task: (_reduce_start, _reduce_finish), write_task: (_write_start, _write_finish)}


def pipelined(fn, args, indices, devices=None):
    """``(i, fn(*args, i))`` for each index, in order. For the tasks in :data:`STAGES`
    the chunks are dispatched round-robin over ``devices`` (XLA host devices, one per
    core: :mod:`dse.run.devices`), one chunk in flight per device while the oldest one's
    host work runs; other functions run plainly."""
    if fn not in STAGES:
        for i in indices:
            yield i, fn(*args, i)
        return
    start, finish = STAGES[fn]
    devices = list(devices) if devices and len(devices) > 1 else [None]
    pending = collections.deque()
    for k, i in enumerate(indices):
        pending.append((i, start(*args, i, device=devices[k % len(devices)])))
        while len(pending) > len(devices):
            j, handle = pending.popleft()
            yield j, finish(*args, j, handle)
    while pending:
        j, handle = pending.popleft()
        yield j, finish(*args, j, handle)


# --- client side ----------------------------------------------------------------------

def resolve_workers(study, workers: int | None, scheduler: str | None) -> int:
    """How many local worker processes (0: a dask scheduler's): the caller's or the
    study's number; ``"auto"`` is one, this process, which spreads chunks over one XLA
    host device per core (:mod:`dse.run.devices`): as fast as worker processes on one
    machine, with none of their start-up (``benchmarks/bench_stream.py``)."""
    if scheduler is not None:
        return 0
    choice = workers if workers is not None else study.output.workers
    return 1 if choice == "auto" else int(choice)


class Runner:
    """Where chunk tasks run: this process, a local cluster of ``workers`` processes
    (one thread each), or the dask cluster at ``scheduler``. A context manager: the
    connection is made on entry, before anything is written."""

    def __init__(self, scheduler: str | None = None, workers: int = 1, devices=None):
        self.scheduler, self.workers, self.devices = scheduler, workers, devices
        self.client = self._cluster = None

    def __enter__(self) -> "Runner":
        if self.scheduler is None and self.workers <= 1:
            return self
        from dask.distributed import Client, LocalCluster

        if self.scheduler is not None:
            try:
                self.client = Client(self.scheduler, timeout="5s")
            except (OSError, TimeoutError, ValueError) as err:
                raise InputError("--scheduler", self.scheduler, "cannot connect to the dask "
                                 f"scheduler ({err})", "the address of a running dask "
                                 "scheduler, e.g. tcp://10.0.0.1:8786") from None
            _check_versions(self.client)
        else:
            # the workers (and any the nanny restarts) know they are pinned dse workers
            self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                         processes=True, dashboard_address=None,
                                         silence_logs=logging.ERROR, env={"DSE_WORKER": "1"})
            self.client = Client(self._cluster)
        return self

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def run(self, fn, args, indices, on_done, progress: PointsProgress | None = None) -> None:
        """``fn(*args, i)`` for every chunk index; ``on_done(i, result)`` here, as each
        finishes (in any order on a cluster)."""
        indices = list(indices)
        if not indices:
            return
        if self.client is None:
            for i, result in pipelined(fn, args, indices, self.devices):
                on_done(i, result)
                if progress:
                    progress.update(i)
            return
        from dask.distributed import as_completed

        client = self.client
        # Arguments travel with each task (a study pickles to a few kB): nothing lives
        # only on a worker that may die.
        token = hashlib.sha256(pickle.dumps(args)).hexdigest()[:16]
        # A few tasks per worker, each a run of consecutive chunks: the scheduler's
        # per-task cost stays small next to the work, and load still balances.
        n_workers = max(1, len(client.scheduler_info(n_workers=-1)["workers"]))
        size = max(1, len(indices) // (TASKS_PER_WORKER * n_workers))
        batches = [tuple(indices[k:k + size]) for k in range(0, len(indices), size)]
        futures = {client.submit(_run_batch, fn, *args, batch,
                                 key=f"dse-{fn.__name__}-{token}-{batch[0]}", pure=False,
                                 retries=2): batch for batch in batches}
        for future in as_completed(futures):
            for i, result in future.result():
                on_done(i, result)
                if progress:
                    progress.update(i)
            future.release()


TASKS_PER_WORKER = 16


def _run_batch(fn, *args):
    """Worker side of :meth:`Runner.run`: ``fn`` over a run of chunk indices."""
    *args, batch = args
    return list(pipelined(fn, args, batch, local_devices(args[0])))


def _version() -> str:
    from .._version import __version__

    return __version__


def _check_versions(client) -> None:
    from .._version import __version__

    found = set(client.run(_version).values())
    if found and found != {__version__}:
        raise InputError("--scheduler", None, f"workers run dse {', '.join(sorted(found))}, "
                         f"this client {__version__}", "the same dse version on every worker")


def reduce_grid(study, *, target: Path | None = None, resume: bool = False,
                scheduler: str | None = None, workers: int | None = None,
                progress=None) -> xr.Dataset:
    """Stream the grid through the study's ``[output.reduce]``; the reduced Dataset.

    With ``target``, finished chunks' partials are kept beside it so an interrupted
    run continues with ``resume=True``.
    """
    xla.configure()
    spec = study.output.reduce
    chunks = plan(study.shape, chunk_budget(study))
    runner = Runner(scheduler, resolve_workers(study, workers, scheduler),
                    local_devices(study))
    with runner:
        return _reduce(study, spec, chunks, runner, target, resume, progress)


def _reduce(study, spec, chunks, runner: Runner, target, resume, progress) -> xr.Dataset:
    from .reduction import Accumulator, warm_best

    partial = Partial(target) if target is not None else None
    done = partial.open(fingerprint(study, "reduce", len(chunks), repr(spec)), resume) \
        if partial else set()
    acc = Accumulator(study, spec)
    pending: dict[int, dict] = {}
    state = {"next": 0}

    def fold(i, part):
        pending[i] = part
        while state["next"] in pending:
            acc.add(chunks[state["next"]], pending.pop(state["next"]))
            state["next"] += 1

    # the best-point evaluation compiles in a thread once the chunk kernel is running
    # (tracing both at once would only contend for the interpreter)
    warm = threading.Thread(target=_quietly, args=(warm_best, study, spec), daemon=True)

    # markers are small files written off the main thread (file creation is slow on
    # some file systems); a marker lost to an interrupt only means a recomputed chunk
    marker = ThreadPoolExecutor(max_workers=1)
    marks = []

    def on_done(i, part):
        if warm.ident is None:  # not started yet
            warm.start()
        if partial:
            marks.append(marker.submit(partial.mark, i, part))
        fold(i, part)

    for i in sorted(done):
        fold(i, partial.load(i))
    bar = PointsProgress(progress, study, chunks, done)
    try:
        runner.run(reduce_task, (study, spec), [i for i in range(len(chunks)) if i not in done],
                   on_done, progress=bar)
    finally:
        bar.close()
        marker.shutdown(wait=True)
        if warm.ident is not None:
            warm.join()
    for mark in marks:
        mark.result()  # raise a failed write (e.g. a full disk)
    assert state["next"] == len(chunks), "every chunk is folded"
    return acc.finish()


def _quietly(fn, *args) -> None:
    """A warm-up: its failure costs only time (the real call reports any error)."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001
        pass


def write_grid(study, target: Path, *, resume: bool = False, scheduler: str | None = None,
               workers: int | None = None, progress=None) -> Partial:
    """Stream every output of the grid into the partial zarr store beside ``target``.

    Returns the :class:`Partial` whose ``data`` store is complete (not yet renamed).
    """
    xla.configure()
    evaluator = Evaluator.of(study)
    chunks = plan(study.shape, chunk_budget(study))
    deps = dependencies(study, evaluator)
    runner = Runner(scheduler, resolve_workers(study, workers, scheduler),
                    local_devices(study))
    with runner:
        return _write(study, evaluator, chunks, deps, runner, target, resume, progress)


def _write(study, evaluator, chunks, deps, runner: Runner, target, resume, progress) -> Partial:
    names = evaluator.names
    partial = Partial(target)
    done = partial.open(fingerprint(study, "write", len(chunks)), resume)
    if not done or not (partial.data / ".zgroup").exists():
        done = set()
        create_store(study, evaluator, partial.data, deps, chunks)
    bar = PointsProgress(progress, study, chunks, done)
    try:
        runner.run(write_task, (study, str(partial.data), str(partial.done_dir), names, deps),
                   [i for i in range(len(chunks)) if i not in done], lambda i, r: None,
                   progress=bar)
    finally:
        bar.close()
    missing = set(range(len(chunks))) - partial.done()
    if missing:
        raise RuntimeError(f"chunks {sorted(missing)[:5]} did not complete")
    return partial

"""The search loop: optuna asks a batch of trials, one jitted call evaluates them, optuna
is told the results. Trials live in a real optuna storage (SQLite by default), so a
search resumes where it stopped and several processes can share one study.

Batched mode: each trial is one configuration. Hybrid mode: optuna picks the outer
choices (model, hardware, precision, what-if scales) and each trial sweeps the inner
axes (tp, pp, batch, ...) exhaustively in the same call, reporting its best point.
"""

from __future__ import annotations

import datetime
import sqlite3
from pathlib import Path

import numpy as np
import optuna

from ..core.encoding import trial_point
from ..core.evaluator import Evaluator
from ..errors import InputError
from ..results import select
from ..study.constraints import variables
from ..study.search import STORAGE_ALLOWED, SearchConfig
from ..study.study import Study
from . import constraints as C
from .space import as_python, distributions, pad

optuna.logging.set_verbosity(optuna.logging.WARNING)

INNER_ATTR = "inner"
STALE_AFTER = datetime.timedelta(minutes=10)


def make_sampler(cfg: SearchConfig) -> optuna.samplers.BaseSampler:
    if cfg.sampler == "tpe":
        # constant_liar: trials asked together (a batch) are kept apart (Optuna docs,
        # TPESampler, "parallel optimization").
        # Constraints reach the samplers through Trial.set_constraint (optuna >= 5).
        return optuna.samplers.TPESampler(seed=cfg.seed, multivariate=True, constant_liar=True)
    if cfg.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=cfg.seed)
    if cfg.sampler == "cmaes":
        # CMA-ES takes no constraints: infeasible trials are told their true objective
        # and filtered out of the result.
        return optuna.samplers.CmaEsSampler(seed=cfg.seed)
    return optuna.samplers.RandomSampler(seed=cfg.seed)


def make_storage(url: str):
    """An optuna storage from a database URL, a bare *.db path, a *.log journal file, or
    ":memory:" (nothing kept: notebooks and tests)."""
    if url == ":memory:":
        return optuna.storages.InMemoryStorage()
    if url.endswith((".log", ".journal")) and "://" not in url:
        Path(url).parent.mkdir(parents=True, exist_ok=True)
        backend = optuna.storages.journal.JournalFileBackend(url)
        return optuna.storages.JournalStorage(backend)
    if "://" not in url:
        url = f"sqlite:///{url}"
    path = url.removeprefix("sqlite:///")
    if url.startswith("sqlite:///") and "?" not in path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.RDBStorage(url, engine_kwargs={"creator": lambda: sqlite(path)})
    return optuna.storages.RDBStorage(url)  # other databases, or SQLite with URL options


def sqlite(path: str) -> sqlite3.Connection:
    """A connection to an SQLite study file in write-ahead-log mode.

    SQLite's default rollback journal syncs the disk on every commit, and optuna
    commits several times per trial, so a search would spend much of its time waiting
    for the disk (``docs/search.md`` gives the figure). With a write-ahead log and
    ``synchronous=NORMAL`` (https://www.sqlite.org/wal.html) a commit is an append; the
    disk is synced at checkpoints. The file stays consistent through a crash or power
    loss; a power loss may drop the last trials told, which a resumed search samples
    again. Readers and one writer work at once, so processes sharing the file wait less
    (``timeout``: how long a writer waits for the lock). WAL needs the file on a local
    disk, not NFS.
    """
    con = sqlite3.connect(path, timeout=60, check_same_thread=False)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    return con


def open_study(cfg: SearchConfig, study: Study) -> optuna.Study:
    import sqlalchemy.exc

    try:
        storage = make_storage(cfg.storage)
    except (OSError, ImportError, sqlite3.Error, sqlalchemy.exc.SQLAlchemyError) as err:
        problem = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(study.file, "search.storage", f"cannot open {cfg.storage!r}: {problem}",
                         STORAGE_ALLOWED) from None
    opt = optuna.create_study(storage=storage, study_name=cfg.study_name,
                              directions=list(cfg.directions), sampler=make_sampler(cfg),
                              load_if_exists=True)
    if "dse_study" not in opt.user_attrs:
        opt.set_user_attr("dse_study", study.text)
        opt.set_user_attr("objectives", list(cfg.objectives))
        opt.set_user_attr("constraints", C.names(cfg.constraints))
    fail_stale_trials(opt)
    return opt


def fail_stale_trials(opt: optuna.Study) -> int:
    """Fail the trials a killed process left running.

    dse tells every trial within seconds of asking it, so one still running after
    STALE_AFTER belongs to a process that died (Ctrl-C, kill); it is marked FAIL so the
    study's counts stay true. Returns how many were failed.
    """
    now = datetime.datetime.now()
    stale = [t for t in opt.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
             if t.datetime_start is not None and now - t.datetime_start > STALE_AFTER]
    for t in stale:
        opt._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
    return len(stale)


def _outer_keys(study: Study, cfg: SearchConfig) -> list[str]:
    return [a.name for a in study.dims if a.name not in cfg.inner]


def _choose_inner(values: np.ndarray, violation: np.ndarray, direction: str) -> int:
    """Flat index of the best feasible inner point (:mod:`dse.results.select`), else of
    the least-violating one."""
    best = select.top(select.score(values, np.all(violation <= 0.0, axis=0), direction))
    if len(best):
        return int(best[0])
    return int(np.argmin(np.clip(violation, 0.0, None).sum(axis=0).ravel()))


class Mirror:
    """An in-memory copy of a stored study that the batch loop asks and tells, written
    back to the storage once per batch.

    optuna reads the storage on every ``ask`` (each sampled parameter reads the trials
    again), which for an SQLite study costs most of a search's time. Here the sampler
    reads memory; each batch first takes in the trials that other processes finished
    meanwhile (a shared study stays shared, a batch late) and then adds its own finished
    trials to the storage, which keeps every trial as before. A process killed mid-batch
    leaves nothing of that batch behind (no running trials to fail)."""

    ORIGIN = "dse_origin"

    def __init__(self, opt: optuna.Study):
        import uuid

        self.opt = opt
        self.origin = uuid.uuid4().hex
        self.memory = optuna.create_study(directions=opt.directions, sampler=opt.sampler)
        self.seen: set[int] = set()

    def ask(self, distributions, k: int) -> list:
        """``k`` trials of the in-memory study, which first takes in the finished trials
        of the storage it lacks."""
        new = [t for t in self.opt.get_trials(deepcopy=False)
               if t._trial_id not in self.seen and t.state.is_finished()
               and t.system_attrs.get(self.ORIGIN) != self.origin]
        self.seen.update(t._trial_id for t in new)
        self.memory.add_trials(new)
        trials = [self.memory.ask(distributions) for _ in range(k)]
        for t in trials:
            t.storage.set_trial_system_attr(t._trial_id, self.ORIGIN, self.origin)
        return trials

    def tell(self, trial, values, state) -> None:
        self.memory.tell(trial, values, state=state)

    def push(self, trials: list) -> None:
        """Write the batch's finished trials to the storage: in one transaction where it is
        a database (:func:`write_rdb`), else one by one as optuna adds them."""
        frozen = [self.memory._storage.get_trial(t._trial_id) for t in trials]
        if not write_rdb(self.opt, frozen):
            self.opt.add_trials(frozen)


def write_rdb(opt: optuna.Study, trials: list) -> bool:
    """Add finished ``trials`` to ``opt``'s database storage in one transaction, as rows
    of optuna's own schema (what ``Study.add_trials`` writes), numbered after the study's
    trials; False, writing nothing, where the storage is not a database or optuna's
    schema classes are not where this optuna keeps them.

    ``add_trials`` opens a transaction per trial and, inside it, queries and writes each
    parameter and attribute on its own: 500 trials of six parameters took 10 of a
    search's 17 s (SQLAlchemy's ORM). The study row is locked while the numbers are
    taken, as optuna does, so processes sharing a study still number their trials apart.
    Distributions are not checked against the study's earlier trials: every trial here
    comes from the search's own space."""
    import json

    try:
        from optuna.distributions import distribution_to_json
        from optuna.storages import RDBStorage
        from optuna.storages._cached_storage import _CachedStorage
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session
    except ImportError:
        return False
    storage = opt._storage
    backend = storage._backend if isinstance(storage, _CachedStorage) else storage
    if not isinstance(backend, RDBStorage) or not trials:
        return isinstance(backend, RDBStorage)
    study_id = opt._study_id
    with _create_scoped_session(backend.scoped_session) as session:
        study = models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
        first = models.TrialModel.count(session, study)
        for k, t in enumerate(trials):
            row = models.TrialModel(study_id=study_id, number=first + k, state=t.state,
                                    datetime_start=t.datetime_start,
                                    datetime_complete=t.datetime_complete)
            row.params = [models.TrialParamModel(
                param_name=name, param_value=t.distributions[name].to_internal_repr(value),
                distribution_json=distribution_to_json(t.distributions[name]))
                for name, value in t.params.items()]
            row.values = [models.TrialValueModel(
                objective=i, **dict(zip(("value", "value_type"),
                                        models.TrialValueModel.value_to_stored_repr(v))))
                for i, v in enumerate(t.values or [])]
            row.user_attributes = [models.TrialUserAttributeModel(key=k2, value_json=json.dumps(v))
                                   for k2, v in t.user_attrs.items()]
            row.system_attributes = [models.TrialSystemAttributeModel(
                key=k2, value_json=json.dumps(v)) for k2, v in t.system_attrs.items()]
            session.add(row)
    return True


def run_trials(study: Study, cfg: SearchConfig, opt: optuna.Study, progress=None) -> int:
    """Ask, evaluate and tell ``cfg.n_trials`` trials; returns how many were told (each
    batch asked of an in-memory :class:`Mirror` of ``opt``, stored when told)."""
    outer = _outer_keys(study, cfg)
    dists = distributions(study, outer)
    evaluator = Evaluator.of(study, dict.fromkeys(cfg.objectives + variables(cfg.constraints)))
    constraint_names = C.names(cfg.constraints)
    inner_values = [next(a.values for a in study.dims if a.name == k) for k in cfg.inner]
    inner_shape = tuple(len(v) for v in inner_values)
    told = 0
    mirror = Mirror(opt)
    while told < cfg.n_trials:
        k = min(cfg.batch_size, cfg.n_trials - told)
        trials = mirror.ask(dists, k)
        columns = {key: [as_python(t.params[key]) for t in trials] for key in outer}
        columns = pad(columns, cfg.batch_size)
        out = evaluator(trial_point(study, columns, cfg.inner))
        shape = (cfg.batch_size,) + inner_shape
        out = {n: np.broadcast_to(np.asarray(v), shape) for n, v in out.items()}
        violation = C.violations(cfg.constraints, out)
        for i, trial in enumerate(trials):
            if cfg.inner:
                j = _choose_inner(out[cfg.objectives[0]][i], violation[:, i], cfg.directions[0])
                index = np.unravel_index(j, inner_shape)
                trial.set_user_attr(INNER_ATTR, {key: as_python(vals[x]) for key, vals, x in
                                                 zip(cfg.inner, inner_values, index)})
                values = [float(out[o][i][index]) for o in cfg.objectives]
                cons = [float(v) for v in violation[(slice(None), i) + index]]
            else:
                values = [float(out[o][i]) for o in cfg.objectives]
                cons = [float(v) for v in violation[:, i]]
            for name, value in zip(constraint_names, cons):
                trial.set_constraint(name, value)
            state = None if all(np.isfinite(values)) else optuna.trial.TrialState.FAIL
            mirror.tell(trial, None if state else values, state=state)
        mirror.push(trials)
        told += k
        if progress is not None:
            progress(k)
    return told

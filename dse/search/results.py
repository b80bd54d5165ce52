"""What a search returns: trials as a Dataset, the best feasible point(s), and the
comparison with the exhaustive optimum when the space is a grid a sweep covers.

Only trials whose every constraint value is <= 0 can be best (feasible in the sense of
:mod:`dse.study.constraints`); a search where none is feasible has no best (the CLI says
so and exits with code 3). The exhaustive comparison selects with
:mod:`dse.results.select`, as a reduction or the summary would.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import optuna
import xarray as xr

from ..results import select
from ..run.memory import run
from ..run.sweep import sweep
from ..study.constraints import feasible as is_feasible, variables
from ..study.search import SearchConfig
from ..study.study import Study
from . import constraints as C
from .run import INNER_ATTR
from .space import distributions, enumerable

EXHAUSTIVE_LIMIT = 50_000_000


@dataclasses.dataclass
class SearchResult:
    """A finished (or resumed) search: trials, best point(s), exhaustive comparison."""

    config: SearchConfig
    study: Study
    optuna_study: optuna.Study
    trials: xr.Dataset
    best: list[dict]  # {"trial", "axes", "objectives", "outputs"}; several for a Pareto front
    exhaustive: dict | None
    told: int  # trials this run added

    @property
    def n_trials(self) -> int:
        return int(self.trials.sizes.get("trial", 0))

    @property
    def n_feasible(self) -> int:
        return int(self.trials["feasible"].sum()) if self.n_trials else 0

    def to_json(self) -> dict:
        return {"study": self.study.name, "objectives": list(self.config.objectives),
                "directions": list(self.config.directions),
                "constraints": C.names(self.config.constraints), "n_trials": self.n_trials,
                "n_feasible": self.n_feasible, "trials_this_run": self.told,
                "best": self.best, "exhaustive": self.exhaustive}


def _params(trial: optuna.trial.FrozenTrial) -> dict:
    return dict(trial.params, **trial.user_attrs.get(INNER_ATTR, {}))


def completed(opt: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in opt.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.constraints]


def _feasible(trial) -> bool:
    return all(v <= 0.0 for v in trial.constraints.values())


def trials_dataset(opt: optuna.Study, cfg: SearchConfig, study: Study) -> xr.Dataset:
    trials = completed(opt)
    keys = [a.name for a in study.dims]
    data = {"number": ("trial", [t.number for t in trials])}
    for key in keys:
        values = [_params(t).get(key) for t in trials]
        if any(isinstance(v, str) for v in values):
            column = np.asarray(values, dtype=object).astype(str)
        elif values and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                            for v in values):
            column = np.asarray(values, dtype=np.int64)  # tp = 8, not 8.0
        else:
            column = np.asarray(values, dtype=float)
        data[key] = ("trial", column)
    for i, name in enumerate(cfg.objectives):
        data[name] = ("trial", [t.values[i] for t in trials])
    names = C.names(cfg.constraints)
    data["constraint"] = (("trial", "constraint_name"),
                          np.asarray([[t.constraints[n] for n in names] for t in trials],
                                     float).reshape(len(trials), len(names)))
    data["feasible"] = ("trial", [_feasible(t) for t in trials])
    ds = xr.Dataset(data, coords={"constraint_name": names})
    ds["constraint"].attrs.update(units="1", long_name="constraint value (<= 0: satisfied)")
    ds["feasible"].attrs.update(units="1", long_name="every constraint satisfied")
    ds.attrs.update(study=study.text, optuna_study=cfg.study_name, storage=cfg.storage,
                    objectives=" ".join(cfg.objectives), directions=" ".join(cfg.directions))
    return ds


def _as_min(values, directions) -> np.ndarray:
    signs = np.asarray([-1.0 if d == "maximize" else 1.0 for d in directions])
    return np.asarray(values, float) * signs


def best_trials(opt: optuna.Study, cfg: SearchConfig) -> list[optuna.trial.FrozenTrial]:
    feasible = [t for t in completed(opt) if _feasible(t)]
    if not feasible:
        return []
    values = _as_min([t.values for t in feasible], cfg.directions)
    if not cfg.multi:  # the first best trial, as select.top breaks ties
        return [feasible[int(select.top(-values[:, 0])[0])]]
    keep = select.pareto_mask(values)
    unique: dict[tuple, optuna.trial.FrozenTrial] = {}
    for t, k in zip(feasible, keep):
        if k:  # a sampler may propose one configuration twice: report it once
            unique.setdefault(tuple(sorted(_params(t).items())), t)
    return list(unique.values())


def ranked(result: SearchResult, top: int) -> list[dict]:
    """The ``top`` best feasible configurations, described: the best (or the Pareto
    front), then, for one objective, the next distinct feasible trials in its order."""
    best = list(result.best)
    if len(best) >= top or result.config.multi:
        return best[:top]
    seen = {tuple(sorted(b["axes"].items())) for b in best}
    feasible = [t for t in completed(result.optuna_study) if _feasible(t)]
    feasible.sort(key=lambda t: float(_as_min([t.values], result.config.directions)[0, 0]))
    for t in feasible:
        key = tuple(sorted(_params(t).items()))
        if key not in seen:
            seen.add(key)
            best.append(describe(result.study, t, result.config))
            if len(best) == top:
                break
    return best


def describe(study: Study, trial: optuna.trial.FrozenTrial, cfg: SearchConfig) -> dict:
    """A best trial with every output of its configuration (re-evaluated exactly)."""
    axes = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in _params(trial).items()}
    ds = sweep(study.at(**axes), progress=False)
    outputs = {k: _plain(ds[k].values) for k in ds.data_vars}
    return {"trial": trial.number, "axes": axes,
            "objectives": dict(zip(cfg.objectives, trial.values)), "outputs": outputs}


def _plain(x):
    x = np.asarray(x)
    if x.ndim:
        return x.tolist()
    value = x.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def exhaustive(study: Study, cfg: SearchConfig, found: list[dict]) -> dict | None:
    """The optimum over the whole grid (a sweep and :mod:`dse.results.select`), and the
    search's regret.

    For several objectives: the hypervolumes of the exhaustive and the found Pareto
    fronts, with the reference point at the worst feasible value of each objective.
    """
    if cfg.exhaustive is False:
        return None
    if cfg.exhaustive == "auto" and (not enumerable(distributions(study, [a.name for a in study.dims]))
                                     or study.size > EXHAUSTIVE_LIMIT):
        return None
    names = tuple(dict.fromkeys(cfg.objectives + variables(cfg.constraints)))
    arrays, deps = run(study, names)
    shape = study.shape
    dims = [a.name for a in study.dims]

    def full(name):
        a = arrays[name]
        expand = [slice(None) if d in deps[name] else None for d in dims]
        return np.broadcast_to(a[tuple(expand)] if a.ndim else a, shape)

    ok = np.broadcast_to(is_feasible({n: full(n) for n in names}, cfg.constraints), shape)
    result = {"points": int(np.prod(shape)), "feasible_points": int(ok.sum())}
    if not ok.any():
        return result
    if not cfg.multi:
        objective = full(cfg.objectives[0])
        best = select.top(select.score(objective, ok, cfg.directions[0]))
        if not len(best):
            return result
        index = np.unravel_index(best[0], shape)
        optimum = float(objective[index])
        result.update(optimum=optimum, axes={a.name: _plain(np.asarray(a.values[j]))
                                             for a, j in zip(study.dims, index)})
        if found:
            value = found[0]["objectives"][cfg.objectives[0]]
            sign = select.sign(cfg.directions[0])
            result["regret"] = sign * (optimum - value) / abs(optimum) if optimum else 0.0
        return result
    values = np.stack([full(o)[ok] for o in cfg.objectives], axis=1)
    minimized = _as_min(values, cfg.directions)
    minimized = minimized[np.all(np.isfinite(minimized), axis=1)]
    if not len(minimized):
        return result
    front = minimized[select.pareto_mask(minimized)]
    reference = minimized.max(axis=0)
    total = select.hypervolume(front, reference)
    result.update(front_size=int(len(front)), hypervolume=total)
    if found:
        mine = _as_min([[b["objectives"][o] for o in cfg.objectives] for b in found],
                       cfg.directions)
        result["found_hypervolume"] = select.hypervolume(mine, reference)
        result["hypervolume_ratio"] = result["found_hypervolume"] / total if total else 1.0
    return result

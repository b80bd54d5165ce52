"""``dse.search``: optuna finds the best feasible configurations of a study's space.

    >>> import dse
    >>> result = dse.search("studies/search-serving.toml")   # doctest: +SKIP
    >>> result.best[0]["axes"], result.exhaustive["regret"]    # doctest: +SKIP

(Its imports are inside the function: importing dse stays light.)
"""

from __future__ import annotations

from pathlib import Path


def search(study, *, out: str | Path | None = None, n_trials: int | None = None,
           progress=None):
    """Run ``study``'s ``[search]``: add its trials to the optuna study in its storage.

    The study's ``[axes]`` are the space; ``[search]`` gives objectives, constraints,
    sampler, storage and trials. Re-running resumes (adds trials to the same study);
    processes sharing a storage cooperate. ``n_trials`` overrides the study's count;
    ``out`` (the trials file) places the default storage beside it. Returns a
    :class:`dse.search.results.SearchResult`.
    """
    import dataclasses

    from ..errors import InputError
    from ..run.sweep import default_path
    from ..study.search import storage_url
    from ..study.study import Study, load_study
    from .results import SearchResult, best_trials, describe, exhaustive, trials_dataset
    from .run import open_study, run_trials

    if not isinstance(study, Study):
        study = load_study(study)
    if study.search is None:
        raise InputError(study.file, "[search]", "missing", "a [search] section with an objective")
    results = Path(out) if out is not None else default_path(study)
    cfg = dataclasses.replace(study.search, storage=storage_url(study.search, results))
    if n_trials is not None:
        if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
            raise InputError(study.file, "n_trials", f"value {n_trials!r} is not valid",
                             "an integer >= 1 (the trials to add)")
        cfg = dataclasses.replace(cfg, n_trials=n_trials)
    opt = open_study(cfg, study)
    told = run_trials(study, cfg, opt, progress)
    best = [describe(study, t, cfg) for t in best_trials(opt, cfg)]
    best.sort(key=lambda b: [b["objectives"][o] for o in cfg.objectives])
    return SearchResult(cfg, study, opt, trials_dataset(opt, cfg, study), best,
                        exhaustive(study, cfg, best), told)

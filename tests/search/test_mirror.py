"""The search loop asks an in-memory mirror of the stored study (dse.search.run.Mirror):
every trial still lands in the storage, a resumed search samples with the stored trials,
and processes sharing one study see each other's trials, their own never twice."""

from __future__ import annotations

import optuna

from dse.search.run import Mirror, make_storage

X = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}


def _batch(mirror: Mirror, k: int) -> list:
    trials = mirror.ask(X, k)
    for t in trials:
        mirror.tell(t, [t.params["x"]], None)
    mirror.push(trials)
    return trials


def test_two_processes_share_one_stored_study(tmp_path):
    storage = make_storage(str(tmp_path / "s.db"))
    a = optuna.create_study(storage=storage, study_name="s",
                            sampler=optuna.samplers.RandomSampler(seed=0))
    b = optuna.load_study(storage=storage, study_name="s",
                          sampler=optuna.samplers.RandomSampler(seed=1))
    first, second = Mirror(a), Mirror(b)
    _batch(first, 3)
    assert len(a.get_trials()) == 3  # stored as soon as the batch is told
    _batch(second, 2)
    assert len(second.memory.trials) == 5  # the other's 3, then its own 2
    _batch(first, 1)
    assert len(first.memory.trials) == 6  # its own 3 once, the other's 2, the new one
    stored = a.get_trials()
    assert len(stored) == 6 and all(t.state.is_finished() for t in stored)
    assert sorted(t.values[0] for t in stored) == sorted(
        t.values[0] for t in first.memory.trials)


def test_a_resumed_search_samples_with_the_stored_trials(tmp_path):
    storage = make_storage(str(tmp_path / "s.db"))
    old = optuna.create_study(storage=storage, study_name="s")
    old.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=4)
    again = Mirror(optuna.load_study(storage=storage, study_name="s"))
    _batch(again, 2)
    assert [t.number for t in again.memory.trials] == list(range(6))
    assert len(again.opt.get_trials()) == 6

"""The evaluator's programs kept between processes (dse.core.programs): a kept program
gives the traced path's values bit for bit, and a process that finds it traces nothing."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dse.core import evaluate as E, fusion, programs
from dse.core.evaluator import Evaluator
from dse.core.encoding import trial_point
from dse.run.chunks import chunk_point, plan
from dse.study import parse_study
from tests.helpers import study_text

RNG = np.random.default_rng(27)


def _random_study(dtype: str):
    """A small random inference grid: the models, devices and knobs drawn by the RNG."""
    models = ["llama-3-8b", "llama-2-70b", "mixtral-8x7b", "qwen2.5-7b"]
    devices = ["a100-80gb", "h100-sxm", "mi300x", "l40s"]
    text = study_text(
        model=list(RNG.choice(models, 2, replace=False)),
        hardware=list(RNG.choice(devices, 2, replace=False)),
        batch=sorted(int(b) for b in RNG.choice([1, 4, 16, 64, 256], 3, replace=False)),
        input_len=int(RNG.choice([128, 1000, 4096])), output_len=int(RNG.integers(16, 600)),
        tp=[1, 2], weight_bits=float(RNG.choice([4.0, 8.0, 16.0])),
        hbm_bw_scale=round(float(RNG.uniform(0.5, 2.0)), 3))
    return parse_study(text.replace('name = "t"', f'name = "t"\ndtype = "{dtype}"'),
                       "<test>")


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """Programs kept under a fresh directory, forgotten by this process between calls."""
    monkeypatch.setattr(programs, "directory", lambda: tmp_path / "programs")
    monkeypatch.setattr(programs, "_LOADED", {})
    return tmp_path / "programs"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_kept_program_gives_the_traced_values_bit_for_bit(kept, monkeypatch, dtype):
    study = _random_study(dtype)
    ev = Evaluator.of(study)
    point = chunk_point(study, plan(study.shape, 1 << 20)[0])
    with ev.precision():
        fresh = fusion.jit(ev.traced)(point)  # the same program, compiled the same way
    first = ev(point)  # exported and kept
    assert len(list(kept.glob("*.jaxexport"))) == 1
    # a later process: nothing in memory, and tracing the formulas would fail
    monkeypatch.setattr(programs, "_LOADED", {})
    monkeypatch.setattr(E, "outputs", _no_tracing)
    monkeypatch.setattr(jax.export, "export", _no_tracing)
    again = ev(point)
    for name in ev.names:
        for got in (first[name], again[name]):
            assert np.array_equal(np.asarray(got), np.asarray(fresh[name]), equal_nan=True), name
            assert np.asarray(got).dtype == np.asarray(fresh[name]).dtype


def _no_tracing(*args, **kwargs):
    raise AssertionError("traced although the program was kept")


def _point_cases(dtype: str):
    """A study at fixed values (one point, of rank 3 once its axes are fixed) and a
    vector of 11 trials of a study with axes."""
    text = study_text(model=["llama-3-8b", "mixtral-8x7b"], hardware=["h100-sxm", "l40s"],
                      batch=[1, 8, 64], input_len=1000, output_len=200, tp=[1, 2])
    study = parse_study(text.replace('name = "t"', f'name = "t"\ndtype = "{dtype}"'), "<test>")
    one = study.at(model="mixtral-8x7b", hardware="l40s", batch=8, tp=2)
    point = chunk_point(one, plan(one.shape, 1 << 20)[0])
    columns = {"model": list(RNG.choice(["llama-3-8b", "mixtral-8x7b"], 11)),
               "hardware": ["h100-sxm"] * 11, "batch": list(RNG.choice([1, 8, 64], 11)),
               "tp": [1, 2] * 5 + [1]}
    return (one, point), (study, trial_point(study, {k: [v.item() if hasattr(v, "item")
                                                          else v for v in vs]
                                                      for k, vs in columns.items()}))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_point_and_a_trial_vector_run_in_shared_programs_with_their_own_shapes(
        kept, dtype):
    """dse.core.programs.canonical_point: one point runs as scalars and a vector of trials
    padded to a power of two; the outputs have the shapes and the values the point's own
    program gives (the evaluator is elementwise over the point's axes), and other points
    of the same families load no new program."""
    (one, point), (study, trials) = _point_cases(dtype)
    for s, p in ((one, point), (study, trials)):
        ev = Evaluator.of(s)
        with ev.precision():
            fresh = fusion.jit(ev.traced)(p)
        got = ev(p)
        for name in ev.names:
            a, b = np.asarray(got[name]), np.asarray(fresh[name])
            assert a.shape == b.shape and a.dtype == b.dtype, name
            np.testing.assert_array_equal(a, b, err_msg=name)
    assert len(list(kept.glob("*.jaxexport"))) == 2
    # another single point (its own rank) and a vector of 13 trials: the same programs
    other = study.at(model="mixtral-8x7b", hardware="h100-sxm", batch=64, tp=1)
    Evaluator.of(other)(chunk_point(other, plan(other.shape, 1 << 20)[0]))
    Evaluator.of(study)(trial_point(study, {"model": ["llama-3-8b"] * 13,
                                            "hardware": ["l40s", "h100-sxm"] * 6 + ["l40s"],
                                            "batch": [1, 8, 64] * 4 + [8], "tp": [2] * 13}))
    assert len(list(kept.glob("*.jaxexport"))) == 2

"""A sensitivity's programs are kept like the evaluator's (dse.core.programs.run): the
differentiated evaluation, the regime's sweep and the inverse queries are exported once, give the traced
values bit for bit, and a later process traces nothing."""

import jax
import numpy as np
import pytest

from dse.core import evaluate as E, programs, trace
from dse.sensitivity import sensitivity
from dse.study import parse_study

from ..helpers import study_text

STUDY = study_text(model="llama-2-7b", hardware="h100-sxm", batch=[1, 64], input_len=512,
                   output_len=128) + """[sensitivity]
metrics = ["tpot_s"]
inverse = [{ param = "hbm_bw", goal = "tpot_s <= 0.005" }]
"""


def _no_tracing(*args, **kwargs):
    raise AssertionError("traced although the program was kept")


def _forget(monkeypatch):
    monkeypatch.setattr(programs, "_LOADED", {})
    monkeypatch.setattr(trace, "_CACHE", {})


def test_kept_sensitivity_programs_are_the_traced_ones(tmp_path, monkeypatch):
    study = parse_study(STUDY, "<test>")
    _forget(monkeypatch)
    monkeypatch.setattr(programs, "directory", lambda kind="programs": None)
    traced = sensitivity(study)
    _forget(monkeypatch)
    monkeypatch.setattr(programs, "directory", lambda kind="programs": tmp_path / kind)
    first = sensitivity(study)
    # the differentiated evaluation, the regime's sweep and the one inverse query
    assert len(list((tmp_path / "programs").glob("*.jaxexport"))) == 3
    _forget(monkeypatch)  # a later process, for which tracing would fail
    monkeypatch.setattr(E, "outputs", _no_tracing)
    monkeypatch.setattr(jax.export, "export", _no_tracing)
    monkeypatch.setattr(trace, "function_layout", _no_tracing)
    again = sensitivity(study)
    assert set(first.data_vars) == set(traced.data_vars) == set(again.data_vars)
    assert {"required_scale", "tpot_s", "tpot_s_plus"} <= set(first.data_vars)
    for name in traced.data_vars:
        for got in (first[name], again[name]):
            assert got.dims == traced[name].dims, name
            assert np.array_equal(got.values, traced[name].values,
                                  equal_nan=got.dtype.kind == "f"), name
    assert np.isfinite(first["required_scale"].values).all()
    assert first["tpot_s"].sel(hw_param="hbm_bw").values == pytest.approx(-1.0, abs=0.05)

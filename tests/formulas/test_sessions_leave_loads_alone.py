"""Without session keys every serving study's values are what they were before sessions
(issue 39): an open and a closed loop, dense and MoE, vLLM and SGLang, with and without
prefix caching, against the values the evaluator wrote at commit 61c48b8 (the last one
without dse.formulas.sessions), stored with their studies in
tests/data/load_values_before_sessions.json. The program is the same, so the values are
the same to float32 rounding: 1e-5, since another CPU's vector width rounds differently
(written on an AVX-512 host; on an AVX2-only AMD EPYC, compiled without YNNPACK fusions,
the P99 TTFT of its bisected percentile moves by up to 3.4e-6, the rest by less). A
session term leaking into a request load would move values by far more.

The studies run under the calibration those values were written with
(tests/data/load_values_before_sessions.calibration.toml, the shipped generic fit until
it was refitted on the InferenceX layouts of the silicon rows): a refit moves the
frontend and the step overheads, not the program."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import dse

DATA = Path(__file__).parents[1] / "data"
GOLDEN = json.loads((DATA / "load_values_before_sessions.json").read_text())
CALIBRATION = DATA / "load_values_before_sessions.calibration.toml"


@pytest.mark.parametrize("loop", ["open", "closed"])
def test_a_request_load_is_priced_as_before_sessions(loop):
    text = GOLDEN["studies"][loop].replace(
        "[axes]", f'calibration = "{CALIBRATION.as_posix()}"\n[axes]', 1)
    study = dse.parse_study(text)
    assert "sessions" not in study.features
    ds = dse.sweep(study)
    for name, values in GOLDEN["values"][study.name].items():
        np.testing.assert_allclose(np.asarray(ds[name].values, float).ravel(), values,
                                   rtol=1e-5, equal_nan=True, err_msg=name)

"""``dse plan``: the deployments of a study that serve a request rate at the objectives,
cheapest first; the CLI writes what ``dse.plan`` returns, and every row is checked by
re-evaluating its deployment at and just past the rate it claims."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dse
from dse.cli import main
from dse.core.encoding import trial_point
from dse.core.evaluator import Evaluator
from dse.study.study import load_study

from ..conftest import STUDIES

STUDY = STUDIES / "serving-load.toml"
RATE = 50.0
CONSTRAINTS = ["ttft_p99_s <= 2", "tpot_p90_s <= 0.05"]


@pytest.fixture(scope="module")
def planned():
    return dse.plan(STUDY, RATE, CONSTRAINTS)


def test_cli_writes_what_the_library_returns(planned, tmp_path, capsys):
    out = tmp_path / "plan.csv"
    argv = ["plan", str(STUDY), "--rate", str(RATE), "-o", str(out)]
    for c in CONSTRAINTS:
        argv += ["--constraint", c]
    assert main(argv) == 0
    written = pd.read_csv(out)
    assert list(written.columns) == list(planned.table.columns)
    assert len(written) == len(planned.table) > 0
    for col in planned.table.columns:
        want = planned.table[col].to_numpy()
        if want.dtype.kind in "fi":
            np.testing.assert_allclose(written[col].to_numpy(), want, rtol=1e-6, err_msg=col)
        else:
            assert list(written[col].astype(str)) == list(map(str, want)), col
    assert "deployments can serve it" in capsys.readouterr().out


def _evaluate(study, table, rates):
    cols = {a.name: list(table[a.name]) if a.name in table else [a.values[0]] * len(table)
            for a in study.dims if a.name != "request_rate"}
    cols["request_rate"] = list(rates)
    names = ("valid", "ttft_p99_s", "tpot_p90_s", "n_devices", "capacity_req_s")
    at = study.at(**{a.name: list(a.values) for a in study.dims if a.name != "request_rate"},
                  request_rate=[1.0])
    out = Evaluator.of(at, names=names)(trial_point(at, cols))
    return {k: np.asarray(v) for k, v in out.items()}


def test_each_deployment_meets_the_objectives_up_to_its_rate_and_no_further(planned):
    """Independent of the planner's bookkeeping: replicas = ceil(rate / max rate per
    replica) and devices = replicas x the deployment's devices (tp here), by hand; at 99.9%
    of the claimed rate the objectives hold, and 0.2% of its capacity past it (the
    bisection resolves 2^-14 of capacity) they fail."""
    study = load_study(STUDY)
    t = planned.table
    for _, row in t.iterrows():
        assert row.replicas == math.ceil(RATE / row.max_rate_per_replica_req_s)
        assert row.devices == row.replicas * row.tp
        assert row.rate_per_replica_req_s <= row.max_rate_per_replica_req_s * (1 + 1e-12)
    usd = t.usd_per_hour.to_numpy()  # cheapest first, devices without a price last
    priced = np.isfinite(usd)
    assert np.all(np.diff(usd[priced]) >= 0)
    assert priced.all() or not priced[np.flatnonzero(~priced)[0]:].any()
    inside = _evaluate(study, t, t.max_rate_per_replica_req_s * 0.999)
    assert np.all(inside["valid"])
    assert np.all((inside["ttft_p99_s"] <= 2) & (inside["tpot_p90_s"] <= 0.05))
    past = _evaluate(study, t, t.max_rate_per_replica_req_s + 0.002 * inside["capacity_req_s"])
    fails = ~past["valid"] | (past["ttft_p99_s"] > 2) | (past["tpot_p90_s"] > 0.05)
    assert np.all(fails)


def test_the_studys_slos_are_the_default_objectives():
    """serving-load states ttft_slo_s = 2 and tpot_slo_s = 0.05 and no [search]: without
    --constraint the plan holds every deployment to P99 TTFT <= 2 s and P99 TPOT <= 50 ms
    (MLPerf Inference's server-scenario bounds), says so, and prints its numbers for
    people (no exponent notation)."""
    p = dse.plan(STUDY, RATE)
    assert p.constraints == ("ttft_p99_s <= 2", "tpot_p99_s <= 0.05")
    assert len(p.table) > 0
    assert (p.table["ttft_p99_s"] <= 2.0).all() and (p.table["tpot_p99_s"] <= 0.05).all()
    text = p.summary()
    assert "the study's SLOs, as P99s" in text and "e+0" not in text


def test_a_study_without_objectives_says_its_latencies_are_unbounded():
    study = load_study(STUDY).with_axes(ttft_slo_s=0.0, tpot_slo_s=0.0)
    from dse.search.plan import slo_constraints

    assert slo_constraints(study) == []
    assert slo_constraints(load_study(STUDY)) == ["ttft_p99_s <= 2", "tpot_p99_s <= 0.05"]

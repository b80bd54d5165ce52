"""``dse plan``: the deployments of a study that serve a request rate at the objectives,
cheapest first; the CLI writes what ``dse.plan`` returns, and every row is checked by
re-evaluating its deployment at and just past the rate it claims."""

from __future__ import annotations

import math
from pathlib import Path

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


MIXED = """[study]
name = "disagg-mixed"
[axes]
model = "llama-3.1-70b"
hardware = ["h100-sxm", "h200"]
framework = "vllm"
weight_bits = 8
kv_bits = 8
tp = 8
serving = ["agg", "disagg"]
prefill_workers = [1, 2]
prefill_tp = 4
prefill_hardware = ["h100-sxm", "h200"]
decode_workers = 1
decode_tp = 8
decode_hardware = "h200"
input_len = 4000
output_len = 500
request_rate = 1
ttft_slo_s = 2.0
tpot_slo_s = 0.05
"""


@pytest.fixture(scope="module")
def mixed():
    from dse.study import parse_study

    study = parse_study(MIXED, "<mixed>")
    unlimited = dse.plan(study, 20.0, prices={"h200": 3.5})
    fleet = {"h100-sxm": 16, "h200": 32}
    return study, unlimited, dse.plan(study, 20.0, fleet=fleet, prices={"h200": 3.5}), fleet


def _devices_by_hardware(row) -> dict[str, int]:
    """By hand: an aggregated replica is tp (8) devices of its hardware; a disaggregated
    one prefill_workers x prefill_tp (4) devices of its prefill pool's device and
    decode_workers x decode_tp (8) of H200."""
    if row["serving"] == "agg":
        return {row["hardware"]: 8 * row["replicas"]}
    out = {"h200": 8 * row["replicas"]}
    pre = row["prefill_hardware"] or row["hardware"]
    out[pre] = out.get(pre, 0) + 4 * int(row["prefill_workers"]) * row["replicas"]
    return out


def test_disaggregated_pools_on_their_own_devices_are_priced_by_device(mixed):
    """Every deployment's price per hour, by hand: its devices on each hardware x that
    hardware's price (H100 from the catalogue, H200 as given)."""
    study, unlimited, _, _ = mixed
    h100 = next(c for c in study.hardware if c.name == "h100-sxm").fields["price_per_hour_usd"]
    t = unlimited.table
    assert len(t) and set(t["serving"]) == {"agg", "disagg"}
    for _, row in t.iterrows():
        want = sum(n * (3.5 if hw == "h200" else h100)
                   for hw, n in _devices_by_hardware(row).items())
        assert row["usd_per_hour"] == pytest.approx(want, rel=1e-6)
        assert row["devices"] == sum(_devices_by_hardware(row).values())


def test_the_cheapest_mix_within_a_fleet(mixed):
    """20 requests/s with 16 H100s and 32 H200s on hand: no single deployment's replicas
    fit the fleet, a mix does. Checked independently of the solver: the mix serves the
    rate at the replicas' rates at the objectives, holds within the fleet per device, and
    no mix is cheaper: every other combination of the candidate deployments' replica
    counts within the fleet (enumerated) that serves the rate costs at least as much."""
    study, unlimited, p, fleet = mixed
    mix = p.mix
    assert len(mix) >= 2 and not len(p.table)  # single deployments do not fit
    assert mix["max_rate_req_s"].sum() >= 20.0
    used = {}
    for _, row in mix.iterrows():
        for hw, n in _devices_by_hardware(row).items():
            used[hw] = used.get(hw, 0) + n
    assert all(used[hw] <= fleet[hw] for hw in used)
    # brute force over the unlimited plan's deployments (the same rates per replica)
    cands = unlimited.table
    per = [(r["max_rate_per_replica_req_s"], r["usd_per_hour"] / r["replicas"],
            _devices_by_hardware(dict(r, replicas=1))) for _, r in cands.iterrows()]
    best = math.inf

    def search(i, devs, rate, usd):  # every replica count per deployment the fleet holds
        nonlocal best
        if rate >= 20.0:
            best = min(best, usd)
            return
        if i == len(per):
            return
        r, u, d = per[i]
        c = 0
        while all(devs.get(hw, 0) + c * n <= fleet[hw] for hw, n in d.items()):
            search(i + 1, {hw: devs.get(hw, 0) + c * d.get(hw, 0) for hw in fleet},
                   rate + c * r, usd + c * u)
            c += 1

    search(0, {}, 0.0, 0.0)
    assert mix["usd_per_hour"].sum() == pytest.approx(best, rel=1e-9)


def test_a_fleet_too_small_is_exit_3_and_says_no_deployment_meets(capsys):
    code = main(["plan", MIXED_PATH(), "--rate", "500", "--fleet", "h100-sxm=8",
                 "--fleet", "h200=8"])
    err = capsys.readouterr().err
    assert code == 3
    assert "no deployment of disagg-mixed meets ttft_p99_s <= 2, tpot_p99_s <= 0.05" in err
    assert "within the fleet" in err


def test_bad_fleet_and_price_are_one_line_errors(capsys):
    for argv, said in ((["--fleet", "h100=8"], "--fleet: h100: not a device of the study "
                        "(allowed: h100-sxm, h200)"),
                       (["--fleet", "h200=x"], "--fleet: h200=x: not NAME=VALUE"),
                       (["--fleet", "h200=1.5"], "--fleet: h200=1.5: not NAME=VALUE"),
                       (["--price", "h200=-1"], "--price: h200=-1.0: not a price")):
        assert main(["plan", MIXED_PATH(), "--rate", "5"] + argv) == 2
        assert said in capsys.readouterr().err


_MIXED_FILE = []


def MIXED_PATH() -> str:
    """The mixed study as a file (the CLI reads files), written once per session."""
    if not _MIXED_FILE:
        import tempfile

        path = Path(tempfile.mkdtemp()) / "disagg-mixed.toml"
        path.write_text(MIXED)
        _MIXED_FILE.append(str(path))
    return _MIXED_FILE[0]


def test_slos_no_deployment_meets_are_exit_3_not_millions_of_replicas(tmp_path, capsys):
    """A P99 TTFT objective of 10 ms is under the 4,000-token prefill of Llama-3.1-70B on
    any of the study's layouts (2 x 70e9 x 4,000 = 560 TFLOP per prompt over at most 8
    devices of <= 1,979 dense FP8 TFLOP/s: >= 35 ms): no deployment meets it at any
    rate, so no number of replicas does either."""
    path = tmp_path / "tight.toml"
    path.write_text(MIXED.replace("ttft_slo_s = 2.0", "ttft_slo_s = 0.01"))
    assert main(["plan", str(path), "--rate", "1e9"]) == 3
    captured = capsys.readouterr()
    assert "0 of 16 deployments can serve it" in captured.out
    assert ("no deployment of disagg-mixed meets ttft_p99_s <= 0.01, tpot_p99_s <= 0.05 (the "
            "study's SLOs, as P99s) at 1e+09 requests/s") in captured.err

"""dse plan of agentic sessions (issue 39): deployments sized in sessions/s, choosing the
router and the KV tier, each priced with its tier."""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.errors import InputError

STUDY = """[study]
name = "plan-sessions"
[axes]
model = "llama-3.1-8b"
hardware = "h100-sxm"
framework = "vllm"
session_rate = 1
turns = 20
turn_input_len = 1500
output_len = 200
shared_prefix_len = 2000
think_time_s = 2.0
memory_reserve = 0.7
routing = ["random", "prefix-aware"]
replicas = 2
kv_dram_bytes = [0, 200e9]
kv_dram_bw_bytes_per_s = 55e9
kv_dram_usd_per_gb_h = 0.01
ttft_slo_s = 1.0
"""


def test_a_plan_of_sessions_sizes_sessions_per_second_and_prices_the_tiers():
    study = dse.parse_study(STUDY)
    plan = dse.plan(study, rate=3.0)
    assert plan.unit == "sessions/s" and "3 sessions/s" in plan.summary()
    t = plan.table
    assert len(t) and set(t["routing"]) <= {"random", "prefix-aware"}
    # each deployment serves the rate over its replicas, at or under its own limit
    assert np.all(t["replicas"] * t["max_rate_per_replica_req_s"] >= 3.0 - 1e-9)
    # its price per hour: the devices (2 replicas x 1 H100 at the catalogue's 3.78 USD/h)
    # and the DRAM tier (2 replicas x 200 GB x 0.01 USD/GB-h) of every replica
    per_replica = 2 * 3.78 + np.where(t["kv_dram_bytes"] > 0, 2 * 200 * 0.01, 0.0)
    np.testing.assert_allclose(t["usd_per_hour"], t["replicas"] * per_replica, rtol=1e-4)
    assert list(t["usd_per_hour"]) == sorted(t["usd_per_hour"])


def test_a_closed_loop_of_sessions_is_not_planned():
    study = dse.parse_study(STUDY.replace("session_rate = 1", "sessions = 8"))
    with pytest.raises(InputError, match="session_rate"):
        dse.plan(study, rate=3.0)


def test_an_open_session_load_past_capacity_is_overloaded():
    """Every relaxation of an open session load past the replicas' capacity overloads the
    engine: the point is marked overloaded with no latency (before, it kept the loop's
    blank start: TTFT the frontend alone, throughput 0, marked valid)."""
    ds = dse.sweep(dse.parse_study(STUDY.replace("session_rate = 1", "session_rate = [0.1, 1000]")
                                   .replace('routing = ["random", "prefix-aware"]',
                                            'routing = "prefix-aware"')
                                   .replace("kv_dram_bytes = [0, 200e9]", "kv_dram_bytes = 0")))
    ok, over = (ds.sel(session_rate=r) for r in (0.1, 1000))
    assert bool(ok["valid"]) and np.isfinite(float(ok["ttft_s"]))
    assert not bool(over["valid"])
    assert "overloaded" in dse.schema.reason_names(int(over["reason"]))
    assert np.isnan(float(over["ttft_s"])) and float(over["request_throughput_req_s"]) > 0.0

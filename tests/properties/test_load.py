"""Properties of the serving-under-load model (formulas/load.py): percentiles ordered,
latency non-decreasing in the load, ``overloaded`` exactly past the capacity.

Each example is a random deployment and workload (the oracle tests' family), evaluated at
a ladder of loads in one call (one compiled program for every example).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from dse.schema.outputs import REASON_BITS

from ..oracles.load_points import DENSE, HARDWARE, MOE, evaluate

SHARES = (0.05, 0.2, 0.4, 0.6, 0.8, 0.9, 0.97, 1.0, 1.05)  # of the capacity
CLIENTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@st.composite
def deployments(draw):
    model, tps = draw(st.sampled_from(DENSE + MOE))
    return dict(model=model, tp=draw(st.sampled_from(tps)),
                hardware=draw(st.sampled_from(HARDWARE)),
                weight_bits=draw(st.sampled_from([16, 8])), kv_bits=draw(st.sampled_from([16, 8])),
                framework=draw(st.sampled_from(["vllm", "sglang", "trtllm"])),
                input_len=draw(st.integers(64, 8192)), output_len=draw(st.integers(16, 1024)),
                input_len_cv=draw(st.sampled_from([0.0, 0.5, 1.0])),
                output_len_cv=draw(st.sampled_from([0.3, 1.0])),
                max_num_seqs=draw(st.sampled_from([0, 32, 256])),
                max_num_tokens=draw(st.sampled_from([0, 2048, 8192])),
                prefix_cache_hit=draw(st.sampled_from([0.0, 0.5])))


def _ordered(out, valid):
    for name in ("ttft", "tpot", "e2e"):
        p50, p90, p99 = (out[f"{name}_p{q}_s"][valid] for q in (50, 90, 99))
        assert np.all(p50 <= p90 * (1 + 1e-6)) and np.all(p90 <= p99 * (1 + 1e-6)), name


def _rising(values, rel):
    steps = np.diff(values) / values[:-1]
    return np.all(steps >= -rel), steps.min()


@settings(max_examples=12, deadline=None, derandomize=True)
@given(deployments())
def test_open_loop_properties(row):
    n = len(SHARES)
    capacity, _ = evaluate([row] * n, "request_rate", [1e-3] * n)
    cap = float(capacity["capacity_req_s"][0])
    rates = [s * cap for s in SHARES]
    out, _ = evaluate([row] * n, "request_rate", rates)
    if not capacity["valid"][0]:  # does not fit: nothing to compare
        return
    over = (out["reason"] & REASON_BITS["overloaded"]) != 0
    # past capacity, and short of it only where the prompt server saturates first,
    # within a few percent of it (docs/serving.md)
    shares = np.asarray(SHARES)
    assert np.all(over[shares >= 1.0]) and not np.any(over[shares < 0.9]), over
    below = ~over
    _ordered(out, below)
    # request latency and TPOT rise with the rate (to the fixed point's accuracy); TTFT
    # may dip where the prompt queue's two estimates hand over (docs/serving.md)
    for key, rel in (("e2e_s", 0.03), ("tpot_s", 0.03), ("ttft_s", 0.2)):
        ok, worst = _rising(out[key][below], rel)
        assert ok, (key, worst, row)
    assert np.all(np.isnan(out["ttft_s"][over]))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(deployments())
def test_closed_loop_properties(row):
    n = len(CLIENTS)
    out, _ = evaluate([row] * n, "concurrency", list(CLIENTS))
    if not out["valid"][0]:
        return
    _ordered(out, np.ones(n, bool))
    for key, rel in (("e2e_s", 0.03), ("tpot_s", 0.03), ("ttft_s", 0.2)):
        ok, worst = _rising(out[key], rel)
        assert ok, (key, worst, row)
    assert np.all(out["reason"] & REASON_BITS["overloaded"] == 0)  # a closed loop is never

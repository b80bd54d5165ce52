"""Properties of the serving-under-load model (formulas/load.py): percentiles ordered,
latency non-decreasing in the load, ``overloaded`` exactly past the capacity.

Each example is a random deployment and workload (the oracle tests' family), evaluated at
a ladder of loads in one call (one compiled program for every example).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from dse.schema.outputs import REASON_BITS

from ..oracles.load_points import DENSE, HARDWARE, MOE, evaluate

SHARES = (0.05, 0.2, 0.4, 0.6, 0.8, 0.9, 0.97, 1.0, 1.05)  # of the capacity
CLIENTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@st.composite
def deployments(draw):
    model, tps = draw(st.sampled_from(DENSE + MOE))
    row = _deployment(draw, model, tps)
    # Known defect, pinned by test_sglang_short_prompts_run_away_short_of_capacity below:
    # SGLang's separate prefill with prompts under 1,024 tokens runs away short of the
    # capacity; the property holds elsewhere
    assume(not (row["framework"] == "sglang" and row["input_len"] < 1024))
    return row


def _deployment(draw, model, tps):
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
        ok, worst = _rising(out[key][below & (shares <= 0.9)], rel)
        assert ok, (key, worst, row)
    # Known defect (docs/serving.md, issue 34): between 90% and 97% of the capacity, where
    # the running batch reaches the slots, the mean TPOT can fall by up to ~6% (Llama-3.1-8B
    # tp2 on H100, SGLang, 6k-token prompts: 101 -> 95 ms; not a convergence error: 200
    # relaxations give 87 ms). Checked there at 8%, so a larger fall still fails.
    for key, rel in (("e2e_s", 0.03), ("tpot_s", 0.08), ("ttft_s", 0.2)):
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


@pytest.mark.xfail(strict=True, reason="known defect (docs/serving.md, issue 34): SGLang's "
                   "separate prefill with short prompts runs away short of the capacity")
def test_sglang_short_prompts_run_away_short_of_capacity():
    """Llama-3.1-8B on one H100 under SGLang, 256-token prompts and 16-token outputs, at
    80% of the capacity dse computes: the mean TPOT comes out 25 s (the running batch near
    the slots) where vLLM's step gives 23 ms at the same share. A TPOT under 1 s is what
    any engine below its capacity gives; this test fails (xfail strict) once it does."""
    row = dict(model="llama-3.1-8b", tp=1, hardware="h100-sxm", weight_bits=16, kv_bits=16,
               framework="sglang", input_len=256, output_len=16, input_len_cv=0.0,
               output_len_cv=0.3, max_num_seqs=0, max_num_tokens=0, prefix_cache_hit=0.0)
    capacity, _ = evaluate([row], "request_rate", [1e-3])
    out, _ = evaluate([row], "request_rate", [0.8 * float(capacity["capacity_req_s"][0])])
    assert float(out["tpot_s"][0]) < 1.0

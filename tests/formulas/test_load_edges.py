"""Edges of the load model (dse.formulas.load) on an affine step time, where the answer
is known by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from dse.formulas import load as L
from dse.formulas.serving import node_axes

from ..oracles.serving_sim import simulate

# step(B decoding, P prompt tokens, n chunks) = a + b B + c P seconds
A, B, C = 0.01, 1e-4, 2e-5
BUDGET, SLOTS, PROMPT = 8192.0, 4096.0, 2048.0


def _step(b, p, n):
    return A + B * b + C * p


def _capacity(x64: bool) -> float:
    with jax.enable_x64(x64), node_axes():
        out = jax.jit(lambda: L.serve(
            _step, L.Lengths(PROMPT, 0.0, 1.0, 0.0),
            L.Load(1.0, 0.0, 1.0, SLOTS, BUDGET, 0.0, 0.0), percentiles=False))()
        return float(out["capacity_req_s"])


def test_a_worker_that_only_prefills_has_the_prompt_servers_capacity_in_float32():
    """One output token (a disaggregated prefill worker): nothing decodes, so the
    capacity is the prompt server's. By hand, full steps of M = 8,192 prompt tokens take
    a + c M = 0.174 s, so at most M / ((a + c M) L) = 23.0 requests/s of L = 2,048 tokens;
    the closed loop at every slot keeps the server just short of saturation. float32 once
    searched from n / 1e-30 and overflowed (4e33 requests/s)."""
    bound = BUDGET / ((A + C * BUDGET) * PROMPT)
    f64, f32 = _capacity(True), _capacity(False)
    assert 0.95 * bound <= f64 <= bound
    assert f32 == pytest.approx(f64, rel=1e-5)


def _open(rate: float, x64: bool) -> dict:
    with jax.enable_x64(x64), node_axes():
        out = jax.jit(lambda: L.serve(
            _step, L.Lengths(64.0, 0.0, 1000.0, 0.0),
            L.Load(rate, 0.0, 1.0, SLOTS, BUDGET, 0.0, 0.0), percentiles=False))()
        return {k: float(v) for k, v in out.items()}


@pytest.mark.parametrize("x64", [True, False])
def test_an_open_loop_near_the_decode_limit_reaches_its_fixed_point(x64):
    """Open loop, 999 decode steps per request, 64-token prompts, affine step: the
    running batch solves b = x 999 TPOT(b), and TPOT ~ a + b (b + 1) plus the prompts'
    small share, so by hand b ~ x 999 (a + b) / (1 - x 999 b - x c 64) = 3,380 at 9.6
    requests/s, where each relaxation of the mean field closes only 3% of the gap
    (x 999 b = 0.96): 88 plain relaxations stopped 7.5% short (b = 3,124), each step of
    the loop nearly self-consistent. The bracketed search lands on it (3,378), in either
    precision."""
    rate = 9.6
    out = _open(rate, x64)
    b, tpot = out["running_batch"], out["tpot_s"]
    assert b == pytest.approx(rate * 999.0 * tpot, rel=5e-3)  # self-consistent
    by_hand = rate * 999.0 * (A + B) / (1.0 - rate * 999.0 * B - rate * C * 64.0)
    assert b == pytest.approx(by_hand, rel=0.03)
    assert b < SLOTS and not out["overloaded"]


def test_one_output_token_has_no_inter_token_time_in_any_statistic(tmp_path):
    """Issue 36 row 13: with one output token a request never decodes, so its TPOT is
    undefined and dse's mean says 0; the percentiles said 14 ms and the E2E P99 came out
    below the TTFT P99. By definition E2E = TTFT + decode time per request: with no decode
    every E2E percentile is the TTFT one, and with two tokens each is at least it."""
    import dse

    study = tmp_path / "s.toml"
    study.write_text('[study]\nname = "one"\n[axes]\nmodel = "llama-2-7b"\n'
                     'hardware = "h100-sxm"\ninput_len = 512\noutput_len = [1, 2]\n'
                     'request_rate = 2\n')
    ds = dse.sweep(study, progress=False)
    one, two = ds.sel(output_len=1), ds.sel(output_len=2)
    for q in ("p50", "p90", "p99"):
        assert float(one[f"tpot_{q}_s"]) == float(one["tpot_s"]) == 0.0
        assert float(one[f"e2e_{q}_s"]) == float(one[f"ttft_{q}_s"])
        assert float(two[f"tpot_{q}_s"]) > 0.0
        assert float(two[f"e2e_{q}_s"]) >= float(two[f"ttft_{q}_s"])


def test_a_spread_of_lengths_as_its_own_axis_runs_and_leaves_the_rest_alone():
    """A study whose only axis is the prompts' spread (input_len_cv = [0, 0.5]) under a
    closed loop: the load model's state took its shape from the load alone and the
    lengths' axis broke the solver's loop ("carry input and carry output must have equal
    types"). It runs, and its cv = 0 point is the study without the axis to float32
    rounding (another shape: XLA fuses it otherwise; 2 ulp seen)."""
    import numpy as np

    from dse.run.sweep import sweep
    from dse.study import parse_study

    text = """
[study]
name = "cv"
[axes]
model = "llama-3.1-8b"
hardware = "h100-sxm"
framework = "sglang"
input_len = 1024
output_len = 256
concurrency = 4
{cv}
"""
    spread = sweep(parse_study(text.format(cv="input_len_cv = [0, 0.5]"), "cv.toml"),
                   progress=False)
    fixed = sweep(parse_study(text.format(cv=""), "cv.toml"), progress=False)
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        assert np.allclose(spread[name].sel(input_len_cv=0.0).values, fixed[name].values,
                           rtol=1e-6, atol=0.0), name
        assert np.isfinite(spread[name].values).all()


def _dipping(b, p, n):
    """A decode step slower at batch 1 than at 2 or more (as a measured GEMM table's
    M = 1 can be: dse.formulas.load.fastest_decode_step), affine in the prompt tokens."""
    return 0.008 + jnp.where((b > 0.5) & (b < 1.5), 0.004, 0.0) + C * p


def test_a_closed_loop_whose_batch_one_step_is_slowest_runs_at_its_batch():
    """Four clients on an engine whose decode step at batch 1 (12 ms) is slower than at
    2-4 (8 ms): they decode together at 8 ms steps, as the discrete-event oracle runs
    them (tests/oracles/serving_sim.py, the same step). A throughput bracket taken from
    the batch-1 step alone left the fixed point outside it: x = 4 / (D x 12 ms), and by
    Little's law a third of each cycle spent waiting before the prompt (TTFT 1.0 s where
    the oracle measures 0.019 s)."""
    lengths = L.Lengths(512.0, 0.5, 256.0, 0.5)
    with node_axes():
        out = jax.jit(lambda: L.serve(_dipping, lengths, L.Load(0.0, 4.0, 1.0, 256.0, 8192.0,
                                                                0.0, 0.0),
                                      percentiles=False))()

    def step(decoding, chunks):
        return float(_dipping(decoding, sum(t for t, _ in chunks), len(chunks)))

    sim = simulate(step, input_len=512, output_len=256, input_len_cv=0.5, output_len_cv=0.5,
                   concurrency=4, max_num_seqs=256, max_num_tokens=8192, n_requests=600,
                   warmup=100, seed=3)
    assert float(out["ttft_s"]) == pytest.approx(sim.ttft().mean(), rel=0.25)
    assert float(out["tpot_s"]) == pytest.approx(sim.tpot().mean(), rel=0.05)
    assert float(out["request_throughput_req_s"]) == pytest.approx(sim.throughput_req_s(),
                                                                  rel=0.05)

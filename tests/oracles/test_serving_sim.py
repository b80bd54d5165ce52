"""The serving simulator (the oracle of the serving-under-load model) against queueing
results derived by hand, so that the oracle itself is checked independently."""

from __future__ import annotations

import numpy as np
import pytest

from .serving_sim import simulate


def constant(seconds: float):
    return lambda decoding, chunks: seconds


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_one_request_at_a_time_is_an_md1_queue(rho):
    """One-token requests served one per step of fixed length s (max_num_seqs 1):
    Poisson arrivals at rate lambda make an M/D/1 queue, whose mean wait is
    Wq = rho s / (2 (1 - rho)) (Pollaczek-Khinchine with zero service variance;
    Kleinrock, Queueing Systems Vol. 1, Eq. 5.87); TTFT = Wq + s."""
    s = 0.01
    res = simulate(constant(s), input_len=1, output_len=1, request_rate=rho / s,
                   max_num_seqs=1, n_requests=40_000, warmup=2_000, seed=1)
    wq = rho * s / (2 * (1 - rho))
    assert res.queue().mean() == pytest.approx(wq, rel=0.06)
    assert res.ttft().mean() == pytest.approx(wq + s, rel=0.05)
    assert res.throughput_req_s() == pytest.approx(rho / s, rel=0.03)


def test_closed_loop_obeys_littles_law():
    """c clients, every request one prefill step then L - 1 decode steps of a fixed s,
    all c running at once: each takes L s, so X = c / (L s) (Little's law) and TPOT = s."""
    s, c, L = 0.02, 16, 50
    res = simulate(constant(s), input_len=100, output_len=L, concurrency=c,
                   max_num_seqs=64, max_num_tokens=100_000, n_requests=640, warmup=64)
    assert res.throughput_req_s() == pytest.approx(c / (L * s), rel=0.02)
    np.testing.assert_allclose(res.tpot(), s, rtol=1e-9)
    assert res.mean_running == pytest.approx(c, rel=0.01)


def test_token_budget_chunks_a_long_prompt():
    """A 1,000-token prompt under a 256-token budget takes ceil(1000 / 256) = 4 steps."""
    seen = []

    def step(decoding, chunks):
        seen.append([t for t, _ in chunks])
        return 0.01

    res = simulate(step, input_len=1000, output_len=2, concurrency=1, max_num_tokens=256,
                   n_requests=1, warmup=0, cooldown=0)
    assert seen[:4] == [[256], [256], [256], [232]]
    assert res.ttft()[0] == pytest.approx(0.04)


def test_decode_runs_are_skipped_exactly():
    """Skipping a run of decode-only steps to its next event changes nothing: with
    step = 1 ms + 0.1 ms per decoding sequence, c = 3 clients of 10-token prompts
    (budget 100: one step each, admitted at once) and 50-token outputs, every request
    spends 1 prefill step and 49 decode steps; in steady state all three run together,
    so each decode step takes 1.3 ms and a prefill step (with two decoding) 1.2 ms."""
    def step(decoding, chunks):
        return 1e-3 + 1e-4 * decoding

    res = simulate(step, input_len=10, output_len=50, concurrency=3, max_num_tokens=100,
                   n_requests=300, warmup=30, seed=3)
    # the three clients stay in step: each TPOT is 49 decode steps of 3 sequences
    np.testing.assert_allclose(res.tpot(), 1.3e-3, rtol=1e-6)
    np.testing.assert_allclose(res.ttft(), 1.0e-3, rtol=1e-6)


def test_separate_prefill_steps_decode_nothing():
    """SGLang's policy: a prefill step decodes nothing. One client: its prompt step, then
    9 decode steps alone (TTFT 5 ms, TPOT 2 ms); two clients started together: both
    prompts in the first step, then 9 decode steps, and in steady state each new prompt
    step (5 ms) falls between the other's decode steps."""
    def step(decoding, chunks):
        return 0.005 if chunks else 0.002

    res = simulate(step, input_len=100, output_len=10, concurrency=1, policy="separate",
                   n_requests=20, warmup=2)
    np.testing.assert_allclose(res.ttft(), 0.005)
    np.testing.assert_allclose(res.tpot(), 0.002)
    two = simulate(step, input_len=100, output_len=10, concurrency=2, policy="separate",
                   n_requests=20, warmup=2)
    # the clients stay in step: one prompt step for both, then 9 decode steps together
    np.testing.assert_allclose(two.ttft(), 0.005)
    np.testing.assert_allclose(two.tpot(), 0.002)

"""Closed loops in lock step (dse.formulas.load.lockstep): benchmark clients with fixed
lengths on an engine that prefills apart from decoding (SGLang) run in waves. Checked by
hand on an affine step time and against the discrete-event oracle, which shares only the
step time with the model."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dse.formulas import load as L
from dse.formulas.serving import node_axes

from ..oracles.serving_sim import simulate

# step(B decoding, P prompt tokens, n chunks) = a + b B + c P seconds
A, B, C = 0.005, 1e-4, 2e-6


def _step(b, p, n):
    return A + B * b + C * p


def _sim_step(decoding, chunks):
    return A + B * decoding + C * sum(tokens for tokens, _ in chunks)


def _serve(clients, cv=0.0, separate=1.0, input_len=1024.0, output_len=256.0, budget=8192.0):
    with jax.enable_x64(True), node_axes():
        out = L.serve(_step, L.Lengths(input_len, cv, output_len, cv),
                      L.Load(0.0, float(clients), 1.0, 1024.0, budget, separate, 0.0))
        return {k: float(v) for k, v in out.items() if not callable(v)}


def test_a_wave_of_sixteen_by_hand():
    """c = 16 clients, ISL 1,024, a budget of 8,192 tokens, separate prefill, fixed
    lengths: the wave of 16 x 1,024 tokens takes two full prompt steps of a + c M =
    0.021384 s each. Eight requests have their first token after the first step and
    eight after the second (the wave's whole prefill: TTFT P99), a mean of 1.5 steps =
    0.032076 s. All then decode together at batch 16 (a + 16 b = 6.6 ms a step) for 255
    steps; those done first waited one prompt step before decoding, which their TPOT
    spreads over 255 steps: mean TPOT = 6.6 ms + 0.5 x 0.021384 / 255; every request
    takes the wave plus 255 decode steps (E2E), and the 16 clients complete 16 per E2E."""
    out = _serve(16)
    full = A + C * 8192
    assert out["ttft_s"] == pytest.approx(1.5 * full, rel=1e-9)
    assert out["ttft_p99_s"] == pytest.approx(full + 0.99 * full, rel=1e-9)
    assert out["tpot_s"] == pytest.approx(A + 16 * B + 0.5 * full / 255, rel=1e-9)
    e2e = 2 * full + 255 * (A + 16 * B)
    assert out["e2e_s"] == pytest.approx(e2e, rel=1e-9)
    assert out["request_throughput_req_s"] == pytest.approx(16 / e2e, rel=1e-9)


@pytest.mark.parametrize("clients", [16, 64, 256])
def test_the_oracle_runs_in_waves_at_zero_spread(clients):
    """The simulator's SGLang scheduler with fixed lengths keeps the waves (a mean TTFT of
    about (K + 1) / 2 full prompt steps, 32-345 ms here, where one prompt step is 7 ms);
    the model follows it: mean TTFT and E2E within 3%, TPOT and throughput within 1%."""
    sim = simulate(_sim_step, input_len=1024, output_len=256, concurrency=clients,
                   max_num_seqs=1024, max_num_tokens=8192, policy="separate",
                   n_requests=4 * clients + 512, warmup=2 * clients)
    out = _serve(clients)
    assert out["ttft_s"] == pytest.approx(sim.ttft().mean(), rel=0.03)
    assert out["e2e_s"] == pytest.approx(sim.e2e().mean(), rel=0.03)
    assert out["tpot_s"] == pytest.approx(sim.tpot().mean(), rel=0.01)
    assert out["request_throughput_req_s"] == pytest.approx(sim.throughput_req_s(), rel=0.01)
    assert out["ttft_s"] > 4 * _step(0, 1024, 1)


def test_spread_lengths_dissolve_the_waves_into_the_mean_field():
    """With 10% spread in both lengths the oracle's waves are gone (TTFT about one prompt
    step of 7 ms at 64 clients, not 95 ms): the lock-step share is exp(-25.6), and the
    model's TTFT is the mean field's, within 5% of the oracle."""
    sim = simulate(_sim_step, input_len=1024, output_len=256, concurrency=64,
                   input_len_cv=0.1, output_len_cv=0.1, max_num_seqs=1024,
                   max_num_tokens=8192, policy="separate", n_requests=600, warmup=128)
    out = _serve(64, cv=0.1)
    assert sim.ttft().mean() < 0.02
    assert out["ttft_s"] == pytest.approx(sim.ttft().mean(), rel=0.05)


def test_mixed_chunked_prefill_keeps_the_mean_field():
    """An engine that mixes prompt chunks into decode steps (vLLM, TensorRT-LLM) staggers
    the waves after one cycle: the lock-step share is 0, and the outputs are exactly the
    mean field's (the values at a spread that has dissolved any waves, by continuity, are
    not the test: the share itself is)."""
    with jax.enable_x64(True), node_axes():
        nodes = L._nodes(L.Lengths(1024.0, 0.0, 256.0, 0.0), 0.0, 0)
        mixed = L.lockstep(_step, nodes, L.Lengths(1024.0, 0.0, 256.0, 0.0),
                           L.Load(0.0, 64.0, 1.0, 1024.0, 8192.0, 0.0, 0.0))
        sep = L.lockstep(_step, nodes, L.Lengths(1024.0, 0.0, 256.0, 0.0),
                         L.Load(0.0, 64.0, 1.0, 1024.0, 8192.0, 1.0, 0.0))
        open_loop = L.lockstep(_step, nodes, L.Lengths(1024.0, 0.0, 256.0, 0.0),
                               L.Load(4.0, 0.0, 1.0, 1024.0, 8192.0, 1.0, 0.0))
    assert float(mixed["weight"]) == 0.0
    assert float(sep["weight"]) == 1.0
    assert float(open_loop["weight"]) == 0.0


def test_lockstep_goodput_reads_the_waves():
    """The TTFT CDF under lock step is the wave's: uniform between the first prompt
    step's end and the wave's (here 21.4 and 42.8 ms), so an objective of 30 ms is met
    by (30 - 21.4) / 21.4 = 40% of requests."""
    with jax.enable_x64(True), node_axes():
        out = L.serve(_step, L.Lengths(1024.0, 0.0, 256.0, 0.0),
                      L.Load(0.0, 16.0, 1.0, 1024.0, 8192.0, 1.0, 0.0))
        full = A + C * 8192
        share = float(out["ttft_cdf"](np.float64(0.030)))
    assert share == pytest.approx((0.030 - full) / full, rel=1e-9)

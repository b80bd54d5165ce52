"""Attention data parallelism under load (dse.formulas.load, ``ranks``): the dp ranks of
an MoE model whose experts span them each run their own share of the clients, but run
every step together, so a rank's decodes wait on every rank's prompt work, and with
TensorRT-LLM's context balancing (``balance``) prompts wait for every rank to have one.
Checked
against the discrete-event oracle (tests/oracles/serving_sim.py, ``ranks``: one queue
and scheduler per rank, each step as long as the slowest rank's), which shares only the
step time with the model, and the per-rank load of a study's layout by hand."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dse.core.encoding import trial_point
from dse.core.evaluate import serving_replica
from dse.core.evaluator import Evaluator
from dse.formulas import load as L
from dse.formulas.serving import node_axes
from dse.study.study import parse_study_dict

from ..oracles.serving_sim import simulate

# step(B decoding, P prompt tokens, n chunks) = a + b B + c P seconds
A, B, C = 0.005, 1e-4, 2e-6
ISL, OSL, CV = 1024, 256, 0.5


def _step(b, p, n):
    return A + B * b + C * p


def _sim_step(decoding, chunks):
    return A + B * decoding + C * sum(tokens for tokens, _ in chunks)


def _model(ranks, separate, clients, balance=0.0):
    with jax.enable_x64(True), node_axes():
        out = L.serve(_step, L.Lengths(float(ISL), CV, float(OSL), CV),
                      L.Load(0.0, float(clients), 1.0, 1024.0, 8192.0, separate, 0.0,
                             float(ranks), balance))
        return {k: float(v) for k, v in out.items() if not callable(v)}


def _oracle(ranks, policy, clients, balance=0):
    return simulate(_sim_step, input_len=ISL, output_len=OSL, concurrency=clients,
                    input_len_cv=CV, output_len_cv=CV, policy=policy, ranks=ranks,
                    balance=balance, n_requests=3000, warmup=max(1000, 3 * clients * ranks),
                    seed=7)


@pytest.mark.parametrize("policy,clients", [("mixed", 16), ("separate", 64)])
def test_ranks_in_lock_step_against_the_oracle(policy, clients):
    """1,024-token prompts and 256-token outputs (cv 0.5), 16 or 64 clients per rank, on
    1 and 8 ranks. On 8 ranks a rank's decodes meet the prompt steps of all eight, and a
    step lasts as the longest of the ranks' (the expected largest of R draws): the
    oracle's mean TPOT rises by 0.7 ms (mixed prefill, 16 clients: 10%) or 0.9 ms
    (separate prefill steps, 64 clients, where the other ranks' prompt steps lengthen
    its decode steps); the model's rise is within 20% of the oracle's; its mean TPOT,
    running batch per rank and throughput within 2% (measured: 1.5% at most), its P90
    TPOT within 6% (4.8%) and mean TTFT within 5% (2%; the longest of the ranks' prompt
    steps at once makes the oracle's TTFT 1.5x the uncoupled model's at 64 separate)."""
    separate = 1.0 if policy == "separate" else 0.0
    one, eight = _model(1, separate, clients), _model(8, separate, clients)
    sim_one, sim_eight = _oracle(1, policy, clients), _oracle(8, policy, clients)
    rise = sim_eight.tpot().mean() - sim_one.tpot().mean()
    assert rise > 0.02 * sim_one.tpot().mean()  # the coupling is there to be modelled
    assert eight["tpot_s"] - one["tpot_s"] == pytest.approx(rise, rel=0.2)
    for ranks, out, sim in ((1, one, sim_one), (8, eight, sim_eight)):
        assert out["tpot_s"] == pytest.approx(sim.tpot().mean(), rel=0.02)
        assert out["running_batch"] == pytest.approx(sim.mean_running, rel=0.02)
        assert out["request_throughput_req_s"] * ranks == pytest.approx(
            sim.throughput_req_s(), rel=0.02)
        assert out["tpot_p90_s"] == pytest.approx(np.percentile(sim.tpot(), 90), rel=0.06)
        assert out["ttft_s"] == pytest.approx(sim.ttft().mean(), rel=0.05)


def test_balanced_contexts_against_the_oracle():
    """TensorRT-LLM's context balancing (timeout 60 steps) on 8 ranks of 16 clients
    (mixed prefill): a prompt waits for every rank to have one or for the 60-step
    release, about half of 60 steps here (the oracle: 164 ms, where unbalanced 9 ms);
    the ranks' prompt steps coincide. The model's mean TTFT within 10% (measured 8.6%),
    TPOT and throughput within 3% (2.2%, 0.2%). Its running batch counts the decoding
    sequences, the oracle's the admitted ones, the held prompts too: not compared."""
    out, sim = _model(8, 0.0, 16, 60.0), _oracle(8, "mixed", 16, 60)
    assert sim.ttft().mean() > 10 * _oracle(8, "mixed", 16).ttft().mean()
    assert out["ttft_s"] == pytest.approx(sim.ttft().mean(), rel=0.1)
    assert out["tpot_s"] == pytest.approx(sim.tpot().mean(), rel=0.03)
    assert out["request_throughput_req_s"] * 8 == pytest.approx(sim.throughput_req_s(),
                                                                rel=0.03)


def test_one_rank_is_the_replica_model_bit_for_bit():
    """ranks = 1 is the model without attention-DP, exactly."""
    with jax.enable_x64(True), node_axes():
        lengths = L.Lengths(float(ISL), CV, float(OSL), CV)
        a = L.serve(_step, lengths, L.Load(0.0, 16.0, 1.0, 1024.0, 8192.0, 0.0, 0.0))
        b = L.serve(_step, lengths, L.Load(0.0, 16.0, 1.0, 1024.0, 8192.0, 0.0, 0.0, 1.0))
        for k in ("ttft_s", "tpot_s", "tpot_p99_s", "request_throughput_req_s"):
            assert float(a[k]) == float(b[k])


def test_each_rank_runs_its_share_of_the_clients():
    """Qwen3-30B-A3B at 64 clients on tp 1: with dp 8 and the experts over the eight
    ranks (ep 8) each rank has 64 / 8 = 8 clients and runs in lock-step with the other
    seven (ranks 8); dp 8 without expert parallelism is eight independent replicas of 8
    clients (ranks 1), as is a dense model's dp (Llama-3.1-8B, ep ignored)."""
    study = parse_study_dict({"study": {"name": "adp"}, "axes": {
        "model": ["qwen3-30b-a3b", "llama-3.1-8b"], "hardware": ["h100-sxm"], "tp": [1],
        "dp": [1, 8], "ep": [1, 8], "concurrency": [64], "input_len": [1024],
        "output_len": [256]}}, "", "<adp>")
    cols = {"model": ["qwen3-30b-a3b"] * 3 + ["llama-3.1-8b"], "hardware": ["h100-sxm"] * 4,
            "tp": [1] * 4, "dp": [8, 8, 1, 8], "ep": [8, 1, 1, 8], "concurrency": [64] * 4,
            "input_len": [1024] * 4, "output_len": [256] * 4}
    ev = Evaluator.of(study, names=("ttft_s",))
    with ev.precision():
        _, ld, _ = jax.jit(serving_replica, static_argnames="features")(
            trial_point(study, cols), ev.models, ev.hardware, features=study.features)
    np.testing.assert_array_equal(np.broadcast_to(ld.clients, (4,)), [8, 8, 64, 8])
    np.testing.assert_array_equal(np.broadcast_to(ld.ranks, (4,)), [8, 1, 1, 1])


def test_the_largest_of_independent_draws_by_hand():
    """Two draws, each 1 or 2 with equal odds: the largest is 1 only when both are,
    P = 1/4, so E[max] = 1/4 + 2 x 3/4 = 1.75 and E[max^2] = 1/4 + 4 x 3/4 = 3.25. Two
    draws present with probability 1/2 each, always 1 when present: the largest is 1
    with probability 1 - 1/4, E = 0.75. E[max(1.5, Y)] for the first Y: 1.5 + 3/4 x 0.5."""
    from dse.formulas import queueing as q
    v, w = np.array([1.0, 2.0]), np.array([0.5, 0.5])
    mean, square = q.largest_moments(v, w, [(1.0, 2.0)])
    assert (float(mean), float(square)) == pytest.approx((1.75, 3.25))
    assert float(q.largest_moments(np.array([1.0]), np.array([1.0]), [(0.5, 2.0)])[0]) == \
        pytest.approx(0.75)
    # two groups of one draw each are the same as one group of two
    mixed = q.largest_moments(v, w, [(1.0, 1.0), (1.0, 1.0)])[0]
    assert float(mixed) == pytest.approx(1.75)
    assert float(q.at_least(1.5, v, q.largest_mass(w, [(1.0, 2.0)]))) == pytest.approx(1.875)

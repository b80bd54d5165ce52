"""A closed-loop benchmark run of N requests from a cold start (study key ``num_prompts``;
dse.formulas.load.lockstep): ``vllm bench serve --num-prompts N --max-concurrency c
--request-rate inf`` and InferenceX's ``benchmark_serving.py`` (N = 10 c, lengths uniform
from 0.8 x to x) start every client at once on an idle engine. The first wave's prompts,
c of the N requests, queue behind each other, whatever the engine and the spread of the
lengths; the rest run as the steady state. Checked by hand on an affine step time and
against the discrete-event oracle (tests/oracles/serving_sim.py), which runs the
benchmark itself: every client at t = 0, N requests, each one measured, the lengths the
benchmark draws."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dse.formulas import disagg
from dse.formulas import load as L
from dse.formulas.serving import node_axes

from ..oracles.serving_sim import simulate

# step(B decoding, P prompt tokens, n chunks) = a + b B + c P + d n seconds
A, B, C, D = 0.015, 5e-5, 2e-5, 5e-4


def _step(b, p, n):
    return A + B * b + C * p + D * n


def _sim_step(decoding, chunks):
    return A + B * decoding + C * sum(tokens for tokens, _ in chunks) + D * len(chunks)


def _serve(clients, prompts, separate, input_len, output_len, cv, budget):
    """The load model at these points (arrays broadcast), float64."""
    with jax.enable_x64(True), node_axes():
        f = jnp.asarray
        out = L.serve(_step, L.Lengths(f(input_len), f(cv), f(output_len), f(cv)),
                      L.Load(0.0 * f(clients), f(clients), 1.0, 1024.0, f(budget), f(separate),
                             0.0, prompts=f(prompts)))
        return {k: np.asarray(v) for k, v in out.items() if not callable(v)}


def test_a_mixed_engines_first_wave_by_hand():
    """64 clients, N = 640, prompts of 2,000 tokens, a budget of 8,192, chunked prefill
    mixed into decode steps (vLLM), fixed lengths. The first wave's 128,000 prompt tokens
    need 16 steps without decodes (15.6); its steps decode the prompts done, 64 / 2 x 15 /
    16 = 30 on average, leaving 8,162 tokens for prompts: still 16 steps, 15 full
    (a + 30 b + 8,162 c + 4.081 chunks' d = 0.1817805 s: 8,162 / 2,000 prompts a step)
    and a last of 128,000 - 15 x 8,162 = 5,570 tokens (0.1292925 s). Wave = 2.856 s;
    the first prompt is done after one step (first = wave / 16), the mean of the wave
    (first + wave) / 2. One request in ten is in it: the run's mean TTFT is 0.1 x that +
    0.9 x the steady state's (the same point with N = 0), and its P99 the wave's 90th
    percentile, first + 0.9 (wave - first), where the steady state's TTFT is long done."""
    run = _serve(64.0, 640.0, 0.0, 2000.0, 256.0, 0.0, 8192.0)
    steady = _serve(64.0, 0.0, 0.0, 2000.0, 256.0, 0.0, 8192.0)
    full = A + 30 * B + 8162 * C + 8162 / 2000 * D
    last = A + 30 * B + 5570 * C + 5570 / 2000 * D
    wave = 15 * full + last
    first = wave / 16
    assert wave == pytest.approx(2.856, rel=1e-9)
    assert float(run["ttft_s"]) == pytest.approx(
        0.1 * 0.5 * (first + wave) + 0.9 * float(steady["ttft_s"]), rel=1e-9)
    assert float(steady["ttft_p99_s"]) < 0.1 * wave
    assert float(run["ttft_p99_s"]) == pytest.approx(first + 0.9 * (wave - first), rel=1e-4)


def test_without_num_prompts_nothing_changes():
    """N = 0 is the steady state: the outputs are those of a load without the key (a
    mixed engine's share of lock step is 0, a separate engine's at zero spread 1)."""
    with jax.enable_x64(True), node_axes():
        for separate in (0.0, 1.0):
            base = L.serve(_step, L.Lengths(1024.0, 0.0, 256.0, 0.0),
                           L.Load(0.0, 32.0, 1.0, 1024.0, 8192.0, separate, 0.0))
            keyed = L.serve(_step, L.Lengths(1024.0, 0.0, 256.0, 0.0),
                            L.Load(0.0, 32.0, 1.0, 1024.0, 8192.0, separate, 0.0, prompts=0.0))
            for k, v in base.items():
                if not callable(v):
                    assert float(keyed[k]) == float(v), k


# (clients, policy, stated ISL): the benchmark's OSL is 1,024, lengths uniform from 0.8 x
CASES = [(c, policy, isl) for c in (16, 64, 256) for policy in ("mixed", "separate")
         for isl in (1024, 8192)]


def _uniform(length):
    """Mean and coefficient of variation of uniform integers int(0.8 x) .. x."""
    lo = int(0.8 * length)
    return 0.5 * (lo + length), math.sqrt(((length - lo + 1) ** 2 - 1) / 12.0) / (
        0.5 * (lo + length))


@pytest.fixture(scope="module")
def runs():
    """The oracle's benchmark runs and the model's, at every case (one model call)."""
    sims, cols = [], {k: [] for k in ("clients", "prompts", "separate", "input_len",
                                      "output_len", "cv", "budget")}
    for clients, policy, isl in CASES:
        budget = 8192 if policy == "mixed" else 16384
        sims.append(simulate(_sim_step, input_len=isl, output_len=1024, concurrency=clients,
                             range_ratio=0.8, max_num_seqs=1024, max_num_tokens=budget,
                             policy=policy, n_requests=10 * clients, warmup=0, cooldown=0,
                             seed=clients))
        (inp, cv), (out, _) = _uniform(isl), _uniform(1024)
        for k, v in dict(clients=clients, prompts=10 * clients,
                         separate=float(policy == "separate"), input_len=inp,
                         output_len=out, cv=cv, budget=budget).items():
            cols[k].append(float(v))
    return sims, _serve(**{k: np.asarray(v) for k, v in cols.items()})


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"c{c}-{p}-{i}" for c, p, i in CASES])
def test_the_oracle_runs_the_benchmark_and_the_model_follows(runs, i):
    """Every client at t = 0, 10 x c requests, lengths uniform from 0.8 x (InferenceX's
    runs): the oracle's mean TTFT is 1.7-10x the steady state's here (the first wave's
    c x 0.9 ISL prompt tokens queue behind each other), and the model follows: mean TTFT
    within 6%, TPOT within 3%, the P99 (in the first wave) within 10% (measured: mean
    TTFT 0.3-3.5%, TPOT 0-1.5%, P99 0.5-8.3%). The P90 sits at the edge between the
    first wave and the rest and is not asserted: the second wave is not yet the steady
    state (the oracle's P90 is up to 4.3x the model's at 256 clients, 8,192-token
    prompts, mixed prefill)."""
    sims, out = runs
    sim = sims[i]
    ttft = sim.ttft()
    assert float(out["ttft_s"][i]) == pytest.approx(ttft.mean(), rel=0.06)
    assert float(out["tpot_s"][i]) == pytest.approx(sim.tpot().mean(), rel=0.03)
    assert float(out["ttft_p99_s"][i]) == pytest.approx(np.percentile(ttft, 99), rel=0.10)


# An engine that prefills apart from decoding (SGLang) at 256 clients: the first wave's
# requests finish within 0.2 x OSL steps of each other and return nearly together, so the
# next few waves still bunch (their prompts share prefill steps and stall the decodes);
# the model's steady state is the mean field, whose P50 is 0.7x and 0.6x the oracle's
# there. A known gap (the means are within 4%: the bunching is a few percent of them).
_BUNCHED = {i for i, (c, p, _) in enumerate(CASES) if c == 256 and p == "separate"}


@pytest.mark.parametrize("i", [pytest.param(i, marks=pytest.mark.xfail(
    strict=True, reason="later waves still bunch on a separate-prefill engine")) if i in
    _BUNCHED else i for i in range(len(CASES))], ids=[f"c{c}-{p}-{i}" for c, p, i in CASES])
def test_the_median_is_the_steady_states(runs, i):
    """Nine requests in ten are past the first wave: the P50 is the steady state's,
    within 10% of the oracle's (measured 0-3% outside the known gap above)."""
    sims, out = runs
    assert float(out["ttft_p50_s"][i]) == pytest.approx(np.percentile(sims[i].ttft(), 50),
                                                        rel=0.10)


def test_the_burst_is_most_of_a_benchmarks_ttft_at_many_clients(runs):
    """The effect the key exists for: at 256 clients the oracle's benchmark TTFT is more
    than 5x the model's steady state (N = 0) at every case, the prompts 0.9 x ISL long."""
    sims, _ = runs
    idx = [i for i, (c, _, _) in enumerate(CASES) if c == 256]
    cols = {k: [] for k in ("clients", "prompts", "separate", "input_len", "output_len",
                            "cv", "budget")}
    for i in idx:
        _, policy, isl = CASES[i]
        (inp, cv), (out, _) = _uniform(isl), _uniform(1024)
        for k, v in dict(clients=256, prompts=0, separate=float(policy == "separate"),
                         input_len=inp, output_len=out, cv=cv,
                         budget=8192 if policy == "mixed" else 16384).items():
            cols[k].append(float(v))
    steady = _serve(**{k: np.asarray(v) for k, v in cols.items()})
    for j, i in enumerate(idx):
        assert sims[i].ttft().mean() > 5.0 * float(steady["ttft_s"][j])


def test_a_disaggregated_runs_first_wave_at_the_prefill_pool():
    """64 clients over 4 prefill workers of 0.1 s a prompt, N = 640: one request in ten
    is in the first wave, 16 prompts at each worker, its own anywhere among them (a wait
    uniform on 0 .. 1.5 s, mean 0.75 s); the rest wait the steady state's 0.02 s. Mean
    0.1 x 0.75 + 0.9 x 0.02 = 0.093 s; the P99 is the first wave's 90th percentile, 1.35 s,
    where the steady wait (rho 0.2: P(W > t) = 0.2 exp(-0.2 t / 0.02)) is long done."""
    with jax.enable_x64(True):
        mean, (p50, p90, p99) = disagg.burst_queue(
            jnp.float64(64.0), jnp.float64(640.0), 4.0, 0.1, jnp.float64(0.02), jnp.float64(0.2))
        steady, (s50, s90, s99) = disagg.burst_queue(
            jnp.float64(64.0), jnp.float64(0.0), 4.0, 0.1, jnp.float64(0.02), jnp.float64(0.2))
    assert float(mean) == pytest.approx(0.1 * 0.75 + 0.9 * 0.02, rel=1e-12)
    assert float(p99) == pytest.approx(1.35, rel=1e-5)
    assert float(steady) == 0.02
    assert float(s99) == pytest.approx(0.02 / 0.2 * math.log(0.2 / 0.01), rel=1e-12)
    assert float(s50) == 0.0 and float(p50) == pytest.approx(0.0, abs=1e-9)

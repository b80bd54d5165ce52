"""Agentic sessions and KV tiers (dse.formulas.sessions) against the session oracle.

Random points (tests/oracles/session_points.py): Llama-3.1-8B, Qwen3-32B and
Llama-3.1-70B on H100 and H200 under vLLM and SGLang, 1, 2 or 4 replicas behind each
router, 2-12 turns (fixed or spread), 64-2048 new tokens and 16-256 output tokens a turn
(spread), shared prefixes of 0-2048 tokens, think times of 0 or 0.2-20 s, 20-90% of
the device left for the KV cache, DRAM tiers of 2-200 GB on PCIe-class links or none.
Closed loops of 1-24 sessions per replica, or open session rates at 10-70% of the
deployment's turn capacity.

The oracle (tests/oracles/session_sim.py) runs the same engine step with explicit
sessions, think times, router and LRU caches. The closed forms should match its hit
rates within 5 points and its mean TTFT within 15%. Measured here (seed 2026, 150 draws:
129 points that fit, 78 of them closed loops): hit rates within 5 points at 95% of the
points, mean TTFT median |error| 4.0% and within 15% at 80%. The misses are closed
loops without think time at high load (a finite-source loop whose turns are treated as
Poisson queues too much: +40%) and loads near the HBM's limit, where the caches are
bistable (the oracle may sit in the state where running requests have evicted the idle
copies: its hit rate 20-45 points under the closed forms'). The assertions keep a small
margin under those shares.
"""

from __future__ import annotations

import numpy as np

from .session_points import draw, evaluate, simulated

DRAWS = 150


def _compare(rows, key, loads):
    out, replica = evaluate(rows, key, loads)
    hit, ttft = [], []
    for i, row in enumerate(rows):
        if not out["valid"][i]:
            continue
        sim = simulated(row, replica, i, {key: loads[i]}, n_turns=1000)
        hit.append(out["prefix_hit_rate"][i] - sim.prefix_hit)
        ttft.append(out["ttft_s"][i] / sim.ttft.mean() - 1.0)
    return np.abs(hit), np.abs(ttft)


def test_sessions_against_the_oracle():
    rows = draw(2026, DRAWS)
    closed = [r for r in rows if r["closed"]]
    opened = [r for r in rows if not r["closed"]]
    clients = [max(1, int(round(np.exp(r["load"] * np.log(24)) * r["replicas"])))
               for r in closed]
    hit_c, ttft_c = _compare(closed, "sessions", clients)
    probe, _ = evaluate(opened, "session_rate", [1e-4] * len(opened))
    rates = [float(np.float32(max(1e-3, (0.1 + 0.6 * r["load"]) * probe["capacity_req_s"][i]
                                  / r["turns"]))) for i, r in enumerate(opened)]
    hit_o, ttft_o = _compare(opened, "session_rate", rates)
    hit, ttft = np.concatenate([hit_c, hit_o]), np.concatenate([ttft_c, ttft_o])
    text = (f"{len(hit)} points ({len(hit_c)} closed): hit rate within 5 points at "
            f"{np.mean(hit <= 0.05):.0%} (max {hit.max():.3f}); mean TTFT median |error| "
            f"{np.median(ttft):.3f}, within 15% at {np.mean(ttft <= 0.15):.0%}")
    print(text)
    assert len(hit) >= 100, text
    assert np.mean(hit <= 0.05) >= 0.93, text
    assert np.median(ttft) <= 0.05, text
    assert np.mean(ttft <= 0.15) >= 0.78, text

"""The session oracle against cases derived by hand, so that the oracle is checked
independently of the closed forms it judges."""

from __future__ import annotations

import pytest

from .session_sim import simulate_sessions


def constant(seconds: float):
    return lambda decoding, chunks: seconds


def test_one_session_with_room_for_everything_finds_every_earlier_turn():
    """T = 4 turns, u = 100, o = 50, HBM unbounded: turn n + 1 finds n x 150 tokens of
    its n x 150 + 100 (the session, alone, is never evicted): 900 / 1300 of the tokens.
    A shared prefix of 1000 counts in every turn: 4900 / 5300."""
    res = simulate_sessions(constant(0.01), sessions=1, turns=4, turn_input=100,
                            output_len=50, n_turns=400, warmup=40)
    assert res.hbm_hit == pytest.approx(900 / 1300, abs=0.01)
    shared = simulate_sessions(constant(0.01), sessions=1, turns=4, turn_input=100,
                               output_len=50, shared_prefix=1000, n_turns=400, warmup=40)
    assert shared.hbm_hit == pytest.approx(4900 / 5300, abs=0.01)


@pytest.mark.parametrize("k", [2, 4])
def test_random_routing_finds_the_last_turn_on_one_replica_in_k(k):
    """Two turns a session, the second on the first's replica with probability 1 / k:
    (1 / k) x 150 / 350 of the tokens; affinity always: 150 / 350."""
    res = simulate_sessions(constant(0.01), sessions=8, replicas=k, routing="random",
                            turns=2, turn_input=100, output_len=50, n_turns=6000,
                            warmup=200, seed=k)
    assert res.hbm_hit == pytest.approx(150 / 350 / k, abs=0.015)
    sticky = simulate_sessions(constant(0.01), sessions=8, replicas=k,
                               routing="session-affinity", turns=2, turn_input=100,
                               output_len=50, n_turns=2000, warmup=200)
    assert sticky.hbm_hit == pytest.approx(150 / 350, abs=0.01)


def test_a_prefix_only_in_dram_is_reloaded_at_the_links_rate():
    """No HBM for idle copies (just the running request), DRAM for all: one session of
    two turns with 1 s think times reloads the first turn's 150 tokens at 1 ms a token
    (faster than recomputing at 2 ms): 0.15 s on the second turn, none on the first, so
    0.075 s a turn; its TTFT is the reload plus one 10 ms step."""
    res = simulate_sessions(constant(0.01), sessions=1, turns=2, turn_input=100,
                            output_len=50, think_s=1.0, hbm_tokens=0, dram_tokens=1e9,
                            dram_s_per_token=1e-3, recompute_s_per_token=2e-3,
                            n_turns=400, warmup=20)
    assert res.hbm_hit == pytest.approx(0.0, abs=1e-9)
    assert res.dram_hit == pytest.approx(150 / 350, abs=0.01)
    assert res.reload.mean() == pytest.approx(0.075, abs=0.005)
    assert res.ttft.mean() == pytest.approx(0.075 + 0.01, abs=0.005)
    slower = simulate_sessions(constant(0.01), sessions=1, turns=2, turn_input=100,
                               output_len=50, think_s=1.0, hbm_tokens=0, dram_tokens=1e9,
                               dram_s_per_token=3e-3, recompute_s_per_token=2e-3,
                               n_turns=200, warmup=20)
    assert slower.dram_hit == 0.0  # recomputed

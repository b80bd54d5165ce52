"""Agentic sessions and KV tiers (dse.formulas.sessions) against cases derived by hand.

Units in every case: a session of T turns, u new tokens and o output tokens per turn
(g = u + o the context a turn adds), shared prefix s; turn n + 1 (n = 0 .. T - 1) sends
P_n = s + n g + u tokens. Sums used below: sum_n n = T (T - 1) / 2.
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
import pytest

from dse.formulas import sessions

U, O, T = 100.0, 50.0, 4.0
G = U + O
KAPPA = 1e5  # KV bytes per token per device
BIG = 1e18


def ses(**kw) -> sessions.Sessions:
    base = dict(turns=T, turns_cv=0.0, turn_input=U, shared_prefix=0.0, think_s=1.0,
                sessions=0.0, session_rate=1.0, dram_bytes=0.0, dram_bw=0.0, ssd_bytes=0.0,
                ssd_bw=0.0, ssd_latency_s=0.0, offload=2.0, routing=sessions.AFFINITY,
                replicas=1.0)
    base.update(kw)
    return sessions.Sessions(**base)


@functools.partial(jax.jit, static_argnames="n_terms")
def _cache(ss, rate, hbm_free, recompute, response, devices, n_terms):
    tn = sessions.turn_nodes(ss)
    return sessions.cache(ss, O, tn, n_terms, rate=rate, hbm_free=hbm_free, kappa=KAPPA,
                          devices=devices, wait=0.0, response=response,
                          recompute_per_token=recompute)


def cache(ss, *, rate=0.01, hbm_free=BIG, n_terms=1, recompute=1.0, response=0.0,
          devices=1.0):
    with jax.enable_x64(True):  # (the closed forms are checked to 1e-6)
        ss = sessions.Sessions(*(float(v) for v in ss))
        c = _cache(ss, float(rate), float(hbm_free), float(recompute), float(response),
                   float(devices), n_terms)
        return jax.tree_util.tree_map(np.asarray, c)


def test_a_working_set_that_fits_in_hbm_hits_on_every_later_turn():
    """Every copy stays (HBM far larger than the sessions): turn n + 1 finds its n g
    tokens, so the hit share is sum_n n g / sum_n (n g + u) = 6 g / (4 u + 6 g)
    = 900 / 1300; with a shared prefix s = 1000 kept for all, (4 s + 900) / (4 s + 1300)."""
    assert cache(ses()).hbm_hit == pytest.approx(900.0 / 1300.0, rel=1e-6)
    assert cache(ses(shared_prefix=1000.0)).hbm_hit == pytest.approx(4900.0 / 5300.0, rel=1e-6)
    # a turn prefills u tokens after a hit, u on the first turn: u on every turn
    c = cache(ses())
    assert c.computed == pytest.approx(U, rel=1e-6)
    assert c.computed_cv == pytest.approx(0.0, abs=1e-6)


def test_a_working_set_that_fits_only_in_dram_is_reloaded_at_the_links_bandwidth():
    """No idle HBM (every copy leaves it), DRAM holding everything: the copies come back
    over the link, n g tokens on turn n + 1 at kappa / bw seconds per token; at a rate
    far below the link's capacity no queue: the mean reload per turn is
    sum_n n g kappa / bw / T = 6 x 150 x 1e5 / 50e9 / 4 = 0.45 ms. With the prompt
    policy a copy lacks the turn's o output tokens: (900 - 3 x 50) / 1300 is reloaded.
    A link slower than recomputing (kappa / bw above the engine's prefill per token)
    reloads nothing: those turns are prefilled again."""
    bw = 50e9
    c = cache(ses(dram_bytes=BIG, dram_bw=bw), hbm_free=0.0, rate=1e-6, recompute=1e-3)
    assert c.hbm_hit == pytest.approx(0.0, abs=1e-9)
    assert c.dram_hit == pytest.approx(900.0 / 1300.0, rel=1e-6)
    assert c.reload_s == pytest.approx(6 * G * KAPPA / bw / T, rel=1e-4)
    prompt = cache(ses(dram_bytes=BIG, dram_bw=bw, offload=1.0), hbm_free=0.0, rate=1e-6,
                   recompute=1e-3)
    assert prompt.dram_hit == pytest.approx(750.0 / 1300.0, rel=1e-6)
    slow = cache(ses(dram_bytes=BIG, dram_bw=bw), hbm_free=0.0, rate=1e-6,
                 recompute=0.5 * KAPPA / bw)
    assert slow.dram_hit == 0.0 and slow.reload_s == 0.0


def test_reloads_queue_on_their_link():
    """Pollaczek-Khinchine on the link: turns at rate lambda = Lambda T, each with a
    reload S (0 on the first turn, n g kappa / bw on turn n + 1): the reloading turns wait
    lambda E[S^2] / (2 (1 - lambda E[S])), E over all turns."""
    bw, rate = 50e9, 100.0  # sessions/s
    c = cache(ses(dram_bytes=BIG, dram_bw=bw), hbm_free=0.0, rate=rate, recompute=1e-3)
    s = np.array([n * G * KAPPA / bw for n in range(int(T))])
    lam = rate * T
    wait = lam * np.mean(s ** 2) / (2.0 * (1.0 - lam * np.mean(s)))
    assert c.reload_s == pytest.approx(np.mean(s) + 3.0 / 4.0 * wait, rel=1e-4)
    assert c.link_busy == pytest.approx(lam * np.mean(s), rel=1e-6)


@pytest.mark.parametrize("k", [2, 4])
def test_random_routing_over_k_replicas_divides_the_hits(k):
    """Two turns: the second lands on the first's replica with probability 1 / k, so
    the hit share is (1 / k) g / (2 u + g). Three turns over two replicas: turn 2 finds
    g with probability 1/2; turn 3 finds 2 g (its last replica, 1/2) or g (the first
    turn's, 1/4): (0.5 g + 1.25 g) / (3 u + 3 g) = 262.5 / 750."""
    two = cache(ses(turns=2.0, routing=sessions.RANDOM, replicas=float(k)),
                n_terms=sessions.RANDOM_TERMS)
    assert two.hbm_hit == pytest.approx(G / k / (2 * U + G), rel=1e-6)
    three = cache(ses(turns=3.0, routing=sessions.RANDOM, replicas=2.0),
                  n_terms=sessions.RANDOM_TERMS)
    assert three.hbm_hit == pytest.approx(262.5 / 750.0, rel=1e-6)
    # affinity routes every turn back: all of it
    assert cache(ses(turns=2.0, replicas=float(k))).hbm_hit == pytest.approx(
        G / (2 * U + G), rel=1e-6)


def test_lru_keeps_copies_for_the_characteristic_time_of_its_capacity():
    """Two turns, exponential think time Z, sessions starting at Lambda per second, a
    cache of C bytes (Che's approximation): the first turn's copy (g tokens) is held
    until the second turn or for tau, the second's (2 g) for tau, so the cache holds
    Lambda kappa g (E[min(D, tau)] + 2 tau) = Lambda kappa g (Z (1 - exp(-tau / Z))
    + 2 tau) bytes. With C set for tau = Z ln 2 the second turn finds its copy with
    probability 1 - exp(-tau / Z) = 1/2: a hit share of g / 2 / (2 u + g)."""
    z, lam = 3.0, 0.5
    tau = z * math.log(2.0)
    capacity = lam * KAPPA * G * (z * 0.5 + 2.0 * tau)
    c = cache(ses(turns=2.0, think_s=z), rate=lam, hbm_free=capacity)
    assert float(c.tau[0]) == pytest.approx(tau, rel=1e-3)
    assert c.hbm_hit == pytest.approx(0.5 * G / (2 * U + G), rel=2e-3)


def test_more_cache_never_lowers_the_hit_rate():
    """Property over random session shapes: more HBM, more DRAM or more SSD never
    lowers a hit share (LRU's characteristic time grows with its capacity)."""
    rng = np.random.default_rng(5)
    for _ in range(30):
        ss = ses(turns=float(rng.integers(2, 30)), turns_cv=float(rng.choice([0.0, 0.6])),
                 turn_input=float(rng.integers(50, 3000)), think_s=float(rng.uniform(0, 30)),
                 shared_prefix=float(rng.choice([0, 2000])), dram_bw=60e9, ssd_bw=10e9,
                 routing=float(rng.integers(0, 3)), replicas=float(rng.choice([1, 2, 8])),
                 offload=float(rng.choice([1.0, 2.0])))
        rate, response = float(rng.uniform(0.01, 5)), float(rng.uniform(0, 20))
        sizes = np.geomspace(1e8, 1e12, 6)
        hbm = [float(cache(ss, rate=rate, hbm_free=c, n_terms=sessions.RANDOM_TERMS,
                           response=response).hbm_hit) for c in sizes]
        assert np.all(np.diff(hbm) >= -1e-9), hbm
        total = []
        for d in sizes:
            c = cache(ss._replace(dram_bytes=d, ssd_bytes=2 * d), rate=rate, hbm_free=1e9,
                      n_terms=sessions.RANDOM_TERMS, response=response, recompute=1.0)
            total.append(float(c.hbm_hit + c.dram_hit + c.ssd_hit))
        assert np.all(np.diff(total) >= -1e-9), total

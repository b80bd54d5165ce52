"""Inter-token latency under load (dse.formulas.load_tails.gaps, itl_quantiles): the gaps
between a request's tokens, pooled over tokens, by hand. Against the discrete-event
oracle: tests/oracles/test_load_open.py and test_load_closed.py."""

from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

from dse.formulas import load_tails
from dse.formulas.load import Load
from dse.formulas.serving import node_axes


def _quantiles(gap, weight, lock_weight=0.0, tau=0.0, span=0.0, long=0.0):
    gap = jnp.asarray(gap, jnp.float32).reshape(-1, 1)
    weight = jnp.asarray(weight, jnp.float32).reshape(-1, 1)
    with node_axes():
        found = load_tails.itl_quantiles((gap, weight), jnp.float32(lock_weight),
                                         jnp.float32(tau), jnp.float32(span),
                                         jnp.float32(long), rank=0)
    return [float(x) for x in found]


def test_a_prompt_chunk_in_one_step_of_twenty_is_the_p99():
    """Gaps of 10 ms at 95% of the tokens and of 210 ms (a step with a prompt chunk) at
    5%: P50 and P90 are the decode step, P99 the chunk's step."""
    p50, p90, p99 = _quantiles([0.01, 0.21], [0.95, 0.05])
    assert p50 == pytest.approx(0.01, rel=1e-5) and p90 == pytest.approx(0.01, rel=1e-5)
    assert p99 == pytest.approx(0.21, rel=1e-5)


def test_a_wave_s_first_gaps_are_its_top_tenth():
    """Lock-step waves alone (weight 1), 10 decode steps of 20 ms per request: 9 gaps in 10
    are the step, each request's first waits 0 to 1 s more (uniform). P50 = P90 = 20 ms,
    P99 = 20 ms + (0.99 - 0.9) / 0.1 x 1 s = 0.92 s."""
    p50, p90, p99 = _quantiles([0.5], [1.0], lock_weight=1.0, tau=0.02, span=1.0, long=0.1)
    assert p50 == pytest.approx(0.02, rel=1e-5) and p90 == pytest.approx(0.02, rel=1e-4)
    assert p99 == pytest.approx(0.92, rel=1e-5)


def test_the_gaps_of_a_mixed_engine_by_hand():
    """A closed loop (no occupancy spread) on an engine that mixes prompt chunks into its
    decode steps, step(B, P, n) = 5 ms + 0.1 ms x B + 0.05 ms x P: at a running batch of
    10 with every other request's share 1, a decoding request sees step(11) = 6.1 ms;
    with f = 0.04 a step carries a prompt chunk, here one buffer node of 2,000 tokens:
    100 ms more. Weights 0.96 and 0.04 at 6.1 ms and 106.1 ms; their mean 10.1 ms."""
    def step(b, p, n):
        return 0.005 + 1e-4 * b + 5e-5 * p

    nodes = jnp.asarray([2000.0, 1.0, 1.0, 1.0, 1.0])
    ww = jnp.asarray([1.0, 0.0, 0.0, 0.0, 0.0])
    tau_d = step(10.0, 0.0, 0.0)
    tq = step(10.0, nodes, 1.0)
    p = dict(b=jnp.float32(10.0), share=jnp.float32(1.0), tq=tq, tq_w=ww,
             excess=jnp.maximum(tq - tau_d, 0.0), aligned=jnp.bool_(False),
             coupled=jnp.bool_(False))
    s = SimpleNamespace(f=jnp.float32(0.04), m1=jnp.sum(ww * tq))
    load = Load(rate=0.0, clients=11.0, arrival_cv=1.0, slots=64.0, budget=8192.0,
                separate=0.0, prefix_hit=0.0)
    with node_axes():
        gap, weight = load_tails.gaps(step, load, s, p, jnp.bool_(True), rank=0)
    gap, weight = np.asarray(gap), np.asarray(weight)
    assert weight.sum() == pytest.approx(1.0, rel=1e-6)
    assert np.sum(weight[gap < 0.05]) == pytest.approx(0.96, rel=1e-6)
    assert np.unique(np.round(gap[weight > 0], 7)).tolist() == pytest.approx([0.0061, 0.1061])
    assert np.sum(gap * weight) == pytest.approx(0.0061 + 0.04 * 0.1, rel=1e-6)

"""Derivatives of the load model (dse sensitivity's forward mode) against central finite
differences of the same function in float64: the means through the fixed point, the
percentiles through their implicit derivative (the bisection that finds them has none of
its own), in open and closed loops. Before, the latencies' tangents were NaN in both (sqrt at a
point mass, log of an unpinned batch) and the percentiles' were their bracket's (up to
2.7x off)."""

import jax
import jax.numpy as jnp
import numpy as np
from dse.formulas import load as L
from dse.formulas import queueing as q
from dse.formulas.serving import node_axes

LENGTHS = L.Lengths(1000.0, 0.5, 200.0, 0.5)
KEYS = ("ttft_s", "tpot_s", "e2e_s", "running_batch", "request_throughput_req_s",
        "capacity_req_s", "ttft_p50_s", "ttft_p99_s", "tpot_p90_s", "tpot_p99_s", "e2e_p90_s")


def _serve(k, rate, clients):
    def step(b, p, n):  # a decode step that grows with the batch at k x 0.1 ms a sequence
        return 0.01 + k * 1e-4 * jnp.asarray(b) + 2e-5 * jnp.asarray(p) + 1e-4 * jnp.asarray(n)
    out = L.serve(step, LENGTHS, L.Load(rate, clients, 1.0, 64.0, 8192.0, 0.0, 0.3))
    return {key: out[key] for key in KEYS}


def test_tangents_are_the_finite_differences():
    """By a step-time parameter in open and closed loops (one of them past its slots), and
    by the open loop's rate: one compiled primal and one compiled JVP for all of them."""
    with jax.enable_x64(True), node_axes():
        value = jax.jit(_serve)
        tangent = jax.jit(lambda k, r, c, dk, dr: jax.jvp(
            lambda k_, r_: _serve(k_, r_, c), (k, r), (dk, dr))[1])
        f64 = jnp.float64
        cases = [("open", 5.0, 0.0, 1.0, 0.0), ("closed", 0.0, 12.0, 1.0, 0.0),
                 ("closed past its slots", 0.0, 100.0, 1.0, 0.0), ("open, by rate", 5.0, 0.0,
                                                                    0.0, 1.0)]
        for name, rate, clients, dk, dr in cases:
            got = tangent(f64(1.0), f64(rate), f64(clients), f64(dk), f64(dr))
            h = 1e-4 * (dk + dr * rate)
            up = value(f64(1.0 + h * dk), f64(rate + h * dr), f64(clients))
            down = value(f64(1.0 - h * dk), f64(rate - h * dr), f64(clients))
            for key in KEYS:
                fd = (float(up[key]) - float(down[key])) / (2.0 * h)
                g = float(got[key])
                assert np.isfinite(g), (name, key)
                # percentiles: mixtures of ramps and atoms, piecewise smooth (2%)
                tol = 0.02 if "_p" in key else 1e-5
                assert abs(g - fd) <= tol * abs(fd) + 1e-9, (name, key, g, fd)


def test_root_is_sqrt_with_a_zero_slope_at_zero():
    x = jnp.asarray([0.0, 1e-30, 0.25, 2.0], jnp.float32)
    assert np.array_equal(np.asarray(q.root(x)), np.asarray(jnp.sqrt(x)))
    slope = jax.vmap(jax.grad(q.root))(x)
    assert float(slope[0]) == 0.0
    np.testing.assert_allclose(np.asarray(slope[2:]), [1.0, 0.5 / np.sqrt(2.0)], rtol=1e-6)

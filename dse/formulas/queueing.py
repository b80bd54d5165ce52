"""Queueing and distribution helpers of the serving-under-load model, as pure array functions.

Every function broadcasts its arguments; node axes (quadrature or quantile nodes of a
distribution) lead. Nothing here knows about transformers: :mod:`dse.formulas.load`
composes these with the engine's step time.

Sources:

- Gauss-Hermite quadrature of lognormal lengths (probabilists' Hermite nodes).
- Erlang's C formula through the incomplete gamma function (Erlang B of S servers at
  offered load A is the Poisson pmf at S over the Poisson cdf at S), with the
  Allen-Cunneen factor (c_a^2 + c_s^2) / 2 for G/G/S (Allen, *Probability, Statistics
  and Queueing Theory*, 1990; Whitt, "Approximations for the GI/G/m queue", 1993).
- Spitzer's identity / Sparre Andersen's theorem for the probability that a random walk
  with negative drift stays at or below 0: P(max_k S_k = 0) = exp(-sum_k P(S_k > 0) / k)
  (Feller, *An Introduction to Probability Theory*, Vol. II, XII.7).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaincc, gammaln, ndtr

_GH = np.polynomial.hermite_e.hermegauss


def _hermite(n: int):
    z, w = _GH(n)
    return z, w / w.sum()


# Equal-probability bins of a length distribution for percentiles: finer in the upper
# tail, where P99 lives (bin edges in probability; a node at each bin's middle).
QUANTILE_EDGES = np.array([0.0, 0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.93, 0.97, 0.985, 0.993, 0.997,
                           0.999, 1.0])
QUANTILE_WEIGHTS = np.diff(QUANTILE_EDGES)
_QUANTILE_Z = np.array([NormalDist().inv_cdf(float(u))
                        for u in (QUANTILE_EDGES[1:] + QUANTILE_EDGES[:-1]) / 2.0])


def const(values):
    """A numpy constant as a JAX array of the current precision (float64 under x64).

    The dtype is named: JAX caches the constant it makes of a numpy array inside a
    trace, and without a dtype a later conversion of the same array can reuse that
    float32 copy under x64."""
    values = np.asarray(values)
    return jnp.asarray(values, jax.dtypes.canonicalize_dtype(values.dtype))


def lead(values, rank: int):
    """A 1-D array of node values shaped to lead ``rank`` broadcast axes."""
    return jnp.reshape(const(values), (-1,) + (1,) * rank)


def normal_nodes(n: int, rank: int):
    """Gauss-Hermite nodes and weights of the standard normal, leading ``rank`` axes."""
    z, w = _hermite(n)
    return lead(z, rank), lead(w, rank)


def root(x):
    """sqrt(x) for x >= 0 with a zero derivative at 0, where sqrt's is infinite (times a
    zero tangent: NaN in forward mode). Values are sqrt's, bit for bit."""
    pos = x > 0.0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def lognormal_nodes(mean, cv2, n: int = 8):
    """Gauss-Hermite nodes and weights of a lognormal with ``mean`` and squared coefficient
    of variation ``cv2`` (cv2 = 0: a point mass). Nodes lead: shape (n,) + broadcast."""
    z, w = _hermite(n)
    rank = max(jnp.ndim(mean), jnp.ndim(cv2))
    s2 = jnp.log1p(jnp.maximum(cv2, 0.0))
    nodes = jnp.maximum(mean, 1e-30) * jnp.exp(-s2 / 2.0 + root(s2) * lead(z, rank))
    return nodes, lead(w, rank)


def lognormal_quantile_nodes(mean, cv2):
    """The lognormal's quantiles at the middles of :data:`QUANTILE_EDGES`' bins (nodes
    lead); the bins' probabilities are :data:`QUANTILE_WEIGHTS`."""
    rank = max(jnp.ndim(mean), jnp.ndim(cv2))
    s2 = jnp.log1p(jnp.maximum(cv2, 0.0))
    return jnp.maximum(mean, 1e-30) * jnp.exp(-s2 / 2.0 + root(s2) * lead(_QUANTILE_Z, rank))


def erlang_c(servers, offered):
    """Probability that an arrival waits in M/M/S with ``servers`` S and offered load
    A = lambda / mu < S (Erlang's C formula; S may be any positive number)."""
    a = jnp.maximum(offered, 1e-30)
    log_pmf = -a + servers * jnp.log(a) - gammaln(servers + 1.0)
    blocking = jnp.exp(log_pmf) / jnp.maximum(gammaincc(servers + 1.0, a), 1e-300)
    blocking = jnp.clip(blocking, 0.0, 1.0)
    return jnp.clip(servers * blocking / jnp.maximum(servers - a * (1.0 - blocking), 1e-30),
                    0.0, 1.0)


def busy_probability(arrivals, mean_work, second_moment, capacity, terms: int = 6):
    """P(a slotted queue carries work over a slot): per slot Poisson(``arrivals``) jobs of
    work with ``mean_work`` and ``second_moment``, ``capacity`` served per slot.

    Sparre Andersen: P(no carry-over) = exp(-sum_k P(S_k > 0) / k) with S_k the work of k
    slots less k x capacity, taken as normal (the first ``terms`` terms)."""
    rank = max(jnp.ndim(arrivals), jnp.ndim(mean_work), jnp.ndim(capacity))
    k = lead(np.arange(1, terms + 1, dtype=float), rank)
    mu = k * (arrivals * mean_work - capacity)
    sd = root(k * arrivals * second_moment) + 1e-30
    return 1.0 - jnp.exp(-jnp.sum(ndtr(mu / sd) / k, axis=0))


def capped_lognormal_mean(mean, s2, cap):
    """(E[min(W, cap)], dE/dmean) for W lognormal with ``mean`` and log-variance ``s2``."""
    s = jnp.sqrt(jnp.maximum(s2, 1e-12))
    d1 = (jnp.log(jnp.maximum(mean, 1e-30) / cap) + s2 / 2.0) / s
    over = ndtr(d1)
    return mean * (1.0 - over) + cap * ndtr(d1 - s), 1.0 - over


def lognormal_mean_with_capped_mean(target, s2, cap, iterations: int = 8):
    """The mean m of a lognormal W (log-variance ``s2``) with E[min(W, cap)] = ``target``
    (< cap): Newton's method from m = target, never below it."""

    def body(_, m):
        value, slope = capped_lognormal_mean(m, s2, cap)
        return jnp.maximum(m + (target - value) / jnp.maximum(slope, 1e-6), target)

    return jax.lax.fori_loop(0, iterations, body, target)


def lognormal_params(mean, var):
    """(mu, sigma) of the lognormal with that mean and variance."""
    mean = jnp.maximum(mean, 1e-30)
    s2 = jnp.log1p(jnp.maximum(var, 0.0) / (mean * mean))
    return jnp.log(mean) - s2 / 2.0, root(s2)


def ramp_cdf(t, start, width):
    """P(start + U <= t) for U uniform on [0, width] (width -> 0: a step at start)."""
    return jnp.clip((t - start) / jnp.maximum(width, 1e-30), 0.0, 1.0)


def lognormal_cdf(t, mu, sigma):
    return ndtr((jnp.log(jnp.maximum(t, 1e-300)) - mu) / jnp.maximum(sigma, 1e-12))


def poisson_pmf(k, mean):
    """P(N = k) for N ~ Poisson(mean) (k a float array of counts)."""
    mean = jnp.maximum(mean, 1e-30)
    return jnp.exp(-mean + k * jnp.log(mean) - gammaln(k + 1.0))


def exponential_quantile_nodes(mean, n: int = 8):
    """Middles of n equal-probability bins of an exponential with ``mean`` (nodes lead)."""
    u = (np.arange(n) + 0.5) / n
    return -jnp.asarray(mean)[None] * lead(np.log1p(-u), jnp.ndim(mean))


SQRT_2PI = math.sqrt(2.0 * math.pi)


def largest_moments(v, w, groups):
    """(mean, mean square) of the largest of independent draws: for each (p, n) of
    ``groups``, n draws that are 0 with probability 1 - p and else take the values ``v``
    (ascending along the leading node axis) with weights ``w``. The largest is below
    v_j with probability F_j = prod (1 - p + p G_j)^n, G the weights' running sum."""
    mass = largest_mass(w, groups)
    return jnp.sum(v * mass, 0), jnp.sum(v * v * mass, 0)


def largest_mass(w, groups):
    """The probabilities that the largest draw of :func:`largest_moments` takes each value
    (the rest: every draw 0)."""
    g = jnp.cumsum(w, 0)
    cdf, atom = 1.0, 1.0
    for p, n in groups:
        n = jnp.maximum(n, 0.0)
        cdf = cdf * (1.0 - p + p * g) ** n
        atom = atom * (1.0 - p) ** n
    return cdf - jnp.concatenate([atom * jnp.ones_like(cdf[:1]), cdf[:-1]])


def at_least(a, v, mass):
    """E[max(a, Y)] for a >= 0 and Y the largest draw (values v, probabilities mass, 0
    otherwise); a may carry node axes of its own ahead of the point axes."""
    shape = v.shape[:1] + (1,) * (jnp.ndim(a) + 1 - v.ndim) + v.shape[1:]
    v, mass = jnp.reshape(v, shape), jnp.reshape(mass, shape)
    return a + jnp.sum(jnp.maximum(v - a, 0.0) * mass, 0)

"""Fit a calibration by gradient descent through the jitted evaluator.

The objective is the MAP estimate under a log-normal error model: the weighted mean
squared log error of the predicted metric (each kind of measurement weighs the same,
however many rows it has; flagged anomalies weigh nothing) plus a Gaussian prior that
keeps parameters the data cannot see at their starting values and family offsets
small. Adam runs inside ``lax.scan``; the folds of a cross-validation (leave one
hardware out, leave one model out) run side by side under ``vmap``, each with its own
row weights, in one compiled call.

The covariance is the Laplace approximation at the optimum (Gauss-Newton Hessian of
the same objective with the residual variance estimated from the fit).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.example_libraries import optimizers

from ..catalogue import calibration as C
from ..core.fusion import jit
from .predict import Problem, predict

SIGMA0 = 0.10  # assumed log error of one row in the MAP objective (10%)
PRIOR_SD_BASE = 2.0  # unconstrained units (logit / log)
PRIOR_SD_OFFSET = 0.5
# Host and launch overheads are the software's, not the GPU generation's: their family
# offsets stay at 0 (not fitted; variance 0 in the covariance). Free, a family's ratio
# learnt where an overhead is negligible (TensorRT-LLM's per-layer time on Blackwell
# against Hopper: 4.5x of ~0.1 us) multiplied another framework's large one (vLLM's:
# 150 us -> 700 us per layer on B200).
HOST_OVERHEADS = ("layer_overhead_s", "step_overhead_s", "seq_overhead_s")
STEPS = 600
LEARNING_RATE = 0.05


def start(prob: Problem) -> C.Calibration:
    return C.initial(prob.frameworks, prob.families, C.FAMILY_OF)


def prior_precision(prob: Problem) -> np.ndarray:
    n_base = len(prob.frameworks) * len(C.NAMES)
    n_off = len(prob.families) * len(C.NAMES)
    return np.concatenate([np.full(n_base, PRIOR_SD_BASE ** -2.0),
                           np.full(n_off, PRIOR_SD_OFFSET ** -2.0)])


def free(prob: Problem) -> np.ndarray:
    """[param] True for the parameters a fit moves: all but the host overheads' family
    offsets (:data:`HOST_OVERHEADS`), which stay where they start (0)."""
    n_base = len(prob.frameworks) * len(C.NAMES)
    offsets = np.array([n not in HOST_OVERHEADS for n in C.NAMES])
    return np.concatenate([np.ones(n_base, bool), np.tile(offsets, len(prob.families))])


def row_weights(prob: Problem, include: np.ndarray) -> np.ndarray:
    """Weights of the rows a fit uses: each kind's rows share one kind's worth, flagged
    anomalies and excluded rows get 0; the weights sum to the number of rows used."""
    kinds = np.asarray([c.kind for c in prob.cases])
    used = include & np.asarray([not c.flag for c in prob.cases])
    w = np.zeros(prob.size)
    present = [k for k in dict.fromkeys(kinds) if np.any(used & (kinds == k))]
    for k in present:
        sel = used & (kinds == k)
        w[sel] = 1.0 / sel.sum()
    return w * used.sum() / max(w.sum(), 1e-300)


def objective(theta, prob: Problem, weights, theta0, precision):
    """Weighted mean squared log error + the prior (scaled to the same units)."""
    r = jnp.log(predict(theta, prob)) - jnp.log(prob.measured)
    n = jnp.maximum(jnp.sum(weights), 1.0)
    data = jnp.sum(weights * r ** 2) / n
    prior = SIGMA0 ** 2 * jnp.sum(precision * (theta - theta0) ** 2) / n
    return data + prior


def fit_folds(prob: Problem, includes: np.ndarray, steps: int = STEPS,
              learning_rate: float = LEARNING_RATE, theta0=None):
    """Fit one calibration per row of ``includes`` ([fold, row] booleans) at once.

    Returns (theta [fold, param], loss history [fold, step]).
    """
    with jax.enable_x64(True):
        theta0 = jnp.asarray(start(prob).theta if theta0 is None else theta0)
        precision = jnp.asarray(prior_precision(prob))
        moves = jnp.asarray(free(prob), theta0.dtype)
        weights = jnp.asarray(np.stack([row_weights(prob, inc) for inc in includes]))
        init, update, params = optimizers.adam(learning_rate)

        def one(w):
            loss_grad = jax.value_and_grad(objective)

            def step(state, i):
                value, grad = loss_grad(params(state), prob, w, theta0, precision)
                return update(i, grad * moves, state), value

            state, history = jax.lax.scan(step, init(theta0), jnp.arange(steps, dtype=theta0.dtype))
            return params(state), history

        theta, history = jit(jax.vmap(one))(weights)
        return np.asarray(theta), np.asarray(history)


def covariance(theta, prob: Problem, include: np.ndarray) -> tuple[np.ndarray, float]:
    """Laplace covariance of the unconstrained parameters and the residual log-SD."""
    with jax.enable_x64(True):
        theta = jnp.asarray(theta)
        w = row_weights(prob, include)
        used = w > 0

        def residuals(t):
            return jnp.log(predict(t, prob)) - jnp.log(prob.measured)

        r = np.asarray(residuals(theta))
        jac = np.asarray(jax.jacfwd(residuals)(theta))
        sigma2 = float(np.sum(w[used] * r[used] ** 2) / np.sum(w[used]))
        info = (jac[used].T * w[used]) @ jac[used] / sigma2 + np.diag(prior_precision(prob))
        moves = free(prob)
        cov = np.zeros_like(info)  # what the fit does not move has no variance
        cov[np.ix_(moves, moves)] = np.linalg.inv(info[np.ix_(moves, moves)])
        return cov, float(np.sqrt(sigma2))


def fit(prob: Problem, include: np.ndarray | None = None, steps: int = STEPS,
        info: dict | None = None) -> tuple[C.Calibration, np.ndarray]:
    """One calibration fitted on the included rows (all by default), with its covariance.

    Returns (calibration, loss history).
    """
    include = np.ones(prob.size, bool) if include is None else include
    theta, history = fit_folds(prob, include[None], steps)
    cov, sigma = covariance(theta[0], prob, include)
    cal = start(prob).with_theta(theta[0])
    meta = dict(info or {}, rows_fitted=int((row_weights(prob, include) > 0).sum()),
                residual_log_sd=sigma, loss_start=float(history[0, 0]),
                loss_end=float(history[0, -1]), steps=steps)
    return cal.__class__(cal.frameworks, cal.families, cal.base, cal.offset, cal.family_of,
                         cov, meta), history[0]

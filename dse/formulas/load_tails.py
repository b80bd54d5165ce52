"""Percentiles of TTFT, TPOT and E2E under load (the tails of :mod:`dse.formulas.load`).

Each latency is a mixture over quantile nodes of the length distribution that drives it
(:data:`dse.formulas.queueing.QUANTILE_EDGES`, finer in the upper tail):

- **TTFT** (input-length nodes): the steps that process the prompt at that length, after
  the tokens ahead of it; plus, in the open loop, the residual of the step it arrives
  in, uniform over a step drawn size-biased from decode-only and prompt steps (prompts
  arriving during a long step also share the next one); plus the wait for a slot (open
  loop: none with probability 1 - P(wait), else exponential; closed loop: the wait for
  c - S departures, gamma with shape c - S);
- **TPOT** (output-length nodes): the decode step as the request sees it, shifted, plus a
  lognormal for the prompt work of others arriving while it decodes (compound Poisson:
  variance rate x TPOT x E[w^2] / n over n decode steps) and, in the open loop, the
  Poisson variation of the batch;
- **E2E** (output-length nodes): lognormal with TTFT's mean and variance plus the decode;
- **ITL** (the gaps between tokens, pooled over tokens): the steps a decoding request
  decodes in (:func:`gaps`); its percentiles are the mixture's with the lock-step waves
  (:func:`itl_quantiles`).

The quantiles come from one bisection in log time over every percentile at once.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import queueing as q

PERCENTILES = (0.5, 0.9, 0.99)
BISECTIONS = 28
CO_NODES = 4  # prompts arriving with it: 0, 1, 2 and the tail
WAIT_NODES = 4  # the wait's quantile nodes (beside its atom at 0)
SMOOTH = 1e-4  # an atom's spread (share of t) in the percentiles' derivatives


def _interp_log(xq, x, y):
    """Piecewise-linear interpolation in log x along the leading (node) axis; x ascending."""
    lx, lq = jnp.log(x), jnp.log(xq)
    out = jnp.zeros_like(xq * y[:1])
    k = x.shape[0]
    for i in range(k - 1):
        a, b = lx[i], lx[i + 1]
        u = jnp.clip((lq - a) / jnp.maximum(b - a, 1e-12), 0.0, 1.0)
        inside = (lq >= a) & (lq < b) if i < k - 2 else (lq >= a)
        out = jnp.where(inside, y[i] + u * (y[i + 1] - y[i]), out)
    return jnp.where(lq < lx[0], y[0], out)


def busy(load, s, nodes):
    """The probability an open-loop arrival finds a step running: 1 unless ``load.idle``,
    then the Poisson occupancy of the requests in the system, 1 - exp(-x (TTFT + decode
    time))."""
    occupied = 1.0 - jnp.exp(-s.x * (s.ttft + nodes.mean_decode * s.tpot))
    return jnp.where(load.idle > 0.0, occupied, 1.0)


def tails(step, nodes, load, s, p, t, closed, slot_wait, p_wait, extra_closed,
          lock: dict | None = None) -> dict:
    """P50/P90/P99 of TTFT, TPOT and E2E, the CDFs of TTFT and TPOT, and the gaps
    between tokens (``itl_gaps``: :func:`gaps`, whose percentiles
    :func:`dse.formulas.load.serve` takes with the lock-step waves').

    With ``lock`` (:func:`dse.formulas.load.lockstep`, its ``wait`` for slots added),
    each distribution is the mixture of the mean field's and, with the share of requests
    in lock step, the waves' (TTFT uniform from the first prompt step's end to the
    wave's, TPOT uniform over the wait spread, E2E uniform over the wave's finishes), and
    the percentiles are the mixture's own: a blend of the two's percentiles puts a
    median in the first wave where it is a tenth of a benchmark's requests. Where every
    request is in lock step they are the waves' in closed form.
    """
    cap, bs, chunks = p["cap"], p["bs"], p["chunks"]
    x, ei = s.x, nodes.mean_prompt
    rank = jnp.ndim(s.x)
    qw = q.lead(q.QUANTILE_WEIGHTS, rank)
    # the step an arrival lands in: decode-only or a prompt step, size-biased
    wn, ww = q.lognormal_nodes(p["buffer"], 0.0 * p["buffer"] + 0.25, 2)
    lengths = jnp.concatenate([p["tau_d"][None] * jnp.ones_like(wn[:1]),
                               step(bs, jnp.minimum(wn, cap), chunks)])
    prob = jnp.concatenate([(1.0 - s.f)[None] * jnp.ones_like(ww[:1]), s.f * ww])
    prob = prob * lengths / jnp.sum(prob * lengths, 0)
    # prompts arriving with it (closed loop: finishing in the same step; open loop: during
    # the step it arrives in), Poisson: 0, 1, 2 or (the tail) 3 and more of them
    mean_k = jnp.where(closed, x * s.tbar, x * lengths) * p["share"] * t["look"]
    count = q.lead(np.arange(CO_NODES, dtype=float), rank + 1)
    pk = q.poisson_pmf(count, mean_k[None])
    tail = jnp.maximum(1.0 - jnp.sum(pk[:-1], 0), 0.0)
    above = jnp.maximum(mean_k - jnp.sum(count[:-1] * pk[:-1], 0), 0.0)  # E[N; N >= last]
    count = jnp.concatenate([count[:-1] + 0.0 * pk[:-1],
                             (above / jnp.maximum(tail, 1e-30))[None]])
    pk = jnp.concatenate([pk[:-1], tail[None]])
    co = count * ei  # [count, step]
    total = nodes.prompt_q[:, None, None] + t["backlog"] + co[None] / 2.0
    full_steps = jnp.floor(total / cap)
    last = jnp.minimum(total - full_steps * cap + co[None] / 2.0, cap)
    t_last = step(bs, last, chunks)
    # coupled attention-DP ranks: at least the other ranks' prompt steps (load._tagged)
    t_last = jnp.where(p["coupled"], p["tau_d"] + q.at_least(
        jnp.maximum(t_last - p["tau_d"], 0.0), p["excess"], p["others_mass"]), t_last)
    duration = (full_steps * t["t_full"] + t_last
                + jnp.where(closed, extra_closed, 0.0))  # [input quantile, count, step]
    duration = jnp.reshape(duration, (duration.shape[0], -1) + duration.shape[3:])
    running = busy(load, s, nodes)
    width = jnp.reshape(jnp.broadcast_to(jnp.where(closed, 0.0, lengths * running)[None],
                                         pk.shape), (1, -1) + pk.shape[2:])
    weight = qw[:, None] * jnp.reshape(pk * prob[None], (1, -1) + pk.shape[2:])
    k = jnp.maximum(load.clients - load.slots, 0.0)
    # open loop: the waits for a slot and for the prompt server, as one: none with the
    # probability that neither is busy, else exponential with their summed mean
    p_prompt = jnp.where(closed, 0.0, jnp.where(t["prompt_wait"] > 0.0, p["rho_t"], 0.0))
    p_wait = jnp.where(closed, p_wait, 1.0 - (1.0 - p_wait) * (1.0 - p_prompt))
    slot_wait = slot_wait + t["prompt_wait"]
    mean_wait = slot_wait / jnp.maximum(jnp.where(closed, 1.0, p_wait), 1e-12)
    exp_nodes = q.exponential_quantile_nodes(mean_wait, WAIT_NODES)
    gam_nodes, gam_w = q.lognormal_nodes(jnp.maximum(slot_wait, 1e-30),
                                         1.0 / jnp.maximum(k, 1.0), WAIT_NODES)
    wait_nodes = jnp.concatenate([jnp.zeros_like(exp_nodes[:1]),
                                  jnp.where(closed, gam_nodes, exp_nodes)])
    wait_w = jnp.concatenate([jnp.where(closed, 0.0, 1.0 - p_wait)[None]
                              * jnp.ones_like(exp_nodes[:1]),
                              jnp.where(closed, gam_w, p_wait / WAIT_NODES)])
    start = duration[:, :, None] + wait_nodes[None, None]
    w3 = weight[:, :, None] * wait_w[None, None]
    width3 = width[:, :, None]

    def ttft_at(par, v, smooth=0.0):  # v: the point axes, with any leading axes of its own
        w3, start, width3 = par
        lead = jnp.ndim(v) - rank
        v = jnp.reshape(v, jnp.shape(v)[:lead] + (1, 1, 1) + jnp.shape(v)[lead:])
        return jnp.sum(w3 * q.ramp_cdf(v, start, jnp.maximum(width3, smooth * v)),
                       (lead, lead + 1, lead + 2))

    # TPOT at the output quantile nodes
    n = jnp.maximum(nodes.decode, 1.0)
    nq = jnp.maximum(nodes.decode_q, 1.0)
    tpot_q = _interp_log(nq, n, t["tpot_n"])
    per_step = jnp.maximum(s.x * s.tbar / jnp.maximum(s.f, 1e-9), 1.0)  # prompts per step
    per_prompt = jnp.where(load.separate > 0.0, s.m1, s.m1 - p["tau_d"]) / per_step
    work2 = per_prompt ** 2 * nodes.prompt_m2 / jnp.maximum(ei, 1e-30) ** 2 * per_step
    # the queued prompt work it meets (atom at 0 and an exponential: variance
    # 2 W^2 / rho - W^2) is spread over its n decode steps
    rho_t = jnp.maximum(p["rho_t"], 1e-9)
    queued = jnp.maximum(2.0 * t["backlog_s"] ** 2 / rho_t - t["backlog_s"] ** 2, 0.0)
    var_q = (x * p["share"] * p["amplify"] * tpot_q * work2 / nq + queued / nq ** 2
             + jnp.where(closed, 0.0, p["slope"] ** 2 * p["b"] * 0.5))
    shift = jnp.minimum(p["seen"], jnp.min(tpot_q, 0)) * 0.999
    mu, sigma = q.lognormal_params(tpot_q - shift, var_q)
    live = jnp.where(nodes.decode_q > 0.5, qw, 0.0)
    live = live / jnp.maximum(jnp.sum(live, 0), 1e-30)

    def tpot_at(par, v, smooth=0.0):
        live, shift, mu, sigma = par
        sigma = jnp.maximum(sigma, smooth)
        lead = jnp.ndim(v) - rank
        v = jnp.reshape(v, jnp.shape(v)[:lead] + (1,) + jnp.shape(v)[lead:])
        return jnp.sum(live * q.lognormal_cdf(v - shift, mu, sigma), lead)

    # E2E at the output quantile nodes: TTFT's mean and variance plus the decode
    mean_t = jnp.sum(w3 * (start + width3 / 2.0), (0, 1, 2))
    var_t = jnp.sum(w3 * ((start + width3 / 2.0) ** 2 + width3 ** 2 / 12.0),
                    (0, 1, 2)) - mean_t ** 2
    dq = nodes.decode_q
    mu_e, sigma_e = q.lognormal_params(mean_t + dq * tpot_q, var_t + dq ** 2 * var_q)

    def e2e_at(par, v, smooth=0.0):
        qw, mu_e, sigma_e = par
        sigma_e = jnp.maximum(sigma_e, smooth)
        lead = jnp.ndim(v) - rank
        v = jnp.reshape(v, jnp.shape(v)[:lead] + (1,) + jnp.shape(v)[lead:])
        return jnp.sum(qw * q.lognormal_cdf(v, mu_e, sigma_e), lead)

    bounds = (
        (jnp.maximum(jnp.min(start, (0, 1, 2)) * 0.5, 1e-9),
         (jnp.max(start, (0, 1, 2)) + jnp.max(width3, (0, 1, 2))) * 2.0 + 1e-9),
        (shift + jnp.maximum(jnp.min(tpot_q, 0) - shift, 1e-12) * 0.01,
         shift + (jnp.max(tpot_q, 0) - shift) * 20.0 + 1e-9),
        (mean_t * 0.2 + 1e-9, (mean_t + jnp.max(dq * tpot_q, 0)) * 4.0 + 1e-9))
    field = ((ttft_at, (w3, start, width3)), (tpot_at, (live, shift, mu, sigma)),
             (e2e_at, (qw, mu_e, sigma_e)))
    if lock is None:
        cdfs, params = zip(*field)
        waves = None
    else:
        wait = lock["wait"]
        # the waves' uniforms: (start, width) of TTFT, TPOT and E2E
        waves = ((lock["first"] + wait, lock["wave"] - lock["first"]),
                 (lock["tau"], lock["spread_s"]),
                 (lock["e2e_lo"] + wait, lock["e2e_hi"] - lock["e2e_lo"]))
        cdfs = tuple(_mixed(cdf) for cdf, _ in field)
        params = tuple((lock["weight"], a, jnp.maximum(b, 1e-12), par)
                       for (_, par), (a, b) in zip(field, waves))
        # brackets that hold the waves too (the mean field's own where none runs in them)
        some = lock["weight"] > 0.0
        bounds = tuple((jnp.where(some, jnp.minimum(lo, 0.5 * a), lo),
                        jnp.where(some, jnp.maximum(hi, 2.0 * (a + b) + 1e-9), hi))
                       for (lo, hi), (a, b) in zip(bounds, waves))
    # (what they read is in their parameters: _quantiles' derivative closes over no array)
    probs = (PERCENTILES,) * 3
    found = _quantiles(cdfs, probs, rank, params, bounds)
    if waves is not None:  # every request in lock step: the uniforms' quantiles
        every = lock["weight"] >= 1.0
        found = tuple(jnp.where(every, a + q.lead(list(PERCENTILES), rank) * b, f)
                      for f, (a, b) in zip(found, waves))
    ttft_p, tpot_p, e2e_p = found
    return dict(ttft_p50_s=ttft_p[0], ttft_p90_s=ttft_p[1], ttft_p99_s=ttft_p[2],
                tpot_p50_s=tpot_p[0], tpot_p90_s=tpot_p[1], tpot_p99_s=tpot_p[2],
                e2e_p50_s=e2e_p[0], e2e_p90_s=e2e_p[1], e2e_p99_s=e2e_p[2],
                itl_gaps=gaps(step, load, s, p, closed, rank),
                ttft_cdf=lambda v: cdfs[0](params[0], v), tpot_cdf=lambda v: cdfs[1](params[1], v))


def _mixed(cdf):
    """The CDF of the mixture of ``cdf`` (share 1 - w) and a uniform from a over b (share
    w, the lock-step waves'), in the parameters as :func:`_quantiles` calls it."""
    def at(par, v, smooth=0.0):
        w, a, b, inner = par
        return w * q.ramp_cdf(v, a, jnp.maximum(b, smooth * v)) + (1.0 - w) * cdf(inner, v, smooth)
    return at


def gaps(step, load, s, p, closed, rank: int):
    """(lengths, weights) of the gaps between a decoding request's tokens, pooled over its
    tokens: [prompt node, occupancy node, point axes] atoms.

    Each gap is a step it decodes in: the decode step as it sees it (itself and the
    others: Poisson occupancy nodes in the open loop, the other clients' share in the
    closed loop, as :func:`dse.formulas.load._seen_decode_step`), and with probability
    f_o = f x share the step carries the others' prompt work: mixed in (vLLM,
    TensorRT-LLM) it lasts the prompt step's excess over a decode step longer (the
    prompt buffer's nodes; balanced attention-DP ranks: the longest of R); apart from
    decodes (SGLang) the prefill steps before its next decode pass, K >= 1 of them
    with probability f_o (geometric: the first at the buffer's nodes, E[K - 1 | K >= 1]
    = f_o / (1 - f_o) more at the mean prompt step); attention-DP ranks in lock step:
    the largest excess over its own rank's others and every other rank. The mean of the
    gaps is the mean field's TPOT (its base, before the correlation of a request's own
    first steps)."""
    zn, zw = q.normal_nodes(5, rank)
    b = p["b"]
    others = jnp.clip(b + jnp.sqrt(jnp.maximum(b, 1e-12)) * zn, 0.0, load.slots - 1.0)
    seen = jnp.where(closed, step(jnp.minimum(b * p["share"] + 1.0, load.slots), 0.0, 0.0),
                     step(1.0 + others, 0.0, 0.0))  # [occupancy node, point axes]
    fo = s.f * p["share"]
    tq, ww, excess = p["tq"], p["tq_w"], p["excess"]
    aligned = q.largest_mass(ww, [(1.0, load.ranks)])
    mass = jnp.where(p["aligned"], aligned, ww)
    separate = load.separate > 0.0
    stall = tq + fo / jnp.maximum(1.0 - fo, 1e-6) * s.m1
    extra = jnp.where(separate, stall, excess)
    weight = fo * mass
    coupled = q.largest_mass(ww, [(fo, 1.0), (s.f, load.ranks - 1.0)])
    extra = jnp.where(p["coupled"], excess, extra)
    weight = jnp.where(p["coupled"], coupled, weight)
    extra = jnp.concatenate([jnp.zeros_like(extra[:1]), extra])
    weight = jnp.concatenate([jnp.maximum(1.0 - jnp.sum(weight, 0), 0.0)[None], weight])
    return extra[:, None] + seen[None], weight[:, None] * zw[None]


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _quantiles(cdfs, probs, rank: int, params, bounds):
    """Every quantile of every distribution by one bisection in log time: ``cdfs[i](params[i],
    t)`` at ``probs[i]`` within ``bounds[i]`` (one array per distribution, the
    probabilities leading).

    Derivatives are implicit (the bisection's own would be its bracket's): where F(t; p)
    = P, dt = -(dF/dp . dp) / (dF/dt) at the quantile found, each CDF called with
    ``smooth`` = :data:`SMOOTH` (its atoms spread over that share of t, or that log-scale
    spread at least): a quantile at an atom (the closed loop's TTFT is a sum of steps)
    moves with the atom, where the CDF itself is flat on either side."""
    targets = [q.lead(list(ps), rank) for ps in probs]
    init = []
    for cdf, par, (lo, hi), tg in zip(cdfs, params, bounds, targets):
        a, b = jnp.log(lo)[None] + 0.0 * tg, jnp.log(hi)[None] + 0.0 * tg
        # the brackets take every axis the CDF's parameters have (a mixture's share may
        # vary along an axis its bounds do not)
        shape = jnp.broadcast_shapes(a.shape, jax.eval_shape(
            lambda v, cdf=cdf, par=par: cdf(par, v), jnp.exp(a)).shape)
        init.append((jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)))
    init = tuple(init)

    def body(_, brackets):
        out = []
        for cdf, par, tg, (a, b) in zip(cdfs, params, targets, brackets):
            m = 0.5 * (a + b)
            below = cdf(par, jnp.exp(m)) < tg
            out.append((jnp.where(below, m, a), jnp.where(below, b, m)))
        return tuple(out)

    brackets = jax.lax.fori_loop(0, BISECTIONS, body, init)
    return tuple(jnp.exp(0.5 * (a + b)) for a, b in brackets)


@_quantiles.defjvp
def _quantiles_jvp(cdfs, probs, rank, primals, tangents):
    params, bounds = primals
    found = _quantiles(cdfs, probs, rank, params, bounds)
    out = []
    for cdf, par, dpar, t in zip(cdfs, params, tangents[0], found):
        _, by_par = jax.jvp(lambda p_: cdf(p_, t, SMOOTH), (par,), (dpar,))
        _, by_t = jax.jvp(lambda t_: cdf(par, t_, SMOOTH), (t,), (jnp.ones_like(t),))
        steep = by_t > 0.0
        out.append(jnp.where(steep, -by_par / jnp.where(steep, by_t, 1.0), 0.0))
    return found, tuple(out)


def itl_quantiles(itl_gaps, weight, tau, span, long, rank: int):
    """P50/P90/P99 of the gaps between tokens: the mean field's (``itl_gaps``, from
    :func:`gaps`) mixed with share ``weight`` of lock-step waves', whose gaps are the
    wave's decode step ``tau`` but for a share ``long`` (1 / decode steps: each request's
    first), which waits for the rest of the wave's prefill, 0 to ``span`` beyond it
    (uniform). The quantiles of the mixture itself: a blend of the two's quantiles puts
    a median in the waves' long gaps where they are a few percent of the tokens."""
    gap, gap_w = itl_gaps

    def itl_at(par, v, smooth=0.0):  # atoms, spread over ``smooth`` of t in derivatives
        gap, gap_w, weight, tau, span, long = par
        lead = jnp.ndim(v) - rank
        nodes = jnp.reshape(v, jnp.shape(v)[:lead] + (1, 1) + jnp.shape(v)[lead:])
        field = jnp.sum(gap_w * q.ramp_cdf(nodes, gap, smooth * nodes), (lead, lead + 1))
        waves = ((1.0 - long) * q.ramp_cdf(v, tau, smooth * v)
                 + long * q.ramp_cdf(v, tau, jnp.maximum(span, smooth * v)))
        return weight * waves + (1.0 - weight) * field

    par = (gap, gap_w, weight, tau, span, long)
    lo = jnp.maximum(jnp.minimum(jnp.min(gap, (0, 1)), tau) * 0.5, 1e-12)
    hi = jnp.maximum(jnp.max(gap, (0, 1)), tau + span) * 2.0 + 1e-9
    (found,) = _quantiles((itl_at,), (PERCENTILES,), rank, (par,), ((lo, hi),))
    return found

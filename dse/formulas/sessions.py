"""Agentic sessions and KV-cache tiers (feature "sessions"), in closed form.

A session is ``turns`` requests (T: fixed, or lognormal with ``turns_cv`` over sessions,
rounded to whole turns) on one conversation: turn n + 1 (n = 0 .. T - 1 turns before
it) sends the shared system prompt s, the n earlier turns' inputs and outputs
(g = u + o tokens each) and u new tokens, P_n = s + n g + u, and generates o. Between a
turn's last token and the next turn's arrival the session thinks (tool calls, the user):
exponential gaps of mean Z = ``think_time_s`` (Z = 0: the next turn at once).

**Caches.** After each turn the replica that served it keeps the session's context
(n g tokens) in its HBM prefix cache (vLLM's automatic prefix caching, SGLang's radix
cache: the blocks of finished requests stay cached until evicted) and, where the study
gives tiers, writes it through to host DRAM and to SSD (LMCache, SGLang HiCache's
write-through, Dynamo KVBM; ``kv_offload`` = "prompt" keeps only the prompt's blocks
there, LMCache's default ``save_decode_cache = false``: a tier's copy lacks the turn's
o output tokens). The shared prefix stays in HBM (every turn refers to it). Each tier
evicts least recently used first.

**LRU as a TTL cache** (Che, Tung and Wang, "Hierarchical Web caching systems: modeling,
design and experimental results", IEEE JSAC 20(7), 2002; Fricker, Robert and Roberts,
"A versatile and accurate approximation for LRU cache performance", ITC 2012, for
renewal reference streams): an LRU cache of capacity C keeps an item for a
characteristic time tau after its last use, the tau at which the expected bytes held
equal C. A copy made at a turn's end is held until the session's next turn on that
replica (gap G) or for tau, whichever is first: min(G, tau); a session's last copy on a
replica is held for tau. With the session-start rate Lambda_r of a replica the tier
holds Lambda_r E[sum over a session's copies of bytes x lifetime] bytes: tau solves
that = C (bisection in log tau). The next turn finds the copy where G < tau: P(G < tau)
with G = W + (j - 1) R + Erlang(j, Z) for a copy made j turns before (R: a turn's
response time, W: its wait before the cache lookup). Tiers are inclusive (write-
through): a copy is in DRAM where its age is under tau_DRAM >= tau_HBM.

**Routing.** ``session-affinity`` and ``prefix-aware`` routers send every turn of a
session to the replica that served its last (p = 1); a ``random`` router (a plain load
balancer) sends it to any of the k replicas (p = 1 / k), where it finds the session's
copy from its last visit there, j turns before with probability p (1 - p)^(j - 1),
shorter by (j - 1) g tokens and older; each replica holds copies of the sessions it
served (duplicates). Copies more than :data:`RANDOM_TERMS` turns old are counted as
misses. A session-affinity router places sessions by hash, blind to load: the
sessions per replica vary (binomial) where prefix-aware routing balances them.

**Reload or recompute.** A prefix found in DRAM comes back over the device's host link
(``kv_dram_bw_bytes_per_s``, per device: each device loads its shard); one on SSD over
the replica's storage bandwidth (``kv_ssd_bw_bytes_per_s``) after ``kv_ssd_latency_s``.
The engine reloads where that is faster per token than prefilling it again (at the
engine's prefill rate), else recomputes (the tier then serves nothing). Reloads queue on
their link (M/G/1, Pollaczek-Khinchine) and add to the turn's TTFT, not to the engine's
steps (the engines load asynchronously: vLLM's KV connectors, LMCache, HiCache).

Everything is a closed form over per-turn-count sums (Faulhaber), evaluated at a few
quadrature nodes of T, so the whole grid is one array program.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import gammainc

from . import queueing as q

ROUTING = ("random", "session-affinity", "prefix-aware")
OFFLOAD = ("none", "prompt", "all")
RANDOM, AFFINITY, PREFIX_AWARE = 0.0, 1.0, 2.0
RANDOM_TERMS = 24  # earlier visits of a replica a random router's turn may find
TURN_NODES = 5  # quadrature nodes of the turns per session (turns_cv > 0)
TTL_BISECTIONS = 28  # in log tau over [TTL_LO, TTL_HI]: 3e-4 relative
TTL_LO, TTL_HI = 1e-3, 1e9  # seconds


class Sessions(NamedTuple):
    """The session workload and the KV tiers of one replica (per-device bytes where
    noted); ``k`` the replicas the router spreads the sessions over."""

    turns: Any
    turns_cv: Any
    turn_input: Any  # u: new tokens per turn
    shared_prefix: Any  # s
    think_s: Any  # Z
    sessions: Any  # closed: concurrent sessions of the deployment (0: open)
    session_rate: Any  # open: sessions per second to the deployment
    dram_bytes: Any  # per replica
    dram_bw: Any  # bytes/s of each device's host link
    ssd_bytes: Any  # per replica
    ssd_bw: Any  # bytes/s of the replica's storage
    ssd_latency_s: Any
    offload: Any  # 0 none, 1 prompt, 2 all
    routing: Any  # 0 random, 1 session-affinity, 2 prefix-aware
    replicas: Any  # k
    dram_usd_per_byte_s: Any = 0.0  # the tiers' price
    ssd_usd_per_byte_s: Any = 0.0


class Turns(NamedTuple):
    """Per-session sums at the nodes of T (leading axis), with their weights."""

    t: Any  # turns at the node
    w: Any  # the node's share of sessions


def turn_nodes(ss: Sessions) -> Turns:
    """Turns per session at lognormal quadrature nodes, whole and at least 1."""
    nodes, weights = q.lognormal_nodes(ss.turns, ss.turns_cv ** 2, TURN_NODES)
    return Turns(jnp.maximum(jnp.round(nodes), 1.0), weights)


def mean_turns(tn: Turns):
    return jnp.sum(tn.w * tn.t, 0)


def _s1(x):  # sum_{n=0}^{x-1} n
    return x * (x - 1.0) / 2.0


def _s2(x):  # sum_{n=0}^{x-1} n^2
    return (x - 1.0) * x * (2.0 * x - 1.0) / 6.0


def prompt_per_turn(ss: Sessions, output_len, tn: Turns):
    """The mean prompt of a turn (over turns): s + u + g E[sum n] / E[T]."""
    g = ss.turn_input + output_len
    total = jnp.sum(tn.w * (tn.t * (ss.shared_prefix + ss.turn_input) + g * _s1(tn.t)), 0)
    return total / mean_turns(tn)


class _Terms(NamedTuple):
    """Sums over a session's turns for a copy made j turns before the turn that finds it
    (axes: [j, T node, point axes])."""

    j: Any
    w: Any  # p (1 - p)^(j - 1): the turn's replica last saw the session j turns before
    cnt: Any  # turns with a copy j turns old: max(T - j, 0)
    a: Any  # sum over them of (n + 1 - j): the copy's turns
    n1: Any  # sum of n
    n2: Any  # sum of n^2
    a2: Any  # sum of (n + 1 - j)^2


def _terms(tn: Turns, p, n_terms: int) -> _Terms:
    rank = jnp.ndim(tn.t)
    j = jnp.reshape(jnp.arange(1, n_terms + 1, dtype=jnp.result_type(float)),
                    (n_terms,) + (1,) * rank)
    t = tn.t[None]
    cnt = jnp.maximum(t - j, 0.0)
    has = cnt > 0.0
    n1 = jnp.where(has, _s1(t) - _s1(j), 0.0)
    n2 = jnp.where(has, _s2(t) - _s2(j), 0.0)
    a = cnt * (cnt + 1.0) / 2.0
    a2 = cnt * (cnt + 1.0) * (2.0 * cnt + 1.0) / 6.0
    w = p * (1.0 - p) ** (j - 1.0)
    return _Terms(j, w, cnt, a, n1, n2, a2)


def _age(tau, j, wait, response, think):
    """(P(G_j < tau), E[min(G_j, tau)]) of the gap G_j = wait + (j - 1) response +
    Erlang(j, think) (think 0: no gap but the shift)."""
    shift = wait + (j - 1.0) * response
    t = tau - shift
    z = jnp.maximum(think, 1e-30)
    x = jnp.maximum(t, 0.0) / z
    f = gammainc(j, x)
    f2 = gammainc(j + 1.0, x)
    inside = t * (1.0 - f) + j * think * f2
    timed = think > 0.0
    f = jnp.where(timed, jnp.where(t > 0.0, f, 0.0), (t > 0.0).astype(x.dtype))
    held = jnp.where(t > 0.0, shift + jnp.where(timed, inside, 0.0), tau)
    return f, jnp.minimum(held, tau)


def _bytes_held(tau, terms: _Terms, tn: Turns, g, drop, kappa, wait, response, think):
    """Bytes-seconds per session a tier holds at characteristic time tau (session-
    weighted over the T nodes): copies held until the replica's next turn of the session
    or tau; ``drop`` tokens of each copy not kept (the prompt policy's last output)."""
    _, held = _age(tau, terms.j, wait, response, think)
    length = g * terms.a - drop * terms.cnt  # tokens of the copies that see a next turn
    t = tn.t
    every = g * t * (t + 1.0) / 2.0 - drop * t  # tokens of all the session's copies
    per = jnp.sum(terms.w * length * (held - tau), 0) + tau * every
    live = jnp.sum(terms.w * length * held, 0)
    return kappa * jnp.sum(tn.w * per, 0), kappa * jnp.sum(tn.w * live, 0)


def characteristic_time(capacity, rate, terms, tn, g, drop, kappa, wait, response, think):
    """The TTL tau at which the tier holds ``capacity`` bytes (0 where it holds nothing,
    TTL_HI where every session fits), and the bytes of copies a later turn finds."""
    full, _ = _bytes_held(TTL_HI + 0.0 * capacity, terms, tn, g, drop, kappa, wait, response,
                          think)
    zero = 0.0 * (full + capacity + rate)
    lo = jnp.log(TTL_LO) + zero
    hi = jnp.log(TTL_HI) + zero

    def body(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        held, _ = _bytes_held(jnp.exp(mid), terms, tn, g, drop, kappa, wait, response, think)
        over = rate * held > capacity
        return jnp.where(over, lo, mid), jnp.where(over, mid, hi)

    lo, hi = jax.lax.fori_loop(0, TTL_BISECTIONS, body, (lo, hi))
    tau = jnp.exp(0.5 * (lo + hi))
    tau = jnp.where(rate * full <= capacity, TTL_HI, tau)
    tau = jnp.where(capacity > 0.0, tau, 0.0)
    _, live = _bytes_held(tau, terms, tn, g, drop, kappa, wait, response, think)
    return tau, rate * live


class Cache(NamedTuple):
    """A turn's cache outcome, as per-turn means over sessions."""

    prompt: Any  # P: prompt tokens
    computed: Any  # tokens prefilled
    computed_cv: Any  # their coefficient of variation over turns
    hbm_hit: Any  # shares of prompt tokens served from each tier
    dram_hit: Any
    ssd_hit: Any
    reload_s: Any  # mean seconds a turn waits for its prefix from DRAM and SSD
    link_busy: Any  # the busier reload link's utilization (>= 1: overloaded)
    dram_used: Any  # bytes per device of DRAM copies a later turn finds
    ssd_used: Any
    tau: Any  # (HBM, DRAM, SSD) characteristic times, stacked


def cache(ss: Sessions, output_len, tn: Turns, n_terms: int, *, rate, hbm_free, kappa,
          devices, wait, response, recompute_per_token) -> Cache:
    """The caches of one replica at session-start ``rate`` (sessions/s), ``hbm_free``
    bytes per device for idle copies, ``kappa`` KV bytes per token per device,
    ``devices`` per replica, a turn's ``wait`` before its lookup and ``response`` time,
    and the engine's prefill seconds per token (what a reload must beat)."""
    u, s, think = ss.turn_input, ss.shared_prefix, ss.think_s
    g = u + output_len
    drop = jnp.where(ss.offload == 1.0, output_len, 0.0)
    p = jnp.where(ss.routing == RANDOM, 1.0 / jnp.maximum(ss.replicas, 1.0), 1.0)
    terms = _terms(tn, p, n_terms)
    args = (rate, terms, tn, g)
    tier_on = ss.offload > 0.0
    tau1, _ = characteristic_time(hbm_free, *args, 0.0, kappa, wait, response, think)
    tau2, dram_used = characteristic_time(jnp.where(tier_on, ss.dram_bytes / devices, 0.0),
                                          *args, drop, kappa, wait, response, think)
    tau3, ssd_used = characteristic_time(jnp.where(tier_on, ss.ssd_bytes / devices, 0.0),
                                         *args, drop, kappa, wait, response, think)
    tau2 = jnp.maximum(tau2, tau1)
    tau3 = jnp.maximum(tau3, tau2)
    f1, _ = _age(tau1, terms.j, wait, response, think)
    f2, _ = _age(tau2, terms.j, wait, response, think)
    f3, _ = _age(tau3, terms.j, wait, response, think)
    f2, f3 = jnp.maximum(f2, f1), jnp.maximum(jnp.maximum(f3, f2), f1)
    # reload where it beats prefilling the tokens again (the SSD's latency spread over a
    # mean turn's context)
    mean_t = mean_turns(tn)
    context = prompt_per_turn(ss, output_len, tn) - u
    dram_per_token = jnp.where(ss.dram_bw > 0.0, kappa / jnp.maximum(ss.dram_bw, 1e-30), 0.0)
    ssd_per_token = jnp.where(ss.ssd_bw > 0.0, kappa * devices / jnp.maximum(ss.ssd_bw, 1e-30),
                              0.0)
    use_dram = (ss.dram_bw > 0.0) & (dram_per_token < recompute_per_token)
    use_ssd = (ss.ssd_bw > 0.0) & (ssd_per_token + ss.ssd_latency_s / jnp.maximum(context, 1.0)
                                   < recompute_per_token)
    hbm = f1
    dram = jnp.where(use_dram, f2 - f1, 0.0)
    ssd = jnp.where(use_ssd, f3 - f1 - dram, 0.0)
    miss = jnp.maximum(1.0 - hbm - dram - ssd, 0.0)
    w = terms.w
    tier_tokens = g * terms.a - drop * terms.cnt  # a tier copy's tokens, summed over turns

    def per_session(x):  # sum over j, then weighted over the T nodes
        return jnp.sum(tn.w * jnp.sum(x, 0), 0)

    t = tn.t
    prompt = jnp.sum(tn.w * (t * (s + u) + g * _s1(t)), 0)
    hbm_tok = jnp.sum(tn.w * s * t, 0) + per_session(w * hbm * g * terms.a)
    dram_tok = per_session(w * dram * tier_tokens)
    ssd_tok = per_session(w * ssd * tier_tokens)
    computed = prompt - hbm_tok - dram_tok - ssd_tok
    # second moment of the tokens a turn prefills: hits (u + (j - 1) g, and the output a
    # prompt-only tier lacks), misses (its whole context but the shared prefix)
    hit_c = u + (terms.j - 1.0) * g
    miss_sq = g * g * terms.n2 + 2.0 * g * u * terms.n1 + u * u * terms.cnt
    all_sq = jnp.sum(tn.w * (g * g * _s2(t) + 2.0 * g * u * _s1(t) + u * u * t), 0)
    comp2 = (per_session(w * hbm * terms.cnt * hit_c ** 2)
             + per_session(w * (dram + ssd) * terms.cnt * (hit_c + drop) ** 2)
             + per_session(w * miss * miss_sq) + all_sq - per_session(w * miss_sq))
    turns = mean_t
    mean_c = computed / turns
    cv2 = jnp.maximum(comp2 / turns / jnp.maximum(mean_c, 1e-30) ** 2 - 1.0, 0.0)
    # reloads: each link a FIFO queue (M/G/1) fed at the turn rate
    turn_rate = rate * turns
    tier_sq = g * g * terms.a2 - 2.0 * g * drop * terms.a + drop * drop * terms.cnt

    def link(share, per_token, latency):
        count = per_session(w * share * terms.cnt) / turns  # reload jobs per turn
        tokens = per_session(w * share * tier_tokens) / turns
        sq = per_session(w * share * tier_sq) / turns
        mean = tokens * per_token + count * latency
        second = sq * per_token ** 2 + 2.0 * tokens * per_token * latency + count * latency ** 2
        busy = turn_rate * mean
        wait_q = turn_rate * second / (2.0 * jnp.maximum(1.0 - busy, 1e-9))
        return mean + count * wait_q, busy

    dram_s, dram_busy = link(dram, dram_per_token, 0.0)
    ssd_s, ssd_busy = link(ssd, ssd_per_token, ss.ssd_latency_s)
    return Cache(prompt / turns, mean_c, jnp.sqrt(jnp.maximum(cv2, 1e-12)), hbm_tok / prompt,
                 dram_tok / prompt,
                 ssd_tok / prompt, dram_s + ssd_s, jnp.maximum(dram_busy, ssd_busy),
                 dram_used, ssd_used, jnp.stack(jnp.broadcast_arrays(tau1, tau2, tau3)))

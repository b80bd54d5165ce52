"""A deployment's outputs under a request load (feature "load"): the engine step
(:mod:`dse.formulas.engine`) run by the load model (:mod:`dse.formulas.load`).

The deployment's dp replicas share the load evenly (concurrency / dp clients or
request_rate / dp arrivals each). An MoE model's dp ranks whose experts span them
(ep > 1: attention data parallelism) run their steps in lock-step, so a rank's decodes
wait on every rank's prompt work (``ranks`` of :class:`dse.formulas.load.Load`). A replica's running-batch cap is max_num_seqs (the
framework's default when 0), at most the requests its KV memory holds: the memory left
after the weights and a full step's activations, over the cache of a running request at
its mean length (the prompt and half its output, size-biased:
input_len + output_len (1 + cv^2) / 2). Points with neither concurrency nor request_rate
keep the static batch's outputs; their percentiles are the static latencies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import engine, load, memory, sessions, vision
from .types import ModelSpec, Options, Parallel, Power, Precision, Rates, Serving, Workload


def _mean_held(w: Workload, sv: Serving):
    """Tokens a running request holds on average (its prompt and half its output)."""
    return w.input_len + w.output_len * (1.0 + sv.output_len_cv ** 2) / 2.0


def spec_step_tokens(k, accepted, a):
    """Mean tokens a speculative decode step yields per sequence: ``accepted`` where
    given (> 0), else from the per-token acceptance probability a, with the draft's k
    tokens accepted in order until the first rejection and one token from the verify
    pass: (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, Eq. 1); 1 without drafts."""
    sure = a >= 1.0
    derived = jnp.where(sure, k + 1.0, (1.0 - a ** (k + 1.0)) / jnp.where(sure, 1.0, 1.0 - a))
    return jnp.where(k > 0.0, jnp.where(accepted > 0.0, accepted, derived), 1.0)


def replica_load(m: ModelSpec, s, p: Precision, w: Workload, sv: Serving, rates: Rates,
                 par: Parallel, o: Options, features: frozenset, capacity, weights):
    """(engine step model, load, lengths, KV bytes per running request, activation bytes,
    requests the KV memory holds) of one replica."""
    with node_axes():
        return _replica_load(m, s, p, w, sv, rates, par, o, features, capacity, weights)


def draft_share(m: ModelSpec, spec):
    """The draft layer's weights and cache over the model's (speculative decoding with a
    draft layer of the model, as DeepSeek's MTP module: one more layer, one more layer's
    KV): 1 / n_layers with drafts, 0 without."""
    return jnp.where(spec > 0.0, 1.0 / m.n_layers, 0.0)


def _replica_load(m, s, p, w, sv, rates, par, o, features, capacity, weights):
    mla = "mla" in features
    spec = sv.spec_tokens if "mtp" in features else None
    held = _mean_held(w, sv)
    per_seq = memory.kv_cache_bytes(m, s, p, par.pp, 1.0, held, mla)
    if spec is not None:
        per_seq = per_seq * (1.0 + draft_share(m, spec))
        weights = weights * (1.0 + draft_share(m, spec))
    act = memory.activation_bytes(m, s, p, par, 1.0, sv.max_num_tokens, 0.0, o.flash)
    room = capacity - weights - act
    holds = jnp.maximum(jnp.floor(room / jnp.maximum(per_seq, 1e-30)), 0.0)
    slots = jnp.maximum(jnp.minimum(sv.max_num_seqs, holds), 1.0)
    largest = slots + sv.max_num_tokens if spec is None else slots * (spec + 1.0) + (
        sv.max_num_tokens)
    sm = engine.step_model(m, s, p, rates, par, o, features, largest,
                           w.input_len, held, sv.max_num_tokens, sv.prefix_cache_hit, spec)
    if "vision" in features:  # the encoder's time per request, over its prompt tokens
        one = vision.encoder(m, 1.0, o.image_tokens, p.act_bits, rates, par.tp).time_s
        sm = sm._replace(prompt_vision_s=one / jnp.maximum(w.input_len, 1.0))
    # a decode step of a speculative engine yields spec_step_tokens tokens per sequence:
    # the load model runs its steps, 1 + (output_len - 1) / E of them per request
    out_len = w.output_len if spec is None else 1.0 + (w.output_len - 1.0) / sv.spec_step_tokens
    # attention-DP: the dp ranks of an MoE model whose experts span them (ep > 1) run each
    # step together (the experts' all-to-all), each rank with its own share of the load
    ranks = jnp.where((m.n_experts > 0.0) & (par.ep > 1.0), par.dp, 1.0)
    ld = load.Load(sv.request_rate / par.dp, sv.concurrency / par.dp, sv.arrival_cv, slots,
                   sv.max_num_tokens, sv.separate, sv.prefix_cache_hit, ranks,
                   sv.adp_balance_iters, prompts=sv.num_prompts / par.dp,
                   poll=jnp.maximum(sv.recv_interval, 1.0))
    lengths = load.Lengths(w.input_len, sv.input_len_cv, out_len, sv.output_len_cv)
    return sm, ld, lengths, per_seq, act, holds, room


def under_load(m: ModelSpec, s, p: Precision, w: Workload, sv: Serving, rates: Rates,
               par: Parallel, o: Options, features: frozenset, capacity, weights,
               power: Power, static: dict, ss: sessions.Sessions | None = None) -> dict:
    """The inference outputs of the points under load, the ``static`` ones elsewhere;
    with ``ss`` (feature "sessions") the load is agentic sessions over KV-cache tiers."""
    with node_axes():
        return _under_load(m, s, p, w, sv, rates, par, o, features, capacity, weights, power,
                           static, ss)


def _per_token(res: dict, tokens) -> dict:
    """The load model's outputs over speculative steps, as per-token TPOT: each step's
    time over the ``tokens`` it yields per sequence (its TPOT, percentiles and CDF)."""
    out = dict(res, tpot_s=res["tpot_s"] / tokens)
    for q in ("p50", "p90", "p99"):
        for name in ("tpot", "itl"):  # a gap between tokens: a step over what it yields
            if f"{name}_{q}_s" in res:
                out[f"{name}_{q}_s"] = res[f"{name}_{q}_s"] / tokens
    if "tpot_cdf" in res:
        cdf = res["tpot_cdf"]
        out["tpot_cdf"] = lambda v: cdf(v * tokens)
    return out


def node_axes():
    """The load model's quadrature, quantile and table nodes lead the point axes and
    broadcast against them as numpy broadcasts (rank promotion), whatever the caller's
    JAX setting. A new context each time: JAX's context object keeps the value it
    replaced on itself, so one object entered twice (nested) would restore the wrong
    setting on leaving."""
    return jax.numpy_rank_promotion("allow")


SESSION_SEARCH = 10  # bisection steps of a closed loop's turn rate
SESSION_INNER = 3  # passes of the caches with the load per step
SESSION_RELAX = 4  # relaxations after the search (an open loop: all of them)
_SESSION_KEEP = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "request_throughput_req_s",
                 "running_batch", "capacity_req_s", "utilization", "overloaded", "ttft_p50_s",
                 "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
                 "e2e_p50_s", "e2e_p90_s", "e2e_p99_s", "itl_p50_s", "itl_p90_s", "itl_p99_s")


def _session_serve(step_of, sm, ld: load.Load, lengths: load.Lengths, ss, sv: Serving,
                   par: Parallel, per_seq, room, kappa, output_len, features, spec_tokens):
    """The load model under agentic sessions (:mod:`dse.formulas.sessions`): returns
    (its outputs with the prefix reloads in TTFT and E2E, the caches, the serving load
    as a request load, the mean turns of a session).

    A replica's turns enter the engine as requests of the mean turn's prompt, of which
    the cached share h is not prefilled, the prefilled tokens spread as the turns' are
    (coefficient of variation over hits and misses). The caches depend on the load (the
    running requests' KV leaves the rest of HBM to idle copies; the response time ages
    them) and the load on the caches. Open sessions (session_rate) send turns at rate x
    turns, relaxed with their caches SESSION_SEARCH x SESSION_INNER + SESSION_RELAX
    times. Closed sessions are the finite-source loop N / k = X (T R + (T - 1) Z) / T,
    solved by bisection on the turn rate X (SESSION_SEARCH trials of SESSION_INNER passes
    of the caches each) of an open loop: a turn meets the other sessions' turns as
    Poisson arrivals. The load model's CDFs are read at the study's SLOs only
    (goodput)."""
    tn = sessions.turn_nodes(ss)
    turns = sessions.mean_turns(tn)
    k = jnp.maximum(par.dp, 1.0)
    closed = ss.sessions > 0.0
    open_rate = ss.session_rate * turns / k
    devices = par.tp * par.pp
    n_terms = sessions.RANDOM_TERMS if "sessions_random" in features else 1
    budget = ld.budget
    step0 = step_of(sm)
    recompute = (step0(0.0, budget, 1.0) - step0(0.0, 0.0, 0.0)) / jnp.maximum(budget, 1.0)
    pinned = ss.shared_prefix * kappa

    # A closed loop's turn meets the turns of the other sessions only (the arrival
    # theorem of closed networks: an arrival sees the loop without itself): N - 1 of them
    # spread over the replicas (random: each turn anywhere; prefix-aware: balanced, N / k - 1
    # others beside it), or, by hash (session-affinity), Binomial(N - 1, 1 / k) others on
    # its replica, as two points of that mean and variance (load.serve at each)
    n = ss.sessions
    mean_others = jnp.where(ss.routing == sessions.RANDOM, (n - 1.0) / k,
                            jnp.maximum(n / k - 1.0, 0.0))
    mean_others = jnp.where(ss.routing == sessions.AFFINITY, (n - 1.0) / k, mean_others)
    var_others = jnp.where(ss.routing == sessions.AFFINITY,
                           jnp.maximum(n - 1.0, 0.0) / k * (1.0 - 1.0 / k), 0.0)
    # (sqrt at a floor: its derivative at 0 would turn a zero tangent into NaN)
    mu, sd = jnp.maximum(mean_others, 0.0), jnp.sqrt(jnp.maximum(var_others, 1e-20))
    split = mu >= sd  # mu -/+ sd, half each; else 0 and (sd^2 + mu^2) / mu
    high = jnp.where(split, mu + sd, jnp.where(mu > 0.0, (sd * sd + mu * mu) / jnp.maximum(
        mu, 1e-30), 0.0))
    low = jnp.where(split, mu - sd, 0.0)
    p_high = jnp.where(split, 0.5, mu * mu / jnp.maximum(sd * sd + mu * mu, 1e-30))
    others = jnp.stack(jnp.broadcast_arrays(low, high))
    weights = jnp.stack(jnp.broadcast_arrays(1.0 - p_high, p_high))
    per_session = k / jnp.maximum(n, 1.0)  # a session's share of its replica's turns

    def run(h, cv, rate):
        hit_sm = sm._replace(prompt_attention_s=sm.prompt_attention_s * (1.0 + h),
                             prompt_attention_stage_s=sm.prompt_attention_stage_s * (1.0 + h))
        seen = jnp.where(closed, jnp.maximum(rate * per_session * others, 1e-6 * rate),
                         rate + 0.0 * others)
        depth = jnp.ndim(seen)  # the two points lead the point axes

        def lift(v):
            v = jnp.asarray(v)
            return jnp.reshape(v, (1,) * (depth - v.ndim) + v.shape)

        res = load.serve(step_of(hit_sm),
                         load.Lengths(*map(lift, lengths._replace(input_cv=cv))),
                         load.Load(*map(lift, ld._replace(rate=seen, clients=0.0 * seen,
                                                          prefix_hit=h, idle=1.0))))
        # a turn arrives a think time after its own last step: where that is short, the
        # engine is inside the step it began then, not a random one (Poisson arrivals
        # wait E[tau^2] / 2 E[tau] ~ tau / 2 of it; think D ~ Exp(Z) leaves E[(tau - D)+]
        # = tau - Z (1 - exp(-tau / Z)), and the Poisson residual past it)
        tau = res["mean_step_s"]
        z = ss.think_s
        near = jnp.exp(-tau / jnp.maximum(z, 1e-30))
        left = jnp.where(z > 0.0, tau - z * (1.0 - near), tau)
        running = 1.0 - jnp.exp(-seen * res["e2e_s"])  # the others' occupancy (Poisson)
        extra = jnp.where(closed, running * (left + jnp.where(z > 0.0, near, 0.0) * tau / 2.0
                                            - tau / 2.0), 0.0)
        res = dict(res, ttft_s=res["ttft_s"] + extra, e2e_s=res["e2e_s"] + extra,
                   queue_s=res["queue_s"] + extra,
                   **{f"{m}_{q_}_s": res[f"{m}_{q_}_s"] + extra for m in ("ttft", "e2e")
                      for q_ in ("p50", "p90", "p99")})
        for key in ("ttft_cdf",):
            res[key] = (lambda f, e: lambda v: f(v - e))(res[key], extra)
        out = {}
        for key, v in res.items():
            if key.endswith("_cdf"):
                out[key] = (lambda f: lambda x: jnp.sum(weights * f(x[None]), 0))(v)
            elif key == "overloaded":
                out[key] = jnp.any(v & (weights > 0.0), 0)
            else:
                out[key] = jnp.sum(weights * jnp.where(weights > 0.0, v, 0.0), 0)
        # the closed loop's own throughput, and its decoding turns by Little's law
        decoding = rate * (out["e2e_s"] - out["ttft_s"])
        return dict(out, request_throughput_req_s=jnp.where(
            closed, rate, out["request_throughput_req_s"]), running_batch=jnp.where(
            closed, decoding, out["running_batch"]))

    def caches(res, reload):
        x = jnp.where(res["overloaded"], res["capacity_req_s"], res["request_throughput_req_s"])
        response = res["e2e_s"] + reload
        response = jnp.where(jnp.isfinite(response), response, 1e9)
        running = jnp.where(jnp.isfinite(res["running_batch"]), res["running_batch"], 0.0)
        free = room - running * per_seq - pinned
        # (a turn looks its prefix up when it arrives: its copy's age is the think time)
        return sessions.cache(ss, output_len, tn, n_terms, rate=x / turns,
                              hbm_free=jnp.maximum(free, 0.0), kappa=kappa, devices=devices,
                              wait=0.0, response=response, recompute_per_token=recompute)

    # the closed loop's bracket: no faster than its sessions thinking and decoding at the
    # fastest decode steps they can run (load.fastest_decode_step)
    one = step0(1.0, 0.0, 0.0)
    alone = output_len * load.fastest_decode_step(step0, jnp.minimum(ss.sessions / k, ld.slots),
                                                  one)
    top = jnp.log(jnp.maximum(ss.sessions / k * turns / jnp.maximum(
        (turns - 1.0) * ss.think_s + turns * alone, 1e-30), 1e-30))
    zero = 0.0 * (one + per_seq + room + turns + top + open_rate
                  + sum(lengths) + sum(ld) + sum(ss))
    # the load model's outputs and the caches are carried from the last relaxation (one
    # program for the load model: its CDFs are read at the SLOs there)
    keys = [k_ for k_ in _SESSION_KEEP]
    parts = [f for f in sessions.Cache._fields if f != "tau"]
    slo_ttft = jnp.maximum(sv.ttft_slo_s - sv.frontend_s, 1e-12)
    slo_tpot = sv.tpot_slo_s * spec_tokens

    def body(i, carry):
        state, fitted, lo, hi, edge, kept_old, got_old, taken = carry
        h, cv, reload = state
        searching = i < SESSION_SEARCH * SESSION_INNER
        decide = searching & (i % SESSION_INNER == SESSION_INNER - 1)
        # the bisection's trials (SESSION_INNER relaxations each, the last deciding),
        # then relaxations at the last trial that fitted
        rate = jnp.where(closed, jnp.exp(jnp.where(searching, 0.5 * (lo + hi), lo)), open_rate)
        # (derivatives hold the trial rate: a bisection has none of its own, and a
        # closed loop's sensitivities are finite differences, dse.sensitivity; an open
        # loop's rate is the study's, its caches' relaxations carry their derivatives)
        rate = jax.lax.stop_gradient(rate)
        res = run(h, cv, rate)
        c = caches(res, reload)
        target = ss.sessions / k * turns / jnp.maximum(
            turns * (res["e2e_s"] + reload) + (turns - 1.0) * ss.think_s, 1e-30)
        new_h = jnp.clip(1.0 - c.computed / jnp.maximum(c.prompt, 1e-30), 0.0, 0.999)
        # a trial fits where the sessions keep up at it (its caches from SESSION_INNER
        # passes down from the caches of no load: the largest fixed point, the branch
        # where the running requests have not evicted the idle prefixes)
        high = res["overloaded"] | ~jnp.isfinite(target) | (rate > target)
        mid = 0.5 * (lo + hi)
        lo = jnp.where(decide & ~high, mid, lo)
        hi = jnp.where(decide & high, mid, hi)
        edge = jnp.where(decide & high, res["overloaded"], edge)

        def fit(v):
            return jnp.broadcast_to(jnp.asarray(v, zero.dtype), zero.shape)

        # a closed loop held at the engine's limit (where the turn's time climbs too
        # steeply with the rate for the bisection to resolve, or past overloaded
        # trials): the rest of the turn's time by Little's law, N / k = X (T R + (T - 1)
        # Z) / T, waits in the queue before its prompt (as a closed loop's clients
        # beyond the slots: dse.formulas.load.serve); applied after the search where
        # that holds
        little = (ss.sessions / k * turns / jnp.maximum(rate, 1e-30)
                  - (turns - 1.0) * ss.think_s) / turns
        wait = jnp.maximum(little - res["e2e_s"] - c.reload_s, 0.0)
        wait = jnp.where(closed & jnp.isfinite(wait), wait, 0.0)
        kept = {k_: fit(res[k_]) for k_ in keys}
        kept.update(ttft_meets=fit(res["ttft_cdf"](jnp.maximum(slo_ttft - c.reload_s, 1e-12))),
                    ttft_meets_held=fit(res["ttft_cdf"](jnp.maximum(
                        slo_ttft - c.reload_s - wait, 1e-12))),
                    tpot_meets=fit(res["tpot_cdf"](slo_tpot)), rate=fit(rate), wait=fit(wait))
        got = {f: fit(getattr(c, f)) for f in parts}
        passed = (new_h, c.computed_cv, c.reload_s)
        relaxed = tuple(jnp.where(res["overloaded"], old, 0.5 * (old + new)) for old, new in
                        zip(state, passed))
        # A closed loop's trial starts from the caches of no load and takes SESSION_INNER
        # passes (monotone: more hits leave more room); its outputs are those of its
        # last trial that fitted, from whose state it relaxes past the search where that
        # stays consistent. An open loop relaxes throughout (an overloaded relaxation
        # carries no caches).
        good = ~high
        take = jnp.where(closed, jnp.where(searching, decide & good, good), ~res["overloaded"])
        fitted = tuple(jnp.where(take, p_, f) for f, p_ in zip(fitted, passed))
        state = tuple(jnp.where(closed, jnp.where(decide, s0, jnp.where(
            searching | good, p_, f)), r) for s0, p_, r, f in zip(first, passed, relaxed, fitted))

        # (an open load that overloads every relaxation keeps its last: overloaded, not
        # the blank start)
        take = take | ((i == SESSION_SEARCH * SESSION_INNER + SESSION_RELAX - 1) & ~taken)

        def keep(new, old):
            return {k_: jnp.where(take, new[k_], old[k_]) for k_ in new}

        return (state, fitted, lo, hi, edge, keep(kept, kept_old), keep(got, got_old),
                taken | take)

    # the caches' first guess: no load (no running requests, no waits), turns at the
    # rate of their decode steps at batch 1 (the closed loop: its bracket's middle)
    guess = jnp.where(closed, jnp.exp(top - 4.6), open_rate)
    c0 = sessions.cache(ss, output_len, tn, n_terms, rate=guess / turns,
                        hbm_free=jnp.maximum(room - pinned, 0.0), kappa=kappa, devices=devices,
                        wait=0.0, response=0.0, recompute_per_token=recompute)
    h0 = jnp.clip(1.0 - c0.computed / jnp.maximum(c0.prompt, 1e-30), 0.0, 0.999)
    blank = {k_: zero for k_ in (*keys, "ttft_meets", "ttft_meets_held", "tpot_meets", "rate",
                                 "wait")}
    first = (zero + h0, zero + c0.computed_cv, zero)
    init = (first, first, zero + top - 9.2, zero + top, zero > 1.0, blank,
            {f: zero for f in parts}, zero > 1.0)
    _, _, lo, hi, _, kept, got, _ = jax.lax.fori_loop(
        0, SESSION_SEARCH * SESSION_INNER + SESSION_RELAX, body, init)
    c = sessions.Cache(**got, tau=None)
    rate = kept.pop("rate")
    # held at the engine's limit where the wait Little's law leaves is more than the
    # bracket's width can account for (the turn's cycle known to that share)
    wait = kept.pop("wait")
    cycle = ss.sessions / k / jnp.maximum(rate, 1e-30)
    held = closed & (wait > 2.0 * jnp.expm1(hi - lo) * cycle)
    wait = jnp.where(held, wait, 0.0)
    ttft_meets = jnp.where(held, kept.pop("ttft_meets_held"), kept.pop("ttft_meets"))
    tpot_meets = kept.pop("tpot_meets")
    kept = {k_: v + wait if k_.startswith(("ttft", "e2e", "queue")) else v
            for k_, v in kept.items()}
    shift = c.reload_s
    res = dict(kept, ttft_s=kept["ttft_s"] + shift, e2e_s=kept["e2e_s"] + shift,
               overloaded=(kept["overloaded"] > 0.5) | (c.link_busy >= 1.0),
               ttft_cdf=lambda v: ttft_meets, tpot_cdf=lambda v: tpot_meets)
    for q_ in ("p50", "p90", "p99"):
        res[f"ttft_{q_}_s"] = res[f"ttft_{q_}_s"] + shift
        res[f"e2e_{q_}_s"] = res[f"e2e_{q_}_s"] + shift
    sv = sv._replace(concurrency=0.0 * rate, request_rate=rate * k,
        prefix_cache_hit=1.0 - c.computed / jnp.maximum(c.prompt, 1e-30))
    return res, c, sv, turns


def _under_load(m, s, p, w, sv, rates, par, o, features, capacity, weights, power, static,
                ss=None):
    sm, ld, lengths, per_seq, act, holds, room = replica_load(m, s, p, w, sv, rates, par, o,
                                                               features, capacity, weights)
    rank = max(jnp.ndim(x) for x in (*lengths, *ld, *(ss if ss is not None else ())))

    spec = sv.spec_tokens if "mtp" in features else None

    def step_of(sm):
        def step(decode, prompt, chunks):
            return engine.step_time(sm, decode, prompt, chunks, rank, spec=spec)
        return step

    step = step_of(sm)
    if ss is not None:
        kappa = memory.kv_bytes_per_cached_token(m, s, p, par.pp, "mla" in features)
        res, cached, sv, turns = _session_serve(step_of, sm, ld, lengths, ss, sv, par, per_seq,
                                                room, kappa, w.output_len, features,
                                                sv.spec_step_tokens if spec is not None else 1.0)
    else:
        res = load.serve(step, lengths, ld)
    if spec is not None:  # per token: a step's time over the tokens it yields
        res = _per_token(res, sv.spec_step_tokens)
        weights = weights * (1.0 + draft_share(m, spec))
    loaded = (sv.concurrency > 0.0) | (sv.request_rate > 0.0)
    over = loaded & res["overloaded"]
    nan = jnp.nan

    def latency(v):
        return jnp.where(over, nan, v)

    n_devices = static["n_devices"]
    # the frontend (HTTP server, tokenizer, detokenizer, the client) adds its time to every
    # request's TTFT and E2E; a closed loop's clients spend it outside the engine, which
    # then runs fewer of them: X = min(X_engine, c / (n / X_engine + f)), n the clients
    # in the engine (at most its slots)
    front = sv.frontend_s + jnp.zeros_like(res["ttft_s"])  # (0 * TTFT: NaN where overloaded)
    clients = sv.concurrency / par.dp
    x = res["request_throughput_req_s"]
    in_engine = jnp.minimum(clients, jnp.maximum(jnp.minimum(sv.max_num_seqs, holds), 1.0))
    x = jnp.where(sv.concurrency > 0.0, jnp.minimum(x, clients / jnp.maximum(
        in_engine / jnp.maximum(x, 1e-30) + front, 1e-30)), x)
    requests = jnp.where(over, res["capacity_req_s"], x) * par.dp
    throughput = requests * w.output_len

    def meets(cdf, slo, shift=0.0):
        return jnp.where(slo > shift, cdf(jnp.maximum(slo - shift, 1e-12)),
                         jnp.where(slo > 0.0, 0.0, 1.0))

    good = (requests * meets(res["ttft_cdf"], sv.ttft_slo_s, front)
            * meets(res["tpot_cdf"], sv.tpot_slo_s))
    in_system = x * (res["e2e_s"] + front)
    busy = jnp.where(over, 1.0, 1.0 - jnp.exp(-in_system))  # overloaded: never idle
    energy = n_devices * power.tdp_w * (power.static_share + (1.0 - power.static_share) * busy)
    kv = res["running_batch"] * per_seq
    out = dict(
        ttft_s=latency(res["ttft_s"] + front), tpot_s=latency(res["tpot_s"]),
        e2e_s=latency(res["e2e_s"] + front), queue_s=latency(res["queue_s"]),
        frontend_s=front,
        throughput_tok_s=throughput, throughput_per_device_tok_s=throughput / n_devices,
        tokens_per_s_per_user=latency(1.0 / res["tpot_s"]),
        cost_per_mtok=n_devices * power.price_usd_per_s / throughput * 1e6,
        energy_per_tok_j=energy / throughput,
        request_throughput_req_s=requests, goodput_req_s=jnp.where(over, 0.0, good),
        goodput_req_per_usd=jnp.where(over, 0.0, good) / (n_devices * power.price_usd_per_s),
        running_batch=res["running_batch"],
        utilization=jnp.where(sv.concurrency > 0.0, x / jnp.maximum(res["capacity_req_s"], 1e-30),
                              res["utilization"]),
        capacity_req_s=res["capacity_req_s"] * par.dp,
        kv_cache_bytes=kv, activation_bytes=act, memory_bytes=weights + kv + act,
        fits=holds >= 1.0, max_batch=jnp.minimum(sv.max_num_seqs, holds),
        overloaded=over)
    # A request's E2E is its TTFT plus its decode, so each E2E percentile is at least the
    # TTFT one; with one output token (no decode: mean TPOT 0) they are equal and the TPOT
    # percentiles are 0 as the mean is (the tails' closed forms gave 14 ms and an E2E
    # P99 below the TTFT P99 there)
    no_decode = res["tpot_s"] <= 0.0
    tails = {}
    for q in ("p50", "p90", "p99"):
        ttft_q, e2e_q = res[f"ttft_{q}_s"], res[f"e2e_{q}_s"]
        tails[f"ttft_{q}_s"] = ttft_q + front
        tails[f"tpot_{q}_s"] = jnp.where(no_decode, 0.0, res[f"tpot_{q}_s"])
        tails[f"e2e_{q}_s"] = jnp.where(no_decode, ttft_q, jnp.maximum(e2e_q, ttft_q)) + front
        tails[f"itl_{q}_s"] = jnp.where(no_decode, 0.0, res[f"itl_{q}_s"])
    for key in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s",
                "tpot_p99_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s", "itl_p50_s", "itl_p90_s",
                "itl_p99_s"):
        out[key] = latency(tails[key])
    # points without a load: the static batch, every request alike
    static_requests = par.dp * w.batch / static["e2e_s"]
    meets_static = (((sv.ttft_slo_s <= 0.0) | (static["ttft_s"] <= sv.ttft_slo_s))
                    & ((sv.tpot_slo_s <= 0.0) | (static["tpot_s"] <= sv.tpot_slo_s)))
    fallback = dict(static, queue_s=0.0 * static["ttft_s"], frontend_s=0.0 * front,
                    running_batch=w.batch + 0.0 * res[
        "running_batch"], request_throughput_req_s=static_requests,
        goodput_req_s=jnp.where(meets_static, static_requests, 0.0),
        goodput_req_per_usd=jnp.where(meets_static, static_requests, 0.0) / (
            n_devices * power.price_usd_per_s),
        utilization=nan * res["utilization"],
        capacity_req_s=out["capacity_req_s"], overloaded=over,
        ttft_p50_s=static["ttft_s"], ttft_p90_s=static["ttft_s"], ttft_p99_s=static["ttft_s"],
        tpot_p50_s=static["tpot_s"], tpot_p90_s=static["tpot_s"], tpot_p99_s=static["tpot_s"],
        e2e_p50_s=static["e2e_s"], e2e_p90_s=static["e2e_s"], e2e_p99_s=static["e2e_s"],
        itl_p50_s=static["tpot_s"], itl_p90_s=static["tpot_s"], itl_p99_s=static["tpot_s"])
    if ss is not None:  # every point has a session load (dse.study checks)
        sessions_per_s = requests / turns
        tiers = par.dp * (ss.dram_bytes * ss.dram_usd_per_byte_s
                          + ss.ssd_bytes * ss.ssd_usd_per_byte_s)
        devices = par.tp * par.pp
        out.update(
            prefix_hit_rate=cached.hbm_hit + cached.dram_hit + cached.ssd_hit,
            hbm_hit_rate=cached.hbm_hit, dram_hit_rate=cached.dram_hit,
            ssd_hit_rate=cached.ssd_hit, kv_reload_s=latency(cached.reload_s),
            session_s=latency(turns * out["e2e_s"] + (turns - 1.0) * ss.think_s),
            sessions_per_s=sessions_per_s,
            kv_dram_used_bytes=cached.dram_used * devices,
            kv_ssd_used_bytes=cached.ssd_used * devices,
            cost_per_session_usd=(n_devices * power.price_usd_per_s + tiers) / sessions_per_s)
        return out
    return {k: jnp.where(loaded, v, fallback[k]) for k, v in out.items()}

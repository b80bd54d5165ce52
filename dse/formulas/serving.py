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

from . import engine, load, memory, vision
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
                   sv.adp_balance_iters)
    lengths = load.Lengths(w.input_len, sv.input_len_cv, out_len, sv.output_len_cv)
    return sm, ld, lengths, per_seq, act, holds


def under_load(m: ModelSpec, s, p: Precision, w: Workload, sv: Serving, rates: Rates,
               par: Parallel, o: Options, features: frozenset, capacity, weights,
               power: Power, static: dict) -> dict:
    """The inference outputs of the points under load, the ``static`` ones elsewhere."""
    with node_axes():
        return _under_load(m, s, p, w, sv, rates, par, o, features, capacity, weights, power,
                           static)


def _per_token(res: dict, tokens) -> dict:
    """The load model's outputs over speculative steps, as per-token TPOT: each step's
    time over the ``tokens`` it yields per sequence (its TPOT, percentiles and CDF)."""
    out = dict(res, tpot_s=res["tpot_s"] / tokens)
    for q in ("p50", "p90", "p99"):
        if f"tpot_{q}_s" in res:
            out[f"tpot_{q}_s"] = res[f"tpot_{q}_s"] / tokens
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


def _under_load(m, s, p, w, sv, rates, par, o, features, capacity, weights, power, static):
    sm, ld, lengths, per_seq, act, holds = replica_load(m, s, p, w, sv, rates, par, o,
                                                         features, capacity, weights)
    rank = max(jnp.ndim(x) for x in (*lengths, *ld))

    spec = sv.spec_tokens if "mtp" in features else None

    def step(decode, prompt, chunks):
        return engine.step_time(sm, decode, prompt, chunks, rank, spec=spec)

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
    for key in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s",
                "tpot_p99_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s"):
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
        e2e_p50_s=static["e2e_s"], e2e_p90_s=static["e2e_s"], e2e_p99_s=static["e2e_s"])
    return {k: jnp.where(loaded, v, fallback[k]) for k, v in out.items()}

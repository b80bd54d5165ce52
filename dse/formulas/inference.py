"""Inference of one deployment: prefill (TTFT), decode (TPOT), memory, capacity, cost.

A replica is tp x pp devices; dp replicas serve (expert parallelism may span them).
``batch`` sequences run together in a replica. With pp > 1 they are split into
m = min(pp, batch) micro-batches kept in flight across the stages (vLLM's virtual
engines; GPipe-style fill for prefill):

    TTFT = T_all(b) + (m - 1) T_stage(b) + hops(b)      (b = batch / m)
    TPOT = max(T_all(b) + hops(b), m T_stage(b))

T_all is the time of all layers and ends, T_stage that of the heaviest stage. Each is
a sum of parts (roofline-timed operators and communication) by component, so the
breakdown sums to TTFT and TPOT (to float rounding: the program may add some
components last, :class:`~dse.formulas.types.Hints`). Communication is not overlapped
with compute.

Prefill runs in n = ceil(input_len / prefill_chunk) equal chunks (n = 1 when chunking
is off); chunk j attends to the j earlier chunks. TPOT is the mean decode step over the
generation: step j = 1..output_len-1 attends to input_len + j tokens, and the attention
roofline is averaged exactly over those steps. The pipeline max is applied to the means.

Speculative decoding (Leviathan et al. 2023): a draft model proposes k = draft_len
tokens (k decode steps of the draft), the target verifies k + 1 positions in one pass,
and with per-token acceptance rate a the expected tokens per target pass are
E = (1 - a^(k+1)) / (1 - a) (their Eq. 1), so TPOT = (k T_draft + T_verify) / E.

Serving engines spend host time on every step (scheduling, input preparation,
sampling; vLLM and SGLang overlap part of it, llama.cpp little): a calibrated
``step_overhead_s + seq_overhead_s x batch`` per prefill chunk and per decode step (per
speculative round), in the ``overhead`` component. Both are 0 in the plain roofline.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import comm, memory, params, parts, serving, vision
from .transformer import end_parts, layer_parts
from .types import (PLAIN, Hints, ModelSpec, Options, Parallel, Pass, Power, Precision, Rates,
                    Serving, Speculation, Workload)

COMPONENTS = ("embedding", "norms", "qkv_proj", "attention", "o_proj", "kv_cache", "mlp", "moe",
              "lora", "lm_head", "tp_comm", "pp_comm", "ep_comm", "overhead", "vision")
SIDES = ("compute_s", "memory_s", "comm_s")  # a decode side's seconds energy reads (_step)
PHASES = ("prefill", "decode")


def _pass_parts(m, s, p, ps: Pass, rates, par: Parallel, o: Options, features, hints):
    """(all layers and ends, heaviest stage) parts of one forward pass."""
    dense, moe = layer_parts(m, s, p, ps, rates, par, o, features, hints)
    first, last = end_parts(m, s, p, ps, rates, par.tp)
    n_dense, n_moe = params.layer_counts(m)
    _, dense_stage, moe_stage = memory.stage_layers(m, par.pp)
    per_chunk = {"norms": last.pop("norms")}
    total = [(n_dense * ps.repeat, dense), (ps.repeat, first), (ps.repeat, per_chunk), (1.0, last)]
    stage = [(dense_stage * ps.repeat, dense), (ps.repeat, per_chunk), (1.0, last)]
    if moe:
        total.append((n_moe * ps.repeat, moe))
        stage.append((moe_stage * ps.repeat, moe))
    total, stage = parts.combine(total), parts.combine(stage)
    stage = {k: parts.where(par.pp > 1.0, stage.get(k, parts.ZERO), v) for k, v in total.items()}
    return total, stage


def _prefill(m, s, p, w: Workload, b, micro, rates, par, o, features, hints):
    chunks = jnp.where(w.prefill_chunk > 0.0, jnp.ceil(w.input_len / jnp.maximum(w.prefill_chunk, 1.0)), 1.0)
    size = w.input_len / chunks
    ps = Pass("prefill", b, size, 0.0, chunks - 1.0, chunks)
    total, stage = _pass_parts(m, s, p, ps, rates, par, o, features, hints)
    hops = chunks * comm.pipeline_transfer_s(b * size * m.d_model * p.act_bits / 8.0, par.pp,
                                             par.tp, rates)
    out = parts.combine([(1.0, total), (micro - 1.0, stage)])
    out["pp_comm"] = parts.comm(hops)
    return out, parts.total(out, hints), size


def _step(m, s, p, ps: Pass, micro, rates, par, o, features, hints):
    """A decode-like pass through the pipeline: the traversal or the busiest stage binds.

    Returns its parts and their sum. The sum is the binding side's sum (equal to the
    sum of the selected parts), so that only the two sides' sums are full-grid chains.
    Each side's time is a few additions of components computed at their own shapes;
    only the compute, memory and comm seconds that energy reads are marked
    ``hints.once``.
    """
    total, stage = _pass_parts(m, s, p, ps, rates, par, o, features, hints)
    hop = comm.pipeline_transfer_s(ps.tokens * m.d_model * p.act_bits / 8.0, par.pp, par.tp, rates)
    traversal = dict(total, pp_comm=parts.comm(hop))
    cycle = parts.combine([(micro, stage)])
    sums = (parts.settled(parts.total(traversal, hints), hints, SIDES),
            parts.settled(parts.total(cycle, hints), hints, SIDES))
    binds = sums[0].time_s >= sums[1].time_s
    step = {k: parts.where(binds, traversal.get(k, parts.ZERO), cycle.get(k, parts.ZERO))
            for k in dict.fromkeys([*traversal, *cycle])}
    return step, parts.where(binds, *sums)


def _decode(m, s, p, w: Workload, b, micro, rates, par, o, features, hints,
            spec: Speculation):
    lo = w.input_len + 1.0
    hi = w.input_len + jnp.maximum(w.output_len - 1.0, 1.0)
    plain, plain_sum = _step(m, s, p, Pass("decode", b, 1.0, lo, hi), micro, rates, par, o,
                             features, hints)
    if spec.draft is None:
        return plain, plain_sum, 1.0
    k, a = spec.draft_len, spec.acceptance_rate
    sd = params.shard(spec.draft, par.tp)
    draft_par = Parallel(par.tp, 1.0, par.dp, 1.0)
    draft, _ = _pass_parts(spec.draft, sd, p, Pass("decode", b, 1.0, lo, hi), rates,
                           draft_par, o, features, hints)
    middle = (lo + hi) / 2.0 - 1.0
    verify, verify_sum = _step(m, s, p, Pass("verify", b, k + 1.0, middle, middle), micro,
                               rates, par, o, features, hints)
    sure = a >= 1.0
    tokens = jnp.where(sure, k + 1.0, (1.0 - a ** (k + 1.0)) / jnp.where(sure, 1.0, 1.0 - a))
    speculative = parts.combine([(k / tokens, draft), (1.0 / tokens, verify)])
    on = k > 0.0
    merged = {c: parts.where(on, speculative.get(c, parts.ZERO), plain.get(c, parts.ZERO))
              for c in dict.fromkeys([*plain, *speculative])}
    speculative_sum = parts.add(parts.scale(parts.total(draft, hints), k / tokens),
                                parts.scale(verify_sum, 1.0 / tokens))
    return merged, parts.where(on, speculative_sum, plain_sum), jnp.where(on, 1.0 / tokens, 1.0)


def _with_host(phase: dict, phase_sum, seconds):
    """A phase's parts and sum with ``seconds`` of host time added to its overhead (time
    only: no FLOPs, bytes or roofline side behind it)."""
    over = phase.get("overhead", parts.ZERO)
    return (dict(phase, overhead=over._replace(time_s=over.time_s + seconds)),
            phase_sum._replace(time_s=phase_sum.time_s + seconds))


def _timings(m, s, p, w: Workload, rates, par, o, features, hints, spec):
    micro = jnp.minimum(par.pp, w.batch)
    b = w.batch / micro
    prefill, prefill_sum, chunk = _prefill(m, s, p, w, b, micro, rates, par, o, features, hints)
    if "vision" in features:  # the encoder runs over the batch's images before the prefill
        images = vision.encoder(m, w.batch, o.image_tokens, p.act_bits, rates, par.tp)
        prefill = dict(prefill, vision=images)
        prefill_sum = parts.add(prefill_sum, images)
    decode, decode_sum, steps_per_token = _decode(m, s, p, w, b, micro, rates, par, o,
                                                  features, hints, spec)
    # The serving engine's host work per step (scheduling, input preparation, sampling):
    # a fixed part and a part per running sequence, once per prefill chunk and once per
    # decode step (a speculative round yields 1 / steps_per_token tokens).
    host = rates.step_overhead_s + rates.seq_overhead_s * w.batch
    prefill, prefill_sum = _with_host(prefill, prefill_sum, host * w.input_len / chunk)
    decode, decode_sum = _with_host(decode, decode_sum, host * steps_per_token)
    # what every full-grid output derives from
    prefill_sum = parts.settled(prefill_sum, hints)  # its time is TTFT
    ttft, (tpot,) = prefill_sum.time_s, hints.once(decode_sum.time_s)
    e2e = ttft + (w.output_len - 1.0) * tpot
    return dict(prefill=prefill, decode=decode, prefill_sum=prefill_sum, decode_sum=decode_sum,
                ttft=ttft, tpot=tpot, e2e=e2e, chunk=chunk, micro=micro,
                steps_per_token=steps_per_token)


def _model_flops(m, p, seqs, ps_new, lo, hi, phase, rates, o, features, hints):
    """FLOPs of one pass of the whole model (no sharding, no replication)."""
    ps = Pass(phase, seqs, ps_new, lo, hi, 1.0)
    total, _ = _pass_parts(m, params.whole(m), p, ps, rates, Parallel(1.0, 1.0, 1.0, 1.0), o,
                           features, hints)
    return sum(part.flops for part in total.values())


def inference(m: ModelSpec, rates: Rates, capacity, w: Workload, par: Parallel, p: Precision,
              o: Options, spec: Speculation, power: Power, features: frozenset,
              names: frozenset, hints: Hints = PLAIN, sv: Serving | None = None,
              ss=None) -> dict:
    """Every inference output of one deployment; array arguments broadcast.

    ``features`` (static) switches on model and serving features the study uses
    (moe, mla, window, lora, speculative); ``names`` (static) the optional outputs.
    ``capacity`` is the usable device memory (reserve already taken off); ``hints``
    (static) how the running program wants its shared values computed.

    Energy per device over a request batch is TDP x (static x e2e + compute x C +
    memory x M + network x N), where C, M, N are the seconds the operators' arithmetic,
    memory traffic and communication would take alone: summing GenZ's per-operator
    latency x utilization. Idle pipeline stages draw the static share.
    """
    s = params.shard(m, par.tp)
    t = _timings(m, s, p, w, rates, par, o, features, hints, spec)
    mla = "mla" in features

    # memory per device = fixed + batch x per_seq + micro-batch x per_micro_seq
    length = w.input_len + w.output_len
    weights = memory.weight_params_per_device(m, s, par) * p.weight_bits / 8.0
    if "vision" in features:  # the encoder's 16-bit weights, sharded as its matmuls are
        weights = weights + vision.vision_params(m) / par.tp * vision.VISION_BITS / 8.0
    per_seq = memory.kv_cache_bytes(m, s, p, par.pp, 1.0, length, mla)
    if "lora" in features:
        weights = weights + memory.lora_params_per_device(m, s, par.pp, o.lora_rank,
                                                          o.lora_adapters) * 2.0
    if spec.draft is not None:
        sd = params.shard(spec.draft, par.tp)
        on = spec.draft_len > 0.0
        draft_par = Parallel(par.tp, 1.0, par.dp, 1.0)
        weights = weights + jnp.where(on, memory.weight_params_per_device(
            spec.draft, sd, draft_par) * p.weight_bits / 8.0, 0.0)
        per_seq = per_seq + jnp.where(on, memory.kv_cache_bytes(
            spec.draft, sd, p, 1.0, 1.0, length + spec.draft_len, mla), 0.0)
    per_micro_seq = memory.activation_bytes(m, s, p, par, 1.0, t["chunk"],
                                            w.input_len - t["chunk"], o.flash)
    b = w.batch / t["micro"]
    kv_bytes = w.batch * per_seq
    act_bytes = b * per_micro_seq
    total = weights + kv_bytes + act_bytes
    room = capacity - weights

    n_devices = par.tp * par.pp * par.dp
    throughput = par.dp * w.batch * w.output_len / t["e2e"]
    steps = w.output_len - 1.0

    def seconds(field):
        return getattr(t["prefill_sum"], field) + steps * getattr(t["decode_sum"], field)

    joules = power.tdp_w * (power.static_share * t["e2e"]
                            + power.compute_share * seconds("compute_s")
                            + power.memory_share * seconds("memory_s")
                            + power.network_share * seconds("comm_s"))

    decode_ctx = w.input_len + jnp.maximum(w.output_len, 2.0) / 2.0
    out = dict(
        n_params=params.total_params(m),
        n_params_active=params.active_params(m),
        n_devices=n_devices,
        dp_size=par.dp,
        weight_bytes=weights,
        kv_cache_bytes=kv_bytes,
        activation_bytes=act_bytes,
        memory_bytes=total,
        fits=total <= capacity,
        max_batch=memory.max_batch(capacity, weights, per_seq, per_micro_seq, par.pp),
        max_batch_prefill=jnp.maximum(jnp.floor(room / (
            memory.kv_cache_bytes(m, s, p, par.pp, 1.0, w.input_len, mla) + per_micro_seq)), 0.0),
        max_batch_decode=jnp.maximum(jnp.floor(room / (per_seq + memory.activation_bytes(
            m, s, p, par, 1.0, 1.0, length, o.flash))), 0.0),
        max_batch_total_tokens=jnp.maximum(jnp.floor(room / memory.kv_bytes_per_cached_token(
            m, s, p, par.pp, mla)), 0.0),
        prefill_flops=_model_flops(m, p, w.batch, w.input_len, 0.0, 0.0, "prefill", rates, o,
                                   features, hints),
        decode_flops=_model_flops(m, p, w.batch, 1.0, decode_ctx, decode_ctx, "decode", rates, o,
                                  features, hints),
        ttft_s=t["ttft"],
        tpot_s=t["tpot"],
        e2e_s=t["e2e"],
        throughput_tok_s=throughput,
        throughput_per_device_tok_s=throughput / n_devices,
        tokens_per_s_per_user=1.0 / t["tpot"],
        target_steps_per_token=t["steps_per_token"] + 0.0 * t["tpot"],
        cost_per_mtok=n_devices * power.price_usd_per_s / throughput * 1e6,
        energy_per_tok_j=par.tp * par.pp * joules / (w.batch * w.output_len),
    )
    if "serving_throughput_tok_s" in names:
        best = jnp.maximum(out["max_batch"], 1.0)
        at_best = _timings(m, s, p, w._replace(batch=best), rates, par, o, features, hints,
                           spec)
        steady = par.dp * best * w.output_len / (at_best["ttft"] + w.output_len * at_best["tpot"])
        out["serving_throughput_tok_s"] = jnp.where(out["max_batch"] >= 1.0, steady, 0.0)
    if "load" in features and sv is not None:  # a request load: the engine under it
        out.update(serving.under_load(m, s, p, w, sv, rates, par, o, features, capacity,
                                      weights, power, out, ss))
    if "breakdown" in features:
        out.update(_breakdown(t["prefill"], t["decode"]))
    if "bound_signature" in names:
        out["bound_signature"] = jnp.stack(jnp.broadcast_arrays(
            _signature(t["prefill"]), _signature(t["decode"])))
    if names & {"regime", "dominant_phase"}:
        # the regime: the roof with the most seconds in the phase that takes most of a
        # request's time (prefill: TTFT; decode: the other output_len - 1 steps)
        decoding = (t["e2e"] - t["ttft"]) > t["ttft"]
        out["dominant_phase"] = decoding.astype(jnp.uint8)

        def roofs(phase, total):
            return parts.regime(parts.roof_seconds(
                total, phase.get("overhead", parts.ZERO).time_s))

        out["regime"] = jnp.where(decoding, roofs(t["decode"], t["decode_sum"]),
                                  roofs(t["prefill"], t["prefill_sum"]))
    return out


def _signature(phase: dict):
    """Every component's binding roof in one integer: sum_i code_i 4^i (32 bits)."""
    codes = [parts.bound_code(p.time_s, p.compute_s, p.memory_s, p.comm_s) for p in
             (phase.get(c, parts.ZERO) for c in COMPONENTS)]
    return sum(jnp.asarray(code, jnp.uint32) * jnp.uint32(4 ** i) for i, code in enumerate(codes))


def _breakdown(prefill: dict, decode: dict) -> dict:
    """component_{s,flops,bytes,bound} over (phase, component) leading axes."""
    fields = ("time_s", "flops", "bytes", "compute_s", "memory_s", "comm_s")
    table = {f: [[getattr(ph.get(c, parts.ZERO), f) for c in COMPONENTS] for ph in (prefill, decode)]
             for f in fields}
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for rows in table.values() for r in rows for x in r))

    def stack(f):
        return jnp.stack([jnp.stack([jnp.broadcast_to(x, shape) for x in r]) for r in table[f]])

    time, compute, mem, comm_s = (stack("time_s"), stack("compute_s"), stack("memory_s"),
                                  stack("comm_s"))
    bound = parts.bound_code(time, compute, mem, comm_s).astype(jnp.uint8)
    return dict(component_s=time, component_flops=stack("flops"), component_bytes=stack("bytes"),
                component_bound=bound)

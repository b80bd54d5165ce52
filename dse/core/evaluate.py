"""The composition root: gather specs per point, apply what-ifs, run the formulas, under jit.

Sweep, search, sensitivity, reductions, uncertainty and validation all evaluate through
:class:`dse.core.evaluator.Evaluator`, which calls :func:`evaluate` here; they differ only
in what they feed it: a grid of broadcast arrays, a vector of trials, or tangents.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from ..catalogue.hardware import HardwareSpec
from ..formulas import disagg, memory, params, sessions, vision
from ..formulas.inference import inference
from ..formulas.serving import node_axes, replica_load, spec_step_tokens
from ..formulas.operators import stored_bits
from ..formulas.pipeline import pipeline
from ..formulas.roofline import compute_width, peak_at_width, surface_slot
from ..formulas.training import training
from ..formulas.types import (Bits, Job, Layout, ModelSpec, Options, Parallel, Power, Precision,
                              Rates, Schedule, Serving, Speculation, Workload)
from ..schema.knobs import InferencePoint, PipelinePoint, TrainingPoint
from ..schema.outputs import OUTPUTS, REASON_BITS
from . import staging
from .fusion import XLA_CPU, jit


def take(table, index):
    """The entries of a spec table (leaves with a leading axis) at ``index`` (any shape);
    fields the entries share (metadata ``shared``: the GEMM surfaces) are passed whole."""
    shared = {f.name: getattr(table, f.name) for f in dataclasses.fields(table)
              if f.metadata.get("shared")} if dataclasses.is_dataclass(table) else {}
    if shared:
        table = dataclasses.replace(table, **dict.fromkeys(shared))
    out = jax.tree_util.tree_map(lambda leaf: leaf[index], table)
    return dataclasses.replace(out, **shared) if shared else out


def achieved_rates(hw: HardwareSpec, point, weight_bits, kv_bits, act_bits) -> Rates:
    """Peaks x what-if scales x efficiencies, per arithmetic unit at this precision.

    Two layers of efficiency multiply: the calibration's, carried by the hardware spec
    (per framework and device family, fitted to measurements), and the study's
    ``*_efficiency`` knobs (1.0 by default).
    """
    compute = point.tflops_scale * point.flops_efficiency
    link = point.link_bw_scale * point.link_efficiency * hw.link_efficiency
    peaks = (hw.flops_per_s_4, hw.flops_per_s_8, hw.flops_per_s_16, hw.flops_per_s_32)
    gemm_peak = peak_at_width(compute_width(jnp.maximum(weight_bits, act_bits)), *peaks) * compute
    hbm_peak = hw.hbm_bw_bytes_per_s * point.hbm_bw_scale * point.hbm_efficiency
    return Rates(
        gemm_surface=hw.gemm_surface, moe_surface=hw.moe_surface, kernel_table=hw.kernel_table,
        kernel_slot=surface_slot(weight_bits, act_bits), gemm_peak_flops_per_s=gemm_peak,
        hbm_peak_bytes_per_s=hbm_peak, kernel_scale=hw.gemm_efficiency,
        gemm_flops_per_s=gemm_peak * hw.gemm_efficiency,
        attention_flops_per_s=peak_at_width(compute_width(jnp.maximum(act_bits, kv_bits)),
                                            *peaks) * compute * hw.attention_efficiency,
        vector_flops_per_s=hw.flops_per_s_32 * compute,
        hbm_bw_bytes_per_s=hbm_peak * hw.hbm_efficiency,
        intra_bw_bytes_per_s=hw.intra_bw_bytes_per_s * link, intra_latency_s=hw.intra_latency_s,
        inter_bw_bytes_per_s=hw.inter_bw_bytes_per_s * link, inter_latency_s=hw.inter_latency_s,
        devices_per_node=hw.devices_per_node, gemm_half_rows=hw.gemm_half_rows,
        layer_overhead_s=hw.layer_overhead_s, step_overhead_s=hw.step_overhead_s,
        seq_overhead_s=hw.seq_overhead_s)


def price_scale(p: InferencePoint):
    """Co-design cost model: the device price, with the shares attributable to compute,
    memory bandwidth and capacity scaled by their what-if multipliers (linear in each;
    shares 0 leave the catalogue price)."""
    return (1.0 + p.cost_share_compute * (p.tflops_scale - 1.0)
            + p.cost_share_bandwidth * (p.hbm_bw_scale - 1.0)
            + p.cost_share_memory * (p.memory_scale - 1.0))


def _divides(a, b):
    """b is a multiple of a (integer-valued floats)."""
    return jnp.mod(b, a) == 0.0


def _tp_ok(m: ModelSpec, tp):
    kv_ok = _divides(tp, m.n_kv_heads) | _divides(m.n_kv_heads, tp)
    g = m.global_kv_heads  # full-attention layers' own KV heads (Gemma 4), where given
    kv_ok = kv_ok & ((g == 0.0) | _divides(tp, g) | _divides(g, tp))
    moe_ok = (m.n_experts == 0.0) | _divides(tp, m.d_ff_expert)
    return _divides(tp, m.n_heads) & kv_ok & _divides(tp, m.d_ff) & moe_ok


def _reason_code(flags) -> jnp.ndarray:
    code = jnp.uint16(0)
    for flag, name in flags:
        code = code | jnp.where(flag, jnp.uint16(REASON_BITS[name]), jnp.uint16(0))
    return code


def _ep_ok(m: ModelSpec, ep, tp, dp, redundant=0.0):
    """Expert parallelism splits the experts, with their ``redundant`` copies, evenly
    over ep devices of the tp x dp ones, each expert's FFN evenly over the rest; a dense
    model ignores it (as vLLM's --enable-expert-parallel does), so any ep is valid there
    and equals ep = 1."""
    etp = tp * dp / ep
    return ((ep == 1.0) | (m.n_experts == 0.0)
            | (_divides(ep, m.n_experts + redundant) & _divides(ep, tp * dp)
               & _divides(etp, m.d_ff_expert)))


def _devices_ok(num_devices, per_replica):
    """num_devices (when given) is a whole number of replicas of ``per_replica`` devices."""
    return (num_devices == 0.0) | _divides(per_replica, num_devices)


def _replicas(num_devices, per_replica, dp):
    """Data-parallel replicas: derived from num_devices when given (at least 1), else dp."""
    return jnp.where(num_devices > 0.0, jnp.maximum(jnp.floor(num_devices / per_replica), 1.0),
                     dp)


def _serving(p: InferencePoint, hw: HardwareSpec) -> Serving:
    """The load on the deployment, the framework's defaults where the study leaves 0."""
    return Serving(p.concurrency, p.request_rate, p.arrival_cv,
                   jnp.where(p.max_num_seqs > 0.0, p.max_num_seqs, hw.default_max_num_seqs),
                   jnp.where(p.max_num_tokens > 0.0, p.max_num_tokens,
                             hw.default_max_num_tokens),
                   hw.prefill_separate, p.prefix_cache_hit, p.input_len_cv, p.output_len_cv,
                   p.ttft_slo_s, p.tpot_slo_s, hw.request_overhead_s, p.spec_tokens,
                   spec_step_tokens(p.spec_tokens, p.spec_acceptance, p.acceptance_rate),
                   # context balancing holds context requests: a disaggregated worker's
                   # prompts (prefill pool: nothing decodes; decode pool: generation-init
                   # requests) are not held
                   jnp.where(p.serving == disagg.DISAGG, 0.0, hw.adp_balance_iters),
                   p.num_prompts, p.scheduler_recv_interval)



def inference_reasons(m: ModelSpec, p: InferencePoint, fits, draft: ModelSpec | None,
                      overloaded=None):
    tp_ok = _tp_ok(m, p.tp)
    if draft is not None:
        tp_ok = tp_ok & ((p.draft_len == 0.0) | _tp_ok(draft, p.tp))
    return _reason_code([
        (~tp_ok, "tp_indivisible"),
        (p.pp > m.n_layers, "pp_exceeds_layers"),
        (~fits, "oom"),
        (p.input_len + p.output_len > m.max_seq_len, "context_too_long"),
        (~_ep_ok(m, p.ep, p.tp, p.dp, p.ep_redundant_experts), "ep_indivisible"),
        (~_devices_ok(p.num_devices, p.tp * p.pp), "devices_indivisible"),
        (False if overloaded is None else overloaded, "overloaded"),
    ])


def _precision(p: InferencePoint) -> Precision:
    """Stored bits of weights and KV (with their quantization scales), activation bits."""
    return Precision(stored_bits(p.weight_bits, p.quant_group_size),
                     stored_bits(p.kv_bits, p.quant_group_size), p.act_bits)


def _inference_inputs(p: InferencePoint, models: ModelSpec, hardware: HardwareSpec):
    """(point with dp derived, model, device, precision, rates, usable memory)."""
    m = take(models, p.model)
    hw = take(hardware, p.hardware + p.framework)  # the framework's block of devices
    p = dataclasses.replace(p, dp=_replicas(p.num_devices, p.tp * p.pp, p.dp))
    precision = _precision(p)
    rates = achieved_rates(hw, p, p.weight_bits, p.kv_bits, p.act_bits)
    capacity = hw.memory_bytes * p.memory_scale * (1.0 - p.memory_reserve)
    return p, m, hw, precision, rates, capacity


def serving_replica(p: InferencePoint, models: ModelSpec, hardware: HardwareSpec,
                    features: frozenset = frozenset(), kv: bool = False):
    """(engine step model, load, lengths) of one replica of each point under load, as
    :func:`dse.formulas.serving.replica_load` builds them (for tests and tools that run
    the same engine step elsewhere, e.g. a discrete-event simulator); with ``kv`` also
    (KV bytes per cached token per device, bytes per device left for the KV cache)."""
    p = _with_images(p, features)
    p = _with_sessions(p, features)
    p, m, hw, precision, rates, capacity = _inference_inputs(p, models, hardware)
    par = Parallel(p.tp, p.pp, p.dp, p.ep, p.ep_redundant_experts)
    s = params.shard(m, p.tp)
    weights = memory.weight_params_per_device(m, s, par) * precision.weight_bits / 8.0
    if "vision" in features:
        weights = weights + vision.vision_params(m) / p.tp * vision.VISION_BITS / 8.0
    sm, ld, lengths, *_, room = replica_load(
        m, s, precision, Workload(p.batch, p.input_len, p.output_len, p.prefill_chunk),
        _serving(p, hw), rates, par, _options(p), features, capacity, weights)
    if not kv:
        return sm, ld, lengths
    return sm, ld, lengths, memory.kv_bytes_per_cached_token(m, s, precision, p.pp,
                                                             "mla" in features), room


def _pooled(p: InferencePoint) -> InferencePoint:
    """The point with a leading pool axis: [the aggregated deployment, one prefill
    worker, one decode worker] (:mod:`dse.formulas.disagg`)."""
    lead = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], p)

    def three(a, b, c):
        return jnp.stack(jnp.broadcast_arrays(jnp.asarray(a), jnp.asarray(b), jnp.asarray(c)))

    def either(x, default):
        return jnp.where(x > 0.0, x, default)

    def device(x):
        return jnp.where(x >= 0, x, p.hardware)

    pool = {k: three(getattr(p, k), either(getattr(p, f"prefill_{k}"), getattr(p, k)),
                     either(getattr(p, f"decode_{k}"), getattr(p, k))) for k in ("tp", "pp", "ep")}
    one = 0.0 * p.dp + 1.0
    zero = 0.0 * p.num_devices
    cap = p.max_num_seqs
    pool.update(
        dp=three(p.dp, either(p.prefill_dp, one), either(p.decode_dp, one)),
        num_devices=three(p.num_devices, zero, zero),
        hardware=three(p.hardware, device(p.prefill_hardware), device(p.decode_hardware)),
        max_num_seqs=three(cap, either(p.prefill_batch, cap), either(p.decode_batch, cap)),
        # the prefill worker runs the prompt and the first token; the decode worker the
        # rest, the prompt's cache transferred (it computes the last prompt token only)
        output_len=three(p.output_len, 0.0 * p.output_len + 1.0,
                         jnp.maximum(p.output_len - 1.0, 1.0)),
        output_len_cv=three(p.output_len_cv, 0.0 * p.output_len_cv, p.output_len_cv),
        prefix_cache_hit=three(p.prefix_cache_hit, p.prefix_cache_hit,
                               1.0 - 1.0 / jnp.maximum(p.input_len, 1.0)),
        request_rate=three(p.request_rate, p.request_rate / p.prefill_workers,
                           p.request_rate / p.decode_workers),
        # a closed loop: each pool's workers share the clients (dse.formulas.disagg)
        # (a prefill worker runs one client, its queue follows in disagg.combine)
        concurrency=three(p.concurrency, jnp.minimum(p.concurrency, 1.0),
                          p.concurrency / p.decode_workers),
        # a benchmark run's first wave: the prefill pool's queue (disagg.combine)
        num_prompts=three(p.num_prompts, 0.0 * p.num_prompts, 0.0 * p.num_prompts),
        # a prefill worker decodes nothing: it looks for new requests after every step
        scheduler_recv_interval=three(p.scheduler_recv_interval,
                                      0.0 * p.scheduler_recv_interval + 1.0,
                                      p.scheduler_recv_interval))
    return dataclasses.replace(lead, **pool)


def _moe_tp_ok(moe_tp, tp, dp, ep):
    """A stated moe_tp (0: derived) matches the worker: tp x dp = moe_tp x ep."""
    return (moe_tp == 0.0) | (moe_tp * ep == tp * dp)


def _evaluate_disagg(p: InferencePoint, models: ModelSpec, hardware: HardwareSpec,
                     features: frozenset, names: frozenset) -> dict:
    """Aggregated points as :func:`_evaluate_inference` gives them; disaggregated ones from
    one prefill and one decode worker evaluated beside them (a leading pool axis, one
    program) and joined by :func:`dse.formulas.disagg.combine`."""
    p3 = _pooled(p)
    out3 = _evaluate_inference(p3, models, hardware, features - {"disagg"},
                               names | frozenset(DISAGG_NEEDS))
    rank = jnp.ndim(p3.model) - 1

    def pick(name, i):
        a = out3[name]
        if jnp.ndim(a) <= rank:
            return a
        axis = jnp.ndim(a) - rank - 1  # the pool axis, after an output's own leading axes
        return jnp.take(a, min(i, a.shape[axis] - 1), axis=axis)

    agg, pre, dec = ({k: pick(k, i) for k in out3} for i in range(3))
    m = take(models, p.model)
    tp_p, pp_p, dp_p, tp_d, pp_d, dp_d = (p3.tp[1], p3.pp[1], p3.dp[1], p3.tp[2], p3.pp[2],
                                          p3.dp[2])
    hw_p = take(hardware, p3.hardware[1] + p.framework)
    hw_d = take(hardware, p3.hardware[2] + p.framework)
    devices_p, devices_d = tp_p * pp_p * dp_p, tp_d * pp_d * dp_d
    n_devices = p.prefill_workers * devices_p + p.decode_workers * devices_d
    kv_bytes = memory.kv_cache_bytes(m, params.shard(m, 1.0), _precision(p), 1.0, 1.0, p.input_len,
                                     "mla" in features)
    same = (p3.hardware[1] == p3.hardware[2]) & (n_devices <= hw_p.devices_per_node)
    bandwidth = jnp.where(same, jnp.minimum(hw_p.intra_bw_bytes_per_s, hw_d.intra_bw_bytes_per_s),
                          jnp.minimum(hw_p.inter_bw_bytes_per_s, hw_d.inter_bw_bytes_per_s))
    latency = jnp.where(same, jnp.maximum(hw_p.intra_latency_s, hw_d.intra_latency_s),
                        jnp.maximum(hw_p.inter_latency_s, hw_d.inter_latency_s))
    transfer = disagg.transfer_s(kv_bytes, jnp.minimum(tp_p * pp_p, tp_d * pp_d),
                                 bandwidth * p.link_bw_scale, latency,
                                 p.link_efficiency * hw_p.link_efficiency)
    scale = price_scale(p)
    usd_per_s = (p.prefill_workers * devices_p * hw_p.price_usd_per_s
                 + p.decode_workers * devices_d * hw_d.price_usd_per_s) * scale

    def watts(o):
        return o["energy_per_tok_j"] * o["throughput_tok_s"]

    joined = disagg.combine(
        p.request_rate, p.concurrency, p.output_len, pre, dec, p.prefill_workers, p.decode_workers, transfer,
        p.kv_transfer_overlap, m.n_layers, usd_per_s,
        p.prefill_workers * watts(pre) + p.decode_workers * watts(dec), p.ttft_slo_s,
        p.tpot_slo_s, p.num_prompts)
    joined.update(n_devices=n_devices, prefill_devices=p.prefill_workers * devices_p,
                  decode_devices=p.decode_workers * devices_d,
                  throughput_per_device_tok_s=joined["throughput_tok_s"] / n_devices,
                  fits=pre["fits"] & dec["fits"])
    layout_ok = (_moe_tp_ok(p.prefill_moe_tp, tp_p, dp_p, p3.ep[1])
                 & _moe_tp_ok(p.decode_moe_tp, tp_d, dp_d, p3.ep[2]))
    over = jnp.uint16(REASON_BITS["overloaded"])
    reason = ((pre["reason"] | dec["reason"]) & ~over) | jnp.where(joined["overloaded"], over,
                                                                    jnp.uint16(0))
    joined["reason"] = reason | jnp.where(layout_ok, jnp.uint16(0),
                                          jnp.uint16(REASON_BITS["ep_indivisible"]))
    joined["valid"] = joined["reason"] == 0
    is_disagg = p.serving == disagg.DISAGG
    for k in DISAGG_ONLY:  # nan at aggregated points
        agg[k] = jnp.nan * agg["ttft_s"]
    # per-device outputs of a disaggregated point: its decode worker's
    return {k: jnp.where(is_disagg, joined.get(k, dec.get(k)), v) for k, v in agg.items()}


# The outputs of disaggregated points only, and what such a point needs of its pools
DISAGG_ONLY = tuple(k for k, o in OUTPUTS["inference"].items() if o.feature == "disagg")
DISAGG_NEEDS = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "frontend_s", "ttft_p50_s", "ttft_p90_s",
                "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "e2e_p50_s",
                "e2e_p90_s", "e2e_p99_s", "itl_p50_s", "itl_p90_s", "itl_p99_s",
                "capacity_req_s", "energy_per_tok_j",
                "throughput_tok_s", "fits")


def _with_images(p: InferencePoint, features: frozenset) -> InferencePoint:
    """A vision-language request's image tokens join its prompt (the language model
    prefills and caches them as it does text; dse.formulas.vision prices the encoder)."""
    if "vision" not in features:
        return p
    return dataclasses.replace(p, input_len=p.input_len + p.image_tokens)


GB_HOUR = 1e9 * 3600.0  # bytes x seconds in a GB-hour


def session_load(p: InferencePoint) -> sessions.Sessions:
    """The study's session keys (feature "sessions"); turn_input_len 0 takes input_len."""
    return sessions.Sessions(
        p.turns, p.turns_cv, jnp.where(p.turn_input_len > 0.0, p.turn_input_len, p.input_len),
        p.shared_prefix_len, p.think_time_s, p.sessions, p.session_rate, p.kv_dram_bytes,
        p.kv_dram_bw_bytes_per_s, p.kv_ssd_bytes, p.kv_ssd_bw_bytes_per_s, p.kv_ssd_latency_s,
        p.kv_offload, p.routing, p.dp, p.kv_dram_usd_per_gb_h / GB_HOUR,
        p.kv_ssd_usd_per_gb_h / GB_HOUR)


def _with_sessions(p: InferencePoint, features: frozenset) -> InferencePoint:
    """A session study's requests are its turns: input_len the mean turn's prompt, the
    prefix cache's share from the sessions (dse.formulas.sessions), the router's replicas
    the deployment's (replicas, where given, else dp)."""
    if "sessions" not in features:
        return p
    p = dataclasses.replace(p, dp=jnp.where(p.replicas > 0.0, p.replicas, p.dp))
    ss = session_load(p)
    with node_axes():  # (the turns' quadrature nodes lead the point axes)
        tn = sessions.turn_nodes(ss)
        prompt = sessions.prompt_per_turn(ss, p.output_len, tn)
    return dataclasses.replace(p, input_len=prompt, prefix_cache_hit=0.0 * p.prefix_cache_hit)


def _options(p: InferencePoint) -> Options:
    return Options(p.flash_attention, p.lora_rank, p.lora_adapters, p.moe_imbalance,
                   p.image_tokens)


def _evaluate_inference(p: InferencePoint, models: ModelSpec, hardware: HardwareSpec,
                        features: frozenset, names: frozenset) -> dict:
    p = _with_images(p, features)
    if "disagg" in features:
        return _evaluate_disagg(p, models, hardware, features, names)
    asked = p
    p = _with_sessions(p, features)
    p, m, hw, precision, rates, capacity = _inference_inputs(p, models, hardware)
    draft = take(models, p.draft_model) if "speculative" in features else None
    # (the session keys as the study gave them, over the deployment's replicas)
    ss = session_load(dataclasses.replace(asked, dp=p.dp)) if "sessions" in features else None
    out = inference(
        m, rates, capacity, Workload(p.batch, p.input_len, p.output_len, p.prefill_chunk),
        Parallel(p.tp, p.pp, p.dp, p.ep, p.ep_redundant_experts), precision, _options(p),
        Speculation(draft, p.draft_len, p.acceptance_rate),
        Power(hw.tdp_w, hw.price_usd_per_s * price_scale(p), p.power_static, p.power_compute,
              p.power_memory, p.power_network), features, names, XLA_CPU,
        _serving(p, hw) if "load" in features else None,
        ss)
    if ss is not None:  # the context limit holds for a session's last turn
        p = dataclasses.replace(p, input_len=ss.shared_prefix + ss.turn_input + (
            ss.turns - 1.0) * (ss.turn_input + p.output_len))
    out["reason"] = inference_reasons(m, p, out["fits"], draft, out.get("overloaded"))
    out["valid"] = out["reason"] == 0
    return out


def training_reasons(m: ModelSpec, p: TrainingPoint, dp, global_batch, fits):
    micro_batches = global_batch / (p.micro_batch * dp)
    interleaved = p.virtual_stages > 1.0
    v = p.virtual_stages
    # Uneven stages (Megatron-LM's TransformerConfig checks): the rest divide evenly over
    # the other stages, and each of those shares by v. An end's layers need not divide by
    # v: Megatron-Core's --pipeline-model-parallel-layout places any number of layers in
    # each virtual stage (the recipes that account the embedding and the loss as pipeline
    # layers leave an end chunk one layer short)
    first, last = p.first_stage_layers, p.last_stage_layers
    uneven = (first > 0.0) | (last > 0.0)
    rest_stages = p.pp - jnp.where(first > 0.0, 1.0, 0.0) - jnp.where(last > 0.0, 1.0, 0.0)
    rest = m.n_layers - first - last
    share = rest / jnp.maximum(rest_stages, 1.0)
    rest_ok = jnp.where(rest_stages > 0.0,
                        (rest > 0.0) & _divides(rest_stages, rest) & _divides(v, share),
                        rest == 0.0)
    uneven_bad = uneven & ((p.pp == 1.0) | ~rest_ok)
    # Schedules: GPipe, ZB-H1 and DualPipe have no virtual stages; DualPipe needs an even
    # pp and an even number of micro-batches >= 2 pp (deepseek-ai/DualPipe asserts both)
    schedule = p.pp_schedule
    dual_bad = (schedule == 3.0) & (~_divides(2.0, p.pp) | ~_divides(2.0, micro_batches)
                                    | (micro_batches < 2.0 * p.pp))
    schedule_bad = (interleaved & ((p.pp == 1.0)
                                   | (~uneven & ~_divides(p.pp * p.virtual_stages, m.n_layers))
                                   | ~_divides(p.pp, micro_batches))
                    | ((p.cp > 1.0) & ~_divides(2.0 * p.cp, p.seq_len))
                    | uneven_bad | (interleaved & (schedule > 0.0)) | dual_bad)
    return _reason_code([
        (~_tp_ok(m, p.tp), "tp_indivisible"),
        (p.pp > m.n_layers, "pp_exceeds_layers"),
        (~fits, "oom"),
        (p.seq_len > m.max_seq_len, "context_too_long"),
        (~_ep_ok(m, p.ep, p.tp, dp), "ep_indivisible"),
        (~_divides(p.micro_batch * dp, global_batch), "batch_indivisible"),
        (~_devices_ok(p.num_devices, p.tp * p.pp * p.cp), "devices_indivisible"),
        (schedule_bad, "schedule_indivisible"),
    ])


def _evaluate_training(p: TrainingPoint, models: ModelSpec, hardware: HardwareSpec,
                       features: frozenset, names: frozenset) -> dict:
    m = take(models, p.model)
    hw = take(hardware, p.hardware)
    dp = _replicas(p.num_devices, p.tp * p.pp * p.cp, p.dp)
    global_batch = jnp.where(p.global_batch > 0.0, p.global_batch, p.micro_batch * dp)
    rates = achieved_rates(hw, p, p.weight_bits, p.act_bits, p.act_bits)
    peaks = (hw.flops_per_s_4, hw.flops_per_s_8, hw.flops_per_s_16, hw.flops_per_s_32)
    peak = peak_at_width(compute_width(jnp.maximum(p.weight_bits, p.act_bits)), *peaks)
    capacity = hw.memory_bytes * p.memory_scale * (1.0 - p.memory_reserve)
    out = training(
        m, rates, capacity, peak * p.tflops_scale, hw.price_usd_per_s,
        Job(global_batch, p.micro_batch, p.seq_len, p.total_tokens),
        Layout(p.tp, p.pp, dp, p.ep, p.cp, p.virtual_stages, p.sequence_parallel,
               p.first_stage_layers, p.last_stage_layers),
        Bits(p.weight_bits, p.grad_bits, p.master_weight_bits, p.act_bits, p.optimizer),
        Schedule(p.zero_stage, p.recompute, p.flash_attention, p.dropout, p.tp_overlap,
                 p.dp_overlap, p.pp_overlap, p.pp_schedule, p.moe_imbalance), features, names,
        XLA_CPU)
    out["reason"] = training_reasons(m, p, dp, global_batch, out["fits"])
    out["valid"] = out["reason"] == 0
    return out


def _evaluate_pipeline(p: PipelinePoint, models: ModelSpec, spec, features: frozenset,
                       names: frozenset) -> dict:
    """Leading axes (candidate, stage or link) in front of the grid's, then selected."""
    rank = jnp.ndim(p.model)
    n_stages = spec.candidates.shape[1]

    def lead(x):
        return jnp.reshape(x, (1, 1) + jnp.shape(x))

    def per(k):
        return lambda x: jnp.reshape(x, (1, k) + (1,) * rank)

    pl = jax.tree_util.tree_map(lead, p)
    m = take(models, pl.model)
    hw = jax.tree_util.tree_map(per(n_stages), spec.hardware)
    links = jax.tree_util.tree_map(per(spec.links.bw_bytes_per_s.shape[0]), spec.links)
    shape = (spec.candidates.shape[0],) + (1,) * rank
    candidates = jnp.reshape(spec.candidates, (shape[0], n_stages) + shape[1:])
    candidate_ok = jnp.reshape(spec.candidate_layers, (shape[0], 1) + shape[1:]) == m.n_layers
    precision = Precision(stored_bits(pl.weight_bits, pl.quant_group_size),
                          stored_bits(pl.kv_bits, pl.quant_group_size), pl.act_bits)
    rates = achieved_rates(hw, pl, pl.weight_bits, pl.kv_bits, pl.act_bits)
    capacity = hw.memory_bytes * pl.memory_scale * (1.0 - pl.memory_reserve)
    objective = next(f.split(":", 1)[1] for f in features if f.startswith("objective:"))
    out = pipeline(m, rates, links, capacity, candidates, candidate_ok, pl.batch,
                   pl.input_len, pl.output_len, precision, pl.flash_attention,
                   pl.link_bw_scale, (pl.target_tpot_s[0, 0], pl.target_ttft_s[0, 0]),
                   pl.comm_share[0, 0], features, objective, XLA_CPU)
    m0 = take(models, p.model)
    out["reason"] = _reason_code([
        (float(n_stages) > m0.n_layers, "pp_exceeds_layers"),
        (~out["fits"], "oom"),
        (p.input_len + p.output_len > m0.max_seq_len, "context_too_long"),
    ])
    out["valid"] = out["reason"] == 0
    return out


_BY_MODE = {"inference": _evaluate_inference, "training": _evaluate_training,
            "pipeline": _evaluate_pipeline}


def outputs(point, models, hardware, mode: str, names: tuple[str, ...],
            features: frozenset) -> dict:
    """The outputs ``names`` of ``mode`` at ``point``: the formulas composed, neither
    jitted nor staged (for use inside a jitted kernel of one's own)."""
    out = _BY_MODE[mode](point, models, hardware, features, frozenset(names))
    for name in names:  # an old name is the same array
        if OUTPUTS[mode][name].alias_of:
            out[name] = out[OUTPUTS[mode][name].alias_of]
    return out


@jit(static_argnames=("mode", "names", "features"))
def evaluate(point, models: ModelSpec, hardware: HardwareSpec, mode: str = "inference",
             names: tuple[str, ...] | None = None, features: frozenset = frozenset()) -> dict:
    """Evaluate the outputs ``names`` of ``mode`` at ``point``.

    ``point`` is the mode's knob pytree (e.g. :class:`InferencePoint`) whose leaves all
    broadcast against each other; ``model``, ``hardware`` and ``draft_model`` leaves are
    integer indices into the ``models`` and ``hardware`` tables. Each output has the
    broadcast shape of the leaves it depends on (breakdown outputs lead with phase and
    component axes). ``features`` (static) switches on the parts of the model a study
    uses: "moe", "mla", "window", "linear", "lora", "speculative", "breakdown", "pp_layout". Outputs
    not named are never computed.
    """
    names = tuple(names or OUTPUTS[mode].defaults(features))

    def run(point, models, hardware):
        return outputs(point, models, hardware, mode, names, features)

    # over many points: small intermediates computed once before the grid-sized kernels;
    # over few: reused chains computed once, so that XLA compiles them once (dse.core.staging)
    points = math.prod(jnp.broadcast_shapes(*(jnp.shape(x) for x in
                                              jax.tree_util.tree_leaves(point))))
    out = (staging.staged(run) if points >= staging.MIN_POINTS else staging.lean(run))(
        point, models, hardware)
    return {k: out[k] for k in names}

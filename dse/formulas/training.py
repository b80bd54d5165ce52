"""One training step of a job: memory per device, time per step, MFU and HFU, time to train.

**Layout.** Ranks are ordered tp, cp, dp, pp, innermost first (Megatron-LM's default
order): a tensor-parallel group is consecutive devices, a context-parallel group strides
by tp, a data-parallel group by tp x cp, and pipeline neighbours are tp x cp x dp apart.
A collective runs at the intra-node link among the members that share a node of
``devices_per_node`` and at the inter-node link across nodes (:mod:`.comm`). Experts
are laid out as in inference (ep devices drawn from tp x dp, each expert split over
etp = tp dp / ep), so with ep > 1 an expert has no data-parallel replica outside cp.

**Memory** (busiest pipeline stage, ceil(L / pp) layers):

- weights, gradients and optimizer states (fp32 master weights when master_weight_bits
  exceeds weight_bits, plus the optimizer's state bytes per parameter) of the stage's
  tensor-parallel shard, each divided by the data-parallel group dp x cp from ZeRO
  stage 1 (optimizer), 2 (and gradients), 3 (and weights) on (Rajbhandari et al. 2020);
  16 bytes per parameter for mixed-precision Adam at ZeRO-0. ZeRO-3 also holds the
  gathered parameters of two layers (the one running and the one prefetched).
- activations per layer per micro-batch after Korthikanti et al. 2022 (Sec. 4), with
  the model's own widths: for GPT at 16 bits with dropout, sbh(10 + 24/t + 5as/(ht))
  without sequence parallelism, sbh/t (34 + 5as/h) with it; selective recompute drops
  the attention scores term; full recompute keeps only each layer's input (2sbh, / t
  with sequence parallelism) plus the working set of the one layer being recomputed.
  FlashAttention never stores the scores (only a log-sum-exp per row and head).
  Under 1F1B the first stage keeps min(p, m) micro-batches in flight, scaled by
  1 + (p - 1)/(p v) with v interleaved model chunks (their Sec. 4.2.3); the last stage
  keeps one, plus the fp32 logits 4sbV/t.

**Time.** Each operator of a micro-batch is timed on the roofline as in inference
(:mod:`.transformer`), for a forward pass over micro_batch x seq_len / cp tokens; with
context parallelism each device attends its load-balanced share of the causal pairs
(ring attention, Liu et al. 2023), exchanging key-value chunks with its ring neighbours
behind the attention arithmetic (exposed only when longer). The backward pass costs twice
the forward (two matmuls per matmul), FlashAttention's backward 2.5x (five matmuls
against two, Dao 2023); communication inside a layer (tp all-reduces, which sequence
parallelism replaces by reduce-scatter + all-gather of the same volume; ep all-to-alls)
happens once forward and once backward. Recomputation adds a forward of every layer
(full) or of the attention core (selective). With m = global_batch / (micro_batch dp)
micro-batches and v chunks per device the 1F1B step is (m + (p - 1)/v) T_mb (Narayanan
et al. 2021, Sec. 2.2): bubble fraction (p - 1)/(v m). Pipeline sends carry
micro_batch x seq_len / cp x d activations split over tp (their scatter/gather
optimization), 2 v m per device plus 2 (p - 1) on the fill and drain. Gradients are
all-reduced over dp x cp once per step (ZeRO-1: reduce-scatter + all-gather of the
weights; ZeRO-2: reduce-scatter every micro-batch; ZeRO-3: also all-gather the weights
for every forward, backward and recompute), a configurable share hidden behind compute.

**FLOPs.** MFU counts model FLOPs per token 6 N + 3 A (Chowdhery et al. 2022, App. B),
N the parameters in matmuls (LM head included, embedding lookup excluded), A the
forward FLOPs of causal attention (4 d_attn per (query, key) pair, (s + 1)/2 pairs per
token: half of PaLM's non-causal 12 L H Q T). HFU counts what runs: recomputation, the
2.5x FlashAttention backward, and the full score rectangle of unfused attention.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import comm, memory, operators as op, params, parts
from .roofline import shaped
from .transformer import expert_layout, layer_parts
from .types import (PLAIN, Bits, Hints, Job, Layout, ModelSpec, Options, Parallel, Part, Pass,
                    Precision, Rates, Schedule, Shard)

COMM_KINDS = ("tp", "pp", "dp", "ep", "cp")
_IN_LAYER_COMM = {"tp_comm": "tp", "ep_comm": "ep", "cp_comm": "cp"}


def _full(sch: Schedule):
    return jnp.where(sch.recompute == 2.0, 1.0, 0.0)


def _selective(sch: Schedule):
    return jnp.where(sch.recompute == 1.0, 1.0, 0.0)


# --- memory -------------------------------------------------------------------------


def layer_activation_bytes(m: ModelSpec, s: Shard, lay: Layout, tokens, seq_len, bits: Bits,
                           sch: Schedule, recompute) -> tuple[Any, Any]:
    """(dense-MLP layer, MoE layer): activation bytes one layer keeps for its backward.

    ``tokens`` of the micro-batch on this device (micro_batch x seq_len / cp), keys per
    query ``seq_len``; ``recompute`` 0/1/2 as in :class:`Schedule` (passed separately so
    the working set of a fully recomputed layer can be asked for with 0).
    """
    a = bits.act_bits / 8.0
    d, hd = m.d_model, m.head_dim
    drop = sch.dropout
    shard_rep = jnp.where(lay.sequence_parallel > 0.0, lay.tp, 1.0)
    # kept on every tp rank unless sequence-parallel: norm inputs, the inputs of the qkv
    # and MLP matmuls, the two residual dropout masks (1 byte per element)
    replicated = (m.norms_per_layer + 2.0) * d * a + drop * 2.0 * d
    standard = ((s.heads + s.kv_heads) * hd + s.kv_heads * hd + s.heads * hd) * a
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    latent = (s.heads * (2.0 * qk + 2.0 * m.v_head_dim)
              + m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) * a
    attention = jnp.where(m.kv_lora_rank > 0.0, latent, standard)
    # softmax output, its dropout mask and output per (query, key) and head; FlashAttention
    # keeps one fp32 log-sum-exp per query and head instead
    scores = jnp.where(sch.flash > 0.0, s.heads * 4.0,
                       s.heads * seq_len * (a + drop * (1.0 + a)))
    scores = jnp.where(recompute == 0.0, scores, 0.0)
    dense_mlp = m.mlp_matrices * s.ff * a
    _, etp, group = expert_layout(m, Parallel(lay.tp, lay.pp, lay.dp, lay.ep))
    rows = m.top_k * group / lay.ep
    moe_mlp = (rows * (m.mlp_matrices * m.d_ff_expert / etp + d) * a
               + m.n_shared_experts * m.mlp_matrices * s.ff_expert * a + m.n_experts * 4.0)
    common = replicated / shard_rep + attention + scores
    checkpoint = d * a / shard_rep
    dense = jnp.where(recompute == 2.0, checkpoint, common + dense_mlp)
    moe = jnp.where(recompute == 2.0, checkpoint, common + moe_mlp)
    return tokens * dense, tokens * moe


def in_flight(lay: Layout, micro_batches):
    """Micro-batches whose activations the first pipeline stage holds under 1F1B."""
    interleave = jnp.where(lay.virtual > 1.0, 1.0 + (lay.pp - 1.0) / (lay.pp * lay.virtual), 1.0)
    return jnp.where(lay.pp > 1.0, jnp.minimum(lay.pp, micro_batches) * interleave, 1.0)


def activation_memory(m: ModelSpec, s: Shard, lay: Layout, job: Job, bits: Bits,
                      sch: Schedule, micro_batches):
    """Activation bytes per device of the busier of the first and last pipeline stages."""
    tokens = job.micro_batch * job.seq_len / lay.cp
    _, dense_stage, moe_stage = memory.stage_layers(m, lay.pp)
    dense, moe = layer_activation_bytes(m, s, lay, tokens, job.seq_len, bits, sch, sch.recompute)
    per_micro = dense_stage * dense + moe_stage * moe
    work_dense, work_moe = layer_activation_bytes(m, s, lay, tokens, job.seq_len, bits, sch, 0.0)
    working = _full(sch) * jnp.where(moe_stage > 0.0, jnp.maximum(work_dense, work_moe), work_dense)
    logits = 4.0 * tokens * s.vocab
    first = per_micro * in_flight(lay, micro_batches) + working
    last = per_micro + working + logits
    return jnp.where(lay.pp > 1.0, jnp.maximum(first, last), last)


def expert_params_per_device(m: ModelSpec, par: Parallel):
    """Routed-expert parameters of the busiest stage on one device."""
    _, _, moe_stage = memory.stage_layers(m, par.pp)
    local, etp, _ = expert_layout(m, par)
    return moe_stage * local * m.mlp_matrices * m.d_model * m.d_ff_expert / etp


def layer_params_per_device(m: ModelSpec, s: Shard):
    """Parameters of one dense layer on one tensor-parallel rank (ZeRO-3 gathers these)."""
    return params.attention_params(m, s) + params.norm_params(m) + params.dense_mlp_params(m, s.ff)


def state_memory(m: ModelSpec, s: Shard, lay: Layout, bits: Bits, sch: Schedule):
    """(weight, gradient, optimizer) bytes per device under the ZeRO stage."""
    par = Parallel(lay.tp, lay.pp, lay.dp, lay.ep)
    total = memory.weight_params_per_device(m, s, par)
    experts = expert_params_per_device(m, par)
    dense = total - experts
    dense_group, expert_group = lay.dp * lay.cp, jnp.where(lay.ep > 1.0, lay.cp, lay.dp * lay.cp)

    def sharded(from_stage):
        on = sch.zero_stage >= from_stage
        return dense / jnp.where(on, dense_group, 1.0) + experts / jnp.where(on, expert_group, 1.0)

    master = jnp.where(bits.master_bits > bits.weight_bits, bits.master_bits / 8.0, 0.0)
    gathered = jnp.where(sch.zero_stage >= 3.0, 2.0 * layer_params_per_device(m, s), 0.0)
    weights = (sharded(3.0) + gathered) * bits.weight_bits / 8.0
    grads = sharded(2.0) * bits.grad_bits / 8.0
    optimizer = sharded(1.0) * (master + bits.optimizer_bytes)
    return weights, grads, optimizer


# --- time ---------------------------------------------------------------------------


def _train_parts(fwd: dict, sch: Schedule) -> dict:
    """Forward, backward and recomputation of one layer's forward parts."""
    full, selective = _full(sch), _selective(sch)
    out = {}
    for name, part in fwd.items():
        if name in _IN_LAYER_COMM:
            k = 2.0 + full
        elif name == "attention":
            k = 3.0 + 0.5 * sch.flash + full + selective
        else:
            k = 3.0 + full
        out[name] = parts.scale(part, k)
    return out


def _cp_exchange(m, s, lay: Layout, job: Job, bits: Bits, sch: Schedule, attention: Part,
                 rates: Rates):
    """Exposed ring-attention key/value exchange of one layer (forward, backward, recompute)."""
    tokens = job.micro_batch * job.seq_len / lay.cp
    per_token = jnp.where(m.kv_lora_rank > 0.0,
                          s.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim),
                          2.0 * s.kv_heads * m.head_dim)
    chunk = tokens * per_token * bits.act_bits / 8.0
    local = comm.members_per_node(lay.cp, lay.tp, rates) >= lay.cp
    hop = jnp.where(local, chunk / rates.intra_bw_bytes_per_s + rates.intra_latency_s,
                    chunk / rates.inter_bw_bytes_per_s + rates.inter_latency_s)
    send = (lay.cp - 1.0) * hop
    forward = jnp.maximum(send - attention.time_s, 0.0)
    backward = jnp.maximum(2.0 * send - (2.0 + 0.5 * sch.flash) * attention.time_s, 0.0)
    exposed = jnp.where(lay.cp > 1.0, (1.0 + _full(sch)) * forward + backward, 0.0)
    return parts.comm(exposed)


def layer_train_parts(m, s, p: Precision, lay: Layout, job: Job, bits: Bits, sch: Schedule,
                      rates: Rates, features: frozenset, hints: Hints = PLAIN
                      ) -> tuple[dict, dict]:
    """(dense, MoE) layer: parts of forward + backward (+ recompute) of one micro-batch."""
    ps = Pass("prefill", job.micro_batch, job.seq_len / lay.cp, 0.0, lay.cp - 1.0, 1.0)
    par = Parallel(lay.tp, lay.pp, lay.dp, lay.ep)
    layer_features = frozenset(features) - {"lora", "speculative", "breakdown"}
    dense, moe = layer_parts(m, s, p, ps, rates, par, Options(sch.flash, 0.0, 1.0),
                             layer_features, hints)
    out = []
    for fwd in (dense, moe):
        if not fwd:
            out.append({})
            continue
        fwd = {k: v for k, v in fwd.items() if k != "kv_cache"}  # K, V stay activations
        fwd["norms"] = parts.scale(fwd["norms"], 1.0 / jnp.where(
            lay.sequence_parallel > 0.0, lay.tp, 1.0))
        step = _train_parts(fwd, sch)
        step["cp_comm"] = _cp_exchange(m, s, lay, job, bits, sch, fwd["attention"], rates)
        out.append(step)
    return out[0], out[1]


def end_train_parts(m: ModelSpec, s: Shard, p: Precision, lay: Layout, job: Job,
                    rates: Rates) -> tuple[dict, dict]:
    """(first stage: embedding, last stage: final norm, LM head, loss) per micro-batch.

    Vocab-parallel embedding all-reduces its output; the LM head's input gradient is
    all-reduced in the backward; the vocab-parallel cross-entropy all-reduces a max, a
    sum and the target logit per token (Megatron-LM). Logits are for every token.
    """
    t, d, a = job.micro_batch * job.seq_len / lay.cp, m.d_model, p.act_bits
    reduce = comm.all_reduce_s(t * d * a / 8.0, lay.tp, rates)
    first = {"embedding": parts.scale(parts.of(op.elementwise(t * d, 1.0, 1.0, a, 0.0), rates), 3.0),
             "tp_comm": parts.comm(reduce)}
    loss = op.elementwise(t * s.vocab, 2.0, 2.0, 32.0, 5.0)
    last = {"norms": parts.scale(parts.of(op.elementwise(t * d, 1.0, 1.0, a, 4.0), rates), 3.0),
            "lm_head": parts.scale(parts.of(op.matmul(t, d, s.vocab, p.weight_bits, a),
                                            shaped(rates, t)), 3.0),
            "loss": parts.of(loss, rates),
            "tp_comm": parts.comm(reduce + 3.0 * comm.all_reduce_s(t * 4.0, lay.tp, rates))}
    return first, last


def _stage_parts(m, s, p, lay, job, bits, sch, rates, features, hints) -> dict:
    """Parts of one micro-batch on a device of the busiest stage (the last, with the head)."""
    dense, moe = layer_train_parts(m, s, p, lay, job, bits, sch, rates, features, hints)
    first, last = end_train_parts(m, s, p, lay, job, rates)
    _, dense_stage, moe_stage = memory.stage_layers(m, lay.pp)
    groups = [(dense_stage, dense), (1.0, last), (jnp.where(lay.pp > 1.0, 0.0, 1.0), first)]
    if moe:
        groups.append((moe_stage, moe))
    return parts.combine(groups)


def model_flops_per_token(m: ModelSpec, seq_len):
    """The MFU numerator per token: 6 N + 3 A (see the module docstring)."""
    n_mm = params.active_params(m) - params.embedding_params(m, params.whole(m)) + m.tied_embeddings * (
        m.vocab_size * m.d_model)
    full = (seq_len + 1.0) / 2.0
    windowed = op.causal_pairs(seq_len, 0.0, m.sliding_window) / seq_len
    f = jnp.where(m.sliding_window > 0.0, m.sliding_window_layers, 0.0)
    pairs = (1.0 - f) * full + f * windowed
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    width = jnp.where(m.kv_lora_rank > 0.0, m.n_heads * (qk + m.v_head_dim),
                      2.0 * m.n_heads * m.head_dim)
    attention = m.n_layers * 2.0 * width * pairs
    return 6.0 * n_mm + 3.0 * attention


def hardware_flops_per_sequence(m: ModelSpec, p: Precision, job: Job, sch: Schedule,
                                rates: Rates, features: frozenset, hints: Hints = PLAIN):
    """FLOPs one sequence costs per step on the whole (unsharded) model."""
    one = Layout(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0)
    j = job._replace(micro_batch=1.0)
    bits = Bits(p.weight_bits, p.weight_bits, 0.0, p.act_bits, 0.0)
    dense, moe = layer_train_parts(m, params.whole(m), p, one, j, bits, sch, rates, features,
                                   hints)
    first, last = end_train_parts(m, params.whole(m), p, one, j, rates)
    n_dense, n_moe = params.layer_counts(m)
    groups = [(n_dense, dense), (1.0, first), (1.0, last)] + ([(n_moe, moe)] if moe else [])
    return sum(part.flops for part in parts.combine(groups).values())


def _dp_comm(m, s, lay: Layout, bits: Bits, sch: Schedule, micro_batches, rates: Rates):
    """Data-parallel gradient and ZeRO traffic of one step (before overlap)."""
    par = Parallel(lay.tp, lay.pp, lay.dp, lay.ep)
    experts = expert_params_per_device(m, par)
    dense = memory.weight_params_per_device(m, s, par) - experts
    stride = lay.tp
    total = 0.0
    for count, group in ((dense, lay.dp * lay.cp), (experts, jnp.where(lay.ep > 1.0, lay.cp,
                                                                        lay.dp * lay.cp))):
        grads, weights = count * bits.grad_bits / 8.0, count * bits.weight_bits / 8.0
        all_reduce = comm.all_reduce_s(grads, group, rates, stride)
        scatter = comm.reduce_scatter_s(grads, group, rates, stride)
        gather = comm.all_gather_s(weights, group, rates, stride)
        z = sch.zero_stage
        per_step = jnp.where(z == 0.0, all_reduce, jnp.where(z == 1.0, scatter + gather, jnp.where(
            z == 2.0, micro_batches * scatter + gather,
            micro_batches * (scatter + (2.0 + _full(sch)) * gather))))
        total = total + jnp.where((group > 1.0) & (count > 0.0), per_step, 0.0)
    return total


def _signature(stage: dict):
    """Binding roof of every part of the step, base-4 digits in a fixed order (the
    component_bound codes: 0 compute, 1 memory, 2 communication, 3 absent)."""
    code = jnp.uint32(0)
    for i, name in enumerate(sorted(stage)):
        part = stage[name]
        bound = parts.bound_code(part.time_s, part.compute_s, part.memory_s, part.comm_s)
        code = code + jnp.asarray(bound, jnp.uint32) * jnp.uint32(4 ** i)
    return code


def training(m: ModelSpec, rates: Rates, capacity, peak_flops, price_usd_per_s, job: Job,
             lay: Layout, bits: Bits, sch: Schedule, features: frozenset,
             names: frozenset = frozenset(), hints: Hints = PLAIN) -> dict:
    """Every training output of one job; array arguments broadcast.

    ``peak_flops`` is the device's peak at the compute width (MFU and HFU denominators),
    ``capacity`` its usable memory. ``job.global_batch`` must already be resolved.
    """
    s = params.shard(m, lay.tp)
    p = Precision(bits.weight_bits, bits.act_bits, bits.act_bits)
    micro_batches = jnp.maximum(job.global_batch / (job.micro_batch * lay.dp), 1.0)
    n_devices = lay.tp * lay.pp * lay.dp * lay.cp

    weights, grads, optimizer = state_memory(m, s, lay, bits, sch)
    activations = activation_memory(m, s, lay, job, bits, sch, micro_batches)
    total = weights + grads + optimizer + activations
    per_sequence = activations / job.micro_batch
    max_micro = jnp.maximum(jnp.floor((capacity - weights - grads - optimizer) / per_sequence), 0.0)

    stage = _stage_parts(m, s, p, lay, job, bits, sch, rates, features, hints)
    overlap = {"tp_comm": 1.0 - sch.tp_overlap}
    stage = {k: parts.scale(v, overlap.get(k, 1.0)) for k, v in stage.items()}
    t_micro = parts.total_time(stage)
    in_layer = {kind: stage[name].time_s if name in stage else 0.0
                for name, kind in _IN_LAYER_COMM.items()}
    compute = micro_batches * (t_micro - sum(in_layer.values()))
    bubble = (lay.pp - 1.0) / lay.virtual * t_micro

    hop_bytes = job.micro_batch * job.seq_len / lay.cp * m.d_model * bits.act_bits / 8.0 / lay.tp
    hops = jnp.maximum(lay.pp - 1.0, 1.0)
    mean_hop = comm.pipeline_transfer_s(hop_bytes, lay.pp, lay.tp * lay.cp * lay.dp, rates) / hops
    sends = 2.0 * lay.virtual * micro_batches + 2.0 * (lay.pp - 1.0)
    pp_comm = jnp.where(lay.pp > 1.0, (1.0 - sch.pp_overlap) * sends * mean_hop, 0.0)
    dp_comm = (1.0 - sch.dp_overlap) * _dp_comm(m, s, lay, bits, sch, micro_batches, rates)
    comm_by_kind = dict(tp=micro_batches * in_layer["tp"], pp=pp_comm, dp=dp_comm,
                        ep=micro_batches * in_layer["ep"], cp=micro_batches * in_layer["cp"])
    step = compute + bubble + sum(comm_by_kind.values())

    tokens = job.global_batch * job.seq_len
    model_flops = tokens * model_flops_per_token(m, job.seq_len)
    hardware_flops = job.global_batch * hardware_flops_per_sequence(m, p, job, sch, rates,
                                                                    features, hints)
    throughput = tokens / step
    train_s = job.total_tokens / throughput
    given = job.total_tokens > 0.0
    shape = jnp.broadcast_shapes(*(jnp.shape(v) for v in comm_by_kind.values()))
    out = dict(
        n_params=params.total_params(m),
        n_params_active=params.active_params(m),
        n_devices=n_devices,
        dp_size=lay.dp,
        grad_accum_steps=micro_batches,
        weight_bytes=weights,
        grad_bytes=grads,
        optimizer_bytes=optimizer,
        activation_bytes=activations,
        memory_bytes=total,
        fits=total <= capacity,
        max_micro_batch=max_micro,
        step_s=step,
        compute_s=compute,
        bubble_s=bubble,
        bubble_fraction=(lay.pp - 1.0) / (lay.virtual * micro_batches),
        comm_s=jnp.stack([jnp.broadcast_to(comm_by_kind[k], shape) for k in COMM_KINDS]),
        throughput_tok_s=throughput,
        throughput_per_device_tok_s=throughput / n_devices,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        mfu=model_flops / (step * n_devices * peak_flops),
        hfu=hardware_flops / (step * n_devices * peak_flops),
        train_days=jnp.where(given, train_s / 86400.0, jnp.nan),
        device_hours=jnp.where(given, n_devices * train_s / 3600.0, jnp.nan),
        train_cost_usd=jnp.where(given, n_devices * train_s * price_usd_per_s, jnp.nan),
    )
    if "bound_signature" in names:
        out["bound_signature"] = _signature(stage)[None]
    return out

"""One training step of a job: memory per device, time per step, MFU and HFU, time to train.

**Layout.** Ranks are ordered tp, cp, dp, pp, innermost first (Megatron-LM's default
order): a tensor-parallel group is consecutive devices, a context-parallel group strides
by tp, a data-parallel group by tp x cp, and pipeline neighbours are tp x cp x dp apart.
A collective runs at the intra-node link among the members that share a node of
``devices_per_node`` and at the inter-node link across nodes (:mod:`.comm`). Experts
are laid out as in inference (ep devices drawn from tp x dp, each expert split over
etp = tp dp / ep), so with ep > 1 an expert has no data-parallel replica outside cp.

**Pipeline stages.** By default every stage is charged ceil(L / pp) layers (the heaviest
stage of an even split). With ``first_layers`` / ``last_layers`` (Megatron-LM's
``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``,
``TransformerConfig.num_layers_in_first/last_pipeline_stage``) the first / last stage
holds that many layers and the rest divide evenly over the remaining (middle) stages; 0
leaves that end in the even split of the rest. The first stage holds the embedding, the
last the final norm and LM head (a tied head is a copy there); each end stage is charged
the embedding table and the final norm, as the even split always has been (the learned
position rows and the final norm's d parameters are counted on both ends). Memory is
that of the busiest device (weights + gradients + optimizer + activations of the first,
a middle or the last stage); time per micro-batch is that of the slowest stage, which
sets the pace of the whole pipeline.

**Memory** (busiest pipeline device):

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
  Under 1F1B pipeline rank r keeps min(p - r, m) micro-batches in flight (Megatron-LM
  warms up p - r - 1); with v interleaved model chunks min(p, m)(1 + (p - 2r - 1)/(p v))
  (Narayanan et al. 2021 Sec. 4.2.3 for r = 0; Megatron-LM's (p - r - 1) 2 + (v - 1) p
  warm-up chunks of L/(p v) layers); the last stage keeps one, plus the fp32 logits
  4sbV/t. ZB-H1 keeps 1F1B's peak (Qi et al. 2023, Sec. 2.1); GPipe keeps all m
  micro-batches on every stage (Huang et al. 2019: every forward before any backward);
  DualPipe holds two stages per device (r and p - 1 - r: parameters 2x) and p + 1
  micro-batches of activations (DeepSeek-AI 2024, Table 2).

**Time.** Each operator of a micro-batch is timed on the roofline as in inference
(:mod:`.transformer`), for a forward pass over micro_batch x seq_len / cp tokens; with
context parallelism each device attends its load-balanced share of the causal pairs
(ring attention, Liu et al. 2023), exchanging key-value chunks with its ring neighbours
behind the attention arithmetic (exposed only when longer). The backward pass costs twice
the forward (two matmuls per matmul), FlashAttention's backward 2.5x (five matmuls
against two, Dao 2023); communication inside a layer (tp all-reduces, which sequence
parallelism replaces by reduce-scatter + all-gather of the same volume; ep all-to-alls)
happens once forward and once backward. Recomputation adds a forward of every layer
(full) or of the attention core (selective). Pipeline sends carry micro_batch x seq_len
/ cp x d activations split over tp (their scatter/gather optimization), 2 v m per device
plus 2 (p - 1) on the fill and drain. Gradients are all-reduced over dp x cp once per
step (ZeRO-1: reduce-scatter + all-gather of the weights; ZeRO-2: reduce-scatter every
micro-batch; ZeRO-3: also all-gather the weights for every forward, backward and
recompute), a configurable share hidden behind compute.

**Pipeline schedules.** With m = global_batch / (micro_batch dp) micro-batches, T the
time of one micro-batch on the slowest stage, split as T = F + B + W (forward; backward
for the inputs, recomputation included; backward for the weights: the weight-gradient
half of every operator's 2x backward, none for the attention core or communication), the
step is m T + bubble:

- 1F1B (Narayanan et al. 2021, Sec. 2.2): bubble (p - 1)/v T, fraction (p - 1)/(v m)
  with v interleaved chunks per device;
- GPipe (Huang et al. 2019, Sec. 2.3): (p - 1) T, fraction (p - 1)/m;
- ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 2.1 and
  Table 2): (p - 1)(T_F + T_B - T_W) = (p - 1)(T - 2W), a third of 1F1B's when
  F = B = W;
- DualPipe (DeepSeek-AI 2024, DeepSeek-V3 technical report, arXiv 2412.19437, Table 2):
  (p/2 - 1)(F&B + B_full - 3W) with B_full = B + W the full backward and F&B the two
  overlapped chunks taken as F + B_full (the overlap hides communication, not
  arithmetic): (p/2 - 1)(2T - F - 3W); each device runs stages r and p - 1 - r, so its
  micro-batch time is the mean of the pair's.

GPipe, ZB-H1 and DualPipe take no virtual stages; DualPipe needs an even p and an even
m >= 2p (DeepSeek's DualPipe asserts both).

**FLOPs.** MFU counts model FLOPs per token 6 N + 3 A (Chowdhery et al. 2022, App. B),
N the parameters in matmuls (LM head included, embedding lookup excluded), A the
forward FLOPs of causal attention (4 d_attn per (query, key) pair, (s + 1)/2 pairs per
token: half of PaLM's non-causal 12 L H Q T). HFU counts what runs: recomputation, the
2.5x FlashAttention backward, and the full score rectangle of unfused attention.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from . import comm, memory, operators as op, params, parts
from .roofline import shaped
from .transformer import expert_layout, layer_parts
from .types import (PLAIN, Bits, Hints, Job, Layout, ModelSpec, Options, Parallel, Part, Pass,
                    Precision, Rates, Schedule, Shard)

COMM_KINDS = ("tp", "pp", "dp", "ep", "cp")
_IN_LAYER_COMM = {"tp_comm": "tp", "ep_comm": "ep", "cp_comm": "cp"}
# Schedule.pp_schedule codes: indices into dse.schema.knobs.PP_SCHEDULES
ONE_F_ONE_B, GPIPE, ZB_H1, DUALPIPE = 0.0, 1.0, 2.0, 3.0
# The static feature of studies with uneven stages or a schedule other than 1F1B
# (dse.study.Study.features); without it every job is an even split under 1F1B, and the
# program and its outputs' dimensions stay those of that case alone.
PP_LAYOUT = "pp_layout"


def _full(sch: Schedule):
    return jnp.where(sch.recompute == 2.0, 1.0, 0.0)


def _selective(sch: Schedule):
    return jnp.where(sch.recompute == 1.0, 1.0, 0.0)


# --- pipeline stages ------------------------------------------------------------------


def uneven(lay: Layout):
    """Whether the first or last stage has its own layer count."""
    return (lay.first_layers > 0.0) | (lay.last_layers > 0.0)


def stage_layers(m: ModelSpec, lay: Layout):
    """Transformer layers of the (first, middle, last) pipeline stage.

    Megatron-LM (``TransformerConfig.num_layers_in_first/last_pipeline_stage``): a given
    end holds its own count, the remaining layers split evenly over the remaining
    stages (rounded up here; an uneven rest is flagged ``schedule_indivisible``).
    Neither given: ceil(L / pp) everywhere, the heaviest stage of an even split.
    """
    even, _, _ = memory.stage_layers(m, lay.pp)
    has_first, has_last = lay.first_layers > 0.0, lay.last_layers > 0.0
    rest_stages = lay.pp - jnp.where(has_first, 1.0, 0.0) - jnp.where(has_last, 1.0, 0.0)
    rest = m.n_layers - lay.first_layers - lay.last_layers
    middle = jnp.where(rest_stages > 0.0, jnp.ceil(rest / jnp.maximum(rest_stages, 1.0)), 0.0)
    first = jnp.where(has_first, lay.first_layers, middle)
    last = jnp.where(has_last, lay.last_layers, middle)
    split = uneven(lay)
    return (jnp.where(split, first, even), jnp.where(split, middle, even),
            jnp.where(split, last, even))


def _dense_moe(m: ModelSpec, n):
    """(dense-MLP, MoE) layers of a stage of n layers (MoE first, as memory.stage_layers)."""
    _, n_moe = params.layer_counts(m)
    moe = jnp.minimum(n, n_moe)
    return n - moe, moe


def _devices(lay: Layout, sch: Schedule):
    """(dualpipe, middle device present) of the layout: a middle stage exists from pp = 3;
    a DualPipe device holding two middle stages from pp = 4."""
    dual = sch.pp_schedule == DUALPIPE
    return dual, jnp.where(dual, lay.pp >= 4.0, lay.pp >= 3.0)


def _per_device(dual, first, middle, last):
    """An amount held per stage, for the (first, middle, last) device kinds: under
    DualPipe a device holds stages r and p - 1 - r, so the first and last kinds hold
    first + last and the middle kind two middle stages."""
    pair = first + last
    return (jnp.where(dual, pair, first), jnp.where(dual, 2.0 * middle, middle),
            jnp.where(dual, pair, last))


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
    replicated = (params.layer_norms(m) + 2.0) * d * a + drop * 2.0 * d
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
    dense_mlp = params.dense_mlp_share(m) * m.mlp_matrices * s.ff * a  # its MLPs
    _, etp, group = expert_layout(m, Parallel(lay.tp, lay.pp, lay.dp, lay.ep))
    rows = m.top_k * group / lay.ep
    # LatentMoE: the dispatched copies are latent-wide, and the latent token kept twice
    width = params.expert_width(m)
    moe_mlp = (rows * (m.mlp_matrices * m.d_ff_expert / etp + width) * a
               + 2.0 * m.moe_latent_size * a
               + m.n_shared_experts * m.mlp_matrices * s.ff_expert * a + m.n_experts * 4.0)
    common = replicated / shard_rep + attention + scores
    checkpoint = d * a / shard_rep
    dense = jnp.where(recompute == 2.0, checkpoint, common + dense_mlp)
    moe = jnp.where(recompute == 2.0, checkpoint, common + moe_mlp)
    return tokens * dense, tokens * moe



def in_flight(lay: Layout, micro_batches, rank=0.0, sch: Schedule | None = None):
    """Micro-batches whose activations pipeline rank ``rank`` holds at its peak.

    1F1B: min(p - r, m) (Megatron-LM warms up p - r - 1 forwards); interleaved over v
    chunks: min(p, m)(1 + (p - 2r - 1)/(p v)) (Narayanan et al. 2021, Sec. 4.2.3, for
    r = 0: p + (p - 1)/v; Megatron-LM's (p - r - 1) 2 + (v - 1) p + 1 chunks of L/(p v)
    layers in general); ZB-H1 as 1F1B (Qi et al. 2023, Sec. 2.1); GPipe all m (Huang et
    al. 2019). Without a pipeline one.
    """
    p, v = lay.pp, lay.virtual
    interleave = jnp.where(v > 1.0, 1.0 + (p - 2.0 * rank - 1.0) / (p * v), 1.0)
    ahead = jnp.where(v > 1.0, jnp.minimum(p, micro_batches), jnp.minimum(p - rank, micro_batches))
    out = ahead * interleave
    if sch is not None:
        out = jnp.where(sch.pp_schedule == GPIPE, micro_batches, out)
    return jnp.where(p > 1.0, out, 1.0)


def stage_activation_bytes(m: ModelSpec, s: Shard, lay: Layout, job: Job, bits: Bits,
                           sch: Schedule, n):
    """(layers' activations of one micro-batch, full-recompute working set) of a stage
    of n layers on one device."""
    tokens = job.micro_batch * job.seq_len / lay.cp
    dense_stage, moe_stage = _dense_moe(m, n)
    dense, moe = layer_activation_bytes(m, s, lay, tokens, job.seq_len, bits, sch, sch.recompute)
    per_micro = dense_stage * dense + moe_stage * moe
    work_dense, work_moe = layer_activation_bytes(m, s, lay, tokens, job.seq_len, bits, sch, 0.0)
    working = _full(sch) * jnp.where(moe_stage > 0.0, jnp.maximum(work_dense, work_moe), work_dense)
    return per_micro, working


def activation_memory(m: ModelSpec, s: Shard, lay: Layout, job: Job, bits: Bits,
                      sch: Schedule, micro_batches):
    """Activation bytes of the (first, middle, last) device kind (see :func:`_per_device`)."""
    n_first, n_middle, n_last = stage_layers(m, lay)
    first, work_first = stage_activation_bytes(m, s, lay, job, bits, sch, n_first)
    middle, work_middle = stage_activation_bytes(m, s, lay, job, bits, sch, n_middle)
    last, work_last = stage_activation_bytes(m, s, lay, job, bits, sch, n_last)
    tokens = job.micro_batch * job.seq_len / lay.cp
    logits = 4.0 * tokens * s.vocab
    tail = jnp.where((sch.pp_schedule == GPIPE) & (lay.pp > 1.0), micro_batches, 1.0)
    one_way = (first * in_flight(lay, micro_batches, 0.0, sch) + work_first,
               middle * in_flight(lay, micro_batches, 1.0, sch) + work_middle,
               last * tail + work_last + logits * tail)
    # DualPipe: p + 1 micro-batches of the device's two stages (their mean), one of logits
    ahead = lay.pp + 1.0
    pair = ahead * (first + last) / 2.0 + jnp.maximum(work_first, work_last) + logits
    dual, _ = _devices(lay, sch)
    return (jnp.where(dual, pair, one_way[0]),
            jnp.where(dual, ahead * middle + work_middle, one_way[1]),
            jnp.where(dual, pair, one_way[2]))


def stage_params(m: ModelSpec, s: Shard, par: Parallel, n, ends):
    """(parameters, routed-expert parameters) on one device of a stage of n layers;
    ``ends``: a first or last stage (charged the embedding table and the final norm, as
    :func:`dse.formulas.memory.weight_params_per_device` charges the heaviest stage)."""
    dense_stage, moe_stage = _dense_moe(m, n)
    per_layer = params.attention_params(m, s) + params.norm_params(m)
    layers = (dense_stage * (per_layer + params.dense_mlp_params(m, s.ff))
              + moe_stage * (per_layer + memory.moe_params_per_device(m, s, par)))
    table = params.embedding_params(m, s)
    # One stage holds everything when pp = 1; otherwise the first stage holds the
    # embedding and the last the LM head (a tied head is a copy there; Megatron-LM).
    end = jnp.where(par.pp > 1.0, table,
                    table + (1.0 - m.tied_embeddings) * s.vocab * m.d_model)
    total = layers + jnp.where(ends, end, 0.0) + jnp.where(ends, m.norm_params * m.d_model, 0.0)
    local, etp, _ = expert_layout(m, par)
    experts = moe_stage * local * m.mlp_matrices * params.expert_width(m) * m.d_ff_expert / etp
    return total, experts


def device_params(m: ModelSpec, s: Shard, lay: Layout, sch: Schedule):
    """((parameters, routed-expert parameters) of the first, middle and last device kind)."""
    par = Parallel(lay.tp, lay.pp, lay.dp, lay.ep)
    n_first, n_middle, n_last = stage_layers(m, lay)
    first = stage_params(m, s, par, n_first, True)
    middle = stage_params(m, s, par, n_middle, False)
    last = stage_params(m, s, par, n_last, True)
    dual, _ = _devices(lay, sch)
    totals = _per_device(dual, first[0], middle[0], last[0])
    experts = _per_device(dual, first[1], middle[1], last[1])
    return tuple(zip(totals, experts))


def layer_params_per_device(m: ModelSpec, s: Shard):
    """Parameters of one dense layer on one tensor-parallel rank (ZeRO-3 gathers these)."""
    return params.attention_params(m, s) + params.norm_params(m) + params.dense_mlp_params(m, s.ff)


def state_memory(m: ModelSpec, s: Shard, lay: Layout, bits: Bits, sch: Schedule, total,
                 experts):
    """(weight, gradient, optimizer) bytes of a device holding ``total`` parameters, of
    them ``experts`` routed-expert ones, under the ZeRO stage."""
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


def busiest_device(m: ModelSpec, s: Shard, lay: Layout, job: Job, bits: Bits, sch: Schedule,
                   micro_batches, capacity, general: bool = True) -> dict:
    """Memory of the busiest pipeline device (largest weights + gradients + optimizer +
    activations among the first, middle and last device kinds), the largest micro-batch
    that fits on every device, and the (parameters, expert parameters) of the device
    holding the most parameters (whose gradients the data-parallel step waits for).

    Not ``general`` (an even split under 1F1B) the first and last stages hold the same
    parameters, so the busiest is the one with more activations: the states of the
    heaviest stage plus the larger activations (the same numbers, computed without
    putting the states' outputs on the activations' axes).
    """
    if not general:
        n_stage, _, _ = stage_layers(m, lay)
        total, experts = stage_params(m, s, Parallel(lay.tp, lay.pp, lay.dp, lay.ep), n_stage,
                                      True)
        weights, grads, optimizer = state_memory(m, s, lay, bits, sch, total, experts)
        per_micro, working = stage_activation_bytes(m, s, lay, job, bits, sch, n_stage)
        logits = 4.0 * (job.micro_batch * job.seq_len / lay.cp) * s.vocab
        first = per_micro * in_flight(lay, micro_batches) + working
        last = per_micro + working + logits
        act = jnp.where(lay.pp > 1.0, jnp.maximum(first, last), last)
        fit = jnp.maximum(jnp.floor((capacity - weights - grads - optimizer)
                                    / (act / job.micro_batch)), 0.0)
        return dict(weight_bytes=weights, grad_bytes=grads, optimizer_bytes=optimizer,
                    activation_bytes=act, memory_bytes=weights + grads + optimizer + act,
                    max_micro_batch=fit, params=total, experts=experts)
    _, has_middle = _devices(lay, sch)
    present = (lay.pp > 1.0, has_middle, True)
    held = device_params(m, s, lay, sch)
    acts = activation_memory(m, s, lay, job, bits, sch, micro_batches)
    kinds = []
    for (total, experts), act, here in zip(held, acts, present):
        weights, grads, optimizer = state_memory(m, s, lay, bits, sch, total, experts)
        memory_bytes = weights + grads + optimizer + act
        fit = jnp.maximum(jnp.floor((capacity - weights - grads - optimizer)
                                    / (act / job.micro_batch)), 0.0)
        kinds.append(dict(weight_bytes=weights, grad_bytes=grads, optimizer_bytes=optimizer,
                          activation_bytes=act, memory_bytes=memory_bytes, params=total,
                          experts=experts, max_micro_batch=fit, present=here))

    def pick(key, better):
        """Per point, the kind whose ``key`` is ``better`` (first of equals), its dict."""
        best = kinds[-1]
        for kind in reversed(kinds[:-1]):
            take = kind["present"] & better(kind[key], best[key])
            best = {k: jnp.where(take, kind[k], best[k]) for k in best}
        return best

    busiest = pick("memory_bytes", lambda a, b: a >= b)
    holder = pick("params", lambda a, b: a >= b)
    tightest = pick("max_micro_batch", lambda a, b: a <= b)
    out = {k: busiest[k] for k in ("weight_bytes", "grad_bytes", "optimizer_bytes",
                                   "activation_bytes", "memory_bytes")}
    out.update(max_micro_batch=tightest["max_micro_batch"], params=holder["params"],
               experts=holder["experts"])
    return out


# --- time ---------------------------------------------------------------------------

# Shares of a micro-batch's time: all of it (forward, backward, recomputation), the
# forward alone, the backward for the weights alone (W of Qi et al. 2023).
SHARES = ("all", "forward", "weights")


def _train_parts(fwd: dict, sch: Schedule, share: str = "all") -> dict:
    """Forward, backward and recomputation of one layer's forward parts (``share``: all
    of it, the forward, or the weight-gradient half of the backward)."""
    full, selective = _full(sch), _selective(sch)
    out = {}
    for name, part in fwd.items():
        if share == "forward":
            k = 1.0
        elif share == "weights":  # no weights behind communication or the attention core
            k = 0.0 if name in _IN_LAYER_COMM or name == "attention" else 1.0
        elif name in _IN_LAYER_COMM:
            k = 2.0 + full
        elif name == "attention":
            k = 3.0 + 0.5 * sch.flash + full + selective
        else:
            k = 3.0 + full
        out[name] = parts.scale(part, k)
    return out


def _cp_exchange(m, s, lay: Layout, job: Job, bits: Bits, sch: Schedule, attention: Part,
                 rates: Rates, share: str = "all"):
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
    exposed = {"all": (1.0 + _full(sch)) * forward + backward, "forward": forward,
               "weights": 0.0}[share]
    return parts.comm(jnp.where(lay.cp > 1.0, exposed, 0.0))


def _layer_train_shares(m, s, p: Precision, lay: Layout, job: Job, bits: Bits, sch: Schedule,
                        rates: Rates, features: frozenset, hints: Hints, shares
                        ) -> dict[str, tuple[dict, dict]]:
    """share -> (dense, MoE) layer parts of one micro-batch (see :data:`SHARES`)."""
    ps = Pass("prefill", job.micro_batch, job.seq_len / lay.cp, 0.0, lay.cp - 1.0, 1.0)
    par = Parallel(lay.tp, lay.pp, lay.dp, lay.ep)
    layer_features = frozenset(features) - {"lora", "speculative", "breakdown"}
    dense, moe = layer_parts(m, s, p, ps, rates, par, Options(sch.flash, 0.0, 1.0,
                                                            sch.moe_imbalance),
                             layer_features, hints)
    out = {share: [] for share in shares}
    for fwd in (dense, moe):
        if not fwd:
            for share in shares:
                out[share].append({})
            continue
        fwd = {k: v for k, v in fwd.items() if k != "kv_cache"}  # K, V stay activations
        fwd["norms"] = parts.scale(fwd["norms"], 1.0 / jnp.where(
            lay.sequence_parallel > 0.0, lay.tp, 1.0))
        for share in shares:
            step = _train_parts(fwd, sch, share)
            step["cp_comm"] = _cp_exchange(m, s, lay, job, bits, sch, fwd["attention"], rates,
                                           share)
            out[share].append(step)
    return {share: (pair[0], pair[1]) for share, pair in out.items()}


def layer_train_parts(m, s, p: Precision, lay: Layout, job: Job, bits: Bits, sch: Schedule,
                      rates: Rates, features: frozenset, hints: Hints = PLAIN
                      ) -> tuple[dict, dict]:
    """(dense, MoE) layer: parts of forward + backward (+ recompute) of one micro-batch."""
    return _layer_train_shares(m, s, p, lay, job, bits, sch, rates, features, hints,
                               ("all",))["all"]


def end_train_parts(m: ModelSpec, s: Shard, p: Precision, lay: Layout, job: Job,
                    rates: Rates, share: str = "all") -> tuple[dict, dict]:
    """(first stage: embedding, last stage: final norm, LM head, loss) per micro-batch.

    Vocab-parallel embedding all-reduces its output; the LM head's input gradient is
    all-reduced in the backward; the vocab-parallel cross-entropy all-reduces a max, a
    sum and the target logit per token (Megatron-LM). Logits are for every token.
    ``share`` as in :data:`SHARES`: the forward has the embedding's all-reduce and the
    loss's; the backward for the weights has no communication and no loss.
    """
    t, d, a = job.micro_batch * job.seq_len / lay.cp, m.d_model, p.act_bits
    reduce = comm.all_reduce_s(t * d * a / 8.0, lay.tp, rates)
    k = 3.0 if share == "all" else 1.0
    loss_reduce = 3.0 * comm.all_reduce_s(t * 4.0, lay.tp, rates)
    first = {"embedding": parts.scale(parts.of(op.elementwise(t * d, 1.0, 1.0, a, 0.0), rates), k),
             "tp_comm": parts.comm({"all": reduce, "forward": reduce, "weights": 0.0}[share])}
    loss = op.elementwise(t * s.vocab, 2.0, 2.0, 32.0, 5.0)
    last = {"norms": parts.scale(parts.of(op.elementwise(t * d, 1.0, 1.0, a, 4.0), rates), k),
            "lm_head": parts.scale(parts.of(op.matmul(t, d, s.vocab, p.weight_bits, a),
                                            shaped(rates, t)), k),
            "loss": parts.scale(parts.of(loss, rates), 0.0 if share == "weights" else 1.0),
            "tp_comm": parts.comm({"all": reduce + loss_reduce, "forward": loss_reduce,
                                   "weights": 0.0}[share])}
    return first, last


def _stage(m: ModelSpec, n, layer: tuple[dict, dict], ends: tuple[dict, dict], with_first,
           with_last) -> dict:
    """Parts of one micro-batch on a stage of n layers holding the embedding
    (``with_first``) and the LM head (``with_last``), 0 or 1 each."""
    dense, moe = layer
    first, last = ends
    dense_stage, moe_stage = _dense_moe(m, n)
    groups = [(dense_stage, dense), (with_last, last), (with_first, first)]
    if moe:
        groups.append((moe_stage, moe))
    return parts.combine(groups)


def _pick_parts(choice, stages: dict[int, dict]) -> dict:
    """Per point the stage dict ``stages[choice]`` (every dict has the same names)."""
    codes = sorted(stages)
    out = stages[codes[-1]]
    for code in reversed(codes[:-1]):
        out = {k: parts.where(choice == code, stages[code][k], v) for k, v in out.items()}
    return out


def stage_parts(m, s, p, lay: Layout, job: Job, bits: Bits, sch: Schedule, rates: Rates,
                features, hints=PLAIN, general: bool = True) -> dict[str, dict]:
    """share -> parts of one micro-batch on the slowest stage (see :data:`SHARES`).

    The slowest of the first (embedding), middle and last (final norm, LM head, loss)
    stages with their own layer counts; with an even split the last (its heaviest
    layers plus the head). Under DualPipe a device runs stages r and p - 1 - r on half
    the micro-batches each: the mean of the first and last stages', or of two middle ones.
    Not ``general`` (an even split under 1F1B): the last stage, and only the "all" share.
    """
    overlap = {"tp_comm": 1.0 - sch.tp_overlap}
    n_first, n_middle, n_last = stage_layers(m, lay)
    shares = SHARES if general else ("all",)
    layers = _layer_train_shares(m, s, p, lay, job, bits, sch, rates, features, hints, shares)
    one = jnp.where(lay.pp > 1.0, 0.0, 1.0)  # pp = 1: one stage holds both ends
    by_share = {}
    for share in shares:
        ends = end_train_parts(m, s, p, lay, job, rates, share)
        stages = {2: _stage(m, n_last, layers[share], ends, one, 1.0)}
        if general:
            stages[0] = _stage(m, n_first, layers[share], ends, 1.0, one)
            stages[1] = _stage(m, n_middle, layers[share], ends, 0.0, 0.0)
            stages[3] = parts.combine([(0.5, stages[0]), (0.5, stages[2])])  # DualPipe pair
        by_share[share] = {code: {k: parts.scale(v, overlap.get(k, 1.0))
                                  for k, v in stage.items()} for code, stage in stages.items()}
    if not general:
        return {"all": by_share["all"][2]}
    times = {code: parts.total_time(stage) for code, stage in by_share["all"].items()}
    dual, has_middle = _devices(lay, sch)
    middle = jnp.where(has_middle, times[1], 0.0)
    slowest = jnp.where((times[0] >= times[2]) & (times[0] >= middle), 0.0,
                        jnp.where(middle > times[2], 1.0, 2.0))
    choice = jnp.where(dual, jnp.where(middle > times[3], 1.0, 3.0),
                       jnp.where(uneven(lay), slowest, 2.0))
    return {share: _pick_parts(choice, stages) for share, stages in by_share.items()}


def pipeline_bubble(lay: Layout, sch: Schedule, micro_batches, t_micro, forward, weights):
    """(bubble seconds per step, bubble over the ideal m T) of the schedule, T = t_micro
    the slowest stage's micro-batch time, ``forward`` and ``weights`` its F and W."""
    p, v, code = lay.pp, lay.virtual, sch.pp_schedule
    one_f_one_b = (p - 1.0) / v * t_micro  # Narayanan et al. 2021, Sec. 2.2
    gpipe = (p - 1.0) * t_micro  # Huang et al. 2019
    zb_h1 = (p - 1.0) * (t_micro - 2.0 * weights)  # Qi et al. 2023: (p-1)(T_F + T_B - T_W)
    # DeepSeek-V3 Table 2: (p/2 - 1)(F&B + B - 3W), B the full backward T - F, F&B = T
    dualpipe = jnp.maximum(p / 2.0 - 1.0, 0.0) * (2.0 * t_micro - forward - 3.0 * weights)
    bubble = jnp.where(code == GPIPE, gpipe, jnp.where(code == ZB_H1, zb_h1, jnp.where(
        code == DUALPIPE, dualpipe, one_f_one_b)))
    fraction = jnp.where(code == ONE_F_ONE_B, (p - 1.0) / (v * micro_batches),
                         jnp.where(code == GPIPE, (p - 1.0) / micro_batches,
                                   bubble / (micro_batches * t_micro)))
    return bubble, fraction


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
                      m.n_heads * (m.head_dim + params.value_dim(m)))
    # full-attention layers of a head size of their own (Gemma 4) over the full pairs
    mg = params.global_view(m, params.whole(m))[0]
    wider = m.n_heads * (mg.head_dim + params.value_dim(mg) - m.head_dim - params.value_dim(m))
    # a hybrid model's linear-attention layers: the delta rule's ~7 dk dv per value head
    # and token (formulas.attention.linear_attention_costs), no pairs
    f_lin = params.linear_fraction(m)
    recurrence = 7.0 * m.linear_value_heads * m.linear_key_head_dim * m.linear_value_head_dim
    softmax = 2.0 * (width * pairs + (1.0 - f) * full * jnp.where(m.kv_lora_rank > 0.0, 0.0,
                                                                   wider))
    attention = m.n_layers * ((1.0 - f_lin) * softmax + f_lin * recurrence)
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




def _dp_comm(lay: Layout, bits: Bits, sch: Schedule, micro_batches, rates: Rates, total,
             experts):
    """Data-parallel gradient and ZeRO traffic of one step (before overlap) of a device
    holding ``total`` parameters, ``experts`` of them routed-expert ones."""
    dense = total - experts
    stride = lay.tp
    out = 0.0
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
        out = out + jnp.where((group > 1.0) & (count > 0.0), per_step, 0.0)
    return out


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
    general = PP_LAYOUT in features
    if not general:  # an even split under 1F1B (see PP_LAYOUT)
        lay = lay._replace(first_layers=0.0, last_layers=0.0)
        sch = sch._replace(pp_schedule=ONE_F_ONE_B)

    device = busiest_device(m, s, lay, job, bits, sch, micro_batches, capacity, general)
    total = device["memory_bytes"]

    shares = stage_parts(m, s, p, lay, job, bits, sch, rates, features, hints, general)
    stage = shares["all"]
    t_micro = parts.total_time(stage)
    in_layer = {kind: stage[name].time_s if name in stage else 0.0
                for name, kind in _IN_LAYER_COMM.items()}
    compute = micro_batches * (t_micro - sum(in_layer.values()))
    if general:
        bubble, bubble_fraction = pipeline_bubble(lay, sch, micro_batches, t_micro,
                                                  parts.total_time(shares["forward"]),
                                                  parts.total_time(shares["weights"]))
    else:  # 1F1B, Narayanan et al. 2021, Sec. 2.2
        bubble = (lay.pp - 1.0) / lay.virtual * t_micro
        bubble_fraction = (lay.pp - 1.0) / (lay.virtual * micro_batches)

    hop_bytes = job.micro_batch * job.seq_len / lay.cp * m.d_model * bits.act_bits / 8.0 / lay.tp
    hops = jnp.maximum(lay.pp - 1.0, 1.0)
    mean_hop = comm.pipeline_transfer_s(hop_bytes, lay.pp, lay.tp * lay.cp * lay.dp, rates) / hops
    sends = 2.0 * lay.virtual * micro_batches + 2.0 * (lay.pp - 1.0)
    pp_comm = jnp.where(lay.pp > 1.0, (1.0 - sch.pp_overlap) * sends * mean_hop, 0.0)
    dp_comm = (1.0 - sch.dp_overlap) * _dp_comm(lay, bits, sch, micro_batches, rates,
                                                device["params"], device["experts"])
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
        weight_bytes=device["weight_bytes"],
        grad_bytes=device["grad_bytes"],
        optimizer_bytes=device["optimizer_bytes"],
        activation_bytes=device["activation_bytes"],
        memory_bytes=total,
        fits=total <= capacity,
        max_micro_batch=device["max_micro_batch"],
        step_s=step,
        compute_s=compute,
        bubble_s=bubble,
        bubble_fraction=bubble_fraction,
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
    if "regime" in names:  # the roof with the most seconds of the step (the bubble
        # idles every roof alike); exposed pipeline and data-parallel traffic on the links
        c, mem, link, host = parts.roof_seconds(parts.total(stage), stage.get(
            "overhead", parts.ZERO).time_s)
        out["regime"] = parts.regime([micro_batches * c, micro_batches * mem,
                                      micro_batches * link + pp_comm + dp_comm,
                                      micro_batches * host])
    return out

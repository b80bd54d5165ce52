"""The small pytrees the formulas pass around, in one place, units in the field names.

Every field is a number or an array of them (they broadcast against each other); a
field without a unit suffix is a count (tokens, heads, devices, layers) or a
dimensionless fraction. NamedTuples are pytrees already; the two dataclasses are
registered so that ``jax.jit`` and ``jax.vmap`` take them as they are. Static fields
(a pass's phase, a cost's arithmetic unit, the engine's :class:`Hints`) are Python
values, fixed at trace time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .. import pytrees


@pytrees.register
@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Decoder-only transformer architecture, every field a number (or array of them).

    Notation follows the scaling-book: L layers, D model width, N query heads, K kv
    heads, H head dim, F MLP width, V vocabulary. Booleans are 0/1 floats, so a table
    of several models is the same pytree with one entry per model.
    """

    n_layers: Any
    d_model: Any
    n_heads: Any
    n_kv_heads: Any
    head_dim: Any  # query/key head dim (standard attention)
    d_ff: Any  # dense MLP width
    vocab_size: Any
    max_seq_len: Any
    tied_embeddings: Any  # 1: the LM head reuses the embedding table
    mlp_matrices: Any  # 3 for gated MLPs (gate, up, down), 2 for plain (up, down)
    norm_params: Any  # parameters per element of a norm: 1 RMSNorm, 2 LayerNorm
    norms_per_layer: Any  # 2 (pre-attention, pre-MLP); Gemma-2 has 4
    qkv_bias: Any
    linear_bias: Any  # bias on every linear layer (GPT-3, OPT)
    qk_norm: Any  # per-head RMSNorm on q and k (Qwen3)
    learned_pos_rows: Any  # rows of a learned position table (0 for RoPE/ALiBi)
    # Mixture of experts (n_experts = 0: dense)
    n_experts: Any
    top_k: Any
    d_ff_expert: Any
    n_shared_experts: Any
    n_dense_layers: Any  # leading layers with a dense MLP in an MoE model
    # of the dense-MLP layers, those whose block has no MLP at all (Nemotron-H and
    # Nemotron-3 attention blocks: each block is a norm and one mixer or one MLP)
    mlp_free_layers: Any
    # Multi-head latent attention (kv_lora_rank = 0: standard attention)
    q_lora_rank: Any
    kv_lora_rank: Any
    qk_nope_head_dim: Any
    qk_rope_head_dim: Any
    v_head_dim: Any
    # Sliding-window attention (sliding_window = 0: full attention)
    sliding_window: Any
    sliding_window_layers: Any  # fraction of the attention layers that use the window
    attention_sinks: Any  # 1: a learned sink logit per head (gpt-oss)
    attention_output_gate: Any  # 1: q_proj also yields a per-head output gate (Qwen3-Next)
    expert_bias: Any  # 1: biases on the experts' matrices and the router (gpt-oss)
    # Linear attention (Gated DeltaNet: Qwen3-Next, Qwen3.5) mixed with full attention:
    # linear_layers of the n_layers keep a constant recurrent state instead of a KV cache
    linear_layers: Any
    linear_key_heads: Any
    linear_value_heads: Any
    linear_key_head_dim: Any
    linear_value_head_dim: Any
    linear_conv_kernel: Any  # causal depthwise convolution over q, k, v
    linear_state_bits: Any  # bits per element of the recurrent state as engines keep it
    # DeepSeek Sparse Attention (DSA: DeepSeek-V3.2, GLM-5) on an MLA model: a lightning
    # indexer of index_n_heads x index_head_dim scores every cached token and the main
    # attention reads the index_topk best of them (index_topk = 0: dense attention)
    index_topk: Any
    index_n_heads: Any
    index_head_dim: Any
    # A vision encoder (vision_layers = 0: none; dse.formulas.vision): ViT blocks of
    # vision_width and an MLP of vision_d_ff, vision_merge patches per image token,
    # vision_mergers patch mergers, vision_patch_inputs pixel values per patch and a
    # position table of vision_positions rows
    vision_layers: Any = 0.0
    vision_width: Any = 0.0
    vision_d_ff: Any = 0.0
    vision_merge: Any = 1.0
    vision_mergers: Any = 0.0
    vision_patch_inputs: Any = 0.0
    vision_positions: Any = 0.0
    # DSA's IndexShare (GLM-5.2): the share of the layers that run their own indexer and
    # cache index keys; the others reuse the top-k of the last such layer
    index_layer_fraction: Any = 1.0
    # LatentMoE (Nemotron-3 Super, Ultra): the routed experts read and write tokens of
    # this width, projected from and back to d_model once per layer (0: d_model)
    moe_latent_size: Any = 0.0
    # layers of an MLP and no mixer (Llama-Nemotron's attention-free blocks), counted
    # beside the n_layers mixer layers: the mean dense layer carries (n_dense_layers -
    # mlp_free_layers + mlp_only_layers) / n_dense_layers MLPs, each with its own norm
    mlp_only_layers: Any = 0.0
    # Full-attention layers with shapes of their own beside sliding-window ones (Gemma 4):
    # their head dim and KV heads (0: head_dim, n_kv_heads), and whether their keys serve
    # as values (one projection, one cached tensor); kv_equal is that switch on the layer
    # being priced (dse.formulas.params.global_view sets it)
    global_head_dim: Any = 0.0
    global_kv_heads: Any = 0.0
    global_kv_equal: Any = 0.0
    kv_equal: Any = 0.0

    def astype(self, dtype) -> "ModelSpec":
        return pytrees.astype(self, dtype)


# The grid of the measured GEMM efficiency surfaces (dse.catalogue.kernels; log2 of the
# node values: first, last, step): M at half octaves from 1 to 32768, N and K at octaves
# from 32 to 65536; and their kernel slots (dse.formulas.roofline.surface_slot).
SURFACE_AXES = (("m", 0.0, 15.0, 0.5), ("n", 5.0, 16.0, 1.0), ("k", 5.0, 16.0, 1.0))
SURFACE_SLOTS = ("bf16", "fp8", "fp8_block", "nvfp4")
# The grid of the measured MoE surfaces (a device's routed experts as one grouped GEMM,
# dse.catalogue.kernel_build.moe_shape): M = token-expert rows per expert in use at half
# octaves from 1 to 32768, N = the experts in use side by side (experts x width per
# device) from 128 to 2^21, K = the hidden size from 1024 to 16384, at half octaves.
MOE_SURFACE_AXES = (("m", 0.0, 15.0, 0.5), ("n", 7.0, 21.0, 0.5), ("k", 10.0, 14.0, 0.5))


class Rates(NamedTuple):
    """Achieved rates of one device at one precision.

    Compute rates are per arithmetic unit: ``gemm`` runs weight matmuls at the width of
    max(weight, activation) bits, ``attention`` at max(activation, KV) bits, ``vector``
    (norms, activation functions) on the 32-bit vector path. Each is the dense peak of
    that width x what-if scale x efficiency. ``gemm_half_rows``, ``layer_overhead_s`` and
    the engine-step overheads come from a calibration (see :func:`dse.formulas.roofline.shaped`); their defaults
    (0) give the plain roofline.
    """

    gemm_flops_per_s: Any
    attention_flops_per_s: Any
    vector_flops_per_s: Any
    hbm_bw_bytes_per_s: Any
    intra_bw_bytes_per_s: Any  # per device, per direction
    intra_latency_s: Any  # per hop
    inter_bw_bytes_per_s: Any
    inter_latency_s: Any
    devices_per_node: Any
    gemm_half_rows: Any = 0.0  # GEMM rows at which a matmul reaches half the gemm rate
    layer_overhead_s: Any = 0.0  # fixed seconds per layer per pass (kernel launches, sync)
    step_overhead_s: Any = 0.0  # host seconds per engine step (scheduler, sampling; inference)
    seq_overhead_s: Any = 0.0  # host seconds per running sequence per engine step
    # Measured GEMM efficiency surfaces (dse.catalogue.kernels): the efficiency table
    # [table, slot, M, N, K] (None: every matmul at the calibrated rates), this point's
    # table (< 0: none) and slot, the peaks a surface divides (what-if scales included,
    # no calibration), and the calibration's factor on the measured efficiency (how much
    # of the isolated kernel's speed the framework keeps in a whole run)
    gemm_surface: Any = None
    # the measured MoE surfaces [table, slot, M, N, K] on MOE_SURFACE_AXES, the same
    # tables and slots (None: routed experts priced through the GEMM surface)
    moe_surface: Any = None
    kernel_table: Any = -1.0
    kernel_slot: Any = 0.0
    gemm_peak_flops_per_s: Any = 1.0
    hbm_peak_bytes_per_s: Any = 1.0
    kernel_scale: Any = 1.0

    def flops_per_s(self, unit: str):
        """The compute rate of arithmetic ``unit`` ("gemm", "attention" or "vector")."""
        return getattr(self, f"{unit}_flops_per_s")


class Cost(NamedTuple):
    """FLOPs and device-memory bytes of one operator, and the unit its arithmetic runs on.

    ``unit`` is static ("gemm", "attention" or "vector"): which :class:`Rates` rate
    times the FLOPs.
    """

    flops: Any
    bytes: Any
    unit: str
    # (m, n, k) of a matmul ([m, k] x [k, n]; a grouped one per weight set): the shape a
    # measured efficiency surface is read at (None: the roofline at the calibrated rates)
    shape: Any = None
    # which measured surface prices it (static): "gemm", or "moe" for a device's routed
    # experts (the shape on MOE_SURFACE_AXES; the GEMM surface where none is shipped)
    surface: str = "gemm"


class Part(NamedTuple):
    """An operator's time with the FLOPs, bytes and roofline sides behind it."""

    time_s: Any
    flops: Any
    bytes: Any
    compute_s: Any  # seconds the arithmetic alone would take
    memory_s: Any  # seconds the memory traffic alone would take
    comm_s: Any  # seconds of communication (time of comm parts)


class Shard(NamedTuple):
    """Per-device widths under tensor parallelism of degree tp (tp = 1: whole model)."""

    heads: Any
    kv_heads: Any
    ff: Any
    ff_expert: Any
    vocab: Any


class Precision(NamedTuple):
    weight_bits: Any  # stored bits per weight, quantization scales included
    kv_bits: Any  # stored bits per KV-cache element, scales included
    act_bits: Any


class Pass(NamedTuple):
    """A forward pass: ``seqs`` sequences each adding ``new`` tokens after ``prior(x)``
    cached ones, x over the integers [lo, hi] (the pass's time is the mean over x,
    times ``repeat``). See :mod:`dse.formulas.attention`."""

    phase: str  # "prefill" | "decode" | "verify" (static)
    seqs: Any
    new: Any
    lo: Any
    hi: Any
    repeat: Any = 1.0

    def prior(self, x):
        if self.phase == "prefill":
            return x * self.new
        if self.phase == "decode":
            return x - 1.0
        return x

    @property
    def tokens(self):
        return self.seqs * self.new


class Parallel(NamedTuple):
    tp: Any
    pp: Any
    dp: Any
    ep: Any
    redundant: Any = 0.0  # redundant expert copies per MoE layer over the ep ranks (EPLB)


class Options(NamedTuple):
    flash: Any  # 1: FlashAttention, 0: materialized scores
    lora_rank: Any
    lora_adapters: Any
    moe_imbalance: Any = 1.0  # max over mean tokens per expert (1: balanced routing)
    image_tokens: Any = 0.0  # a request's image tokens (vision-language models)


class Workload(NamedTuple):
    batch: Any
    input_len: Any
    output_len: Any
    prefill_chunk: Any  # tokens per prefill chunk; 0: the whole prompt at once


class Serving(NamedTuple):
    """The request load on a deployment and how its engine schedules (serving under load).

    ``concurrency`` and ``request_rate`` are the deployment's (dp replicas share them);
    both 0: a static batch of ``Workload.batch``. ``max_num_seqs`` and ``max_num_tokens``
    are per replica; ``separate`` 1 runs prefill steps apart from decode steps (SGLang),
    0 mixes prompt chunks into decode steps (vLLM, TensorRT-LLM, llama.cpp)."""

    concurrency: Any
    request_rate: Any  # requests per second
    arrival_cv: Any
    max_num_seqs: Any
    max_num_tokens: Any
    separate: Any
    prefix_cache_hit: Any
    input_len_cv: Any
    output_len_cv: Any
    ttft_slo_s: Any  # 0: none
    tpot_slo_s: Any
    frontend_s: Any = 0.0  # host seconds per request outside the engine steps
    spec_tokens: Any = 0.0  # draft tokens per decode step (MTP / EAGLE; 0: none)
    spec_step_tokens: Any = 1.0  # mean tokens a decode step yields per sequence
    # attention-DP context balancing: a rank's prompts wait until every rank has one, at
    # most this many steps (TensorRT-LLM's attention_dp_config timeout_iters; 0: none)
    adp_balance_iters: Any = 0.0
    # requests of a closed-loop benchmark run started on an idle engine (0: steady state)
    num_prompts: Any = 0.0
    # decode steps between the scheduler's looks for new requests (1: every step)
    recv_interval: Any = 1.0


class Power(NamedTuple):
    """Device power model of GenZ (GenZ/power.py): TDP split into a static share and
    compute, memory and network shares drawn in proportion to their utilization."""

    tdp_w: Any
    price_usd_per_s: Any
    static_share: Any
    compute_share: Any
    memory_share: Any
    network_share: Any


class Speculation(NamedTuple):
    draft: ModelSpec | None
    draft_len: Any
    acceptance_rate: Any


class Job(NamedTuple):
    global_batch: Any
    micro_batch: Any
    seq_len: Any
    total_tokens: Any


class Layout(NamedTuple):
    tp: Any
    pp: Any
    dp: Any
    ep: Any
    cp: Any
    virtual: Any
    sequence_parallel: Any
    # transformer layers of the first / last pipeline stage (0: its share of an even
    # split; Megatron-LM's --decoder-first/last-pipeline-num-layers)
    first_layers: Any = 0.0
    last_layers: Any = 0.0


class Bits(NamedTuple):
    weight_bits: Any
    grad_bits: Any
    master_bits: Any
    act_bits: Any
    optimizer_bytes: Any  # optimizer state bytes per parameter, master weights excluded


class Schedule(NamedTuple):
    zero_stage: Any
    recompute: Any  # 0 none, 1 selective, 2 full
    flash: Any
    dropout: Any
    tp_overlap: Any
    dp_overlap: Any
    pp_overlap: Any
    pp_schedule: Any = 0.0  # 0 1F1B (interleaved when virtual > 1), 1 GPipe, 2 ZB-H1, 3 DualPipe
    moe_imbalance: Any = 1.0  # max over mean tokens per expert (1: balanced routing)
    image_tokens: Any = 0.0  # a request's image tokens (vision-language models)


@pytrees.register
@dataclasses.dataclass(frozen=True)
class Links:
    """One entry per link of a heterogeneous pipeline (leading axis)."""

    bw_bytes_per_s: Any
    latency_s: Any
    overhead_s: Any  # per message (RPC, serialization)
    direction: Any  # 1 one way, 2 round trip
    ratio: Any  # compression ratio
    compress_bytes_per_s: Any  # 0: no compression


def _unchanged(*arrays):
    return arrays


class Hints(NamedTuple):
    """How the program that runs the formulas wants some values computed (static).

    The formulas mark the few values that many full-grid outputs derive from (TTFT,
    TPOT, a decode side's seconds, the mean attention roofline) with ``once``, and sum
    a phase's components with those named in ``sum_last`` added last. Plain use (the
    default) changes nothing; :mod:`dse.core.fusion` gives XLA:CPU's choices.
    """

    once: Callable[..., tuple] = _unchanged
    sum_last: tuple[str, ...] = ()


PLAIN = Hints()

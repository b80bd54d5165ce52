"""Attention of one layer on one tensor-parallel shard: projections, core, KV cache.

A forward pass is described by a :class:`Pass`: ``seqs`` sequences each adding ``new``
tokens after ``prior(x)`` tokens already cached, where x runs over the integers
[lo, hi] and the pass's time is the mean over x (times ``repeat``):

- prefill in n chunks (n = 1 without chunking): x = chunk index j, prior = j x new;
- a decode step: x = the context length c (the new token included), prior = c - 1;
- a speculative verify step: new = draft_len + 1 after the mean context.

Standard attention (MHA/GQA/MQA) caches K and V per kv head. Multi-head latent
attention (DeepSeek-V2, arXiv 2405.04434 Sec. 2.1; DeepSeek-V3) caches one latent of
kv_lora_rank + rope dims per token, shared by all heads and replicated over tensor
parallelism. Decode runs it with weight absorption (W_UK folded into the query, W_UV
into the output: attention over the latent with qk dim kv_lora + rope and v dim
kv_lora, as vLLM's MLA backend and FlashMLA do); prefill up-projects the latent to
per-head keys and values and runs ordinary attention (vLLM's prefill path).

DeepSeek Sparse Attention (DSA; DeepSeek-V3.2-Exp tech report, DeepSeek_V3_2.pdf in
github.com/deepseek-ai/DeepSeek-V3.2-Exp, Sec. 2.1; its inference/model.py, class
Indexer) puts a lightning indexer beside MLA: index_n_heads small FP8 heads of
index_head_dim score every cached token for each query, and the main attention attends
to the index_topk best (all of them while the context is no longer). The engines run
DSA's main attention absorbed (FlashMLA's sparse kernels, for decode and prefill in
vLLM; SGLang's NSA backend likewise, except a prefill whose whole context fits in the
top-k, which it runs as dense MHA and whose indexer then only writes its keys).
The cache keeps every token's latent (and index key): sparsity saves reads and FLOPs,
not memory.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax.numpy as jnp

from . import operators as op, params
from .types import Cost, ModelSpec, Pass, Precision, Shard


def select(condition, a: Cost, b: Cost) -> Cost:
    if a.shape is None or b.shape is None:
        shape = a.shape if b.shape is None else b.shape
    else:
        shape = tuple(jnp.where(condition, x, y) for x, y in zip(a.shape, b.shape))
    return Cost(jnp.where(condition, a.flops, b.flops), jnp.where(condition, a.bytes, b.bytes),
                a.unit, shape)


def index_key_bytes(m: ModelSpec):
    """Bytes of one token's DSA index key: index_head_dim FP8 values and one fp32 scale
    (the reference's k_cache and k_scale_cache, block 128; vLLM's and SGLang's indexer
    cache: 128 + 4 = 132 B); 0 without an indexer."""
    return jnp.where(m.index_topk > 0.0, m.index_head_dim + 4.0, 0.0)


def kv_bytes_per_token(m: ModelSpec, s: Shard, kv_bits, mla: bool):
    """Bytes one layer caches per token on one device (MLA: the latent and, with DSA,
    the index key, both replicated over tensor parallelism; the index key is FP8
    whatever ``kv_bits``, and only layers that run their own indexer keep one: the
    average layer's share, index_layer_fraction)."""
    standard = s.kv_heads * params.kv_width(m) * kv_bits / 8.0
    if not mla:
        return standard
    latent = ((m.kv_lora_rank + m.qk_rope_head_dim) * kv_bits / 8.0
              + m.index_layer_fraction * index_key_bytes(m))
    return jnp.where(m.kv_lora_rank > 0.0, latent, standard)


class AttentionCosts(NamedTuple):
    """Costs per layer: fixed ones, and those that vary with the pass variable x."""

    fixed: dict[str, list[Cost]]
    varying: dict[str, list[Callable[[Any], Cost]]]


def _standard(m: ModelSpec, s: Shard, p: Precision, ps: Pass, window, flash) -> AttentionCosts:
    t, d, hd, a = ps.tokens, m.d_model, m.head_dim, p.act_bits
    bias = jnp.maximum(m.qkv_bias, m.linear_bias)
    q_heads = s.heads * (1.0 + m.attention_output_gate)  # gated attention: q and its gate
    vd = params.value_dim(m)  # head_dim, or values of their own size (MiMo-V2-Flash)
    # K and V per KV head, or keys that serve as values (Gemma 4's global layers)
    per_token_kv = s.kv_heads * params.kv_width(m)
    qkv = op.matmul(t, d, q_heads * hd + per_token_kv, p.weight_bits, a, bias)
    o_proj = op.matmul(t, s.heads * vd, d, p.weight_bits, a, m.linear_bias)

    def core(x):
        prior = ps.prior(x)
        pairs = op.scored_pairs(ps.new, prior, window, flash)
        if ps.phase == "decode":  # everything, the new token included, comes from the cache
            new_bytes, cached = 0.0, pairs
        else:
            new_bytes = ps.new * per_token_kv * a / 8.0
            cached = jnp.where(window > 0.0, jnp.minimum(prior, window), prior)
        return op.attention(ps.seqs, s.heads, pairs, hd, vd, ps.new, new_bytes,
                            cached * per_token_kv * p.kv_bits / 8.0, a, flash)

    write = op.memory_write(t * per_token_kv * p.kv_bits / 8.0)
    return AttentionCosts({"qkv_proj": [qkv], "o_proj": [o_proj], "kv_cache": [write]},
                          {"attention": [core]})


def _latent(m: ModelSpec, s: Shard, p: Precision, ps: Pass, window, flash,
            sparse: bool = False) -> AttentionCosts:
    t, d, a, w = ps.tokens, m.d_model, p.act_bits, p.weight_bits
    rank, rope, nope, v = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim
    qk = nope + rope
    q = [select(m.q_lora_rank > 0.0, op.matmul(t, d, m.q_lora_rank, w, a), Cost(0.0, 0.0, "gemm")),
         op.elementwise(t * m.q_lora_rank, 1.0, 1.0, a, 4.0),
         select(m.q_lora_rank > 0.0, op.matmul(t, m.q_lora_rank, s.heads * qk, w, a),
                op.matmul(t, d, s.heads * qk, w, a)),
         op.matmul(t, d, rank + rope, w, a),  # latent down-projection (replicated)
         op.elementwise(t * rank, 1.0, 1.0, a, 4.0)]
    write = op.memory_write(t * (rank + rope) * p.kv_bits / 8.0)
    o_proj = op.matmul(t, s.heads * v, d, w, a)

    def absorb():  # W_UK into the query, W_UV into the output
        return (op.grouped_matmul(t * s.heads, nope, rank, s.heads, w, a),
                op.grouped_matmul(t * s.heads, rank, v, s.heads, w, a))

    # DSA: each query attends to at most index_topk keys, a cap like a window's
    cap = jnp.where(m.index_topk > 0.0, m.index_topk, window) if sparse else window

    def absorbed(x):
        prior = ps.prior(x)
        pairs = op.causal_pairs(ps.new, prior, cap)
        # the latents read once per sequence: a decode step's selected ones, a prompt's
        # (whose queries select overlapping sets) at most every cached one
        keys = jnp.minimum(pairs, prior + ps.new) if sparse else pairs
        return op.attention(ps.seqs, s.heads, pairs, rank + rope, rank, ps.new, 0.0,
                            keys * (rank + rope) * p.kv_bits / 8.0, a, flash)

    if ps.phase == "decode":
        absorb_k, absorb_v = absorb()
        return AttentionCosts({"qkv_proj": q + [absorb_k], "o_proj": [absorb_v, o_proj],
                               "kv_cache": [write]}, {"attention": [absorbed]})

    def up(x):  # per-head keys and values of the whole context, from the latent
        return op.matmul(ps.seqs * (ps.prior(x) + ps.new), rank, s.heads * (nope + v), w, a)

    def core(x):
        prior = ps.prior(x)
        pairs = op.scored_pairs(ps.new, prior, window, flash)
        per_token = s.heads * (qk + v) * a / 8.0
        return op.attention(ps.seqs, s.heads, pairs, qk, v, ps.new, ps.new * per_token,
                            prior * per_token, a, flash)

    if not sparse:
        return AttentionCosts({"qkv_proj": q, "o_proj": [o_proj], "kv_cache": [write]},
                              {"qkv_proj": [up], "attention": [core]})
    # DSA: dense MHA (above) while the pass's whole context fits in the top-k, as SGLang
    # runs a prefill (and any model without an indexer); absorbed sparse attention else
    dense = m.index_topk <= 0.0
    if ps.phase == "prefill":
        dense = dense | (ps.prior(ps.hi) + ps.new <= m.index_topk)
    absorb_k, absorb_v = absorb()
    return AttentionCosts(
        {"qkv_proj": q + [select(dense, Cost(0.0, 0.0, "gemm"), absorb_k)],
         "o_proj": [select(dense, Cost(0.0, 0.0, "gemm"), absorb_v), o_proj],
         "kv_cache": [write]},
        {"qkv_proj": [_masked(dense, up)],
         "attention": [_masked(dense, core), _masked(~dense, absorbed)]})


def indexer_costs(m: ModelSpec, p: Precision, ps: Pass) -> AttentionCosts:
    """The DSA lightning indexer of one layer, whole on every tensor-parallel device.

    Per token (inference/model.py, Indexer.forward): the query wq_b, q_lora_rank ->
    index_n_heads x index_head_dim; the key wk, d_model -> index_head_dim, appended to
    the index cache (FP8 and its fp32 scale, :func:`index_key_bytes`); the head weights
    weights_proj, d_model -> index_n_heads. Scoring: each query's heads against every
    cached key (causal), 2 index_n_heads index_head_dim FLOPs per (query, key) pair in
    FP8 (DeepGEMM's fp8_mqa_logits), reading the queries and weights once and each
    sequence's index keys once per pass. vLLM and SGLang replicate the indexer over
    tensor parallelism (ReplicatedLinear wq_b, wk, weights_proj), as MLA's latent path.
    A prefill whose whole context fits in the top-k selects every key: SGLang then only
    projects and writes the keys (nsa_indexer.py, _forward_cuda_k_only); decode always
    scores. Not counted: the key LayerNorm, RoPE, Hadamard rotation and FP8 quantization
    (elementwise), the fp32 logits the top-k selection passes over and the selected
    indices. Zero for a model without an indexer (index_topk = 0).
    """
    t, d, a, w = ps.tokens, m.d_model, p.act_bits, p.weight_bits
    heads, dim = m.index_n_heads, m.index_head_dim
    on = m.index_topk > 0.0
    scores = on
    if ps.phase == "prefill":
        scores = on & (ps.prior(ps.hi) + ps.new > m.index_topk)
    zero = Cost(0.0, 0.0, "gemm")
    wq = select(scores, op.matmul(t, m.q_lora_rank, heads * dim, w, a), zero)
    wk = select(on, op.matmul(t, d, dim, w, a), zero)
    gate = select(scores, op.matmul(t, d, heads, w, a), zero)
    write = op.memory_write(t * index_key_bytes(m))

    def score(x):
        prior = ps.prior(x)
        pairs = op.causal_pairs(ps.new, prior)
        queries = ps.new * heads * (dim + 4.0)  # FP8 query heads and their fp32 weights
        return Cost(2.0 * ps.seqs * heads * dim * pairs,
                    ps.seqs * (queries + (prior + ps.new) * index_key_bytes(m)), "attention")

    return AttentionCosts({"qkv_proj": [wq, wk, gate], "kv_cache": [write]},
                          {"attention": [_masked(scores, score)]})


def attention_costs(m: ModelSpec, s: Shard, p: Precision, ps: Pass, window, flash,
                    mla: bool, sparse: bool = False) -> AttentionCosts:
    """Attention costs of one layer; ``mla`` (static) adds the latent path, chosen per
    model, ``sparse`` (static) DSA's top-k cap on it (the indexer: :func:`indexer_costs`)."""
    standard = _standard(m, s, p, ps, window, flash)
    if not mla:
        return standard
    latent = _latent(m, s, p, ps, window, flash, sparse)
    is_mla = m.kv_lora_rank > 0.0
    fixed, varying = {}, {}
    for name in dict.fromkeys([*standard.fixed, *latent.fixed]):
        fixed[name] = ([select(~is_mla, c, Cost(0.0, 0.0, c.unit)) for c in standard.fixed.get(name, [])]
                       + [select(is_mla, c, Cost(0.0, 0.0, c.unit)) for c in latent.fixed.get(name, [])])
    for name in dict.fromkeys([*standard.varying, *latent.varying]):
        fns = [(~is_mla, f) for f in standard.varying.get(name, [])]
        fns += [(is_mla, f) for f in latent.varying.get(name, [])]
        varying[name] = [_masked(cond, f) for cond, f in fns]
    return AttentionCosts(fixed, varying)


def _masked(condition, fn):
    def cost(x):
        c = fn(x)
        return c._replace(flops=jnp.where(condition, c.flops, 0.0),
                          bytes=jnp.where(condition, c.bytes, 0.0))

    return cost


# Chunk length of the chunked delta-rule kernels (flash-linear-attention's chunk_gated_
# delta_rule, which vLLM and SGLang run for prefill).
DELTA_RULE_CHUNK = 64.0


def linear_attention_costs(m: ModelSpec, s: Shard, p: Precision, ps: Pass) -> dict[str, list[Cost]]:
    """Gated DeltaNet mixer of one layer (see params.linear_attention_params).

    Per token and value head the delta rule reads the state S (dk x dv) to predict
    v (S k), corrects it with a rank-one update, decays it, and reads it again for the
    output (S q): about 7 dk dv FLOPs. Prefill runs the chunked form, which adds
    attention inside each chunk of C = 64 tokens (C / 2 pairs per token on average, of
    dk + dv per pair, 2 FLOPs each). The state (and the convolution's last inputs) is
    read and written once per sequence per pass: a decode step streams it like a KV
    cache that does not grow."""
    t, d, a, w = ps.tokens, m.d_model, p.act_bits, p.weight_bits
    kh, vh = params.linear_heads(m, params.shard_degree(m, s))
    dk, dv = m.linear_key_head_dim, m.linear_value_head_dim
    channels = 2.0 * kh * dk + vh * dv
    in_proj = op.matmul(t, d, 2.0 * kh * dk + 2.0 * vh * dv + 2.0 * vh, w, a)
    conv = op.elementwise(t * channels, 1.0, 1.0, a, 2.0 * m.linear_conv_kernel)
    chunk = DELTA_RULE_CHUNK / 2.0 if ps.phase == "prefill" else 0.0
    state_bytes = (vh * dk * dv * m.linear_state_bits / 8.0
                   + channels * jnp.maximum(m.linear_conv_kernel - 1.0, 0.0) * 2.0)
    recurrence = Cost(t * vh * (7.0 * dk * dv + 2.0 * chunk * (dk + dv)),
                      t * (channels + vh * dv) * a / 8.0 + ps.seqs * 2.0 * state_bytes,
                      "attention")
    norm = op.elementwise(t * vh * dv, 2.0, 1.0, a, 6.0)  # gated RMSNorm: o, z -> o
    out_proj = op.matmul(t, vh * dv, d, w, a)
    return {"qkv_proj": [in_proj, conv], "attention": [recurrence, norm], "o_proj": [out_proj]}

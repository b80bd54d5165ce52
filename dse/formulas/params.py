"""Parameter counts of a decoder-only transformer, whole or per tensor-parallel shard.

Accounting (per layer): attention projections q, k, v, o (with GQA/MQA the k and v
projections have n_kv_heads heads); a gated MLP has three [D, F] matrices, a plain one
two; each norm has D (RMSNorm) or 2D (LayerNorm) parameters, two per layer plus a
final one; embeddings V x D, a separate LM head unless tied, a learned position table.
Llama-2-70B: 80 x (151.0M attention + 704.6M MLP + 16k norms) + 2 x 262.1M + 8k
= 68,976,648,192 (Touvron et al. 2023 report "70B"; HF safetensors hold 68.98B).

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) splits query heads, the MLP
width and the vocabulary over tp devices; kv heads split too, or are replicated when
n_kv_heads < tp (each device then holds one kv head). Norms are replicated.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import ModelSpec, Shard


def shard(m: ModelSpec, tp) -> Shard:
    return Shard(heads=m.n_heads / tp, kv_heads=jnp.maximum(m.n_kv_heads / tp, 1.0),
                 ff=m.d_ff / tp, ff_expert=m.d_ff_expert / tp,
                 vocab=jnp.ceil(m.vocab_size / tp))


def whole(m: ModelSpec) -> Shard:
    return Shard(heads=m.n_heads, kv_heads=m.n_kv_heads, ff=m.d_ff, ff_expert=m.d_ff_expert,
                 vocab=m.vocab_size)


def attention_params(m: ModelSpec, s: Shard):
    """q, k, v, o projections (and their biases, q/k norms) of one layer.

    Multi-head latent attention (DeepSeek-V2/V3, DeepSeek-AI 2024, Sec. 2.1.1) instead
    has low-rank q and kv paths: down-projections D -> q_lora and D -> kv_lora + rope
    (each followed by an RMSNorm; replicated under tp), up-projections to every head's
    (nope + rope) query and (nope + v) key/value, and the output from v_head_dim per head.
    """
    d, hd = m.d_model, m.head_dim
    qkv_width = (s.heads + 2.0 * s.kv_heads) * hd
    bias = jnp.maximum(m.qkv_bias, m.linear_bias) * qkv_width + m.linear_bias * d
    standard = d * qkv_width + s.heads * hd * d + bias + 2.0 * hd * m.qk_norm
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    q = jnp.where(m.q_lora_rank > 0.0,
                  d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * s.heads * qk,
                  d * s.heads * qk)
    kv = (d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
          + m.kv_lora_rank * s.heads * (m.qk_nope_head_dim + m.v_head_dim))
    latent = q + kv + s.heads * m.v_head_dim * d
    return jnp.where(m.kv_lora_rank > 0.0, latent, standard)


def dense_mlp_params(m: ModelSpec, ff):
    """A dense MLP of width ``ff`` (gated: 3 matrices; plain: 2), with biases if any."""
    return m.mlp_matrices * m.d_model * ff + m.linear_bias * ((m.mlp_matrices - 1.0) * ff
                                                              + m.d_model)


def moe_mlp_params(m: ModelSpec, s: Shard, experts):
    """``experts`` routed experts plus the shared ones, and the (replicated) router."""
    return ((experts + m.n_shared_experts) * m.mlp_matrices * m.d_model * s.ff_expert
            + m.d_model * m.n_experts)


def norm_params(m: ModelSpec):
    """The norms of one layer (two pre-norms; Gemma-2 adds two post-norms)."""
    return m.norms_per_layer * m.norm_params * m.d_model


def embedding_params(m: ModelSpec, s: Shard):
    """Token embedding (vocab-parallel) and learned positions (replicated)."""
    return s.vocab * m.d_model + m.learned_pos_rows * m.d_model


def layer_counts(m: ModelSpec):
    """(dense-MLP layers, MoE layers)."""
    n_moe = m.n_layers - m.n_dense_layers
    return m.n_dense_layers, n_moe


def total_params(m: ModelSpec, experts_used=None):
    """All parameters; with ``experts_used`` = top_k, the parameters active per token."""
    s = whole(m)
    experts = m.n_experts if experts_used is None else experts_used
    n_dense, n_moe = layer_counts(m)
    per_layer = attention_params(m, s) + norm_params(m)
    layers = (n_dense * (per_layer + dense_mlp_params(m, s.ff))
              + n_moe * (per_layer + moe_mlp_params(m, s, experts)))
    head = (1.0 - m.tied_embeddings) * s.vocab * m.d_model
    return layers + embedding_params(m, s) + head + m.norm_params * m.d_model


def active_params(m: ModelSpec):
    """Parameters used per token: an MoE layer runs top_k routed experts (+ shared)."""
    return total_params(m, experts_used=m.top_k)

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

import dataclasses
import sys

import numpy as np

from .types import ModelSpec, Shard


def _xp():
    """jax.numpy once JAX is loaded (always, inside the evaluator); NumPy before, so that
    the catalogue listing (``dse models``) counts parameters without importing JAX."""
    if "jax" in sys.modules:
        import jax.numpy as jnp

        return jnp
    return np


def window_fraction(m: ModelSpec):
    """The share of the attention layers that attend within the sliding window."""
    return _xp().where(m.sliding_window > 0.0, m.sliding_window_layers, 0.0)


def global_view(m: ModelSpec, s: Shard) -> tuple[ModelSpec, Shard]:
    """The model and shard of its full-attention layers where they have shapes of their
    own (Gemma 4: global_head_dim 512 against 256, global_kv_heads, keys as values,
    attention_k_eq_v); ``m`` and ``s`` themselves for every other model, value for value."""
    xp = _xp()
    on = m.global_kv_heads > 0.0
    kv = xp.where(on, m.global_kv_heads, m.n_kv_heads)
    tp = shard_degree(m, s)
    mg = dataclasses.replace(m, head_dim=xp.where(m.global_head_dim > 0.0, m.global_head_dim,
                                                  m.head_dim),
                             n_kv_heads=kv, kv_equal=m.global_kv_equal)
    return mg, s._replace(kv_heads=xp.where(on, xp.maximum(kv / tp, 1.0), s.kv_heads))


def value_dim(m: ModelSpec):
    """The value head size of standard attention: head_dim, or its own v_head_dim
    (MiMo-V2-Flash: keys of 192, values of 128). MLA reads v_head_dim on its own path."""
    return _xp().where((m.v_head_dim > 0.0) & (m.kv_lora_rank <= 0.0), m.v_head_dim,
                       m.head_dim)


def kv_width(m: ModelSpec):
    """What one KV head projects and caches per token: a key and a value, or (Gemma 4's
    global layers) keys that serve as values."""
    return m.head_dim + (1.0 - m.kv_equal) * value_dim(m)


def shard(m: ModelSpec, tp) -> Shard:
    xp = _xp()
    return Shard(heads=m.n_heads / tp, kv_heads=xp.maximum(m.n_kv_heads / tp, 1.0),
                 ff=m.d_ff / tp, ff_expert=m.d_ff_expert / tp,
                 vocab=xp.ceil(m.vocab_size / tp))


def whole(m: ModelSpec) -> Shard:
    return Shard(heads=m.n_heads, kv_heads=m.n_kv_heads, ff=m.d_ff, ff_expert=m.d_ff_expert,
                 vocab=m.vocab_size)


def linear_fraction(m: ModelSpec):
    """Share of the layers whose mixer is linear attention (0 for plain transformers)."""
    return m.linear_layers / m.n_layers


def shard_degree(m: ModelSpec, s: Shard):
    """The tensor-parallel degree a shard was cut at (query heads whole / per device)."""
    return m.n_heads / s.heads


def linear_heads(m: ModelSpec, tp):
    """(key heads, value heads) of a linear-attention layer on one of tp devices."""
    return m.linear_key_heads / tp, m.linear_value_heads / tp


def linear_attention_params(m: ModelSpec, tp):
    """Gated DeltaNet mixer of one layer on one of tp devices (Yang et al. 2025,
    arXiv 2412.06464; Qwen3-Next's Qwen3NextGatedDeltaNet): a fused q, k, v, z
    projection D -> 2 Kh dk + 2 Vh dv, the beta and decay inputs D -> 2 Vh, a causal
    depthwise convolution of kernel C over the q, k, v channels (no bias), A_log and
    dt_bias per value head, a gated RMSNorm over dv (shared by the heads) and the output
    projection Vh dv -> D. Qwen3-Next-80B-A3B: 33,718,464 per layer (HF checkpoint)."""
    kh, vh = linear_heads(m, tp)
    dk, dv = m.linear_key_head_dim, m.linear_value_head_dim
    d = m.d_model
    conv_channels = 2.0 * kh * dk + vh * dv
    return (d * (2.0 * kh * dk + 2.0 * vh * dv) + d * 2.0 * vh + conv_channels * m.linear_conv_kernel
            + 2.0 * vh + dv + vh * dv * d)


def indexer_params(m: ModelSpec):
    """The DSA lightning indexer of one layer (DeepSeek-V3.2-Exp inference/model.py,
    class Indexer), whole on every tensor-parallel device: wq_b q_lora -> H_I x d_I, wk
    D -> d_I, a LayerNorm of d_I (weight and bias), weights_proj D -> H_I, no biases.
    DeepSeek-V3.2 (q_lora 1536, D 7168, H_I 64, d_I 128): 12,582,912 + 917,504 + 256
    + 458,752 = 13,959,424. 0 without an indexer (its fields 0)."""
    heads, dim = m.index_n_heads, m.index_head_dim
    return m.q_lora_rank * heads * dim + m.d_model * dim + 2.0 * dim + m.d_model * heads


def full_attention_params(m: ModelSpec, s: Shard):
    """q, k, v, o projections (and their biases, q/k norms) of one attention layer.

    Multi-head latent attention (DeepSeek-V2/V3, DeepSeek-AI 2024, Sec. 2.1.1) instead
    has low-rank q and kv paths: down-projections D -> q_lora and D -> kv_lora + rope
    (each followed by an RMSNorm; replicated under tp), up-projections to every head's
    (nope + rope) query and (nope + v) key/value, and the output from v_head_dim per head;
    with DeepSeek Sparse Attention, its indexer (:func:`indexer_params`), on the share of
    the layers that run one (index_layer_fraction; the average layer is returned).
    """
    xp = _xp()
    d, hd = m.d_model, m.head_dim
    qkv_width = s.heads * (1.0 + m.attention_output_gate) * hd + s.kv_heads * kv_width(m)
    bias = xp.maximum(m.qkv_bias, m.linear_bias) * qkv_width + m.linear_bias * d
    standard = (d * qkv_width + s.heads * value_dim(m) * d + bias + 2.0 * hd * m.qk_norm
                + s.heads * m.attention_sinks)
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    q = xp.where(m.q_lora_rank > 0.0,
                 d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * s.heads * qk,
                 d * s.heads * qk)
    kv = (d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
          + m.kv_lora_rank * s.heads * (m.qk_nope_head_dim + m.v_head_dim))
    latent = q + kv + s.heads * m.v_head_dim * d + m.index_layer_fraction * indexer_params(m)
    return xp.where(m.kv_lora_rank > 0.0, latent, standard)


def attention_params(m: ModelSpec, s: Shard):
    """The token mixer of a layer, averaged over the layers: full attention (its global
    layers priced at their own shapes, :func:`global_view`), or in a hybrid model
    (linear_layers > 0) linear attention on that share of the layers."""
    f = linear_fraction(m)
    tp = shard_degree(m, s)
    windowed = full_attention_params(m, s)
    # full-attention layers of shapes of their own (Gemma 4): their share of the difference
    full = windowed + (1.0 - window_fraction(m)) * (full_attention_params(*global_view(m, s))
                                                    - windowed)
    return (1.0 - f) * full + f * linear_attention_params(m, tp)


def dense_mlp_share(m: ModelSpec):
    """MLPs per dense-MLP layer: 1, less in Nemotron-H-style hybrids, whose attention
    blocks have none (mlp_free_layers: the mean layer carries that share of one), more in
    Llama-Nemotron, whose attention-free blocks are an MLP alone (mlp_only_layers: 80
    MLPs on 49 attention layers, 80/49 a layer)."""
    return ((m.n_dense_layers - m.mlp_free_layers + m.mlp_only_layers)
            / _xp().maximum(m.n_dense_layers, 1.0))


def dense_mlp_params(m: ModelSpec, ff):
    """A dense MLP of width ``ff`` (gated: 3 matrices; plain: 2), with biases if any,
    averaged over the dense-MLP layers (:func:`dense_mlp_share`)."""
    return dense_mlp_share(m) * (m.mlp_matrices * m.d_model * ff
                                 + m.linear_bias * ((m.mlp_matrices - 1.0) * ff + m.d_model))


def expert_width(m: ModelSpec):
    """The width of the tokens the routed experts read and write: d_model, or LatentMoE's
    moe_latent_size (Nemotron-3 Super and Ultra; HF NemotronHMoE: the router reads the
    d_model token, fc1_latent_proj projects it to the latent, the routed experts run
    there, fc2_latent_proj projects their sum back; the shared experts stay at d_model)."""
    return _xp().where(m.moe_latent_size > 0.0, m.moe_latent_size, m.d_model)


def latent_projection_params(m: ModelSpec):
    """LatentMoE's fc1_latent_proj and fc2_latent_proj of one MoE layer (no biases), whole
    on every tensor-parallel device as vLLM and TensorRT-LLM keep them; 0 without."""
    return 2.0 * m.d_model * m.moe_latent_size


def moe_mlp_params(m: ModelSpec, s: Shard, experts):
    """``experts`` routed experts plus the shared ones, the (replicated) router and
    LatentMoE's projections."""
    width = expert_width(m)
    bias = m.expert_bias * (experts * ((m.mlp_matrices - 1.0) * s.ff_expert + width)
                            + m.n_shared_experts * ((m.mlp_matrices - 1.0) * s.ff_expert
                                                    + m.d_model) + m.n_experts)
    return (experts * m.mlp_matrices * width * s.ff_expert
            + m.n_shared_experts * m.mlp_matrices * m.d_model * s.ff_expert
            + m.d_model * m.n_experts + latent_projection_params(m) + bias)


def layer_norms(m: ModelSpec):
    """Norms of the mean layer: norms_per_layer (two pre-norms; Gemma-2 adds two
    post-norms), and the one of each MLP-only block (mlp_only_layers) spread over the
    layers."""
    return m.norms_per_layer + m.mlp_only_layers / m.n_layers


def norm_params(m: ModelSpec):
    """The norms of one layer (:func:`layer_norms`)."""
    return layer_norms(m) * m.norm_params * m.d_model


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

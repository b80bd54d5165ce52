"""Device memory of an inference deployment: weights, KV cache, activation peak, capacity.

Pipeline parallelism gives a stage ceil(L / pp) layers; memory is reported for the
heaviest stage (the most MoE layers, the embedding or LM head table), which is the one
that must fit. Memory is affine in the batch, so the largest batch that fits has a
closed form (:func:`max_batch`).
"""

from __future__ import annotations

import jax.numpy as jnp

from . import params
from .attention import kv_bytes_per_token
from .transformer import expert_layout
from .types import ModelSpec, Parallel, Precision, Shard


def stage_layers(m: ModelSpec, pp):
    """(layers, dense-MLP layers, MoE layers) of the heaviest pipeline stage."""
    n_stage = jnp.ceil(m.n_layers / pp)
    _, n_moe = params.layer_counts(m)
    moe_stage = jnp.minimum(n_stage, n_moe)
    return n_stage, n_stage - moe_stage, moe_stage


def moe_params_per_device(m: ModelSpec, s: Shard, par: Parallel):
    """Routed experts under expert parallelism, shared experts and router of one layer."""
    local, etp, _ = expert_layout(m, par)
    width = params.expert_width(m)
    routed = local * (m.mlp_matrices * width * m.d_ff_expert / etp
                      + m.expert_bias * ((m.mlp_matrices - 1.0) * m.d_ff_expert / etp + width))
    shared = m.n_shared_experts * (m.mlp_matrices * m.d_model * s.ff_expert
                                   + m.expert_bias * ((m.mlp_matrices - 1.0) * s.ff_expert
                                                      + m.d_model))
    return (routed + shared + m.d_model * m.n_experts + m.expert_bias * m.n_experts
            + params.latent_projection_params(m))


def weight_params_per_device(m: ModelSpec, s: Shard, par: Parallel):
    """Parameters held by one device of the heaviest stage."""
    _, dense_stage, moe_stage = stage_layers(m, par.pp)
    per_layer = params.attention_params(m, s) + params.norm_params(m)
    layers = (dense_stage * (per_layer + params.dense_mlp_params(m, s.ff))
              + moe_stage * (per_layer + moe_params_per_device(m, s, par)))
    table = params.embedding_params(m, s)
    # One stage holds everything when pp = 1; otherwise the first stage holds the
    # embedding and the last the LM head (a tied head is a copy there; Megatron-LM).
    ends = jnp.where(par.pp > 1.0, table,
                     table + (1.0 - m.tied_embeddings) * s.vocab * m.d_model)
    return layers + ends + m.norm_params * m.d_model


def lora_params_per_device(m: ModelSpec, s: Shard, pp, rank, adapters):
    """All adapters resident: r (d_in + d_out) per adapted projection, per layer."""
    n_stage, dense_stage, _ = stage_layers(m, pp)
    attention = 2.0 * (m.d_model + s.heads * m.head_dim) + 2.0 * (m.d_model + s.kv_heads * m.head_dim)
    mlp = params.dense_mlp_share(m) * m.mlp_matrices * (m.d_model + s.ff)
    return adapters * rank * (n_stage * attention + dense_stage * mlp)


def cached_tokens(m: ModelSpec, length):
    """Mean tokens a layer keeps per sequence: windowed layers keep at most W."""
    windowed = jnp.where(m.sliding_window > 0.0, jnp.minimum(length, m.sliding_window), length)
    return (1.0 - m.sliding_window_layers) * length + m.sliding_window_layers * windowed


def linear_state_bytes(m: ModelSpec, s: Shard, p: Precision):
    """Recurrent state one linear-attention layer keeps per sequence on one device, as
    vLLM does (MambaStateShapeCalculator.gated_delta_net_state_shape): the delta-rule
    state, Vh x dv x dk at linear_state_bits, and the convolution's last C - 1 inputs of
    the q, k, v channels at 16 bits (the model dtype). Qwen3-Next-80B-A3B, bf16:
    32 x 128 x 128 x 2 + 3 x 8192 x 2 = 1,097,728 bytes."""
    kh, vh = params.linear_heads(m, params.shard_degree(m, s))
    dk, dv = m.linear_key_head_dim, m.linear_value_head_dim
    state = vh * dv * dk * m.linear_state_bits / 8.0
    conv = (2.0 * kh * dk + vh * dv) * jnp.maximum(m.linear_conv_kernel - 1.0, 0.0) * 2.0
    return state + conv


def cache_bytes_per_layer(m: ModelSpec, s: Shard, p: Precision, seqs, length, mla: bool):
    """What a layer keeps per device for ``seqs`` sequences of ``length`` tokens, averaged
    over the layers: K and V (or the MLA latent, and DSA's index key) of the tokens an
    attention layer keeps, and on the linear-attention share of a hybrid model a constant
    recurrent state."""
    f = params.linear_fraction(m)
    windowed = kv_bytes_per_token(m, s, p.kv_bits, mla)
    # full-attention layers of shapes of their own (Gemma 4) keep every token at theirs
    extra = kv_bytes_per_token(*params.global_view(m, s), p.kv_bits, mla) - windowed
    kv = (cached_tokens(m, length) * windowed
          + (1.0 - params.window_fraction(m)) * length * extra)
    return seqs * ((1.0 - f) * kv + f * linear_state_bytes(m, s, p))


def kv_cache_bytes(m: ModelSpec, s: Shard, p: Precision, pp, seqs, length, mla: bool):
    """KV cache (and recurrent state) of ``seqs`` sequences of ``length`` tokens on a
    device of the heaviest stage."""
    n_stage, _, _ = stage_layers(m, pp)
    return n_stage * cache_bytes_per_layer(m, s, p, seqs, length, mla)


def kv_bytes_per_cached_token(m: ModelSpec, s: Shard, p: Precision, pp, mla: bool):
    """Bytes one more cached token costs a device of the heaviest stage (the attention
    layers' K and V; a recurrent state does not grow)."""
    n_stage, _, _ = stage_layers(m, pp)
    windowed = kv_bytes_per_token(m, s, p.kv_bits, mla)
    extra = kv_bytes_per_token(*params.global_view(m, s), p.kv_bits, mla) - windowed
    per_layer = windowed + (1.0 - params.window_fraction(m)) * extra
    return n_stage * (1.0 - params.linear_fraction(m)) * per_layer


def activation_bytes(m: ModelSpec, s: Shard, p: Precision, par: Parallel, seqs, new, context,
                     flash):
    """Peak transient activations of a forward pass of seqs x new tokens after ``context``.

    The residual stream and the normed input (2D per token) stay live while the widest
    intermediate of a layer exists: q, k, v and the attention output (MLA prefill:
    per-head keys and values of the whole context), or the MLP's gate/up output and
    activated product (MoE: each token's top-k expert rows on this device). Without
    FlashAttention the score and probability matrices of one layer are materialized.
    Plus the fp32 logits of the last position of each sequence.
    """
    tokens = seqs * new
    hd = m.head_dim
    standard = (2.0 * s.heads + 2.0 * s.kv_heads) * hd
    mla = s.heads * (2.0 * (m.qk_nope_head_dim + m.qk_rope_head_dim) + 2.0 * m.v_head_dim)
    attn = jnp.where(m.kv_lora_rank > 0.0, mla, standard)
    _, etp, group = expert_layout(m, par)
    moe = (m.top_k * group / par.ep * m.mlp_matrices * m.d_ff_expert / etp
           + m.n_shared_experts * m.mlp_matrices * s.ff_expert)
    widest = jnp.maximum(attn, jnp.maximum(m.mlp_matrices * s.ff, moe))
    scores = (1.0 - flash) * 2.0 * seqs * s.heads * new * (context + new)
    return ((tokens * (2.0 * m.d_model + widest) + scores) * p.act_bits / 8.0
            + seqs * s.vocab * 4.0)


def max_batch(available, fixed, per_seq, per_micro_seq, pp):
    """The largest batch B with fixed + B per_seq + (B / m) per_micro_seq <= available.

    m = min(pp, B) micro-batches: below pp every micro-batch holds one sequence, so
    memory is fixed + B per_seq + per_micro_seq; from pp on it is
    fixed + B (per_seq + per_micro_seq / pp). 0 when not even one sequence fits.
    """
    room = available - fixed
    wide = jnp.floor(room / (per_seq + per_micro_seq / pp))
    narrow = jnp.clip(jnp.floor((room - per_micro_seq) / per_seq), 0.0, pp - 1.0)
    return jnp.maximum(jnp.where(wide >= pp, wide, narrow), 0.0)

"""FLOPs and bytes of the primitive operators of a transformer, per device.

Counting conventions (scaling-book, "Transformer Math"): a matmul of an [M, K] by a
[K, N] operand costs 2MKN FLOPs and moves its three operands through memory once
(weights at ``w_bits``, activations at ``a_bits``). Elementwise operators (norms,
activation functions) are memory-bound and run on the vector units (32-bit width).
Residual adds and bias adds are assumed fused into neighbouring kernels.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import Cost


def matmul(m, k, n, w_bits, a_bits, bias=0.0) -> Cost:
    """[m, k] activations times a [k, n] weight; ``bias`` (0/1) adds a length-n bias."""
    flops = 2.0 * m * k * n + bias * m * n
    bytes_ = (k * n + bias * n) * w_bits / 8.0 + (m * k + m * n) * a_bits / 8.0
    return Cost(flops, bytes_, "gemm", (m, n, k))


def grouped_matmul(rows, k, n, weight_sets, w_bits, a_bits) -> Cost:
    """``rows`` activation rows spread over ``weight_sets`` distinct [k, n] weights.

    Experts of an MoE layer and the adapters of batched LoRA (Punica's SGMV) run this
    way: every distinct weight in use is read once, every row multiplies one of them.
    One kernel runs them all (a grouped GEMM: CUTLASS's, Triton's fused MoE): its shape
    is that of one GEMM over the sets' weights side by side, rows / weight_sets rows
    (at least one) by [k, n x weight_sets], which streams every set's weight once.
    """
    flops = 2.0 * rows * k * n
    bytes_ = weight_sets * k * n * w_bits / 8.0 + rows * (k + n) * a_bits / 8.0
    sets = jnp.maximum(weight_sets, 1.0)
    return Cost(flops, bytes_, "gemm", (rows / sets, n * sets, k))


def elementwise(elements, reads, writes, bits, flops_per_element=1.0) -> Cost:
    """A vector-unit pass reading ``reads`` and writing ``writes`` tensors of ``elements``."""
    return Cost(flops_per_element * elements, (reads + writes) * elements * bits / 8.0, "vector")


def memory_write(bytes_) -> Cost:
    """A pure store (e.g. appending K and V to the cache)."""
    return Cost(0.0 * bytes_, bytes_, "vector")


def attention(seqs, heads, pairs, qk_dim, v_dim, new_tokens, kv_new_bytes, kv_cached_bytes,
              a_bits, flash=1.0) -> Cost:
    """Attention of ``new_tokens`` queries per sequence over ``pairs`` (query, key) pairs.

    Scores cost 2 qk_dim and the weighted values 2 v_dim FLOPs per pair and head.
    Queries are read and outputs written once (``a_bits``); keys and values are read
    once per sequence: ``kv_new_bytes`` (this pass's, from activations) plus
    ``kv_cached_bytes`` (earlier tokens, from the cache), both per sequence. With
    ``flash`` = 1 (FlashAttention, Dao et al. 2022) the score matrix stays on chip;
    with 0 it is written, read by the softmax, written again and read by the PV
    product: four passes over seqs x heads x pairs elements.
    """
    flops = 2.0 * seqs * heads * pairs * (qk_dim + v_dim)
    bytes_ = (seqs * new_tokens * heads * (qk_dim + v_dim) * a_bits / 8.0
              + seqs * (kv_new_bytes + kv_cached_bytes)
              + (1.0 - flash) * 4.0 * seqs * heads * pairs * a_bits / 8.0)
    return Cost(flops, bytes_, "attention")


def causal_pairs(new_tokens, prior, window=0.0):
    """(query, key) pairs of ``new_tokens`` queries after ``prior`` cached tokens.

    Query i (1-based) sees prior + i keys, capped at the window W when W > 0:
    sum_i min(prior + i, W).
    """
    full = new_tokens * prior + new_tokens * (new_tokens + 1.0) / 2.0
    below = jnp.clip(window - prior, 0.0, new_tokens)
    capped = below * prior + below * (below + 1.0) / 2.0 + (new_tokens - below) * window
    return jnp.where(window > 0.0, capped, full)


def scored_pairs(new_tokens, prior, window, flash):
    """(query, key) pairs an attention kernel computes: causal ones with FlashAttention,
    which skips fully masked blocks (Dao 2023), the whole [new, context] rectangle for
    unfused attention, which multiplies Q K^T in full and masks afterwards (Megatron-LM's
    fused scale-mask-softmax, eager PyTorch). For decode (one new token) the two differ at
    most by the one pair a sliding window masks.
    """
    context = jnp.where(window > 0.0, jnp.minimum(prior, window), prior) + new_tokens
    return jnp.where(flash > 0.0, causal_pairs(new_tokens, prior, window), new_tokens * context)


def stored_bits(bits, group_size):
    """Bits per stored element including quantization scales.

    Sub-8-bit formats (INT4/NF4 GPTQ/AWQ, FP4) keep one 16-bit scale per group of
    ``group_size`` elements (GPTQ, Frantar et al. 2023; AWQ default group 128):
    bits + 16 / group_size. 8-bit formats use per-channel or per-tensor scales,
    a negligible overhead. ``group_size`` = 0 disables the term.
    """
    grouped = (bits < 8.0) & (group_size > 0.0)
    return bits + jnp.where(grouped, 16.0 / jnp.where(group_size > 0.0, group_size, 1.0), 0.0)

"""FLOPs and bytes of the primitive operators (dse/formulas/operators.py), by hand.

Conventions checked (scaling-book, "All About Transformer Math"; Kaplan et al. 2020):
an [M, K] x [K, N] matmul is M K N multiply-adds = 2MKN FLOPs (a bias adds MN) and
moves each operand once; attention spends 2 qk_dim FLOPs per (query, key) pair and
head on the scores and 2 v_dim on the weighted values; without FlashAttention (Dao et
al. 2022) the score matrix makes four passes through memory. Sub-8-bit weights keep
one 16-bit scale per group (GPTQ, Frantar et al. 2023; AWQ group 128).
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest

from dse.formulas import operators as op


def jit64(fn, *args):
    """(flops, bytes) or the value of ``fn(*args)`` under ``jax.jit`` in float64."""
    def numbers(*a):
        out = fn(*a)
        return (out.flops, out.bytes) if isinstance(out, op.Cost) else out

    with jax.enable_x64(True):
        out = jax.jit(numbers)(*(np.asarray(a, np.float64) for a in args))
        return jax.tree_util.tree_map(np.asarray, out)


def multiply_adds(m, k, n):
    """Multiply-adds of the schoolbook triple loop over [m, k] x [k, n]."""
    return sum(1 for _ in itertools.product(range(m), range(k), range(n)))


# --- matmuls --------------------------------------------------------------------------


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (3, 5, 7), (4, 8, 2)])
def test_matmul_flops_are_two_per_multiply_add(m, k, n):
    flops, _ = jit64(op.matmul, m, k, n, 16, 16)
    assert flops == 2 * multiply_adds(m, k, n)
    with_bias, _ = jit64(op.matmul, m, k, n, 16, 16, 1.0)
    assert with_bias == 2 * multiply_adds(m, k, n) + m * n  # one add per output element


def test_matmul_bytes_by_hand():
    # [3, 5] activations at 16 bits (2 bytes), a [5, 7] weight at 4 bits (half a byte):
    # weight 35 x 0.5 = 17.5, input 15 x 2 = 30, output 21 x 2 = 42 -> 89.5 bytes
    flops, bytes_ = jit64(op.matmul, 3, 5, 7, 4, 16)
    assert (flops, bytes_) == (210.0, 89.5)
    # a bias of 7 weights at 4 bits adds 3.5 bytes and 21 FLOPs
    assert tuple(jit64(op.matmul, 3, 5, 7, 4, 16, 1.0)) == (231.0, 93.0)
    assert op.matmul(3.0, 5.0, 7.0, 4.0, 16.0).unit == "gemm"


def test_matmul_broadcasts():
    m = np.array([1.0, 16.0, 512.0])
    flops, bytes_ = jit64(op.matmul, m, 4096.0 * np.ones(3), 11008.0 * np.ones(3),
                          16.0 * np.ones(3), 8.0 * np.ones(3))
    np.testing.assert_array_equal(flops, 2 * m * 4096 * 11008)
    np.testing.assert_array_equal(bytes_, 4096 * 11008 * 2 + m * (4096 + 11008) * 1)


def test_grouped_matmul_reads_each_weight_set_once():
    # 64 rows over 8 experts of [4096, 14336] at 8 bits, activations 16 bits
    rows, k, n, sets = 64, 4096, 14336, 8
    flops, bytes_ = jit64(op.grouped_matmul, rows, k, n, sets, 8, 16)
    assert flops == 2 * rows * k * n
    assert bytes_ == sets * k * n * 1 + rows * (k + n) * 2
    # the same as 8 separate matmuls of 8 rows each (each reads its weight and its rows)
    per_expert = (k * n * 1 + 8 * k * 2 + 8 * n * 2)
    assert bytes_ == 8 * per_expert
    assert op.grouped_matmul(1.0, 1.0, 1.0, 1.0, 8.0, 8.0).unit == "gemm"


# --- elementwise ----------------------------------------------------------------------


def test_elementwise_and_memory_write():
    # RMSNorm of 10 x 4096 elements at 16 bits: read once, write once, 4 FLOPs each
    flops, bytes_ = jit64(op.elementwise, 40960, 1, 1, 16, 4)
    assert (flops, bytes_) == (4 * 40960, 2 * 40960 * 2)
    # SiLU-and-mul: reads gate and up, writes one: 3 tensors
    assert jit64(op.elementwise, 100, 2, 1, 16)[1] == 3 * 100 * 2
    assert jit64(op.elementwise, 100, 2, 1, 16)[0] == 100  # 1 FLOP per element by default
    assert op.elementwise(1.0, 1.0, 1.0, 16.0).unit == "vector"
    assert tuple(jit64(op.memory_write, 12345.0)) == (0.0, 12345.0)


# --- attention ------------------------------------------------------------------------


def test_attention_flops_and_bytes_by_hand():
    # 2 sequences, 4 heads, 10 (query, key) pairs each, qk dim 8, v dim 6, 3 new tokens
    # per sequence, 100 bytes of new K/V and 1000 cached per sequence, 16-bit activations
    seqs, heads, pairs, qk, v, new = 2, 4, 10, 8, 6, 3
    flops, bytes_ = jit64(op.attention, seqs, heads, pairs, qk, v, new, 100, 1000, 16, 1.0)
    assert flops == seqs * heads * pairs * (2 * qk + 2 * v)  # = 2240
    assert flops == 2240
    queries_and_outputs = seqs * new * heads * (qk + v) * 2  # q read, output written
    kv = seqs * (100 + 1000)
    assert bytes_ == queries_and_outputs + kv  # = 336 + 2200
    # unfused: the [pairs] score matrix of every sequence and head, written (QK^T), read
    # (softmax), written (probabilities) and read (PV): 4 x 2 x 4 x 10 x 2 bytes
    flops0, bytes0 = jit64(op.attention, seqs, heads, pairs, qk, v, new, 100, 1000, 16, 0.0)
    assert flops0 == flops
    assert bytes0 - bytes_ == 4 * seqs * heads * pairs * 2 == 640
    assert op.attention(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 16.0).unit == "attention"


def brute_force_pairs(new: int, prior: int, window: int) -> int:
    """Keys seen by each query i = 1..new after ``prior`` cached tokens, summed; a
    sliding window of W keys caps each query at W (window 0: no window)."""
    total = 0
    for i in range(1, new + 1):
        keys = prior + i  # the cached tokens, earlier new ones and itself
        total += min(keys, window) if window > 0 else keys
    return total


def test_causal_pairs_against_a_sum_over_queries():
    news, priors, windows = np.arange(1, 21), np.arange(0, 31), np.array([0, 1, 5, 17, 40])
    n, p, w = (a.astype(np.float64) for a in np.meshgrid(news, priors, windows, indexing="ij"))
    got = jit64(op.causal_pairs, n, p, w)
    expected = np.vectorize(brute_force_pairs)(n.astype(int), p.astype(int), w.astype(int))
    np.testing.assert_array_equal(got, expected)


def test_causal_pairs_of_a_prompt_and_a_decode_step():
    # a 4-token prompt: 1 + 2 + 3 + 4 = 10 pairs; a decode token after 99: 100 keys
    assert jit64(op.causal_pairs, 4.0, 0.0) == 10
    assert jit64(op.causal_pairs, 1.0, 99.0) == 100
    assert jit64(op.causal_pairs, 1.0, 99.0, 64.0) == 64  # the window caps it


def test_scored_pairs_flash_skips_the_masked_half_unfused_computes_the_rectangle():
    news, priors, windows = np.arange(1, 12), np.arange(0, 20), np.array([0, 3, 9, 50])
    n, p, w = (a.astype(np.float64) for a in np.meshgrid(news, priors, windows, indexing="ij"))
    flash = jit64(op.scored_pairs, n, p, w, np.ones_like(n))
    np.testing.assert_array_equal(flash, np.vectorize(brute_force_pairs)(
        n.astype(int), p.astype(int), w.astype(int)))
    unfused = jit64(op.scored_pairs, n, p, w, np.zeros_like(n))
    # every query against every key held: the cached ones (at most W) and the new ones
    held = np.where(w > 0, np.minimum(p, w), p) + n
    np.testing.assert_array_equal(unfused, n * held)
    # one decode token without a window (or inside it): the same either way
    one = (n == 1) & ((w == 0) | (p < w))
    np.testing.assert_array_equal(flash[one], unfused[one])


# --- stored bits ----------------------------------------------------------------------


@pytest.mark.parametrize("bits, group, expected", [
    (4, 128, 4 + 16 / 128),  # GPTQ/AWQ INT4, one fp16 scale per 128 weights: 4.125
    (4, 32, 4.5),
    (3, 64, 3.25),
    (4, 0, 4.0),  # group size 0: no scales counted
    (8, 128, 8.0),  # 8-bit: per-channel scales, negligible
    (16, 128, 16.0),
])
def test_stored_bits_add_one_16_bit_scale_per_group(bits, group, expected):
    assert jit64(op.stored_bits, bits, group) == expected

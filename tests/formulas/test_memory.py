"""Memory per device against hand derivations (formulas/memory.py)."""

import pytest

from ..helpers import evaluate_point


def test_llama_2_70b_kv_bytes_per_token():
    # 80 layers x (K + V) x 8 kv heads x 128 dims x 2 bytes = 327,680 bytes per token
    # (kipp.ly "Transformer Inference Arithmetic" counts 2 * n_layers * n_kv * d_head * 2).
    out = evaluate_point(model="llama-2-70b", hardware="h100-sxm", tp=1, batch=1,
                         input_len=1000, output_len=24)
    assert out["kv_cache_bytes"] / 1024 == 327_680


@pytest.mark.parametrize("tp, heads_per_device", [(2, 4), (8, 1), (16, 1)])
def test_kv_heads_shard_then_replicate(tp, heads_per_device):
    # 8 kv heads: tp=2 -> 4 per device; tp=8 -> 1; tp=16 > 8 -> each device keeps a copy
    # of one kv head (Megatron/vLLM replicate kv heads when n_kv_heads < tp).
    out = evaluate_point(model="llama-2-70b", hardware="h100-sxm", tp=tp, batch=3,
                         input_len=1000, output_len=24)
    per_token = 80 * 2 * heads_per_device * 128 * 2
    assert out["kv_cache_bytes"] == 3 * 1024 * per_token


def test_weights_shard_over_tp_and_pp():
    one = evaluate_point(model="llama-2-7b", hardware="a100-80gb", weight_bits=16)
    assert one["weight_bytes"] == 2 * one["n_params"]
    # tp=2 halves every matrix; the two RMSNorm vectors per layer stay whole.
    two = evaluate_point(model="llama-2-7b", hardware="a100-80gb", tp=2)
    norms = (2 * 32 + 1) * 4096 * 2
    assert two["weight_bytes"] == pytest.approx((one["weight_bytes"] - norms) / 2 + norms)
    # pp=2: 16 layers per stage plus one embedding-sized table (first or last stage).
    half = evaluate_point(model="llama-2-7b", hardware="a100-80gb", pp=2)
    table = 32000 * 4096 * 2
    assert half["weight_bytes"] == pytest.approx((one["weight_bytes"] - 2 * table) / 2 + table,
                                                 rel=1e-6)


def test_weight_bits_scale_weight_bytes():
    w16 = evaluate_point(model="llama-2-7b", hardware="a100-80gb", weight_bits=16)
    w8 = evaluate_point(model="llama-2-7b", hardware="a100-80gb", weight_bits=8)
    assert w8["weight_bytes"] == pytest.approx(w16["weight_bytes"] / 2)
    # INT4 with one fp16 scale per group of 128 weights (GPTQ/AWQ): 4 + 16/128 bits
    w4 = evaluate_point(model="llama-2-7b", hardware="a100-80gb", weight_bits=4)
    assert w4["weight_bytes"] == pytest.approx(w16["weight_bytes"] * (4 + 16 / 128) / 16)
    w4_plain = evaluate_point(model="llama-2-7b", hardware="a100-80gb", weight_bits=4,
                              quant_group_size=0)
    assert w4_plain["weight_bytes"] == pytest.approx(w16["weight_bytes"] / 4)


def test_oom_is_a_result_not_an_error():
    out = evaluate_point(model="llama-2-70b", hardware="a100-80gb", tp=1, weight_bits=16)
    assert not out["fits"] and not out["valid"]
    assert out["memory_bytes"] > 80 * 2**30
    assert out["reason"] == 4  # the "oom" flag

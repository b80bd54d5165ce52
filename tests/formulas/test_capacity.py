"""Capacity: the memory reserve, TGI-style token capacities (formulas/memory.py)."""

from ..helpers import evaluate_point


def test_reserve_is_capacity_taken_away():
    """A reserve r leaves exactly what a memory what-if of (1 - r) leaves."""
    axes = dict(model="llama-2-7b", hardware="a100-40gb", input_len=1000, output_len=1000)
    kept = evaluate_point(memory_reserve=0.25, **axes)
    scaled = evaluate_point(memory_reserve=0.0, memory_scale=0.75, **axes)
    assert kept["max_batch"] == scaled["max_batch"] and kept["max_batch"] > 0
    assert evaluate_point(memory_reserve=0.0, **axes)["max_batch"] > kept["max_batch"]


def test_llm_profiler_style_capacities():
    """max_batch_total_tokens: KV tokens beside the weights (TGI's setting).

    Llama-2-7B fp16 on an 80 GiB device with a 0.1 reserve: (72 GiB - 13.48 GB of
    weights) / 524,288 bytes per token (32 layers x 2 x 4096 x 2).
    """
    out = evaluate_point(model="llama-2-7b", hardware="a100-80gb", input_len=512, output_len=512)
    room = 0.9 * 80 * 2**30 - out["weight_bytes"]
    assert out["max_batch_total_tokens"] == room // (32 * 2 * 4096 * 2)
    assert out["max_batch_decode"] <= out["max_batch_total_tokens"] / 1024
    assert out["max_batch_prefill"] >= out["max_batch"]

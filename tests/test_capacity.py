"""Capacity: max_batch against fits (memory.py), the memory reserve."""

from hypothesis import assume, given, settings, strategies as st

from dse.catalogue import lookup as catalogue

from .helpers import evaluate_point

MODELS = ["llama-2-7b", "llama-2-70b", "mixtral-8x7b", "qwen2.5-7b", "llama-3.1-8b"]
HARDWARE = ["a100-40gb", "a100-80gb", "h100-sxm", "l40s", "rtx-4090", "mi300x"]


@settings(max_examples=30, deadline=None)
@given(model=st.sampled_from(MODELS), hardware=st.sampled_from(HARDWARE),
       tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]),
       input_len=st.integers(16, 3000), output_len=st.integers(1, 1000),
       weight_bits=st.sampled_from([4, 8, 16]), reserve=st.sampled_from([0.0, 0.1]))
def test_max_batch_is_the_largest_batch_that_fits(model, hardware, tp, pp, input_len,
                                                  output_len, weight_bits, reserve):
    assume(catalogue.load_model(model).divisors_ok(tp))  # else the study itself is bad input
    axes = dict(model=model, hardware=hardware, tp=tp, pp=pp, input_len=input_len,
                output_len=output_len, weight_bits=weight_bits, memory_reserve=reserve)
    best = int(evaluate_point(batch=1, **axes)["max_batch"])
    if best >= 1:
        assert evaluate_point(batch=best, **axes)["fits"]
    assert not evaluate_point(batch=best + 1, **axes)["fits"]


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

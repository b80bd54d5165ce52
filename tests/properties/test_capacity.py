"""Property: max_batch is the largest batch that fits (formulas/memory.py)."""

from hypothesis import assume, given, settings, strategies as st

from dse.catalogue import lookup as catalogue

from ..helpers import evaluate_point


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

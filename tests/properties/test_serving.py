"""Property: speculative decoding with zero acceptance never lowers TPOT
(formulas/inference.py)."""

from hypothesis import given, settings, strategies as st

from ..helpers import SPECULATION_AXES as AXES
from ..helpers import evaluate_point


@settings(max_examples=15, deadline=None)
@given(batch=st.sampled_from([1, 4, 16, 64]), k=st.integers(1, 8),
       input_len=st.integers(64, 4000), draft=st.sampled_from(["llama-3.2-1b", "llama-3-8b"]))
def test_speculation_with_zero_acceptance_never_helps(batch, k, input_len, draft):
    axes = dict(AXES, batch=batch, draft_len=k, input_len=input_len, draft_model=draft)
    plain = evaluate_point(**dict(axes, draft_len=0))
    spec = evaluate_point(acceptance_rate=0.0, **axes)
    assert spec["tpot_s"] >= plain["tpot_s"]
    assert spec["target_steps_per_token"] == 1.0

"""Grid evaluation (dse/core): outputs span only the axes they depend on; invalid points
are marked with a reason, not raised."""

from dse.schema.outputs import REASON_BITS

from ..helpers import sweep_text


def test_outputs_span_only_their_dependencies(contract_grid):
    study, ds = contract_grid
    assert ds["n_params"].dims == ("model",)
    assert set(ds["weight_bytes"].dims) == {"model", "tp", "pp", "weight_bits"}
    assert ds["ttft_s"].dims == tuple(a.name for a in study.dims)


def test_indivisible_tp_is_marked_not_raised():
    ds = sweep_text("""
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
tp = [1, 3, 64]
""")
    flags = ds["reason"].values
    bit = REASON_BITS["tp_indivisible"]
    assert list(flags & bit) == [0, bit, bit]
    assert list(ds["valid"].values) == [True, False, False]


def test_context_too_long_is_marked():
    ds = sweep_text("""
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
input_len = [1000, 4000]
output_len = 200
""")
    assert list(ds["reason"].values & REASON_BITS["context_too_long"] > 0) == [False, True]

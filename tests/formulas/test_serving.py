"""Breakdown, speculative decoding, chunked prefill, attention variants, precision,
LoRA, cost and energy (formulas/inference.py and friends)."""

import numpy as np
import pytest

from dse.catalogue import lookup as catalogue

from ..helpers import SPECULATION_AXES as AXES
from ..helpers import evaluate_point, sweep_text


BREAKDOWN = """
[study]
dtype = "float64"
[axes]
model = ["llama-2-70b", "mixtral-8x7b", "deepseek-v3", "mistral-7b"]
hardware = "h100-sxm"
tp = 8
pp = [1, 2]
weight_bits = 8
batch = [1, 32]
input_len = [128, 4000]
output_len = 64
[output]
breakdown = true
"""


@pytest.fixture(scope="module")
def breakdown():
    return sweep_text(BREAKDOWN)


def test_breakdown_sums_to_phase_totals(breakdown):
    ds = breakdown
    total = ds["component_s"].sum("component")
    np.testing.assert_allclose(total.sel(phase="prefill"), ds["ttft_s"], rtol=1e-12)
    np.testing.assert_allclose(total.sel(phase="decode"), ds["tpot_s"], rtol=1e-12)


def test_bound_labels_follow_the_physics(breakdown):
    """Batch-1 decode matmuls are memory-bound; a 32 x 4000-token prefill's are compute-
    bound; collectives are communication; FlashAttention prefill at 4000 tokens is
    compute-bound while decode attention streams the KV cache (memory-bound)."""
    codes = {"compute": 0, "memory": 1, "communication": 2}
    b = breakdown["component_bound"].sel(model="llama-2-70b", pp=1)
    decode = b.sel(phase="decode", batch=1, input_len=128)
    prefill = b.sel(phase="prefill", batch=32, input_len=4000)
    for comp in ("qkv_proj", "o_proj", "mlp", "lm_head"):
        assert decode.sel(component=comp) == codes["memory"], comp
    for comp in ("qkv_proj", "o_proj", "mlp", "attention"):
        assert prefill.sel(component=comp) == codes["compute"], comp
    assert decode.sel(component="attention") == codes["memory"]
    assert decode.sel(component="tp_comm") == codes["communication"]
    piped = breakdown["component_bound"].sel(model="llama-2-70b", pp=2, phase="prefill",
                                             batch=32, input_len=4000)
    assert piped.sel(component="pp_comm") == codes["communication"]


def test_decode_attention_intensity_by_hand(breakdown):
    """FLOPs per byte of decode attention, from the cache layout.

    Absorbed MLA (DeepSeek-V3, 128 heads / tp 8 = 16 per device) reads one 576-element
    latent per cached token (2 bytes each) and spends 2 x (576 + 512) FLOPs on it per
    head: 16 x 2176 / 1152 = 30.2. GQA (Llama-2-70B, 8 query heads per kv head after
    tp 8) reads K and V (2 x 128 x 2 bytes) for 8 heads x 2 x 256 FLOPs: 8. The
    query/output traffic of one token per sequence shaves a little off both.
    """
    f = breakdown["component_flops"].sel(phase="decode", component="attention", batch=32,
                                         input_len=4000, pp=1)
    by = breakdown["component_bytes"].sel(phase="decode", component="attention", batch=32,
                                          input_len=4000, pp=1)
    intensity = f / by
    assert float(intensity.sel(model="deepseek-v3")) == pytest.approx(16 * 2176 / 1152, rel=0.01)
    assert float(intensity.sel(model="llama-2-70b")) == pytest.approx(8.0, rel=0.01)


def test_speculation_with_full_acceptance_saves_target_steps():
    """Acceptance 1: every draft token is kept, k + 1 tokens per target pass
    (Leviathan et al. 2023, Eq. 1 with alpha -> 1)."""
    for k in (1, 3, 7):
        out = evaluate_point(acceptance_rate=1.0, **dict(AXES, draft_len=k))
        assert out["target_steps_per_token"] == pytest.approx(1.0 / (k + 1))


def test_speculation_expected_tokens():
    # alpha = 0.8, gamma = 4: (1 - 0.8^5) / (1 - 0.8) = 3.3616 tokens per target pass
    out = evaluate_point(acceptance_rate=0.8, **AXES)
    assert out["target_steps_per_token"] == pytest.approx(1 / 3.3616)


def test_speculation_costs_draft_memory():
    plain = evaluate_point(**dict(AXES, draft_len=0))
    spec = evaluate_point(**AXES)
    draft = catalogue.load_model("llama-3.2-1b")
    assert spec["weight_bytes"] - plain["weight_bytes"] == pytest.approx(
        1_235_814_400 * 2 / 4, rel=0.01), draft.name


def test_chunked_prefill_rereads_weights_and_bounds_activations():
    """Chunks of 512 tokens: the same attention pairs (causality is kept across chunks),
    weights streamed once per chunk, activations of one chunk only."""
    base = dict(model="llama-2-7b", hardware="h100-sxm", batch=1, input_len=4096, output_len=2)
    whole = evaluate_point(prefill_chunk=0, **base)
    chunked = evaluate_point(prefill_chunk=512, **base)
    assert chunked["activation_bytes"] < whole["activation_bytes"] / 6
    assert chunked["ttft_s"] > whole["ttft_s"]
    assert chunked["prefill_flops"] == whole["prefill_flops"]
    one_chunk = evaluate_point(prefill_chunk=4096, **base)
    assert one_chunk["ttft_s"] == pytest.approx(whole["ttft_s"], rel=1e-12)


def test_flash_attention_off_materializes_scores():
    base = dict(model="llama-2-7b", hardware="h100-sxm", batch=4, input_len=4000, output_len=2)
    on = evaluate_point(flash_attention=True, **base)
    off = evaluate_point(flash_attention=False, **base)
    # one layer's score and probability matrices: 2 x 4 seqs x 32 heads x 4000^2 x 2 bytes
    assert off["activation_bytes"] - on["activation_bytes"] == pytest.approx(
        2 * 4 * 32 * 4000 * 4000 * 2)
    assert off["ttft_s"] > on["ttft_s"]


def test_sliding_window_caps_the_kv_cache():
    # Mistral-7B v0.1: window 4096 on every layer, 8 kv heads of 128: beyond 4096 tokens
    # the cache stops growing (32 layers x 2 x 8 x 128 x 2 bytes = 131,072 per token).
    out = evaluate_point(model="mistral-7b", hardware="h100-sxm", batch=2, input_len=10000,
                         output_len=2000)
    assert out["kv_cache_bytes"] == 2 * 4096 * 131_072


def test_compute_dtype_follows_weights_and_activations():
    """W8A8 runs at the 8-bit peak, W4A16 at the 16-bit one (dequantized)."""
    base = dict(model="llama-2-7b", hardware="h100-sxm", batch=64, input_len=4000, output_len=2)
    w16 = evaluate_point(weight_bits=16, act_bits=16, **base)
    w8a8 = evaluate_point(weight_bits=8, act_bits=8, **base)
    w4a16 = evaluate_point(weight_bits=4, act_bits=16, **base)
    assert w8a8["ttft_s"] < 0.6 * w16["ttft_s"]  # H100: FP8 peak = 2 x BF16
    assert w4a16["ttft_s"] == pytest.approx(w16["ttft_s"], rel=0.02)
    # A100 has no FP8: 8-bit weights with 8-bit activations fall back to INT8 (624 TOPS)
    a100 = dict(base, hardware="a100-80gb")
    assert evaluate_point(weight_bits=8, act_bits=8, **a100)["ttft_s"] < 0.6 * evaluate_point(
        **a100)["ttft_s"]


def test_lora_adds_memory_and_time():
    base = dict(model="llama-2-7b", hardware="a100-80gb", batch=16, input_len=512,
                output_len=64)
    plain = evaluate_point(**base)
    lora = evaluate_point(lora_rank=16, lora_adapters=8, **base)
    # 8 adapters x rank 16 x 32 layers x (q,k,v,o: 2 x 8192 each; gate,up,down: 15104 each)
    per_layer = 4 * 2 * 4096 + 3 * (4096 + 11008)
    assert lora["weight_bytes"] - plain["weight_bytes"] == pytest.approx(8 * 16 * 32 * per_layer * 2)
    assert lora["tpot_s"] > plain["tpot_s"]


def test_cost_and_energy_per_token():
    out = evaluate_point(model="llama-2-7b", hardware="h100-sxm", batch=32, tp=2)
    hw = catalogue.load_hardware("h100-sxm").fields
    dollars_per_s = 2 * hw["price_per_hour_usd"] / 3600
    assert out["cost_per_mtok"] == pytest.approx(dollars_per_s / out["throughput_tok_s"] * 1e6)
    # GenZ's power split: between the static share (30% of TDP) and full TDP
    joules_at_tdp = 2 * hw["tdp_w"] / out["throughput_tok_s"]
    assert 0.3 * joules_at_tdp < out["energy_per_tok_j"] <= joules_at_tdp


def test_energy_of_a_memory_bound_decode_by_hand():
    """Batch-1 decode, one device, no communication: every operator is memory-bound,
    so memory utilization is 1 and compute utilization is FLOPs/peak over the step:
    E = TDP (0.3 T + 0.4 C + 0.2 M) per token, M = T (GenZ/power.py)."""
    axes = dict(model="llama-2-7b", hardware="h100-sxm", batch=1, input_len=1, output_len=2)
    out = evaluate_point(power_static=0.3, power_compute=0.0, power_memory=0.2,
                         power_network=0.0, **axes)
    tdp = catalogue.load_hardware("h100-sxm").fields["tdp_w"]
    # two tokens: the 1-token prefill and one decode step, both memory-bound
    assert out["energy_per_tok_j"] == pytest.approx(tdp * 0.5 * out["e2e_s"] / 2, rel=1e-3)


def test_continuous_batching_throughput_runs_at_max_batch():
    ds = sweep_text("""
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
batch = [1, 8]
input_len = 1000
output_len = 500
[output]
variables = ["throughput_tok_s", "serving_throughput_tok_s", "max_batch", "ttft_s"]
""")
    best = int(ds["max_batch"].item())
    at_best = evaluate_point(model="llama-2-7b", hardware="h100-sxm", batch=best,
                             input_len=1000, output_len=500)
    steady = best * 500 / (at_best["ttft_s"] + 500 * at_best["tpot_s"])
    assert float(ds["serving_throughput_tok_s"]) == pytest.approx(steady, rel=1e-5)
    assert float(ds["serving_throughput_tok_s"]) > float(ds["throughput_tok_s"].max())


def test_usecase_axis_sets_the_lengths():
    ds = sweep_text("""
[axes]
model = "llama-3.1-8b"
hardware = "h100-sxm"
usecase = ["chat", "summarization"]
""")
    alone = evaluate_point(model="llama-3.1-8b", hardware="h100-sxm", input_len=15000,
                           output_len=1000)
    assert float(ds["ttft_s"].sel(usecase="summarization")) == pytest.approx(alone["ttft_s"],
                                                                             rel=1e-5)
    assert ds["ttft_s"].dims == ("usecase",)

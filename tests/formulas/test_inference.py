"""Latency and throughput against hand derivations (formulas/inference.py)."""

import numpy as np
import pytest

from dse.catalogue import lookup as catalogue

from ..helpers import evaluate_point, sweep_text


def _hw(name):
    return catalogue.load_hardware(name).spec()


def test_batch1_decode_is_weight_and_kv_streaming():
    """Batch-1 decode on one device ~ (weights + KV cache) / HBM bandwidth.

    Every operator is memory-bound at batch 1, so a decode step streams the weights
    (all but the embedding table, of which one row is read) and the KV cache.
    """
    hw = _hw("h100-sxm")
    out = evaluate_point(model="llama-2-7b", hardware="h100-sxm", batch=1, input_len=1024,
                         output_len=512)
    mean_context = 1024 + 512 / 2
    kv_read = mean_context * 32 * 2 * 4096 * 2  # bytes of K and V per step, fp16
    expected = (out["weight_bytes"] + kv_read) / float(hw.hbm_bw_bytes_per_s)
    assert out["tpot_s"] == pytest.approx(expected, rel=0.03)


def test_long_prefill_is_compute_bound():
    """A long prompt's TTFT = matmul/attention FLOPs at peak + memory-bound passes.

    Every matmul and the attention are compute-bound at 32k tokens; the norms, the
    SiLU-and-mul and the KV-cache append are separate memory-bound kernels (as in vLLM):
    RMSNorm reads and writes T x D (2 per layer + final), SiLU-and-mul reads 2 T x F and
    writes T x F, the embedding gather reads and writes T x D, the cache append writes
    T x 2 x D, all at 2 bytes. The LM head runs once per sequence (8 rows: memory-bound,
    it streams V x D weights).
    """
    hw = _hw("h100-sxm")
    b, s, d, f, layers, v = 8, 4000, 4096, 11008, 32, 32000
    t = b * s
    out = evaluate_point(model="llama-2-7b", hardware="h100-sxm", batch=b, input_len=s,
                         output_len=16)
    vector_flops = 4 * t * d * (2 * layers + 1) + 4 * t * f * layers
    head_flops = 2 * b * d * v
    compute = (out["prefill_flops"] - vector_flops - head_flops) / float(hw.flops_per_s_16)
    passes = (2 * 2 * t * d * (2 * layers + 1) + 2 * 3 * t * f * layers + 2 * 2 * t * d
              + 2 * 2 * t * d * layers)
    head = (v * d + b * d + b * v) * 2
    expected = compute + (passes + head) / float(hw.hbm_bw_bytes_per_s)
    assert out["ttft_s"] == pytest.approx(expected, rel=1e-3)
    assert out["prefill_flops"] / float(hw.flops_per_s_16) < out["ttft_s"] < 1.1 * compute


def test_prefill_flops_by_hand():
    # 2 x (non-embedding params) per token for the matmuls, plus causal attention
    # 4 * L * D * s(s+1)/2 per sequence (QK^T and PV), Kaplan et al. 2020 Table 1
    # (with the causal halving); the LM head once per sequence; norms 4 FLOPs/element.
    d, layers, s, b, v = 4096, 32, 2048, 2, 32000
    per_layer_params = 4 * d * d + 3 * d * 11008
    matmul = 2 * b * s * layers * per_layer_params
    attention = 4 * b * layers * d * s * (s + 1) / 2
    head = 2 * b * d * v
    norms = 4 * b * s * d * (2 * layers + 1) + 4 * b * s * layers * 11008 * 2 / 2
    out = evaluate_point(model="llama-2-7b", hardware="h100-sxm", batch=b, input_len=s)
    assert out["prefill_flops"] == pytest.approx(matmul + attention + head + norms, rel=1e-9)


def test_tpot_is_the_exact_mean_of_the_decode_steps():
    """TPOT over a generation equals the average of its steps evaluated one by one.

    A single decode step at context c is the TPOT of output_len = 2 with input_len =
    c - 1. The attention roofline is made to cross mid-generation: per sequence and
    layer a step computes F1 = 4 D c FLOPs and reads B0 + B1 c bytes (B0 = 4 D for q and
    the output at 16 bits, B1 = 2 D for K and V at 8 bits), so compute and memory time
    meet at c* = 120 when the attention peak P satisfies 4 c*/P = (4 + 2 c*)/bw.
    Evaluating at the mean context instead would not match the step average.
    """
    hw = _hw("a100-80gb")
    c_star = 120.0
    peak = 4.0 * c_star * float(hw.hbm_bw_bytes_per_s) / (4.0 + 2.0 * c_star)
    axes = dict(model="llama-2-7b", hardware="a100-80gb", batch=4, act_bits=16, kv_bits=8,
                tflops_scale=peak / float(hw.flops_per_s_16), memory_scale=100.0)
    whole = evaluate_point(input_len=90, output_len=61, **axes)
    steps = [evaluate_point(input_len=90 + j - 1, output_len=2, **axes)["tpot_s"]
             for j in range(1, 61)]
    assert whole["tpot_s"] == pytest.approx(np.mean(steps), rel=1e-12)
    at_mean = evaluate_point(input_len=90 + 30 - 1, output_len=2, **axes)["tpot_s"]
    assert abs(at_mean - whole["tpot_s"]) > 1e-9 * whole["tpot_s"]
    assert whole["e2e_s"] == pytest.approx(whole["ttft_s"] + 60 * whole["tpot_s"], rel=1e-12)


def test_tensor_parallel_all_reduce_by_hand():
    """Batch-1 decode with tp=2 pays two ring all-reduces per layer.

    Ring all-reduce of S bytes over g devices: 2(g-1)/g * S / bw + 2(g-1) * latency.
    """
    hw = _hw("h100-sxm")
    one = evaluate_point(model="llama-2-7b", hardware="h100-sxm", tp=2, link_bw_scale=1.0,
                         batch=1, input_len=128, output_len=2)
    fast = evaluate_point(model="llama-2-7b", hardware="h100-sxm", tp=2, link_bw_scale=1e9,
                          batch=1, input_len=128, output_len=2)
    size = 1 * 4096 * 2  # hidden state of one token, fp16
    per_reduce_bw = 2 * 1 / 2 * size / float(hw.intra_bw_bytes_per_s)
    # 32 layers x 2 all-reduces; the bandwidth term vanishes when links are 1e9x faster
    # (latency stays), plus the all-gather of the logits (vocab 32000, fp16).
    gather_bw = 1 / 2 * 32000 * 2 / float(hw.intra_bw_bytes_per_s)
    expected = 64 * per_reduce_bw + gather_bw
    assert one["tpot_s"] - fast["tpot_s"] == pytest.approx(expected, rel=1e-6)


def test_data_parallel_replicas_multiply_throughput():
    a = evaluate_point(model="llama-2-7b", hardware="l40s", dp=1)
    b = evaluate_point(model="llama-2-7b", hardware="l40s", dp=4)
    assert b["throughput_tok_s"] == pytest.approx(4 * a["throughput_tok_s"])
    assert b["tpot_s"] == a["tpot_s"] and b["n_devices"] == 4


def test_pipeline_at_batch_1_adds_only_the_hop():
    """At batch 1 a pipeline runs its stages in sequence: same work plus one transfer."""
    hw = _hw("h100-sxm")
    axes = dict(model="llama-2-7b", hardware="h100-sxm", batch=1, input_len=512, output_len=64)
    flat = evaluate_point(pp=1, **axes)
    piped = evaluate_point(pp=2, **axes)
    hop = float(hw.intra_latency_s) + 512 * 4096 * 2 / float(hw.intra_bw_bytes_per_s)
    assert piped["ttft_s"] == pytest.approx(flat["ttft_s"] + hop, rel=1e-9)


def test_throughput_is_output_tokens_over_end_to_end_time():
    out = evaluate_point(model="llama-2-7b", hardware="h100-sxm", batch=16, output_len=200,
                         dp=2)
    assert out["throughput_tok_s"] == pytest.approx(2 * 16 * 200 / out["e2e_s"])


def test_efficiency_and_whatif_scales_are_equivalent():
    """hbm_efficiency 0.5 and hbm_bw_scale 0.5 both halve the achieved bandwidth."""
    a = evaluate_point(model="llama-2-7b", hardware="h100-sxm", hbm_efficiency=0.5)
    b = evaluate_point(model="llama-2-7b", hardware="h100-sxm", hbm_bw_scale=0.5)
    assert a["tpot_s"] == pytest.approx(b["tpot_s"], rel=1e-12)


def test_num_devices_keeps_the_layouts_that_use_exactly_that_many():
    """num_devices = 8 over tp x pp: dp = 8 / (tp pp) replicas, so every feasible
    layout uses 8 devices and serves dp times one replica's batch; layouts that do not
    divide 8 (tp 3, or tp 8 x pp 2 = 16) are flagged devices_indivisible (bit 64)."""
    ds = sweep_text("""
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
num_devices = 8
tp = [1, 2, 3, 4, 8]
pp = [1, 2]
batch = 16
""")
    flagged = (ds["reason"] & 64) > 0
    for tp in (1, 2, 3, 4, 8):
        for pp in (1, 2):
            point = ds.sel(tp=tp, pp=pp)
            divides = 8 % (tp * pp) == 0
            assert bool(flagged.sel(tp=tp, pp=pp)) == (not divides), (tp, pp)
            if divides:
                assert point["n_devices"].item() == 8
                assert point["dp_size"].item() == 8 // (tp * pp)
    # one replica of tp 2 x pp 1 with dp given by hand serves the same
    by_hand = sweep_text("""
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
dp = 4
tp = 2
batch = 16
""")
    for name in ("throughput_tok_s", "ttft_s", "tpot_s", "memory_bytes"):
        assert ds[name].sel(tp=2, pp=1).item() == by_hand[name].item()
    assert ds["throughput_tok_s"].sel(tp=2, pp=1).item() == pytest.approx(
        4 * 16 * 128 / ds["e2e_s"].sel(tp=2, pp=1).item(), rel=1e-6)  # float32 sweep


def test_engine_step_overhead_by_hand(tmp_path):
    """The serving engine's host time per step: step_overhead_s + seq_overhead_s x batch
    once per decode step and once per prefill chunk. Two calibrations that differ only
    in those two values (the Hopper offsets of both set to 0, so the file's values apply
    as written) differ in TPOT by exactly that, and in TTFT by that times the chunks."""
    import re

    from ..conftest import ROOT

    base = (ROOT / "calibrations" / "generic.toml").read_text()
    base = re.sub(r'(\[family\."nvidia-hopper"\][^\[]*?)step_overhead_s = \S+\nseq_overhead_s = \S+',
                  r"\1step_overhead_s = 0.0\nseq_overhead_s = 0.0", base, flags=re.S)
    assert re.search(r'\[family\."nvidia-hopper"\][^\[]*?step_overhead_s = 0\.0\n'
                     r'seq_overhead_s = 0\.0', base, flags=re.S)
    out = {}
    for name, step, seq in (("a", 1e-4, 1e-6), ("b", 3e-3, 2e-5)):
        text = re.sub(r'(\[framework\."generic"\][^\[]*?)step_overhead_s = \S+\n'
                      r'seq_overhead_s = \S+',
                      rf"\1step_overhead_s = {step}\nseq_overhead_s = {seq}", base, flags=re.S)
        (tmp_path / f"{name}.toml").write_text(text)
        out[name] = sweep_text(f"""
[study]
name = "t"
dtype = "float64"
calibration = "{tmp_path / f'{name}.toml'}"
framework = "generic"
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
batch = [1, 16]
input_len = 1024
output_len = 64
prefill_chunk = 256
""")
    batch = np.array([1.0, 16.0])
    host = (3e-3 - 1e-4) + (2e-5 - 1e-6) * batch
    tpot = out["b"]["tpot_s"].values - out["a"]["tpot_s"].values
    ttft = out["b"]["ttft_s"].values - out["a"]["ttft_s"].values
    np.testing.assert_allclose(tpot, host, rtol=1e-9)
    np.testing.assert_allclose(ttft, 4 * host, rtol=1e-9)  # 1024 / 256 = 4 chunks

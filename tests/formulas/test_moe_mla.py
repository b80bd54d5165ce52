"""MoE / expert parallelism and multi-head latent attention (formulas/transformer.py,
formulas/attention.py)."""

import pytest

from dse.formulas.transformer import expected_distinct

from ..helpers import evaluate_point, sweep_text


def test_expected_distinct_experts_by_hand():
    # Mixtral: 8 experts, top-2. One token picks 2; 64 tokens miss a given expert with
    # probability (6/8)^64 each, so 8 (1 - 0.75^64) = 7.99999 experts are read.
    assert float(expected_distinct(8.0, 2.0, 1.0)) == pytest.approx(2.0)
    assert float(expected_distinct(8.0, 2.0, 64.0)) == pytest.approx(8 * (1 - 0.75**64))
    assert float(expected_distinct(8.0, 2.0, 64.0)) > 7.9999


def _decode_moe_bytes(batch):
    ds = sweep_text(f"""
[study]
dtype = "float64"
[axes]
model = "mixtral-8x7b"
hardware = "h100-sxm"
tp = 2
batch = {batch}
input_len = 512
output_len = 128
[output]
breakdown = true
""")
    return float(ds["component_bytes"].sel(phase="decode", component="moe"))


@pytest.mark.parametrize("batch, experts", [(1, 2.0), (64, 8 * (1 - 0.75**64))])
def test_mixtral_decode_reads_the_experts_hit(batch, experts):
    """A decode step streams the expected distinct experts, not all 8 nor only top-2.

    Per layer and device (tp=2): an expert is 3 matrices of 4096 x 14336 / 2 at 2 bytes;
    plus the router (4096 x 8) and the routed rows' activations (batch x 2 rows of
    4096 in, 2 x 7168 gate/up out, 7168 activation in/out, 7168 in and 4096 out).
    """
    d, ff = 4096, 14336 // 2
    expert = 3 * d * ff * 2
    rows = batch * 2
    router = d * 8 * 2 + (batch * d + batch * 8) * 2
    up = rows * (d + 2 * ff) * 2
    act = rows * ff * 3 * 2
    down = rows * (ff + d) * 2
    expected = 32 * (experts * expert + router + up + act + down)
    assert _decode_moe_bytes(batch) == pytest.approx(expected, rel=1e-9)


def test_deepseek_v3_kv_bytes_per_token():
    # MLA caches the compressed latent (kv_lora_rank 512) and the decoupled rope key
    # (64) per token and layer, shared by all 128 heads: 61 x 576 x 2 bytes = 70,272
    # (DeepSeek-V2 paper Table 1: (d_c + d_h^R) l elements per token).
    out = evaluate_point(model="deepseek-v3", hardware="h200", tp=8, batch=1, input_len=1000,
                         output_len=24)
    assert out["kv_cache_bytes"] / 1024 == 61 * 576 * 2


def test_mla_latent_is_replicated_not_sharded_over_tp():
    one = evaluate_point(model="deepseek-v3", hardware="h200", tp=1, batch=1, input_len=1000,
                         output_len=24)
    eight = evaluate_point(model="deepseek-v3", hardware="h200", tp=8, batch=1, input_len=1000,
                           output_len=24)
    assert one["kv_cache_bytes"] == eight["kv_cache_bytes"]


def test_expert_parallel_shards_experts_and_pays_all_to_all():
    """ep=8 over tp=8: each device holds 32 whole experts instead of 1/8 of all 256.

    The weight bytes are the same; the MoE layers swap a tp all-reduce for two
    all-to-alls (ep_comm), and ep > tp x dp is infeasible.
    """
    base = dict(model="deepseek-v3", hardware="h200", tp=8, weight_bits=8, batch=32,
                input_len=1000, output_len=100)
    tp_only = evaluate_point(ep=1, **base)
    ep8 = evaluate_point(ep=8, **base)
    assert ep8["weight_bytes"] == pytest.approx(tp_only["weight_bytes"], rel=1e-12)
    assert ep8["valid"] and tp_only["valid"]
    assert evaluate_point(ep=16, **base)["reason"] & 16  # ep_indivisible: 16 > tp x dp
    assert evaluate_point(ep=16, dp=2, **base)["valid"]


def test_ep_on_a_dense_model_is_ignored_not_flagged():
    """A dense model has no experts to spread, so ep changes nothing (vLLM ignores
    --enable-expert-parallel on one): a sweep of ep over dense and MoE models keeps the
    dense points valid, equal to ep = 1, and still checks ep on the MoE model (Mixtral's
    8 experts do not split over 16 devices when tp x dp is 2)."""
    ds = sweep_text("""
[axes]
model = ["llama-2-7b", "mixtral-8x7b"]
hardware = "h100-sxm"
tp = 2
ep = [1, 2, 16]
""")
    dense = ds.sel(model="llama-2-7b")
    assert (dense["reason"].values == 0).all()
    for name in ("throughput_tok_s", "weight_bytes", "ttft_s", "tpot_s"):
        assert dense[name].sel(ep=2).item() == dense[name].sel(ep=1).item()
        assert dense[name].sel(ep=16).item() == dense[name].sel(ep=1).item()
    moe = ds["reason"].sel(model="mixtral-8x7b")
    assert moe.sel(ep=2).item() & 16 == 0 and moe.sel(ep=16).item() & 16 == 16


def test_expert_imbalance_sets_the_step_under_expert_parallelism():
    """moe_imbalance = max / mean tokens per expert. Mixtral-8x7B over tp 8 with ep 8
    holds one expert per device (etp = tp dp / ep = 1, group = ep etp / tp = 1), so the
    busiest device runs imbalance x the mean rows: a prefill of 64 x 2000 tokens routes
    t x group x top_k / ep = 128,000 x 2 / 8 = 32,000 rows to each device, and imbalance 2
    adds their gate, up and down projections once more: 32 layers x 2 x 32,000 x 4096 x
    14336 x 3 FLOPs. Without expert parallelism every device sees every token and the
    imbalance changes nothing."""
    ds = sweep_text("""
[study]
dtype = "float64"
[output]
breakdown = true
[axes]
model = "mixtral-8x7b"
hardware = "h100-sxm"
tp = 8
ep = [1, 8]
batch = 64
input_len = 2000
output_len = 2
moe_imbalance = [1.0, 2.0]
""")
    moe = ds["component_flops"].sel(component="moe", phase="prefill")
    extra = moe.sel(ep=8, moe_imbalance=2.0) - moe.sel(ep=8, moe_imbalance=1.0)
    assert float(extra) == pytest.approx(32 * 2 * 32_000 * 4096 * 14336 * 3, rel=2e-4)
    assert float(moe.sel(ep=1, moe_imbalance=2.0)) == float(moe.sel(ep=1, moe_imbalance=1.0))
    ttft = ds["ttft_s"].sel(ep=8)
    assert float(ttft.sel(moe_imbalance=2.0)) > float(ttft.sel(moe_imbalance=1.0))

"""DeepSeek Sparse Attention (formulas/attention.py: the top-k cap on MLA and
indexer_costs; formulas/params.py: indexer_params): numbers derived by hand from the
DeepSeek-V3.2-Exp tech report (DeepSeek_V3_2.pdf, Sec. 2.1) and its inference/model.py,
and from GLM-5's config.json (tests/data/hf_configs/glm-5.json)."""

import jax
import numpy as np
import pytest

from dse.catalogue import lookup
from dse.catalogue.model import stack
from dse.formulas import params
from dse.formulas.attention import attention_costs, indexer_costs, kv_bytes_per_token
from dse.formulas.transformer import fp8_rates, layer_parts
from dse.formulas.types import Options, Parallel, Pass, Precision, Rates

BF16 = Precision(16.0, 16.0, 16.0)  # weights, KV cache, activations


def spec(name):
    return lookup.load_model(name).spec()


def jit64(fn, *args):
    """``fn(*args)`` under ``jax.jit`` in float64, as numpy."""
    with jax.enable_x64(True):
        return jax.tree_util.tree_map(np.asarray, jax.jit(fn)(*args))


def _attention(name, ps: Pass, x, sparse, tp=8.0):
    """(main attention FLOPs, bytes, indexer scoring FLOPs, bytes) of one layer on one
    of tp devices at pass variable x (a decode step: the context, new token included)."""
    def fn(m):
        main = attention_costs(m, params.shard(m, tp), BF16, ps, 0.0, 1.0, True, sparse)
        costs = [f(x) for f in main.varying["attention"]]
        score = indexer_costs(m, BF16, ps).varying["attention"][0](x)
        return (sum(c.flops for c in costs), sum(c.bytes for c in costs), score.flops,
                score.bytes)

    return tuple(float(v) for v in jit64(fn, spec(name)))


def test_indexer_parameters_of_deepseek_v3_2_by_hand():
    """inference/model.py, class Indexer, with config_671B_v3.2.json (q_lora_rank 1536,
    dim 7168, index_n_heads 64, index_head_dim 128): wq_b 1536 x (64 x 128) = 12,582,912,
    wk 7168 x 128 = 917,504, k_norm LayerNorm(128) weight and bias 256, weights_proj
    7168 x 64 = 458,752 (no biases): 13,959,424 per layer, as the card's notes say; the
    whole model is DeepSeek-V3's count plus 61 of them."""
    expected = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert expected == 13_959_424
    assert jit64(params.indexer_params, spec("deepseek-v3.2")) == expected
    assert jit64(params.indexer_params, spec("deepseek-v3")) == 0.0
    v3, v32 = jit64(params.total_params, stack([spec("deepseek-v3"), spec("deepseek-v3.2")]))
    assert v32 - v3 == 61 * 13_959_424


def test_glm_5_parameters_by_hand_against_the_published_744b():
    """GLM-5 (config.json): D 6144, 64 heads, q_lora 2048, kv_lora 512, qk 192 + 64, v 256;
    per layer MLA q 6144 x 2048 + 2048 (norm) + 2048 x 64 x 256 = 46,139,392, kv
    6144 x 576 + 512 (norm) + 512 x 64 x (192 + 256) = 18,219,520, o 64 x 256 x 6144 =
    100,663,296; indexer 2048 x 32 x 128 + 6144 x 128 + 256 + 6144 x 32 = 9,371,904; two
    RMSNorms 12,288. Dense MLP 3 x 6144 x 12288 = 226,492,416 (3 layers); MoE 257 experts x
    3 x 6144 x 2048 + router 6144 x 256 = 9,702,998,016 (75 layers); embedding and untied
    head 2 x 154880 x 6144, final norm 6144: 743,911,199,232, the technical report's
    '744B' (arXiv 2602.15763; MTP layer not counted). Active, top-8 + shared, neither
    table counted as for GLM-4.5's 32B: 39,881,544,192 ('40B')."""
    attention = 46_139_392 + 18_219_520 + 100_663_296 + 9_371_904 + 12_288
    dense = attention + 226_492_416
    moe = attention + 257 * 3 * 6144 * 2048 + 6144 * 256
    total = 3 * dense + 75 * moe + 2 * 154_880 * 6144 + 6144
    assert total == 743_911_199_232
    active = 3 * dense + 75 * (attention + 9 * 3 * 6144 * 2048 + 6144 * 256) + 6144
    assert active == 39_881_544_192
    assert jit64(params.total_params, spec("glm-5")) == total
    assert jit64(params.active_params, spec("glm-5")) - 2 * 154_880 * 6144 == active
    assert abs(total - 744e9) <= 0.5e9 and abs(active - 40e9) <= 0.5e9


def test_decode_within_the_top_k_is_dense_mla():
    """At a context of 1024 <= index_topk 2048 every key is selected: the main attention
    of a decode step costs what dense MLA's does (GLM-5, tp 8: 8 heads per device)."""
    ps = Pass("decode", 1.0, 1.0, 1024.0, 1024.0)
    sparse = _attention("glm-5", ps, 1024.0, True)
    dense = _attention("glm-5", ps, 1024.0, False)
    assert sparse[:2] == dense[:2]
    # 2 x 8 heads x 1024 pairs x (576 + 512): absorbed scores over the latent, values
    assert sparse[0] == 2 * 8 * 1024 * (576 + 512)


def test_decode_beyond_the_top_k_reads_2048_latents_and_every_index_key():
    """A decode step at context 8192 (GLM-5, tp 8, 16-bit cache and activations):
    - main attention over the 2048 selected latents: 2 x 8 x 2048 x (576 + 512) =
      35,651,584 FLOPs; the query and output, 8 x 1088 x 2 B = 17,408, and 2048 latents
      of 576 x 2 B = 2,359,296 B (dense MLA: all 8192, four times that);
    - the indexer scores all 8192 keys with its 32 heads of 128: 2 x 32 x 128 x 8192 =
      67,108,864 FLOPs, reading its query and head weights, 32 x (128 + 4) = 4,224 B, and
      8192 index keys of 128 + 4 B = 1,081,344 B."""
    ps = Pass("decode", 1.0, 1.0, 8192.0, 8192.0)
    flops, bytes_, index_flops, index_bytes = _attention("glm-5", ps, 8192.0, True)
    assert flops == 35_651_584
    assert bytes_ == 17_408 + 2_359_296
    assert index_flops == 67_108_864
    assert index_bytes == 4_224 + 1_081_344
    dense_flops, dense_bytes, _, _ = _attention("glm-5", ps, 8192.0, False)
    assert dense_flops == 4 * flops and dense_bytes == 17_408 + 4 * 2_359_296


def test_prefill_within_the_top_k_is_dense_mha_and_the_indexer_only_writes_keys():
    """A 1024-token prompt fits in the top-k: SGLang runs dense MHA prefill (dse's MLA
    prefill, unchanged) and its indexer only projects and stores the keys
    (_forward_cuda_k_only): wk 2 x 1024 x 6144 x 128 FLOPs, no scoring."""
    ps = Pass("prefill", 1.0, 1024.0, 0.0, 0.0)
    sparse = _attention("glm-5", ps, 0.0, True)
    dense = _attention("glm-5", ps, 0.0, False)
    assert sparse[:2] == dense[:2]
    assert sparse[2:] == (0.0, 0.0)

    def projections(m):
        return tuple(c.flops for c in indexer_costs(m, BF16, ps).fixed["qkv_proj"])

    assert tuple(jit64(projections, spec("glm-5"))) == (0.0, 2 * 1024 * 6144 * 128, 0.0)


def test_prefill_beyond_the_top_k_runs_absorbed_sparse_attention():
    """An 8192-token prompt (GLM-5, tp 8): query i attends to min(i, 2048) latents,
    2048 x 2049 / 2 + 6144 x 2048 = 14,681,088 pairs of 2 x 8 x (576 + 512) FLOPs, and
    reads the 8192 cached latents once; the indexer scores the 8192 x 8193 / 2 causal
    pairs, 2 x 32 x 128 FLOPs each."""
    ps = Pass("prefill", 1.0, 8192.0, 0.0, 0.0)
    flops, bytes_, index_flops, index_bytes = _attention("glm-5", ps, 0.0, True)
    pairs = 2048 * 2049 // 2 + 6144 * 2048
    assert pairs == 14_681_088
    assert flops == 2 * 8 * pairs * (576 + 512)
    assert bytes_ == 8192 * 8 * 1088 * 2 + 8192 * 576 * 2
    assert index_flops == 2 * 32 * 128 * (8192 * 8193 // 2) == 274_911_461_376
    assert index_bytes == 8192 * 32 * 132 + 8192 * 132


@pytest.mark.parametrize("tp", [1.0, 8.0])
def test_kv_bytes_per_token_keep_the_index_key(tp):
    """Per token and layer, 16-bit latent, any tp (both replicated): GLM-5 and
    DeepSeek-V3.2 (512 + 64) x 2 + 128 + 4 = 1,284 B; DeepSeek-V3, no indexer, 1,152 B."""
    def fn(m):
        return kv_bytes_per_token(m, params.shard(m, tp), 16.0, True)

    assert jit64(fn, spec("glm-5")) == (512 + 64) * 2 + 128 + 4 == 1_284
    assert jit64(fn, spec("deepseek-v3.2")) == 1_284
    assert jit64(fn, spec("deepseek-v3")) == 1_152


def test_the_indexer_scores_at_the_fp8_rate():
    """Tensor-core peaks double per halving of the width: with a 16-bit cache the
    attention unit runs at the 16-bit rate, the FP8 indexer at twice it; with an FP8
    cache both at the FP8 rate."""
    rates = Rates(1e15, 1e15, 1e13, 3e12, 4e11, 1e-6, 5e10, 3e-6, 8.0)
    assert fp8_rates(rates, BF16).attention_flops_per_s == 2e15
    assert fp8_rates(rates, Precision(8.0, 8.0, 8.0)).attention_flops_per_s == 1e15


@pytest.mark.parametrize("ps", [Pass("decode", 4.0, 1.0, 1025.0, 9000.0),
                                Pass("prefill", 2.0, 4096.0, 0.0, 3.0, 4.0),
                                Pass("verify", 4.0, 3.0, 5000.0, 5000.0)])
def test_a_model_without_an_indexer_costs_the_same_with_the_switch_on(ps):
    """DeepSeek-V3 in a study that also holds a DSA model (the "sparse" switch on): every
    part of its layers, bit for bit, as without the switch."""
    rates = Rates(1e15, 1e15, 1e13, 3e12, 4e11, 1e-6, 5e10, 3e-6, 8.0)
    par, o = Parallel(8.0, 1.0, 1.0, 1.0), Options(1.0, 0.0, 1.0)

    def fn(m, features):
        s = params.shard(m, 8.0)
        return layer_parts(m, s, BF16, ps, rates, par, o, features)

    m = spec("deepseek-v3")
    plain = jit64(lambda m: fn(m, frozenset({"moe", "mla"})), m)
    switched = jit64(lambda m: fn(m, frozenset({"moe", "mla", "sparse"})), m)
    for kind in (0, 1):
        assert set(plain[kind]) == set(switched[kind])
        for name, part in plain[kind].items():
            for a, b in zip(part, switched[kind][name]):
                assert np.array_equal(a, b), (kind, name)


def test_a_pipeline_prices_the_indexer_too():
    """Pipeline mode (cross-machine layer split) runs the layer parts of inference; its
    layer switches dropped "sparse", so DeepSeek-V3.2 cost what V3 does there. With the
    indexer's projections, scoring and key cache its decode step is slower than V3's
    (same weights otherwise: the two cards differ only by DSA)."""
    from pathlib import Path

    from dse.run.sweep import sweep
    from dse.study import parse_study

    root = Path(__file__).resolve().parents[2]
    text = (root / "studies" / "pipeline-apple-lan.toml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("path")]
    text = "\n".join('model = ["deepseek-v3", "deepseek-v3.2"]' if ln.startswith("model =")
                     else ln for ln in lines)
    ds = sweep(parse_study(text, "pl.toml"), progress=False)
    v3, v32 = (ds.tpot_s.sel(model=m).values for m in ("deepseek-v3", "deepseek-v3.2"))
    assert (v32 > v3).all()

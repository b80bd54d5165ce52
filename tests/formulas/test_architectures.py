"""Architectures as they are built (2025-2026 open-weight models): Hugging Face configs
read as published, parameter counts against the published totals and active counts, and
cache bytes per token derived by hand for one GQA, one MLA, one sliding-window and one
hybrid linear-attention model."""

import json
from pathlib import Path

import numpy as np
import pytest

from dse.catalogue import lookup as catalogue
from dse.catalogue.model import card_from_hf_config, stack
from dse.formulas.params import active_params, total_params

from ..helpers import sweep_text

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
NEW = ["deepseek-r1", "kimi-k2", "minimax-m2", "qwen3-32b", "qwen3-next-80b-a3b",
       "qwen3.5-397b-a17b", "gpt-oss-20b", "gpt-oss-120b", "llama-4-scout",
       "llama-4-maverick", "glm-4.5", "glm-4.5-air", "deepseek-v3.2", "glm-5",
       # issue 40's 2026 catalogue, from aiconfigurator-core 0.12.0's model_configs
       "qwen3-0.6b", "qwen3-1.7b", "qwen3-coder-480b-a35b", "qwen3-vl-2b", "qwen3-vl-4b",
       "qwen3-vl-8b", "qwen3-vl-32b", "qwen3-vl-30b-a3b", "qwen3-vl-235b-a22b",
       "qwen3.5-122b-a10b", "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.6-27b",
       "qwen3.6-35b-a3b", "glm-5.1", "kimi-k2.6", "kimi-k2.7-code", "minimax-m2.7",
       # Mamba-2 hybrids (dse.catalogue.model._hf_hybrid)
       "nemotron-3-nano-30b-a3b", "nemotron-h-56b",
       # releases of an architecture already carded, each with its own config and counts
       "deepseek-v3.1", "kimi-k2.5", "minimax-m2.5", "glm-4.6", "qwen3-coder-next",
       # DSA with IndexShare (index_layer_fraction)
       "glm-5.2",
       # configs verified against the Hub's etag or file size (the cards' notes)
       "deepseek-r1-distill-llama-8b", "deepseek-r1-distill-qwen-32b", "olmoe-1b-7b",
       "olmo-2-13b", "phi-3-medium-4k", "falcon3-7b", "qwen2.5-3b", "qwen3-14b", "gpt2",
       "gpt2-large", "gpt2-xl", "mistral-7b-v0.3", "qwen3-4b", "gemma-2-2b", "gemma-2-27b",
       "gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gpt2-medium", "phi-3.5-mini",
       "qwen1.5-moe-a2.7b", "qwen2.5-coder-32b", "deepseek-r1-distill-qwen-7b",
       "deepseek-r1-distill-qwen-1.5b", "deepseek-r1-distill-qwen-14b",
       # LatentMoE hybrids
       "nemotron-3-super-120b-a12b", "nemotron-3-ultra-550b-a55b",
       # full-attention layers of shapes of their own (global_*)
       "gemma-4-26b-a4b", "gemma-4-31b", "mimo-v2-flash",
       # a shape per layer (Llama-Nemotron NAS block_configs)
       "llama-3.3-nemotron-super-49b"]
ARCHITECTURE = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                "vocab_size", "n_experts", "top_k", "d_ff_expert", "n_shared_experts",
                "n_dense_layers", "moe_layer_step", "kv_lora_rank", "q_lora_rank",
                "sliding_window", "sliding_window_layers", "linear_layers",
                "linear_value_heads", "attention_sinks", "attention_output_gate",
                "expert_bias", "qk_norm", "qkv_bias", "tied_embeddings", "index_topk",
                "index_n_heads", "index_head_dim", "mlp_free_layers", "linear_key_heads",
                "linear_key_head_dim", "linear_value_head_dim", "linear_state_bits",
                "index_layer_fraction", "moe_latent_size", "global_head_dim",
                "global_kv_heads", "global_kv_equal", "norms_per_layer", "mlp_only_layers")


@pytest.mark.parametrize("name", NEW)
def test_the_config_json_reads_as_the_catalogue_card(name):
    """The published config.json (tests/data/hf_configs, copies named in each card's
    notes) read by the HF reader gives the catalogue card's architecture."""
    card = catalogue.load_model(name)
    read = card_from_hf_config(json.loads((CONFIGS / f"{name}.json").read_text()), "x", name)
    for key in ARCHITECTURE:
        assert read.fields.get(key) == card.fields.get(key), key
    assert read.spec() == card.spec()


def _allowed(published: float) -> float:
    """1%, or half a unit of the last digit a rounded label quotes ("17B": 0.5B), which
    is all a label of one or two significant figures says."""
    digits = str(int(published)).rstrip("0")
    unit = 10 ** (len(str(int(published))) - len(digits))
    return max(0.01 * published, unit / 2)


def _counts(names):
    cards = [catalogue.load_model(n) for n in names]
    table = stack([c.spec() for c in cards])
    return cards, np.asarray(total_params(table)), np.asarray(active_params(table))


def test_totals_of_the_new_models_within_one_percent_of_the_published():
    """Each card's published_params and its source (published_params_source); parts the
    published total includes but dse does not model (Llama 4's and Qwen3.5's vision
    encoders) are counted from the checkpoint in published_params_other."""
    cards, totals, _ = _counts(NEW)
    for card, n in zip(cards, totals):
        f = card.fields
        assert f["published_params_source"]
        modelled = f["published_params"] - f.get("published_params_other", 0)
        assert abs(n - modelled) <= 0.01 * f["published_params"], (card.name, n, modelled)


def test_exact_counts_where_the_checkpoint_gives_them():
    """Exact sums of checkpoint tensors (HF safetensors / GGUF general.parameter_count):
    gpt-oss-120b 116,829,156,672 and -20b 20,914,757,184 (the model card's 116.83B and
    20.91B), Qwen3-32B 32,762,123,264, Kimi-K2 1,026,408,232,448, MiniMax-M2
    228,689,764,864, DeepSeek-R1-Distill-Llama-8B 8,030,261,248 and -Qwen-32B
    32,763,876,352 (the Hub API's safetensors totals); GPT-2 124,439,808, -large
    774,030,080, -xl 1,557,611,200, -medium 354,823,168, Qwen3-4B 4,022,468,096, Gemma 2 2B
    2,614,341,888 and 27B 27,227,128,320, Gemma 3 1B 999,885,952 and Qwen2.5-Coder-32B
    32,763,876,352 (keras-hub presets' params);
    Qwen3-Next-80B-A3B 81,324,862,720 less its 1,650,471,424-parameter
    MTP module (mtp.* tensors); Llama-4-Maverick 401,583,781,376 less the 871,932,416 of
    its vision encoder."""
    exact = {"gpt-oss-120b": 116_829_156_672, "gpt-oss-20b": 20_914_757_184,
             "qwen3-32b": 32_762_123_264, "kimi-k2": 1_026_408_232_448,
             "minimax-m2": 228_689_764_864,
             "deepseek-r1-distill-llama-8b": 8_030_261_248,  # the Hub API's safetensors total
             "deepseek-r1-distill-qwen-32b": 32_763_876_352,
             # keras-hub presets' parameter counts
             "gpt2": 124_439_808, "gpt2-large": 774_030_080, "gpt2-xl": 1_557_611_200,
             "qwen3-4b": 4_022_468_096, "gemma-2-2b": 2_614_341_888,
             "gemma-2-27b": 27_227_128_320, "gemma-3-1b": 999_885_952,
             "gpt2-medium": 354_823_168, "qwen2.5-coder-32b": 32_763_876_352,
             "qwen3-next-80b-a3b": 81_324_862_720 - 1_650_471_424,
             "llama-4-maverick": 401_583_781_376 - 871_932_416}
    _, totals, _ = _counts(list(exact))
    for (name, n_exact), n in zip(exact.items(), totals):
        assert n == pytest.approx(n_exact, rel=1e-5), name  # MiniMax q/k norms are per layer


def test_gemma_4_31b_by_hand():
    """Gemma 4 31B from its config (D 5376, vocab 262144 tied, 60 layers, 50 windowed and
    10 global): embedding 262144 x 5376 = 1,409,286,144; a windowed layer's attention, q
    and o 5376 x 32 x 256 each, k and v 16 heads of 256 (the same size together), 3 x
    44,040,192 + q/k norms 2 x 256 = 132,121,088; a global layer's q and o 5376 x 32 x 512 each, one K of 4 heads of 512
    serving as V (5376 x 2048) + norms 2 x 512 = 187,171,840; the GeGLU MLP 3 x 5376 x
    21504 = 346,816,512; 4 norms a layer and the final one: 30,697,345,280 (the card's
    '30.7B')."""
    d = 5376
    windowed = 3 * d * 32 * 256 + 2 * 256
    full = 2 * d * 32 * 512 + d * 4 * 512 + 2 * 512
    mlp = 3 * d * 21504
    by_hand = 262144 * d + 50 * windowed + 10 * full + 60 * (mlp + 4 * d) + d
    assert (windowed, full, by_hand) == (132_121_088, 187_171_840, 30_697_345_280)
    _, totals, _ = _counts(["gemma-4-31b"])
    assert totals[0] == pytest.approx(by_hand, rel=1e-7)  # float32 sums outside x64


def test_mimo_v2_flash_attention_by_hand():
    """MiMo-V2-Flash's attention layers (D 4096, 64 q heads, keys of 192, values of 128,
    sink logits on the windowed layers, counted on all): a full layer's q 4096 x 64 x 192,
    k 4096 x 4 x 192, v 4096 x 4 x 128, o 64 x 128 x 4096 = 89,128,960, a windowed one's
    with 8 KV heads 94,371,840, + 64 sinks each; 39 windowed and 9 full layers (the
    config's hybrid_layer_pattern: full at 0, 5, 11, ..., 47)."""
    from dse.formulas.params import attention_params, whole
    d = 4096
    full = d * 64 * 192 + d * 4 * (192 + 128) + 64 * 128 * d + 64
    windowed = d * 64 * 192 + d * 8 * (192 + 128) + 64 * 128 * d + 64
    assert (full - 64, windowed - 64) == (89_128_960, 94_371_840)
    spec = catalogue.load_model("mimo-v2-flash").spec()
    assert float(attention_params(spec, whole(spec))) == pytest.approx(
        (39 * windowed + 9 * full) / 48, rel=1e-7)


def test_active_counts_under_each_sources_convention():
    """Active parameters as each source counts them (published_active_convention): all a
    token touches, or without the input embedding (gpt-oss card: 'unembedding parameters
    are counted towards active, but not embeddings'; DeepSeek's 36.6B 'including 0.9B for
    the output head'), or without either table."""
    moe = [n for n in NEW if catalogue.load_model(n).is_moe]  # dense: active = total
    cards, _, actives = _counts(moe)
    for card, n in zip(cards, actives):
        f = card.fields
        table = f["vocab_size"] * f["d_model"]
        untied = 0 if f.get("tied_embeddings") else table
        n = {"all": n, "no_input_embedding": n - table,
             "no_embeddings": n - table - untied}[f["published_active_convention"]]
        published = f["published_active_params"]
        assert abs(n - published) <= _allowed(published), (card.name, n, published)


def test_llama_nemotron_super_by_hand():
    """Llama-3.3-Nemotron-Super-49B from its 80 block_configs (tests/data/hf_configs; HF
    modeling_decilm.py): D 8192, vocab 128256 untied. An attention block's q and o 8192 x
    64 x 128 each, k and v 8 KV heads of 128 (n_heads_in_group 8): 150,994,944; a block's
    SwiGLU MLP 3 x 8192 x its width, int(2 ffn_mult 8192 / 3) rounded up to 256; an
    RMSNorm before each attention (49) and each MLP (80) and the final one: 130 x 8192.
    Sum 49,867,145,216 (the Hub's '49.9B'). dse's layer has one width, the 80 MLPs' mean
    1,642,496 / 80 = 20,531.2 rounded to 20,544 (a multiple of the 64 heads), so its count
    is 3 x 8192 x (80 x 20,544 - 1,642,496) = 25,165,824 more (+0.05%); the mean layer
    carries 80 / 49 MLPs (and as many tensor-parallel all-reduces) and 129 / 49 norms."""
    from dse.formulas.params import dense_mlp_share, layer_norms

    d = 8192
    blocks = json.loads((CONFIGS / "llama-3.3-nemotron-super-49b.json").read_text())[
        "block_configs"]
    attention = sum(1 for b in blocks if not b["attention"]["no_op"])
    widths = [-(-int(2 * b["ffn"]["ffn_mult"] * d / 3) // 256) * 256 for b in blocks]
    per_attention = 2 * d * 64 * 128 + 2 * d * 8 * 128
    by_hand = (2 * 128256 * d + attention * per_attention + 3 * d * sum(widths)
               + (attention + len(widths) + 1) * d)
    assert (per_attention, by_hand) == (150_994_944, 49_867_145_216)
    _, totals, _ = _counts(["llama-3.3-nemotron-super-49b"])
    assert totals[0] == pytest.approx(by_hand, rel=1e-3)
    assert totals[0] == pytest.approx(by_hand + 3 * d * (80 * 20544 - sum(widths)), rel=1e-7)
    spec = catalogue.load_model("llama-3.3-nemotron-super-49b").spec()
    assert float(dense_mlp_share(spec)) * 49 == pytest.approx(80)
    assert float(layer_norms(spec)) * 49 == pytest.approx(129)


@pytest.mark.parametrize("name, embedding, non_embedding", [
    ("nemotron-4-340b", 9.4e9, 331.6e9),  # Nemotron-4 340B report (arXiv 2406.11704), Sec. 2
])
def test_hand_written_cards_against_the_papers_counts(name, embedding, non_embedding):
    """A dense card written from its paper (no config.json published): total within 1%
    of the published label, active = total, and the paper's embedding / non-embedding
    split."""
    cards, totals, actives = _counts([name])
    f, n, a = cards[0].fields, totals[0], actives[0]
    assert f["published_params_source"]
    assert abs(n - f["published_params"]) <= 0.01 * f["published_params"], (name, n)
    assert a == n
    tables = (2 - f.get("tied_embeddings", False)) * f["vocab_size"] * f["d_model"]
    assert abs(tables - embedding) <= 0.05e9 and abs(n - tables - non_embedding) <= 0.05e9


KV_MODELS = ("qwen3-32b", "deepseek-r1", "gpt-oss-120b", "qwen3-next-80b-a3b", "glm-5",
             "glm-5.2", "gemma-4-31b", "mimo-v2-flash", "llama-3.3-nemotron-super-49b")


@pytest.fixture(scope="module")
def kv_sweep():
    """One sweep: the nine models at 62,000 and 126,000 prompt tokens, 16-bit cache."""
    return sweep_text(f"""
[study]
dtype = "float64"
[axes]
model = {list(KV_MODELS)!r}
hardware = "h200"
batch = 1
output_len = 2
kv_bits = 16
input_len = [62000, 126000]
""".replace("'", '"'))


def _kv_per_token(ds, model):
    """KV cache bytes per cached token, from two context lengths (a constant recurrent
    state cancels), and the bytes at the shorter one."""
    kv = ds["kv_cache_bytes"].sel(model=model)
    short, long_ = kv.sel(input_len=62000).item(), kv.sel(input_len=126000).item()
    return (long_ - short) / 64_000, short


def test_kv_bytes_per_token_by_hand(kv_sweep):
    """Per token, 16-bit cache, one device:
    - GQA, Qwen3-32B: 64 layers x 2 (K, V) x 8 kv heads x 128 x 2 B = 262,144 B;
    - MLA, DeepSeek-R1: 61 layers x (512 latent + 64 rope) x 2 B = 70,272 B;
    - sliding window, gpt-oss-120b: only the 18 full-attention layers grow past the
      128-token window: 18 x 2 x 8 x 64 x 2 B = 36,864 B (the 18 windowed layers hold
      128 tokens each: 18 x 128 x 2,048 B = 4,718,592 B);
    - hybrid, Qwen3-Next-80B-A3B: only the 12 full-attention layers: 12 x 2 x 2 x 256 x
      2 B = 24,576 B; its 36 Gated DeltaNet layers keep a constant state each, 32 x 128 x
      128 x 2 B plus the convolution's 3 x 8192 x 2 B (vLLM's gated_delta_net_state_shape),
      36 x 1,097,728 B = 39,518,208 B per sequence;
    - MLA with DeepSeek Sparse Attention, GLM-5: 78 layers x ((512 + 64) x 2 B latent +
      128 B FP8 index key + its 4 B scale) = 78 x 1,284 B = 100,152 B: the top-k
      selection saves reads, not cache;
    - the same with IndexShare, GLM-5.2: the latent on all 78 layers, the index key only
      on the 21 that run an indexer: 78 x 1,152 + 21 x 132 = 92,628 B;
    - global layers of their own shape beside windowed ones, Gemma 4 31B: only the 10
      full-attention layers grow past the 1,024-token window, each caching 4 KV heads of
      512 whose keys serve as values, 10 x 4 x 512 x 2 B = 40,960 B; the 50 windowed
      layers (16 KV heads of 256, K and V) hold 1,024 tokens each: 50 x 1,024 x 16,384 B;
    - keys and values of their own sizes, MiMo-V2-Flash: the 9 full-attention layers
      (0, 5, 11, ..., 47) cache 4 KV heads of a 192 key and a 128 value, 9 x 4 x 320 x 2 B
      = 23,040 B; the 39 windowed layers (8 KV heads) hold 128 tokens each: 39 x 128 x
      5,120 B;
    - attention-free blocks, Llama-3.3-Nemotron-Super-49B: only its 49 attention blocks
      of 80 cache (block_configs: 31 are attention no_op), 8 KV heads of 128 each
      (n_heads_in_group 8 of 64 heads): 49 x 2 x 8 x 128 x 2 B = 200,704 B."""
    assert _kv_per_token(kv_sweep, "qwen3-32b")[0] == pytest.approx(262_144, rel=1e-9)
    assert _kv_per_token(kv_sweep, "deepseek-r1")[0] == pytest.approx(70_272, rel=1e-9)
    per_token, short = _kv_per_token(kv_sweep, "gpt-oss-120b")
    assert per_token == pytest.approx(36_864, rel=1e-9)
    assert short == pytest.approx(62_002 * 36_864 + 18 * 128 * 2_048, rel=1e-9)
    per_token, short = _kv_per_token(kv_sweep, "qwen3-next-80b-a3b")
    assert per_token == pytest.approx(24_576, rel=1e-9)
    assert short == pytest.approx(62_002 * 24_576 + 36 * 1_097_728, rel=1e-9)
    assert _kv_per_token(kv_sweep, "glm-5")[0] == pytest.approx(100_152, rel=1e-9)
    assert _kv_per_token(kv_sweep, "glm-5.2")[0] == pytest.approx(92_628, rel=1e-9)
    per_token, short = _kv_per_token(kv_sweep, "gemma-4-31b")
    assert per_token == pytest.approx(40_960, rel=1e-9)
    assert short == pytest.approx(62_002 * 40_960 + 50 * 1_024 * 16_384, rel=1e-9)
    per_token, short = _kv_per_token(kv_sweep, "mimo-v2-flash")
    assert per_token == pytest.approx(23_040, rel=1e-9)
    assert short == pytest.approx(62_002 * 23_040 + 39 * 128 * 5_120, rel=1e-9)
    assert _kv_per_token(kv_sweep, "llama-3.3-nemotron-super-49b")[0] == pytest.approx(
        49 * 2 * 8 * 128 * 2, rel=1e-9)
    assert 49 * 2 * 8 * 128 * 2 == 200_704


def test_a_hybrid_decode_step_reads_a_constant_state(kv_sweep):
    """Qwen3-Next-80B-A3B: from 62k to 126k tokens of context its cache grows only by the
    12 attention layers' K and V, and its decode step slows only by reading them: the
    extra time per step is 64,000 x 24,576 bytes at the device's memory bandwidth (the
    calibration-free roofline), whereas Qwen3-32B's grows by 64,000 x 262,144."""
    hbm = 4.8e12  # H200, catalogue
    for model, per_token in (("qwen3-next-80b-a3b", 24_576), ("qwen3-32b", 262_144)):
        tpot = kv_sweep["tpot_s"].sel(model=model)
        grown = tpot.sel(input_len=126000).item() - tpot.sel(input_len=62000).item()
        assert grown == pytest.approx(64_000 * per_token / hbm, rel=0.02), model

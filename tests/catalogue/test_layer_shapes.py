"""Layers of more than one shape in one Hugging Face config (dse.catalogue.model): MiMo-V2-
Flash's sliding-window and full layers of their own KV heads, Gemma 4's global layers and
its MoE block, moe_layer_freq lists. What dse reads is checked against the configs' own
numbers; what it cannot read is refused by name."""

import json
from pathlib import Path

import pytest

from dse.catalogue.model import card_from_hf_config
from dse.errors import InputError

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def _config(name, **changes):
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    config.update(changes)
    return config


def test_mimo_v2_flash_reads_its_two_kinds_of_layers():
    """hybrid_layer_pattern: 39 ones (sliding window) of 48; the windowed layers take
    swa_num_key_value_heads 8, the full ones num_key_value_heads 4 (global_kv_heads);
    values of 128 beside keys of 192; moe_layer_freq [0, 1, ...]: one dense layer."""
    f = card_from_hf_config(_config("mimo-v2-flash"), "x", "x").fields
    assert (f["n_kv_heads"], f["global_kv_heads"], f["head_dim"], f["v_head_dim"]) == (
        8, 4, 192, 128)
    assert f["sliding_window"] == 128 and f["sliding_window_layers"] == 39 / 48
    assert f["n_dense_layers"] == 1 and f["attention_sinks"]


@pytest.mark.parametrize("changes, key", [
    (dict(swa_num_attention_heads=48), "swa_num_attention_heads"),  # q heads per kind
    (dict(swa_head_dim=128), "swa_head_dim"),
    (dict(hybrid_layer_pattern=[0, 1, 2] * 16), "hybrid_layer_pattern"),
    (dict(hybrid_layer_pattern=[0, 1] * 10), "hybrid_layer_pattern"),  # not one per layer
    (dict(moe_layer_freq=[1, 0] * 24), "moe_layer_freq"),  # dense layers not first
])
def test_mimo_v2_shapes_dse_does_not_model_are_refused(changes, key):
    with pytest.raises(InputError, match=key):
        card_from_hf_config(_config("mimo-v2-flash", **changes), "x", "x")


def test_gemma_4_reads_its_global_layers_and_moe_block():
    """Gemma 4 26B-A4B: global layers of head size 512 and 2 KV heads whose keys serve as
    values; the dense MLP beside the 128 experts of 704 (2112 = 3 x 704) as 3 shared
    experts; 5 of 30 layers global (every sixth)."""
    f = card_from_hf_config(_config("gemma-4-26b-a4b"), "x", "x").fields
    assert (f["global_head_dim"], f["global_kv_heads"], f["global_kv_equal"]) == (512, 2, True)
    assert (f["n_experts"], f["top_k"], f["d_ff_expert"], f["n_shared_experts"]) == (
        128, 8, 704, 3)
    assert f["sliding_window_layers"] == 25 / 30 and f["tied_embeddings"]


@pytest.mark.parametrize("changes, key", [
    (dict(hidden_size_per_layer_input=256), "hidden_size_per_layer_input"),  # E2B's PLE
    (dict(num_kv_shared_layers=20), "num_kv_shared_layers"),
    (dict(use_double_wide_mlp=True), "use_double_wide_mlp"),
    (dict(intermediate_size=2000), "enable_moe_block"),  # not a whole number of experts
])
def test_gemma_4_shapes_dse_does_not_model_are_refused(changes, key):
    config = _config("gemma-4-26b-a4b")
    config["text_config"] = dict(config["text_config"], **changes)
    with pytest.raises(InputError, match=key):
        card_from_hf_config(config, "x", "x")


def test_global_shapes_need_windowed_layers_beside_them():
    """A card with global_* keys and no sliding window is refused: every layer would be
    'global', and the keys would price nothing the card says."""
    from dse.catalogue.model import ModelCard
    fields = dict(name="x", n_layers=2, d_model=64, n_heads=4, d_ff=128, vocab_size=100,
                  max_seq_len=256, global_head_dim=32)
    with pytest.raises(InputError, match="global_head_dim"):
        ModelCard.from_mapping(fields, "x.toml")


def test_gemma_3_multimodal_configs_read_with_transformers_defaults():
    """Google's multimodal Gemma 3 configs (here mlx-community/gemma-3-4b-it-bf16's copy of
    google/gemma-3-4b-it's, as its Hub page was stored: tests/data/hf_configs/
    gemma-3-4b-it-multimodal.json) give only the text model's width, MLP, layers and
    window: heads, KV heads, head_dim, vocab and positions are transformers'
    Gemma3TextConfig defaults (8, 4, 256, 262208, 131072; embeddings tied). So read, it
    is the card written from a text-only config that states them."""
    from dse.catalogue import lookup

    config = _config("gemma-3-4b-it-multimodal")
    assert "num_attention_heads" not in config["text_config"]
    card = card_from_hf_config(config, "x", "x")
    assert card.spec() == lookup.load_model("gemma-3-4b").spec()


def _nemotron_super(block=None, part=None, **changes):
    """nvidia/Llama-3_3-Nemotron-Super-49B-v1's config, block 0's ``part`` updated."""
    config = _config("llama-3.3-nemotron-super-49b")
    if part:
        config["block_configs"][block][part].update(changes)
    return config


def test_llama_nemotron_blocks_read_as_attention_layers_carrying_every_mlp():
    """The 80 block_configs of Llama-3.3-Nemotron-Super-49B: 49 with attention
    (n_heads_in_group 8: 64 / 8 = 8 KV heads), 31 attention-free (no_op), every one with an
    MLP of width int(2 ffn_mult 8192 / 3) rounded up to 256 (HF modeling_decilm.py
    _ffn_mult_to_intermediate_size): 1,642,496 summed. dse's 49 layers carry the 80 MLPs
    (31 mlp_only_layers) at the mean width 20,531.2, rounded to a multiple of the 64
    heads: 20,544."""
    config = _config("llama-3.3-nemotron-super-49b")
    blocks = config["block_configs"]
    attention = [b for b in blocks if not b["attention"]["no_op"]]
    widths = [-(-int(2 * b["ffn"]["ffn_mult"] * 8192 / 3) // 256) * 256 for b in blocks]
    assert (len(blocks), len(attention), sum(widths)) == (80, 49, 1_642_496)
    f = card_from_hf_config(config, "x", "x").fields
    assert (f["n_layers"], f["n_kv_heads"], f["mlp_only_layers"], f["d_ff"]) == (49, 8, 31,
                                                                                 20544)
    assert abs(f["d_ff"] - sum(widths) / 80) < 64 / 2 and f["d_ff"] % 64 == 0
    assert not f.get("mlp_free_layers")


@pytest.mark.parametrize("block, part, changes, key", [
    # issue 40: what DeciLM's AttentionConfig / FFNConfig can set beyond the shapes read
    (0, "attention", dict(replace_with_linear=True), "block_configs[0].attention.replace_with_linear"),
    (1, "ffn", dict(replace_with_linear=True), "block_configs[1].ffn.replace_with_linear"),
    (0, "attention", dict(window_length=4096), "block_configs[0].attention.window_length"),
    (0, "attention", dict(num_sink_tokens=4), "block_configs[0].attention.num_sink_tokens"),
    (2, "ffn", dict(sparsify=["x"]), "block_configs[2].ffn.sparsify"),
    (0, "attention", dict(mamba={"state_dim": 128}), "block_configs[0].attention.mamba"),
    (1, "attention", dict(n_heads_in_group=4), "block_configs[1].attention.n_heads_in_group"),
    (0, "attention", dict(n_heads_in_group=5), "block_configs[0].attention.n_heads_in_group"),
    (0, "ffn", dict(ffn_mult=None), "block_configs[0].ffn.ffn_mult"),
])
def test_llama_nemotron_block_keys_dse_does_not_model_are_refused(block, part, changes, key):
    """A block key that changes what the block computes is one line naming the file, the
    key and what is allowed; so are KV heads of another count on one block (dse's
    attention layers share one) and a head grouping that does not divide the heads."""
    with pytest.raises(InputError) as err:
        card_from_hf_config(_nemotron_super(block, part, **changes), "c.json", "x")
    message = str(err.value)
    assert message.startswith(f"c.json: {key}: ") and "(allowed: " in message
    assert "\n" not in message

"""Hugging Face configs with DeepSeek Sparse Attention (dse.catalogue.model.card_from_hf_config):
GLM-5's glm_moe_dsa and DeepSeek-V3.2's deepseek_v32 read with their indexer; keys that
would change the indexer's cost and that dse does not model are refused, naming the key."""

import json
from pathlib import Path

import pytest

from dse.catalogue.model import ModelCard, card_from_hf_config, model_features
from dse.errors import InputError

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def _glm_5(**changes):
    config = json.loads((CONFIGS / "glm-5.json").read_text())
    config.update(changes)
    return config


def test_glm_5_reads_with_its_indexer_and_without_its_rope_head_dim():
    """GlmMoeDsaForCausalLM: MLA with 32 indexer heads of 128 choosing 2048 keys; the
    config's head_dim 64 is the rope dim, which an MLA card does not take as head_dim."""
    card = card_from_hf_config(_glm_5(), "glm-5.json", "glm-5")
    f = card.fields
    assert (f["index_topk"], f["index_n_heads"], f["index_head_dim"]) == (2048, 32, 128)
    assert (f["kv_lora_rank"], f["q_lora_rank"], f["qk_nope_head_dim"], f["v_head_dim"]) == (
        512, 2048, 192, 256)
    assert "head_dim" not in f and card.spec().head_dim == 192 + 64
    assert model_features([card]) == {"moe", "mla", "sparse"}


@pytest.mark.parametrize("key, value", [
    ("moe_layer_freq", 2),
    ("mlp_layer_types", ["dense"] * 4 + ["sparse"] * 74),
])
def test_layer_patterns_dse_does_not_model_are_refused(key, value):
    with pytest.raises(InputError, match=key):
        card_from_hf_config(_glm_5(**{key: value}), "glm-5.2.json", "x")


def test_patterns_that_say_every_layer_has_its_indexer_are_read():
    """GLM-5.1-NVFP4's config lists the layers: every indexer 'full', the first three
    MLPs dense."""
    card = card_from_hf_config(_glm_5(indexer_types=["full"] * 78, index_topk_freq=1,
                                      mlp_layer_types=["dense"] * 3 + ["sparse"] * 75),
                               "glm-5.1.json", "x")
    assert card.fields["index_topk"] == 2048
    assert "index_layer_fraction" not in card.fields and card.spec().index_layer_fraction == 1


# GLM-5.2's IndexShare schedule by hand, as the HF GLM-5 config derives it from
# index_topk_freq f = 4 and index_skip_topk_offset o = 3 (layer i runs its own indexer
# when max(i - o + 1, 0) % f == 0): layers 0, 1, 2 and 6, 10, ..., 74, i.e. 3 + 18 = 21
GLM_52_FULL = [0, 1, 2] + list(range(6, 78, 4))


def test_index_share_runs_an_indexer_on_21_of_78_layers():
    """The shipped GLM-5.2 config (its indexer_types list), and the same config with only
    the frequency and offset (the list derived), and with the equivalent F/S pattern:
    21 of 78 layers run an indexer."""
    assert len(GLM_52_FULL) == 21
    shipped = json.loads((CONFIGS / "glm-5.2.json").read_text())
    assert [i for i, t in enumerate(shipped["indexer_types"]) if t == "full"] == GLM_52_FULL
    derived = {k: v for k, v in shipped.items() if k != "indexer_types"}
    pattern = dict(derived, index_topk_freq=None, index_skip_topk_offset=None,
                   index_topk_pattern="".join("F" if i in GLM_52_FULL else "S"
                                              for i in range(78)))
    for config in (shipped, derived, pattern):
        card = card_from_hf_config(config, "glm-5.2.json", "glm-5.2")
        assert card.fields["index_layer_fraction"] == pytest.approx(21 / 78, rel=1e-15)


@pytest.mark.parametrize("changes, key", [
    (dict(index_topk_freq=4), "index_skip_topk_offset"),  # the offset is not guessed
    (dict(index_topk_freq=0, index_skip_topk_offset=3), "index_topk_freq"),
    (dict(index_topk_pattern="FSSS"), "index_topk_pattern"),  # not one letter per layer
    (dict(index_topk_pattern="S" + "F" * 77), "index_topk_pattern"),  # nothing to reuse
    (dict(indexer_types=["full", "shared"] * 38), "indexer_types"),  # 76 of 78
    (dict(indexer_types=["full", "dense"] * 39), "indexer_types"),
])
def test_index_share_schedules_that_cannot_be_read_are_refused(changes, key):
    with pytest.raises(InputError, match=key):
        card_from_hf_config(_glm_5(**changes), "glm-5.2.json", "x")


def test_index_share_drops_the_indexers_of_the_shared_layers():
    """GLM-5.2 is GLM-5.1 less 57 indexers: each wq_b 2048 x 32 x 128 + wk 6144 x 128 +
    its LayerNorm 2 x 128 + weights_proj 6144 x 32 = 9,371,904 parameters (DeepSeek-V3.2's
    Indexer class at GLM-5's shapes)."""
    from dse.formulas.params import indexer_params, total_params
    glm51 = card_from_hf_config(json.loads((CONFIGS / "glm-5.1.json").read_text()), "a", "a")
    glm52 = card_from_hf_config(json.loads((CONFIGS / "glm-5.2.json").read_text()), "b", "b")
    indexer = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    assert indexer == 9_371_904 == float(indexer_params(glm52.spec()))
    # totals of 7.4e11 in JAX's float32: each within half a unit in the last place, 2**15
    dropped = float(total_params(glm51.spec())) - float(total_params(glm52.spec()))
    assert dropped == pytest.approx(57 * indexer, abs=2.0 ** 16)


def test_an_indexer_on_an_unknown_model_type_is_refused():
    """DeepSeek-V4 (model_type deepseek_v4) has index_* keys over compressed attention,
    no MLA latent: not the DSA dse models, so not read as if it were."""
    config = _glm_5(model_type="deepseek_v4")
    with pytest.raises(InputError, match="index_topk.*deepseek_v4"):
        card_from_hf_config(config, "v4.json", "x")


@pytest.mark.parametrize("key", ["index_topk", "index_n_heads", "index_head_dim"])
def test_a_dsa_config_needs_its_indexer(key):
    """A glm_moe_dsa config without one of its indexer keys is not read as dense MLA."""
    config = _glm_5()
    del config[key]
    with pytest.raises(InputError, match=f"{key}: missing"):
        card_from_hf_config(config, "glm-5.json", "x")


def test_a_model_card_with_an_indexer_needs_mla():
    """A catalogue TOML with index_topk but no latent attention: the indexer's query comes
    from MLA's q latent, so the card is refused, naming the missing key."""
    fields = dict(name="x", n_layers=2, d_model=64, n_heads=4, d_ff=128, vocab_size=100,
                  max_seq_len=256, index_topk=16, index_n_heads=2, index_head_dim=8)
    with pytest.raises(InputError, match="kv_lora_rank"):
        ModelCard.from_mapping(fields, "x.toml")

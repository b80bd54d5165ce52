"""Names as people write them: catalogue aliases (vendor spellings, Hugging Face ids),
case, spaces, dashes and underscores; ambiguous and unknown names are bad input."""

import pytest

from dse.catalogue import lookup
from dse.cli import main
from dse.errors import InputError


@pytest.mark.parametrize("spelling, card", [
    ("H100-SXM5-80GB", "h100-sxm"), ("h100_sxm", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # nvidia-smi
    ("GB200 NVL72", "gb200"), ("Apple M2 Ultra", "m2-ultra"), ("MI355X", "mi355x"),
    ("NVIDIA B200-SXM-180GB", "b200"),  # MLPerf system descriptions
    ("H20", "h20"), ("TPU v6e", "tpu-v6e"),
    ("Ascend 910B", "ascend-910b"), ("Intel Arc Pro B60", "arc-pro-b60"),
])
def test_hardware_as_vendors_write_it(spelling, card):
    assert lookup.load_hardware(spelling).name == card


@pytest.mark.parametrize("spelling, card", [
    ("deepseek-ai/DeepSeek-V3", "deepseek-v3"), ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"), ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "qwen3-next-80b-a3b"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "llama-4-maverick"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("zai-org/GLM-4.5-Air", "glm-4.5-air"),
    ("Llama 3 8B", "llama-3-8b"), ("QWEN3_32B", "qwen3-32b"),
    ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-v3.2"),
    ("zhipuai/GLM-5", "glm-5"), ("nvidia/GLM-5-NVFP4", "glm-5"), ("zai-org/GLM-5-FP8", "glm-5"),
    ("nvidia/Nemotron-4-340B-Instruct", "nemotron-4-340b"),
])
def test_models_by_hugging_face_id_or_spelling(spelling, card):
    assert lookup.load_model(spelling).name == card


def test_a_config_json_path_still_wins(tmp_path):
    folder = tmp_path / "deepseek-ai" / "DeepSeek-V3"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, '
        '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, '
        '"max_position_embeddings": 256}')
    card = lookup.load_model(str(folder))
    assert card.fields["n_layers"] == 2  # the file, not the catalogue's DeepSeek-V3


def test_every_alias_names_one_card():
    """No spelling (normalized) belongs to two cards; the index raises if one does."""
    for kind in ("hardware", "models"):
        entries = lookup._entries(kind)
        index = lookup._aliases(kind, tuple(sorted(entries.items())))
        assert set(index.values()) == set(entries)


def test_an_ambiguous_name_lists_the_cards(tmp_path, capsys):
    with pytest.raises(InputError, match="ambiguous.*h100-sxm.*h100-pcie.*h100-nvl"):
        lookup.load_hardware("H100")
    study = tmp_path / "s.toml"
    study.write_text('[axes]\nmodel = "llama-3-8b"\nhardware = "NVIDIA H100"\n')
    assert main(["sweep", str(study), "-o", str(tmp_path / "o.nc")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "axes.hardware" in err and "h100-pcie" in err
    assert not (tmp_path / "o.nc").exists()


@pytest.mark.parametrize("kind, value, close", [
    ("hardware", "H900", "h200"), ("models", "meta-llama/Llama-2-7b-hf-typo", "llama-2-7b"),
    ("models", "qwen3-33b", "qwen3-32b"),
])
def test_unknown_names_suggest_the_closest(kind, value, close):
    load = lookup.load_hardware if kind == "hardware" else lookup.load_model
    with pytest.raises(InputError, match=f"did you mean '{close}'"):
        load(value)


def test_a_spelled_name_lands_as_the_card_name_in_the_dataset():
    import dse
    from dse.study import parse_study
    ds = dse.sweep(parse_study('[study]\ncalibration = "none"\n[axes]\n'
                               'model = "openai/gpt-oss-20b"\nhardware = ["H100-SXM5-80GB", '
                               '"h200"]\n', "<t>"), progress=False)
    assert list(ds["hardware"].values) == ["h100-sxm", "h200"]
    assert ds.attrs  # provenance intact

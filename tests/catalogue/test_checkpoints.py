"""A quantized checkpoint's precision is the study's default (issue 40 item 2): named by
a catalogue alias whose card lists it under ``checkpoints``, or read from its
config.json's ``quantization_config`` or ModelOpt's hf_quant_config.json beside it."""

import json
import shutil

import pytest

from dse.errors import InputError
from dse.study import parse_study

from ..conftest import ROOT
from ..helpers import study_text

CONFIGS = ROOT / "tests" / "data" / "hf_configs"


def _fixed(model, **axes):
    study = parse_study(study_text(model=model, hardware="h200", **axes), "<t>")
    return study.fixed["weight_bits"], study.fixed["kv_bits"]


def test_a_quantized_alias_sets_the_precision_the_study_leaves_out():
    """NVIDIA's GLM-5 NVFP4 checkpoint (hf_quant_config.json: quant_algo NVFP4,
    kv_cache_quant_algo FP8) and Z.ai's FP8 one: 4-bit weights and an FP8 cache, and
    8-bit weights; the architecture's own name keeps 16 bits; a stated precision wins."""
    assert _fixed("nvidia/GLM-5-NVFP4") == (4, 8)
    assert _fixed("zai-org/GLM-5-FP8") == (8, 16)
    assert _fixed("glm-5") == (16, 16)
    assert _fixed("nvidia/GLM-5-NVFP4", weight_bits=8) == (8, 8)


def test_models_of_different_checkpoints_need_the_precision_stated():
    with pytest.raises(InputError, match=r"axes.weight_bits: not given, and the models' "
                                         r"checkpoints differ .*nvidia/GLM-5-NVFP4: 4"):
        parse_study(study_text(model=["nvidia/GLM-5-NVFP4", "qwen3-32b"], hardware="h200"),
                    "<t>")
    study = parse_study(study_text(model=["nvidia/GLM-5-NVFP4", "qwen3-32b"],
                                   hardware="h200", weight_bits=8, kv_bits=8), "<t>")
    assert study.fixed["weight_bits"] == 8


def test_a_config_json_and_its_hf_quant_config_set_the_precision(tmp_path):
    """A config.json path: DeepSeek-R1's published config says quant_method fp8 (its
    released weights are block-scaled FP8); Llama-2-7B's beside a ModelOpt
    hf_quant_config.json of NVFP4 with an FP8 cache reads 4 and 8."""
    folder = tmp_path / "dsr1"
    folder.mkdir()
    shutil.copy(CONFIGS / "deepseek-r1.json", folder / "config.json")
    assert json.loads((folder / "config.json").read_text())["quantization_config"][
        "quant_method"] == "fp8"
    assert _fixed(str(folder / "config.json")) == (8, 16)
    llama = tmp_path / "llama"
    llama.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
              "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
    (llama / "config.json").write_text(json.dumps(config))
    (llama / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4",
                                                             "kv_cache_quant_algo": "FP8"}}))
    assert _fixed(str(llama / "config.json")) == (4, 8)


def test_a_bad_checkpoints_table_is_one_line():
    from dse.catalogue.model import ModelCard

    with pytest.raises(InputError, match="checkpoints: value"):
        ModelCard.from_mapping({"name": "m", "n_layers": 2, "d_model": 64, "n_heads": 4,
                                "d_ff": 128, "vocab_size": 100, "max_seq_len": 64,
                                "checkpoints": {"x/y-FP8": {"weight_bits": 3}}}, "m.toml")


LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
         "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}


@pytest.mark.parametrize("exclude, problem", [
    # a module no reader knows: its precision could not be placed
    (["lm_head", "model.layers.0.self_attn.rotary_mixer"],
     "module 'model.layers.0.self_attn.rotary_mixer' ('rotary_mixer') is not a module dse "
     "knows"),
    # layer 40 of a 32-layer model (no MTP layers)
    (["model.layers.40.mlp.down_proj"],
     "module 'model.layers.40.mlp.down_proj' names a layer the 32-layer model does not have"),
])
def test_a_quantization_config_naming_unknown_modules_is_one_line(tmp_path, capsys, exclude,
                                                                  problem):
    """ModelOpt's exclusion list names modules it leaves unquantized: names dse cannot
    place are refused by the CLI in one line naming the file and key, exit code 2, and
    nothing written."""
    from dse.cli import main

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(LLAMA))
    (tmp_path / "m" / "hf_quant_config.json").write_text(json.dumps(
        {"quantization": {"quant_algo": "NVFP4", "exclude_modules": exclude}}))
    study = tmp_path / "s.toml"
    study.write_text('[axes]\nmodel = "m/config.json"\nhardware = "h100-sxm"\n')
    assert main(["sweep", str(study), "-o", str(tmp_path / "o.nc"), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"hf_quant_config.json: quantization.exclude_modules: {problem}" in err
    assert err.count("\n") == 1 and not (tmp_path / "o.nc").exists()


def test_every_shipped_quantized_config_names_modules_dse_knows():
    """Kimi K2.5's shipped config (tests/data/hf_configs, as aiconfigurator-core ships it)
    reads with its compressed-tensors ignore list of regular expressions; the same list
    with a misspelled module does not. (Every quantized config in aiconfigurator-core
    0.12.0's model_configs reads but those of architectures dse refuses anyway.)"""
    from dse.catalogue.model import card_from_hf_config

    config = json.loads((CONFIGS / "kimi-k2.5.json").read_text())
    card_from_hf_config(config, "k.json", "k")
    ignore = config["text_config"]["quantization_config"]["ignore"]
    assert any(n.startswith("re:") for n in ignore)
    config["text_config"]["quantization_config"]["ignore"] = ignore + ["re:.*mlp\\.gaet_proj"]
    with pytest.raises(InputError, match="gaet_proj"):
        card_from_hf_config(config, "k.json", "k")

"""The CLI and its Dataset contract (cli.py, sweep.py, dataset.py, io.py)."""

import json

import numpy as np
import pytest
import xarray as xr

from dse.catalogue import lookup as catalogue
from dse.cli import main

from .conftest import STUDIES

CONTRACT_SIZES = {"model": 2, "hardware": 2, "batch": 3, "input_len": 2, "tp": 4, "pp": 2,
                  "weight_bits": 3, "hbm_bw_scale": 3}
CONTRACT_OUTPUTS = ["n_params", "weight_bytes", "kv_cache_bytes", "activation_bytes",
                    "memory_bytes", "fits", "prefill_flops", "decode_flops", "ttft_s", "tpot_s",
                    "e2e_s", "throughput_tok_s", "valid", "reason"]
HARDWARE = ["a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "mi300x",
            "tpu-v5e", "l40s", "rtx-4090", "m2-ultra"]
MODELS = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
          "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "mixtral-8x7b", "qwen2.5-7b",
          "qwen2.5-72b", "gpt-3-175b", "opt-1.3b"]


@pytest.fixture(scope="module")
def contract_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "llama-serving.nc"
    assert main(["sweep", str(STUDIES / "llama-serving.toml"), "-o", str(out)]) == 0
    return out


def test_contract_study_opens_in_plain_xarray(contract_file):
    ds = xr.open_dataset(contract_file)
    assert dict(ds.sizes) == CONTRACT_SIZES
    assert ds["ttft_s"].dims == tuple(CONTRACT_SIZES)  # the study's axis order
    for name in CONTRACT_OUTPUTS:
        assert name in ds.data_vars
        assert ds[name].attrs["units"] and ds[name].attrs["long_name"]
    assert ds["fits"].dtype == bool and ds["valid"].dtype == bool
    assert list(ds["model"].values) == ["llama-2-7b", "llama-2-70b"]
    assert float(ds["output_len"]) == 256  # fixed keys are scalar coordinates
    assert "[axes]" in ds.attrs["study"] and ds.attrs["dse_version"]
    specs = json.loads(ds.attrs["hardware_specs"])
    assert specs["h100-sxm"]["hbm_bw_gb_per_s"] > 0
    assert "llama-2-70b" in json.loads(ds.attrs["model_specs"])


def test_sweep_prints_a_summary(contract_file, capsys):
    out = contract_file.with_name("again.nc")
    assert main(["sweep", str(STUDIES / "llama-serving.toml"), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1,728 points" in text and "points/s" in text
    assert "oom" in text and "best feasible configurations by throughput_per_device_tok_s" in text
    # deployments compared per device, with what a user sees and what they use
    header = next(line for line in text.splitlines() if "tok/s/device" in line).split()
    assert {"tok/s", "tok/s/user", "ttft_s", "tpot_s", "memory/device", "devices"} <= set(header)
    assert "numbers: " in text  # calibrated, or a plain roofline called an upper bound
    xr.testing.assert_identical(xr.open_dataset(out).drop_attrs(),
                                xr.open_dataset(contract_file).drop_attrs())


def test_zarr_output(tmp_path):
    out = tmp_path / "r.zarr"
    assert main(["sweep", str(STUDIES / "llama-serving.toml"), "-o", str(out), "-q"]) == 0
    ds = xr.open_dataset(out, engine="zarr")
    assert dict(ds.sizes) == CONTRACT_SIZES
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_catalogue_listings(capsys):
    assert main(["hardware"]) == 0
    text = capsys.readouterr().out
    for name in HARDWARE:
        assert f"\n{name} " in text
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    for name in MODELS:
        assert f"\n{name} " in text
    assert set(HARDWARE) <= set(catalogue.hardware_names())
    assert set(MODELS) <= set(catalogue.model_names())
    assert any(c.fields["kind"] == "cpu" for c in catalogue.all_hardware())


LLAMA_2_7B_HF = {  # meta-llama/Llama-2-7b-hf config.json (abridged to the shape keys)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "max_position_embeddings": 4096, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False, "vocab_size": 32000, "torch_dtype": "float16"}


def test_hugging_face_config_by_path(tmp_path):
    folder = tmp_path / "Llama-2-7b-hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_2_7B_HF))
    study = tmp_path / "s.toml"
    study.write_text('[axes]\nmodel = ["Llama-2-7b-hf/config.json", "llama-2-7b"]\n'
                     'hardware = "h100-sxm"\n')
    out = tmp_path / "o.nc"
    assert main(["sweep", str(study), "-o", str(out), "-q"]) == 0
    ds = xr.open_dataset(out)
    assert list(ds["model"].values) == ["llama-2-7b-hf", "llama-2-7b"]
    np.testing.assert_array_equal(ds["ttft_s"].values[0], ds["ttft_s"].values[1])
    assert ds["n_params"].values[0] == ds["n_params"].values[1]


# bert-base-uncased's config.json (abridged): an encoder
BERT_BASE = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768,
             "intermediate_size": 3072, "max_position_embeddings": 512,
             "num_attention_heads": 12, "num_hidden_layers": 12, "vocab_size": 30522}


@pytest.mark.parametrize("config, key, problem", [
    (BERT_BASE, "model_type", "'bert' is an encoder or encoder-decoder model"),
    (dict(LLAMA_2_7B_HF, hidden_size=1e12), "hidden_size", "value 1000000000000.0 is not valid"),
    (dict(LLAMA_2_7B_HF, num_hidden_layers="32"), "num_hidden_layers", "value '32' is not valid"),
    # issue 40: fields that change what a layer computes are refused, not ignored. As in
    # MiniMaxAI/MiniMax-M3 (dense layers wider than its experts), a Mamba-2 hybrid pattern
    # without its Mamba shapes (Nemotron-H's are read: models/nemotron-h-56b), a
    # Llama-Nemotron block whose attention is a linear layer (replace_with_linear; the
    # block_configs of nvidia/Llama-3_3-Nemotron-Super-49B-v1 are read:
    # models/llama-3.3-nemotron-super-49b) and a layer type no reader models
    (dict(LLAMA_2_7B_HF, model_type="minimax_m3", dense_intermediate_size=12288),
     "dense_intermediate_size", "the model has dense layers wider than the experts'"),
    (dict(LLAMA_2_7B_HF, model_type="nemotron_h", hybrid_override_pattern="M-M-M*-M-M-"),
     "n_groups", "missing"),
    (dict(LLAMA_2_7B_HF, model_type="nemotron-nas", block_configs=[
        {"attention": {"no_op": False, "n_heads_in_group": 1, "replace_with_linear": True},
         "ffn": {"ffn_mult": 2.6875}}] * 32),
     "block_configs[0].attention.replace_with_linear",
     "value True changes what the block computes, which dse does not model"),
    (dict(LLAMA_2_7B_HF, layer_types=["full_attention", "mamba"] * 16), "layer_types",
     "layers of type mamba, which dse does not model"),
    # google/gemma-4-E2B: per-layer input embeddings (its 26B and 31B siblings are read)
    (dict(LLAMA_2_7B_HF, model_type="gemma4_text", hidden_size_per_layer_input=256),
     "hidden_size_per_layer_input", "the model has per-layer input embeddings"),
])
def test_a_config_dse_cannot_cost_is_refused_by_name(config, key, problem, tmp_path, capsys):
    # issue 36 row 12: a BertModel's config was costed as a decoder, and hidden_size 1e12
    # (a JSON float) was reported "missing"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    study = tmp_path / "s.toml"
    study.write_text('[axes]\nmodel = "m/config.json"\nhardware = "h100-sxm"\n')
    assert main(["sweep", str(study), "-o", str(tmp_path / "o.nc"), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"config.json: {key}: {problem}" in err and err.count("\n") == 1
    assert not (tmp_path / "o.nc").exists()


def test_the_command_exits_with_mains_code_and_flushed_output(tmp_path):
    """``python -m dse`` ends through dse.cli.entry (exit handlers run, streams flushed,
    then os._exit): the exit code is main's, piped output is whole, files are complete."""
    import subprocess
    import sys

    from .conftest import ROOT

    def dse(*argv):
        return subprocess.run([sys.executable, "-m", "dse", *argv], capture_output=True,
                              text=True, cwd=ROOT, timeout=300)

    listing = dse("models", "--json")
    assert listing.returncode == 0
    assert set(json.loads(listing.stdout)) == set(catalogue.model_names())  # whole
    bad = dse("sweep", str(tmp_path / "missing.toml"))
    assert bad.returncode == 2 and bad.stderr.startswith("dse: error: ")
    out = tmp_path / "r.nc"
    done = dse("sweep", str(STUDIES / "llama-serving.toml"), "-o", str(out), "-q")
    assert done.returncode == 0 and done.stdout.strip() == f"wrote {out}"
    with xr.open_dataset(out) as ds:
        assert dict(ds.sizes) == CONTRACT_SIZES
        assert np.isfinite(ds["ttft_s"].values).any()


def test_plot_help_names_every_kind_it_draws(capsys):
    """`dse plot --help` lists the kinds the plotting module draws (issue 37: it listed 7
    of 9, without load and frontier)."""
    from dse.cli import PLOT_KINDS
    from dse.report.kinds import KINDS

    assert PLOT_KINDS == tuple(KINDS)
    with pytest.raises(SystemExit):
        main(["plot", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(kind in out for kind in KINDS) and "load, frontier" in out

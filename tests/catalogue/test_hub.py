"""A model named by its Hugging Face id and absent from the catalogue is read from the
local Hugging Face cache (no network in tests), else refused in one line that says how to
provide it (issue 40 item 1; dse.catalogue.lookup.hub_config)."""

import json
import shutil

import pytest

from dse.cli import main
from dse.errors import InputError
from dse.run.sweep import sweep
from dse.study import parse_study

from ..conftest import ROOT
from ..helpers import study_text

CONFIG = ROOT / "tests" / "data" / "hf_configs" / "qwen3-0.6b.json"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A Hugging Face cache in the documented layout (huggingface_hub's "Manage the
    cache": models--ORG--NAME/refs/main -> snapshots/COMMIT/config.json), offline."""
    root = tmp_path / "hub"
    repo = root / "models--acme--Tiny-Qwen"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd\n")
    (repo / "snapshots" / "0123abcd").mkdir(parents=True)
    shutil.copy(CONFIG, repo / "snapshots" / "0123abcd" / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def test_a_hub_id_in_the_local_cache_runs_as_its_config_does(cache):
    """acme/Tiny-Qwen is Qwen3-0.6B's config under another id: the study runs, and its
    numbers are those of the catalogue's qwen3-0.6b card (made from the same config)."""
    by_id = sweep(parse_study(study_text(model="acme/Tiny-Qwen", hardware="h100-sxm",
                                         batch=4, input_len=512, output_len=64), "<t>"))
    by_name = sweep(parse_study(study_text(model="qwen3-0.6b", hardware="h100-sxm", batch=4,
                                           input_len=512, output_len=64), "<t>"))
    assert float(by_id["n_params"]) == float(by_name["n_params"]) > 5e8
    for name in ("ttft_s", "tpot_s", "memory_bytes"):
        assert float(by_id[name]) == float(by_name[name]), name


def test_a_hub_id_found_nowhere_is_one_line_that_says_how(cache, tmp_path, capsys):
    with pytest.raises(InputError) as err:
        parse_study(study_text(model="acme/Missing-7B", hardware="h100-sxm"), "<t>")
    said = str(err.value)
    assert "unknown model 'acme/Missing-7B'" in said and "HF_HUB_OFFLINE" in said
    assert str(cache) in said and "huggingface-cli download acme/Missing-7B" in said
    study = tmp_path / "s.toml"
    study.write_text(study_text(model="acme/Missing-7B", hardware="h100-sxm"))
    assert main(["sweep", str(study), "-o", str(tmp_path / "r.nc")]) == 2
    out = capsys.readouterr()
    assert len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err
    assert not (tmp_path / "r.nc").exists()


def test_without_the_offline_switch_and_without_huggingface_hub_it_says_to_install_it(
        cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        with pytest.raises(InputError, match=r"huggingface_hub is not installed .*dse\[hub\]"):
            parse_study(study_text(model="acme/Missing-7B", hardware="h100-sxm"), "<t>")
    else:  # with it, no network in tests: the Hub's error, in one line
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        with pytest.raises(InputError, match="HF_HUB_OFFLINE"):
            parse_study(study_text(model="acme/Missing-7B", hardware="h100-sxm"), "<t>")


def test_a_cache_without_the_main_ref_takes_its_newest_snapshot(cache):
    from dse.catalogue.lookup import cached_config

    repo = cache / "models--acme--Tiny-Qwen"
    (repo / "refs" / "main").unlink()
    found = cached_config("acme/Tiny-Qwen")
    assert found is not None and json.loads(found.read_text())["num_hidden_layers"] == 28
    assert cached_config("acme/Other") is None

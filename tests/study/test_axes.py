"""Axis values: lists, scalars and ranges (axes.py)."""

import pytest

from dse.study.axes import parse_axis
from dse.errors import InputError

from ..conftest import ROOT


@pytest.mark.parametrize("spec, kind, expected", [
    ({"start": 1, "stop": 5, "step": 1}, "int", [1, 2, 3, 4, 5]),
    ({"start": 0.5, "stop": 1.0, "num": 3}, "scale", [0.5, 0.75, 1.0]),
    ({"start": 1, "stop": 256, "factor": 2}, "int", [1, 2, 4, 8, 16, 32, 64, 128, 256]),
    ({"start": 1, "stop": 100, "num": 3, "log": True}, "scale", [1.0, 10.0, 100.0]),
    # integer keys round geometric points and drop the duplicates rounding creates
    ({"start": 1, "stop": 4, "num": 7, "log": True}, "int", [1, 2, 3, 4]),
    ({"start": 0.1, "stop": 0.3, "step": 0.1}, "fraction", [0.1, 0.2, 0.3]),
])
def test_ranges_are_inclusive(spec, kind, expected):
    is_axis, values = parse_axis(spec, kind, "f.toml", "axes.k")
    assert is_axis
    assert values == pytest.approx(expected)


def test_scalar_is_fixed_and_list_is_axis():
    assert parse_axis(8, "int", "f", "k") == (False, [8])
    assert parse_axis([8, 16], "int", "f", "k") == (True, [8, 16])


@pytest.mark.parametrize("spec", [
    {"start": 1, "stop": 4}, {"start": 1, "stop": 4, "step": 1, "num": 2},
    {"start": 4, "stop": 1, "step": 1}, {"start": 0, "stop": 4, "factor": 2},
    {"start": 1, "stop": 4, "step": 0}, {"start": 1, "stop": 4, "num": 0},
    {"start": 1, "stop": 4, "stride": 1}, {"start": "a", "stop": 4, "step": 1},
])
def test_malformed_ranges_name_the_key(spec):
    with pytest.raises(InputError, match=r"f\.toml: axes\.k"):
        parse_axis(spec, "int", "f.toml", "axes.k")


def test_relative_input_paths_resolve_like_output_paths(tmp_path, monkeypatch):
    """A model file named relative to the working directory is found there, as the output
    path is (it used to be looked up beside the study file only); beside the study file
    still works."""
    from dse.catalogue.lookup import load_model
    from dse.study import load_study

    card = (ROOT / "models" / "llama-2-7b.toml").read_text()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "custom.toml").write_text(card.replace('name = "llama-2-7b"',
                                                                'name = "custom"'))
    (tmp_path / "studies").mkdir()
    study = tmp_path / "studies" / "s.toml"
    study.write_text('[study]\nname = "s"\n[axes]\nmodel = "mine/custom.toml"\n'
                     'hardware = "h100-sxm"\n')
    monkeypatch.chdir(tmp_path)
    assert load_study(study).models[0].name == "custom"
    (tmp_path / "studies" / "beside.toml").write_text(card.replace('name = "llama-2-7b"',
                                                                   'name = "beside"'))
    study.write_text(study.read_text().replace("mine/custom.toml", "beside.toml"))
    assert load_study(study).models[0].name == "beside"
    assert load_model("mine/custom.toml").name == "custom"

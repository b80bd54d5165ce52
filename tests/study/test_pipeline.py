"""The [pipeline] section: bad input names its key (study/pipeline.py)."""

from __future__ import annotations

import pytest

from dse.cli import main

from ..helpers import pipeline_study


@pytest.mark.parametrize("pipe,key", [
    ('stages = [ { hardware = "m3-pro" }, { hardware = "m2" } ]\nlink = { bandwidth = "1 Gbit" }',
     "pipeline.link.bandwidth"),
    ('stages = [ { hardware = "m3-pro" }, { hardware = "m2" } ]\n'
     'links = [ { bandwidth = "1 Gbit/s" }, { bandwidth = "1 Gbit/s" } ]', "pipeline.links"),
    ('stages = [ { hardware = "m3-pro", layers = 16 }, { hardware = "m2" } ]\n'
     'link = { bandwidth = "1 Gbit/s" }', "pipeline.stages"),
    ('stages = [ { hardware = "m3-pro" }, { hardware = "m9" } ]\nlink = { bandwidth = "1 Gbit/s" }',
     "pipeline.stages[1].hardware"),
    ('stages = [ { hardware = "m3-pro" }, { hardware = "m2" } ]\n'
     'link = { bandwidth = "1 Gbit/s", direction = "both" }', "pipeline.link.direction"),
])
def test_bad_pipeline_input(tmp_path, capsys, pipe, key):
    study = tmp_path / "s.toml"
    study.write_text(pipeline_study(dict(model="llama-3.2-1b"), pipe))
    assert main(["sweep", str(study), "-o", str(tmp_path / "o.nc")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and key in err and str(study) in err, err
    assert not (tmp_path / "o.nc").exists()

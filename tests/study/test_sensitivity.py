"""The [sensitivity] section: bad input names its key (study/sensitivity.py)."""

import pytest

from dse.cli import main


@pytest.mark.parametrize("section, key", [
    ('metrics = ["speed"]', "sensitivity.metrics"),
    ('params = ["hbm"]', "sensitivity.params"),
    ("delta = 1.5", "sensitivity.delta"),
    ('inverse = [{ param = "hbm_bw", goal = "tpot <= 1" }]', "sensitivity.constraints"),
    ('inverse = [{ param = "ram", goal = "tpot_s <= 1" }]', "sensitivity.inverse[0].param"),
    ('mix = { tp = { "3" = 1.0 } }', "sensitivity.mix.tp"),
])
def test_bad_sensitivity_section(section, key, tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text('[axes]\nmodel = "llama-2-7b"\nhardware = "l40s"\ntp = [1, 2]\n'
                    f"[sensitivity]\n{section}\n")
    assert main(["sensitivity", str(path), "-o", str(tmp_path / "r.nc")]) == 2
    err = capsys.readouterr().err
    assert key.split(".")[0] in err and "\n" not in err.strip()
    assert not (tmp_path / "r.nc").exists()

"""The [search] section: bad input names its key (study/search.py)."""

import pytest

from dse.cli import main


@pytest.mark.parametrize("section, key", [
    ('objective = "speed"', "search.objective"),
    ('objective = "throughput_tok_s"\ndirection = "up"', "search.direction"),
    ('objective = "throughput_tok_s"\nconstraints = ["ttft_s < fast"]', "search.constraints"),
    ('objective = "throughput_tok_s"\nconstraints = ["tpot_s"]', "search.constraints"),
    ('objective = "throughput_tok_s"\nsampler = "bayes"', "search.sampler"),
    ('objective = ["throughput_tok_s", "tpot_s"]\nmode = "hybrid"', "search.mode"),
    ('objective = "throughput_tok_s"\nn_trials = 0', "search.n_trials"),
    ('objective = "throughput_tok_s"\ninner = ["seq"]\nmode = "hybrid"', "search.inner"),
    # storages that cannot be opened (/proc takes no new directories, even for root)
    ('objective = "throughput_tok_s"\nstorage = "sqlite:////proc/nope/s.db"', "search.storage"),
    ('objective = "throughput_tok_s"\nstorage = "/proc/nope/s.log"', "search.storage"),
])
def test_bad_search_section(section, key, tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text('[axes]\nmodel = "llama-3.2-1b"\nhardware = "l40s"\ntp = [1, 2]\n'
                    f"[search]\n{section}\n")
    assert main(["search", str(path), "-o", str(tmp_path / "r.nc")]) == 2
    err = capsys.readouterr().err
    assert key in err and "\n" not in err.strip()
    assert not (tmp_path / "r.nc").exists()

"""dse search: optimum vs exhaustive sweep, Pareto fronts, storage (search/)."""

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from dse.cli import main
from dse.search import search
from dse.study import load_study, parse_study
from dse.run.sweep import sweep

from ..conftest import STUDIES
from ..helpers import SMALL, small


def exhaustive_optimum(study, objective, maximize, keep):
    """dse sweep + masked argmax, written independently of dse.search."""
    ds = sweep(study, progress=False)
    mask = ds["valid"] & keep(ds)
    value = ds[objective].where(mask)
    return float(value.max() if maximize else value.min())


def test_search_reaches_the_exhaustive_optimum(tmp_path):
    """The example study (184,320 points): TPE with seed 7, 500 trials, within 1%."""
    study = load_study(STUDIES / "search-serving.toml")
    assert study.size >= 100_000
    result = search(study, out=tmp_path / "s.nc")
    optimum = exhaustive_optimum(
        study, "throughput_tok_s", True,
        lambda ds: (ds["ttft_s"] <= 1.5) & (ds["tpot_s"] <= 0.04))
    found = result.best[0]["objectives"]["throughput_tok_s"]
    assert found <= optimum * (1 + 1e-6)
    assert found >= 0.99 * optimum
    assert result.exhaustive["optimum"] == pytest.approx(optimum, rel=1e-6)


def test_hybrid_mode_sweeps_the_inner_grid(tmp_path):
    """Optuna picks hardware and precision; each trial sweeps tp, pp and batch: the 30
    outer choices are covered within a few batches and the optimum is reached."""
    study = load_study(STUDIES / "search-serving.toml")
    text = re.sub(r"n_trials = \d+", 'n_trials = 60\nmode = "hybrid"\n'
                  'inner = ["tp", "pp", "batch"]\nstorage = ":memory:"', study.text, count=1)
    assert 'mode = "hybrid"' in text
    result = search(parse_study(text, "<hybrid>"), out=tmp_path / "h.nc")
    assert result.exhaustive["regret"] <= 0.001
    assert set(result.best[0]["axes"]) >= {"tp", "pp", "batch", "hardware"}


def test_no_feasible_point_is_said_clearly(tmp_path, capsys):
    path = small(tmp_path, constraints='["tpot_s <= 1e-9"]', n=16)
    assert main(["search", str(path), "-o", str(tmp_path / "r.nc")]) == 3
    err = capsys.readouterr().err
    assert "no feasible configuration among 16 trials" in err
    assert not (tmp_path / "r-best.toml").exists()
    assert (tmp_path / "r.nc").exists()  # the trials are still kept


def test_multi_objective_front_covers_the_exhaustive_hypervolume(tmp_path):
    study = load_study(STUDIES / "search-pareto.toml")
    text = study.text.replace('batch_size = 50', 'batch_size = 50\nstorage = ":memory:"')
    result = search(parse_study(text, "<pareto>"), out=tmp_path / "p.nc")
    assert result.exhaustive["hypervolume_ratio"] >= 0.95
    values = np.asarray([[b["objectives"]["throughput_per_device_tok_s"],
                          b["objectives"]["tpot_s"]] for b in result.best])
    for a in values:  # no reported point dominates another
        assert not np.any((values[:, 0] >= a[0]) & (values[:, 1] <= a[1])
                          & ((values[:, 0] > a[0]) | (values[:, 1] < a[1])))


def _completed(db):
    with sqlite3.connect(db) as con:
        return con.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0]


def test_interrupted_search_resumes(tmp_path):
    db = tmp_path / "s.db"
    path = small(tmp_path, n=100_000, storage=f"sqlite:///{db}")
    proc = subprocess.Popen([sys.executable, "-m", "dse", "search", str(path), "-o",
                             str(tmp_path / "r.nc")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and (not db.exists() or _completed(db) < 24):
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130 and "interrupted" in proc.stderr.read()
    before = _completed(db)
    assert before >= 24
    assert main(["search", str(path), "-o", str(tmp_path / "r.nc"), "-n", "16"]) == 0
    assert _completed(db) == before + 16


def test_two_processes_share_one_study(tmp_path):
    db = tmp_path / "shared.db"
    path = small(tmp_path, n=32, storage=f"sqlite:///{db}")
    main(["search", str(path), "-o", str(tmp_path / "init.nc"), "-n", "8"])  # create it once
    procs = [subprocess.Popen([sys.executable, "-m", "dse", "search", str(path), "-o",
                               str(tmp_path / f"r{i}.nc")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for i in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    assert _completed(db) == 8 + 2 * 32


def test_json_and_files(tmp_path, capsys):
    path = small(tmp_path, n=16)
    assert main(["search", str(path), "-o", str(tmp_path / "r.nc"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    best = result["best"][0]
    assert {"hardware", "tp", "batch", "weight_bits"} <= set(best["axes"])
    assert best["outputs"]["throughput_tok_s"] == pytest.approx(
        best["objectives"]["throughput_tok_s"], rel=1e-6)
    for name in ("r.nc", "r.csv", "r-best.toml", "r-history.png"):
        assert (tmp_path / name).stat().st_size > 0
    # the best-configuration file is a study that reproduces the point
    again = sweep(load_study(tmp_path / "r-best.toml"), progress=False)
    assert float(again["throughput_tok_s"]) == pytest.approx(
        best["objectives"]["throughput_tok_s"], rel=1e-5)


def test_codesign_study_runs(tmp_path):
    study = load_study(STUDIES / "codesign.toml")
    text = study.text.replace("n_trials = 400", 'n_trials = 40\nstorage = ":memory:"')
    result = search(parse_study(text, "<codesign>"), out=tmp_path / "c.nc")
    assert result.exhaustive is None  # continuous what-if scales: no finite grid
    assert result.best and result.best[0]["outputs"]["tpot_s"] <= 0.03


@pytest.mark.parametrize("sampler", ["random", "cmaes", "nsga2"])
def test_every_sampler_runs(sampler, tmp_path):
    study = load_study(STUDIES / "codesign.toml")
    text = study.text.replace("n_trials = 400", f'n_trials = 16\nsampler = "{sampler}"\n'
                              'storage = ":memory:"')
    result = search(parse_study(text, "<samplers>"), out=tmp_path / "c.nc")
    assert result.n_trials == 16
    for best in result.best:
        assert best["outputs"]["tpot_s"] <= 0.03 and best["outputs"]["fits"]


def test_sqlite_study_file_is_in_write_ahead_log_mode(tmp_path):
    """A bare path gets WAL with synchronous=NORMAL (a commit appends to the log rather
    than syncing the disk); the trials are in the file for any later reader."""
    import optuna

    from dse.search.run import make_storage

    storage = make_storage(str(tmp_path / "s.db"))
    opt = optuna.create_study(storage=storage, study_name="wal")
    opt.tell(opt.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 1.0)
    with storage.engine.connect() as con:
        assert con.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    con = sqlite3.connect(tmp_path / "s.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 1
    con.close()
    # a URL with options is passed to SQLAlchemy as given
    other = make_storage(f"sqlite:///{tmp_path / 'o.db'}?timeout=5")
    optuna.create_study(storage=other, study_name="plain")
    assert sqlite3.connect(tmp_path / "o.db").execute("PRAGMA journal_mode").fetchone()[0] \
        == "delete"


def test_a_float64_study_is_searched_in_float64(tmp_path):
    """The trials of a ``dtype = "float64"`` study are evaluated in float64: each best
    trial's objective is the float64 sweep's value of its configuration, to the last
    bit, not the float32 one (which differs in the 8th digit)."""
    text = SMALL.format(constraints='["fits"]', n=24, storage=":memory:")
    wide = parse_study(text.replace('name = "small"', 'name = "small"\ndtype = "float64"'),
                       "<f64>")
    result = search(wide, out=tmp_path / "s.nc")
    best = result.best[0]
    value = best["objectives"]["throughput_tok_s"]
    assert value == best["outputs"]["throughput_tok_s"]  # describe() sweeps the point
    narrow = sweep(parse_study(text, "<f32>").at(**best["axes"]), progress=False)
    assert narrow["throughput_tok_s"].dtype == "float32"
    assert value != float(narrow["throughput_tok_s"])
    assert value == pytest.approx(float(narrow["throughput_tok_s"]), rel=1e-6)


def test_the_csv_has_one_row_per_trial_and_the_summary_the_best_points_latency(tmp_path,
                                                                                 capsys):
    """The trials CSV repeated each trial once per constraint and wrote tp = 2 as 2.0; the
    summary showed the best point's axes and objective only."""
    import csv

    path = small(tmp_path, n=16)
    assert main(["search", str(path), "-o", str(tmp_path / "r.nc")]) == 0
    text = capsys.readouterr().out
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert len(rows) == 16 and len({r["number"] for r in rows}) == 16
    assert {r["tp"] for r in rows} <= {"1", "2"} and {r["batch"] for r in rows} <= {
        str(b) for b in range(1, 65)}
    assert {"constraint: fits", "constraint: tpot_s <= 0.02", "constraint: valid",
            "feasible"} <= set(rows[0])
    header = next(line for line in text.splitlines() if "tok/s" in line).split()
    assert {"ttft_s", "tpot_s", "memory/device", "devices"} <= set(header)


def test_a_batch_written_in_one_transaction_is_what_optuna_writes(tmp_path):
    """dse.search.run.write_rdb stores a batch of finished trials in one transaction; read
    back, they are the trials optuna's own Study.add_trials stores: numbers, states,
    parameters and their distributions, values (an infinite one too), user and system
    attributes, constraints; and failed trials without values."""
    import math

    import optuna

    from dse.search.run import make_storage, write_rdb

    memory = optuna.create_study(directions=["maximize", "minimize"],
                                 sampler=optuna.samplers.RandomSampler(seed=3))
    for i in range(7):
        t = memory.ask()
        t.suggest_categorical("hardware", ["h100-sxm", "b200"])
        t.suggest_int("tp", 1, 8, log=True)
        t.suggest_float("scale", 0.5, 2.0)
        t.set_user_attr("inner", {"batch": 8 * i})
        t.set_user_attr("constraints", [0.5 - i, -1.0])
        t.storage.set_trial_system_attr(t._trial_id, "dse_origin", "a process")
        if i == 5:
            memory.tell(t, state=optuna.trial.TrialState.FAIL)
        else:
            memory.tell(t, [float(i) if i != 3 else math.inf, -2.0 * i])
    frozen = memory.get_trials()

    def stored(how):
        opt = optuna.create_study(storage=make_storage(str(tmp_path / f"{how}.db")),
                                  directions=["maximize", "minimize"])
        opt.add_trials(frozen[:2])  # trials already there: the batch is numbered after
        if how == "optuna":
            opt.add_trials(frozen[2:])
        else:
            assert write_rdb(opt, frozen[2:])
        reread = optuna.load_study(study_name=opt.study_name,
                                   storage=make_storage(str(tmp_path / f"{how}.db")))
        return [(t.number, t.state, t.params, t.distributions, t.values, t.user_attrs,
                 t.system_attrs, t.datetime_start, t.datetime_complete)
                for t in reread.get_trials()]

    mine, theirs = stored("dse"), stored("optuna")
    assert len(mine) == 7 and [t[0] for t in mine] == list(range(7))
    assert mine == theirs
    assert not write_rdb(optuna.create_study(), frozen)  # in memory: not a database


@pytest.mark.parametrize("n", ["0", "-5"])
def test_no_trials_to_add_is_bad_input(n, tmp_path, capsys):
    # issue 36 row 10: -n 0 or -n -5 ran no trial and exited 3, "no feasible
    # configuration among 0 trials"; the library refuses the same count
    from dse.errors import InputError
    from dse.search.api import search

    path = small(tmp_path)
    assert main(["search", str(path), "-o", str(tmp_path / "r.nc"), "-n", n]) == 2
    err = capsys.readouterr().err
    assert err == f"dse: error: -n: value {n} is not valid (allowed: an integer >= 1)\n"
    with pytest.raises(InputError, match="n_trials"):
        search(path, out=tmp_path / "r.nc", n_trials=int(n))
    assert not list(tmp_path.glob("r*"))


def test_a_studys_slos_are_the_default_constraints_of_its_search():
    """Issue 37: ttft_slo_s = 2 and tpot_slo_s = 0.05 under a load, and a [search] without
    constraints: the search is held to P99 TTFT <= 2 s and P99 TPOT <= 50 ms (as dse plan
    and the summary hold it), and says so; stated constraints are kept as written; a
    static study (no load, no percentiles) gets none."""
    from dse.study import parse_study

    text = """[study]
name = "slo"
[axes]
model = "llama-3.1-70b"
hardware = "h100-sxm"
tp = [4, 8]
input_len = 2000
output_len = 300
request_rate = [1, 4]
ttft_slo_s = 2.0
tpot_slo_s = 0.05
[search]
objective = "throughput_per_device_tok_s"
"""
    cfg = parse_study(text, "<slo>").search
    assert [str(c) for c in cfg.constraints] == ["ttft_p99_s <= 2", "tpot_p99_s <= 0.05"]
    assert cfg.source == "slo"
    stated = parse_study(text + 'constraints = ["ttft_s <= 1"]\n', "<slo>").search
    assert [str(c) for c in stated.constraints] == ["ttft_s <= 1"] and stated.source == "search"
    static = text.replace("request_rate = [1, 4]\n", "").replace("ttft_slo_s = 2.0\n", "") \
        .replace("tpot_slo_s = 0.05\n", "")
    assert parse_study(static, "<static>").search.constraints == ()

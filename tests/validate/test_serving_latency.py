"""`dse validate` scores rows measured under a request load (kind serving_latency): each
row becomes the load point a study with the same keys evaluates, its metric is read off
the same outputs, and what cannot be scored says why."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from dse.cli import main
from dse.run.sweep import sweep
from dse.study import parse_study
from dse.validate import default_calibration, validate
from dse.validate.rows import COLUMNS, LOAD_COLUMNS

from ..helpers import write_csv

FIELDS = COLUMNS + LOAD_COLUMNS
GPUSTACK = "gpustack performance lab (vllm bench serve)"
RUN = dict(kind="serving_latency", source=GPUSTACK, model="Qwen/Qwen3-8B", hardware="h100-sxm",
           n_devices="1", tp="1", precision="bf16", input_len="1000", output_len="200",
           framework="vllm", concurrency="8")


def _row(**kw) -> dict:
    return dict(dict.fromkeys(FIELDS, ""), **kw)


METRICS = {"ttft_ms": "80", "tpot_ms": "12", "itl_ms": "12", "e2e_ms": "2500",
           "ttft_ms_p99": "200", "tpot_ms_p90": "14", "e2e_ms_p50": "2400",
           "itl_ms_p99": "30", "output_tokens_per_s": "600", "requests_per_s": "3",
           "tokens_per_s_per_gpu": "600"}
ROWS = [
    *[_row(id=f"c8-{m}", metric=m, value=v, **RUN) for m, v in METRICS.items()],
    # an open loop at 1,000 requests/s of 1,000-token prompts on one H100: 1e6 prompt
    # tokens/s x 2 x 8.2e9 FLOPs = 1.6e16 FLOP/s, 16 x the card's dense BF16 peak
    _row(id="overloaded", metric="ttft_ms", value="100",
         **dict(RUN, concurrency="", request_rate="1000")),
    _row(id="both", metric="ttft_ms", value="100", **dict(RUN, request_rate="2")),
    _row(id="neither", metric="ttft_ms", value="100", **dict(RUN, concurrency="")),
    # wide EP: tp x dp = 4 x 2 = 8 devices per worker = moe_tp 1 x ep 8 (ep derived) ...
    _row(id="wide-ep", metric="tpot_ms", value="20",
         **dict(RUN, model="Qwen/Qwen3-30B-A3B", n_devices="8", tp="4", dp="2", moe_tp="1",
                framework="sglang", concurrency="64")),
    # ... and a layout that breaks tp x dp = moe_tp x ep
    _row(id="bad-ep", metric="tpot_ms", value="20",
         **dict(RUN, model="Qwen/Qwen3-30B-A3B", n_devices="8", tp="4", dp="2", ep="4",
                moe_tp="1", concurrency="64")),
    # a framework dse does not model runs the generic engine and calibration, said
    _row(id="nim", metric="ttft_ms", value="80", **dict(RUN, framework="nim")),
    # speculative decoding: stated in columns, said in notes only, or past its drafts
    _row(id="mtp", metric="tpot_ms", value="8",
         **dict(RUN, spec_tokens="2", spec_acceptance="2.2")),
    _row(id="mtp-notes", metric="tpot_ms", value="8", **dict(RUN, notes="with MTP (2 drafts)")),
    _row(id="mtp-past", metric="tpot_ms", value="8",
         **dict(RUN, spec_tokens="1", spec_acceptance="2.5")),
    # a benchmark run of 80 requests from a cold start (num_prompts); one with no clients,
    # one with fewer requests than clients
    _row(id="run", metric="ttft_ms", value="80", **dict(RUN, num_prompts="80")),
    _row(id="run-open", metric="ttft_ms", value="80",
         **dict(RUN, concurrency="", request_rate="2", num_prompts="80")),
    _row(id="run-few", metric="ttft_ms", value="80", **dict(RUN, num_prompts="4")),
    # notes that name EAGLE beside a stated 0: a table's "without EAGLE" column
    _row(id="eagle-off", metric="tpot_ms", value="12",
         **dict(RUN, spec_tokens="0", notes="the 'Without EAGLE' value; with EAGLE: 5 ms")),
]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    path = write_csv(tmp_path_factory.mktemp("load") / "rows.csv", FIELDS, ROWS)
    return path, validate(path, holdout=False)


def _rows(v):
    return {r["id"]: r for r in v.rows()}


STUDY = """
[study]
name = "c8"
dtype = "float64"
calibration = "{cal}"
[axes]
model = "qwen3-8b"
hardware = "h100-sxm"
framework = "vllm"
tp = 1
input_len = 1000
output_len = 200
concurrency = 8
[output]
variables = "all"
"""


def test_a_row_predicts_what_the_study_of_its_keys_writes(result):
    """The row's point, built from its columns, is the point a study of the same keys
    evaluates (the study path parses TOML, the validation path a CSV row); a row that
    states num_prompts, the study with that key (its first wave's prefill lengthens the
    mean TTFT)."""
    _, v = result
    text = STUDY.format(cal=default_calibration()).replace(
        "concurrency = 8", "concurrency = 8\nnum_prompts = [0, 80]")
    runs = sweep(parse_study(text, "c8.toml"), progress=False)
    ds = runs.sel(num_prompts=0)
    rows = _rows(v)
    assert rows["run"]["status"] == "scored"
    assert rows["run"]["predicted"] == pytest.approx(
        float(runs.ttft_s.sel(num_prompts=80)) * 1e3, rel=1e-9)
    assert rows["run"]["predicted"] > rows["c8-ttft_ms"]["predicted"]
    expect = {"ttft_ms": float(ds.ttft_s) * 1e3, "tpot_ms": float(ds.tpot_s) * 1e3,
              "itl_ms": float(ds.tpot_s) * 1e3, "e2e_ms": float(ds.e2e_s) * 1e3,
              "ttft_ms_p99": float(ds.ttft_p99_s) * 1e3,
              "tpot_ms_p90": float(ds.tpot_p90_s) * 1e3,
              "e2e_ms_p50": float(ds.e2e_p50_s) * 1e3,
              # the mean gap between tokens is the mean TPOT; its percentiles the gaps'
              "itl_ms_p99": float(ds.itl_p99_s) * 1e3,
              "output_tokens_per_s": float(ds.throughput_tok_s),
              "requests_per_s": float(ds.request_throughput_req_s),
              "tokens_per_s_per_gpu": float(ds.throughput_tok_s)}
    for metric, want in expect.items():
        assert rows[f"c8-{metric}"]["status"] == "scored"
        assert rows[f"c8-{metric}"]["predicted"] == pytest.approx(want, rel=1e-9), metric


def test_a_speculative_row_is_the_study_with_its_drafts(result):
    """spec_tokens and spec_acceptance read as the study keys of the same names."""
    _, v = result
    text = STUDY.format(cal=default_calibration()).replace(
        "concurrency = 8", "concurrency = 8\nspec_tokens = 2\nspec_acceptance = 2.2")
    ds = sweep(parse_study(text, "mtp.toml"), progress=False)
    row = _rows(v)["mtp"]
    assert row["status"] == "scored"
    assert row["predicted"] == pytest.approx(float(ds.tpot_s) * 1e3, rel=1e-9)
    assert row["predicted"] < _rows(v)["c8-tpot_ms"]["predicted"]


def test_readings_of_one_run_agree(result):
    """By hand: a closed loop completes c / E2E requests per second (Little's law), each
    of output_len tokens."""
    _, v = result
    rows = _rows(v)
    requests = rows["c8-requests_per_s"]["predicted"]
    assert rows["c8-output_tokens_per_s"]["predicted"] == pytest.approx(200 * requests,
                                                                        rel=1e-9)
    assert requests == pytest.approx(8 / (rows["c8-e2e_ms"]["predicted"] / 1e3), rel=1e-3)


def test_what_cannot_be_scored_says_why(result):
    _, v = result
    rows = _rows(v)
    assert rows["overloaded"]["status"] == "infeasible"
    assert "overloaded" in rows["overloaded"]["note"]
    for rid in ("both", "neither"):
        assert rows[rid]["status"] == "bad_row"
        assert "one of concurrency" in rows[rid]["note"]
    assert rows["bad-ep"]["status"] == "bad_row" and "moe_tp x ep" in rows["bad-ep"]["note"]
    assert rows["mtp-notes"]["status"] == "unmodelled"
    assert "spec_tokens does not" in rows["mtp-notes"]["note"]
    # spec_tokens stated as 0 is plain decoding, whatever the notes name: c8's TPOT
    assert rows["eagle-off"]["status"] == "scored"
    assert rows["eagle-off"]["predicted"] == rows["c8-tpot_ms"]["predicted"]
    assert rows["run-open"]["status"] == "bad_row" and "no concurrency" in rows["run-open"]["note"]
    assert rows["run-few"]["status"] == "bad_row" and "fewer than" in rows["run-few"]["note"]
    assert rows["mtp-past"]["status"] == "bad_row"
    assert "1 .. spec_tokens + 1" in rows["mtp-past"]["note"]
    assert rows["nim"]["status"] == "scored"
    assert rows["nim"]["note"].startswith("framework 'nim' is none dse models")


def test_wide_ep_layout_derives_the_expert_parallelism(result):
    _, v = result
    case = next(c for c in v.cases if c.id == "wide-ep")
    assert (case.knobs["tp"], case.knobs["dp"], case.knobs["ep"]) == (4, 2, 8)
    assert case.n_devices == 8 and case.knobs["engine"] == "sglang"
    assert _rows(v)["wide-ep"]["status"] == "scored"


def test_load_rows_are_never_fitted_and_tables_split_means_from_tails(result, tmp_path):
    path, v = result
    stats = v.stats()
    assert {"serving_latency", "serving_latency_tail", "serving_latency_tput"} <= set(stats)
    assert stats["serving_latency_tail"]["calibrated"]["n"] == 4  # p99, p90, p50, ITL p99 rows
    from dse.errors import InputError
    from dse.validate import calibrate

    with pytest.raises(InputError, match="no row a calibration can be fitted on"):
        calibrate(path, steps=2)
    out = tmp_path / "rows.csv"
    assert main(["validate", str(path), "--no-holdout", "-o", str(tmp_path / "o"),
                 "--rows", str(out)]) == 0
    lines = {r["id"]: r for r in csv.DictReader(out.open())}
    assert np.isfinite(float(lines["c8-ttft_ms_p99"]["predicted"]))

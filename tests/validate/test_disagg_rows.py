"""`dse validate` scores disaggregated rows (kind serving_latency, serving = disagg): a
whole deployment under its request rate is the point a study of the same keys evaluates;
a row of one pool measured at its own limit (``pool``) is that pool's capacity in the
same deployment; what dse does not model says why."""

from __future__ import annotations

import csv

import pytest

from dse.run.sweep import sweep
from dse.study import parse_study
from dse.validate import default_calibration, validate
from dse.validate.rows import COLUMNS, DISAGG_COLUMNS, LOAD_COLUMNS

from ..helpers import write_csv

FIELDS = COLUMNS + LOAD_COLUMNS + DISAGG_COLUMNS
# Llama-3.1-8B on H100: one prefill worker of tp 2, two decode workers of tp 1 (4 GPUs)
RUN = dict(kind="serving_latency", source="test", model="meta-llama/Llama-3.1-8B-Instruct",
           hardware="h100-sxm", precision="bf16", input_len="2000", output_len="200",
           framework="vllm", serving="disagg", request_rate="4", prefill_workers="1",
           prefill_tp="2", decode_workers="2", decode_tp="1", decode_batch="64")
PREFILL = {k: v for k, v in RUN.items() if not k.startswith("decode_")}
DECODE = {k: v for k, v in RUN.items() if not k.startswith("prefill_")}


def _row(**kw) -> dict:
    return dict(dict.fromkeys(FIELDS, ""), **kw)


ROWS = [
    _row(id="ttft", metric="ttft_ms", value="300", **RUN),
    _row(id="tpot-p90", metric="tpot_ms_p90", value="20", **RUN),
    # 1,000 requests/s is past any capacity of 4 H100s: the rate completed is the capacity
    _row(id="saturated", metric="output_tokens_per_s", value="5000",
         **dict(RUN, request_rate="1000")),
    _row(id="saturated-ttft", metric="ttft_ms", value="300", **dict(RUN, request_rate="1000")),
    # each pool measured at its own limit (no load stated)
    _row(id="prefill-pool", metric="input_tokens_per_s_per_gpu", value="9000",
         **dict(PREFILL, pool="prefill", request_rate="")),
    _row(id="prefill-pool-total", metric="input_tokens_per_s", value="18000",
         **dict(PREFILL, pool="prefill", request_rate="")),
    _row(id="decode-pool", metric="tokens_per_s_per_gpu", value="3000",
         **dict(DECODE, pool="decode", request_rate="")),
    _row(id="decode-pool-total", metric="output_tokens_per_s", value="6000",
         **dict(DECODE, pool="decode", request_rate="")),
    # what is not modelled, and what is malformed
    # a closed loop: 16 clients; without worker counts their share per worker is unknown
    _row(id="closed", metric="ttft_ms", value="300", **dict(RUN, request_rate="",
                                                           concurrency="16")),
    _row(id="closed-tpot", metric="tpot_ms", value="20", **dict(RUN, request_rate="",
                                                               concurrency="16")),
    _row(id="closed-unknown-workers", metric="ttft_ms", value="300",
         **dict(RUN, request_rate="", concurrency="16", decode_workers="")),
    _row(id="mtp", metric="tokens_per_s_per_gpu", value="3000",
         **dict(DECODE, pool="decode", request_rate="", notes="decode with MTP (2 drafts)")),
    _row(id="pool-latency", metric="tpot_ms", value="20", **dict(DECODE, pool="decode")),
    _row(id="no-layout", metric="ttft_ms", value="300", **dict(RUN, prefill_tp="")),
    _row(id="bad-pool", metric="ttft_ms", value="300", **dict(RUN, pool="both")),
    _row(id="two-devices", metric="ttft_ms", value="300", **dict(RUN, prefill_hardware="b200")),
    _row(id="same-device", metric="ttft_ms", value="300",
         **dict(RUN, decode_hardware="H100 SXM")),
]

STUDY = """
[study]
name = "pd"
dtype = "float64"
calibration = "{cal}"
[axes]
model = "llama-3.1-8b"
hardware = "h100-sxm"
framework = "vllm"
serving = "disagg"
input_len = 2000
output_len = 200
request_rate = 4
prefill_workers = 1
prefill_tp = 2
decode_workers = 2
decode_tp = 1
decode_batch = 64
[output]
variables = "all"
"""


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    path = write_csv(tmp_path_factory.mktemp("disagg") / "rows.csv", FIELDS, ROWS)
    return {r["id"]: r for r in validate(path, holdout=False).rows()}


@pytest.fixture(scope="module")
def study():
    return sweep(parse_study(STUDY.format(cal=default_calibration()), "pd.toml"),
                 progress=False)


def _scored(rows, rid) -> float:
    assert rows[rid]["status"] == "scored", (rid, rows[rid]["note"])
    return rows[rid]["predicted"]


def test_a_deployment_row_predicts_what_the_study_of_its_keys_writes(rows, study):
    assert _scored(rows, "ttft") == pytest.approx(float(study.ttft_s) * 1e3, rel=1e-9)
    assert _scored(rows, "tpot-p90") == pytest.approx(float(study.tpot_p90_s) * 1e3, rel=1e-9)


def test_a_saturated_deployment_completes_its_capacity(rows, study):
    """Past the capacity an open loop completes the capacity (the smaller pool's):
    requests/s x output_len tokens; its latencies are no number (infeasible)."""
    capacity = min(float(study.prefill_capacity_req_s), float(study.decode_capacity_req_s))
    assert capacity < 1000.0
    assert _scored(rows, "saturated") == pytest.approx(capacity * 200, rel=1e-9)
    assert rows["saturated-ttft"]["status"] == "infeasible"
    assert "overloaded" in rows["saturated-ttft"]["note"]


def test_a_pool_row_is_that_pools_capacity_in_the_deployment(rows, study):
    """A prefill pool at its limit processes capacity x input_len prompt tokens/s over its
    workers' GPUs (here 1 worker of 2); a decode pool emits the rest of each output,
    output_len - 1 tokens (the first is the prefill worker's), over 2 workers of 1 GPU.
    The pool row runs the worker alone; the study runs the whole deployment."""
    prefill = float(study.prefill_capacity_req_s)  # 1 worker
    decode = float(study.decode_capacity_req_s)  # 2 workers
    assert _scored(rows, "prefill-pool") == pytest.approx(prefill * 2000 / 2, rel=1e-9)
    assert _scored(rows, "prefill-pool-total") == pytest.approx(prefill * 2000, rel=1e-9)
    assert _scored(rows, "decode-pool") == pytest.approx(decode * 199 / 2, rel=1e-9)
    assert _scored(rows, "decode-pool-total") == pytest.approx(decode * 199, rel=1e-9)


def test_a_closed_loop_row_predicts_what_the_study_of_its_keys_writes(rows):
    """16 clients on the same deployment: the row is the study's point with concurrency
    16 in place of the request rate."""
    closed = sweep(parse_study(STUDY.format(cal=default_calibration()).replace(
        "request_rate = 4", "concurrency = 16"), "pd.toml"), progress=False)
    assert _scored(rows, "closed") == pytest.approx(float(closed.ttft_s) * 1e3, rel=1e-9)
    assert _scored(rows, "closed-tpot") == pytest.approx(float(closed.tpot_s) * 1e3, rel=1e-9)


def test_what_cannot_be_scored_says_why(rows):
    assert rows["closed-unknown-workers"]["status"] == "unmodelled"
    assert "decode_workers: the clients per worker are unknown" in rows[
        "closed-unknown-workers"]["note"]
    assert rows["mtp"]["status"] == "unmodelled" and "speculative" in rows["mtp"]["note"]
    assert rows["pool-latency"]["status"] == "bad_row"
    assert "throughput" in rows["pool-latency"]["note"]
    assert rows["no-layout"]["status"] == "bad_row"
    assert "prefill pool's layout" in rows["no-layout"]["note"]
    assert rows["bad-pool"]["status"] == "bad_row" and "one of prefill" in rows["bad-pool"]["note"]
    assert rows["two-devices"]["status"] == "unmodelled"
    assert "different devices" in rows["two-devices"]["note"]
    assert rows["same-device"]["predicted"] == rows["ttft"]["predicted"]


def test_the_shipped_rows_read_each_with_a_status():
    """data/measured_disagg.csv: every row is an evaluation point or says why not; a
    per-node figure was divided by the node's 8 GPUs (its notes keep the published one)."""
    from pathlib import Path

    from dse.validate.rows import read

    path = Path(__file__).parents[2] / "data" / "measured_disagg.csv"
    cases, skips = read(path)
    assert len(cases) + len(skips) == sum(1 for _ in csv.DictReader(path.open()))
    assert {s.status for s in skips} <= {"unmodelled", "bad_row"}
    # the bad rows publish no layout (long-context Pareto points, llm-d's H200 figure),
    # no lengths (SGLang's two-batch-overlap ablation) or no load (Ant Group's SLA tiers:
    # a batch per GPU, no clients and no rate)
    assert all("layout" in s.reason or "input_len" in s.reason or "output_len" in s.reason
               or "one of concurrency" in s.reason
               for s in skips if s.status == "bad_row")
    by_id = {c.id: c for c in cases}
    # SGLang's 96-H100 post: 52.3k prompt tokens/s per prefill node of 8 GPUs
    headline = by_id["lmsysep-04"]
    assert headline.measured == pytest.approx(52_300 / 8)
    assert headline.knobs["pool"] == "prefill" and headline.n_devices == 32
    assert (headline.knobs["dp"], headline.knobs["ep"]) == (32, 32)
    # llm-d's whole deployment: 1 prefill + 1 decode worker of 16 B200 each
    llmd = by_id["llmdguide-02"]
    assert llmd.n_devices == 32 and llmd.knobs["serving"] == 1.0

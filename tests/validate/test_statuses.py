"""`dse validate` scores everything it is given: published metrics of every kind, models
by catalogue name or Hugging Face id, every row with a status (--rows), nothing dropped."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from dse.cli import main
from dse.validate import validate
from dse.validate.rows import COLUMNS, STATUSES

from ..helpers import write_csv

BLANK = dict.fromkeys(COLUMNS, "")


def _row(**kw) -> dict:
    return dict(BLANK, **kw)


TRT = "NVIDIA/TensorRT-LLM perf-overview"
DECODE = dict(kind="infer_decode", source="llama.cpp llama-bench", hardware="H100-SXM5-80GB",
              n_devices="1", precision="bf16", batch="4", input_len="512", output_len="128",
              notes="-fa 1")
ROWS = [
    # one decode run read three ways: tokens/s, per-token latency, end to end
    _row(id="dec-toks", model="meta-llama/Meta-Llama-3-8B", metric="tokens_per_s",
         value="150", **DECODE),
    _row(id="dec-tpot", model="meta-llama/Meta-Llama-3-8B", metric="tpot_ms", value="25",
         **DECODE),
    _row(id="dec-itl", model="Llama-3-8B", metric="itl_ms", value="25", **DECODE),
    # serving on 8 GPUs: the system's tokens/s and per GPU, requests/s
    *[_row(id=f"srv-{m}", kind="serving_throughput", source=TRT, model="openai/gpt-oss-20b",
           hardware="h200", n_devices="8", tp="8", precision="fp8", input_len="1000",
           output_len="1000", metric=m, value=v)
      for m, v in (("output_tokens_per_s", "20000"), ("tokens_per_s_per_gpu", "2500"),
                   ("requests_per_s", "20"), ("total_tokens_per_s", "40000"))],
    # training at scale, micro-batch not stated: Megatron-LM's default is assumed
    *[_row(id=f"train-{m}", kind="train", source="Megatron-Bridge performance summary",
           model="Llama-3-70B", hardware="h100-sxm", n_devices="64", tp="8", pp="8",
           precision="bf16", batch="128", input_len="4096", metric=m, value=v)
      for m, v in (("tokens_per_s_per_gpu", "400"), ("tokens_per_s", "25600"),
                   ("tflops_per_gpu", "400"), ("mfu", "0.4"), ("step_time_s", "40"))],
    # what cannot be scored, each with its status
    _row(id="metric", model="Llama-3-8B", metric="joules_per_token", value="1", **{
        k: v for k, v in DECODE.items()}),
    _row(id="hw", model="Llama-3-8B", **dict(DECODE, hardware="Cerebras CS-3"),
         metric="tokens_per_s", value="10"),
    _row(id="model", model="Falcon-180B", **DECODE, metric="tokens_per_s", value="10"),
    # tp 3 divides neither the 32 heads nor the 8 KV heads: a layout dse calls infeasible
    _row(id="infeasible", model="Llama-3-8B", **dict(DECODE, n_devices="3", tp="3"),
         metric="tokens_per_s", value="100"),
    # a serving row without its lengths (a dataset's means belong in the row)
    _row(id="lengths", kind="serving_throughput", source=TRT, model="Llama-3-8B",
         hardware="h100-sxm", n_devices="1", precision="fp8", metric="output_tokens_per_s",
         value="5000"),
    # no framework named: scored under the generic calibration, said in the note
    _row(id="vendor", kind="serving_throughput", source="a vendor's own stack",
         model="Llama-3-8B", hardware="h100-sxm", n_devices="1", precision="fp8",
         input_len="128", output_len="128", metric="output_tokens_per_s", value="5000"),
    # Megatron training without a stated recomputation: 16k-token sequences of the 8B at
    # tp 1 keep sbh x 34 bytes = 16384 x 4096 x 34 = 2.3 GB per layer (Korthikanti et
    # al. 2022, FlashAttention: no score matrix), 73 GB over 32 layers, beyond an 80 GB
    # H100 beside 8e9 x (2 + 2) bytes of weights and gradients; selective recomputation
    # saves nothing more under FlashAttention, full recomputation keeps only the layer
    # inputs (16384 x 4096 x 2 x 32 = 4.3 GB): the first that fits is full
    *[_row(id=f"rc-{k}", kind="train", source="Megatron-LM", model="Llama-3-8B",
           hardware="h100-sxm", n_devices="8", tp="1", pp="1", precision="bf16", batch="8",
           input_len="16384", metric="tokens_per_s_per_gpu", value="5000", notes=n)
      for k, n in (("unstated", "MBS 1"), ("none", "MBS 1; no recomputation"))],
    # 126 layers over pp 16 x vp 4 do not divide: the embedding and the loss count as
    # pipeline layers, 128 = 16 x 4 x 2, so the ends hold 2 x 4 - 1 = 7 layers and the
    # 14 middle stages 8 each: the Llama 3 paper's own split (arXiv 2407.21783, Sec. 3.3.2)
    _row(id="vp-split", kind="train", source="Megatron-Bridge", model="Llama-3.1-405B",
         hardware="h100-sxm", n_devices="1024", tp="8", pp="16", precision="bf16",
         batch="512", input_len="8192", metric="tokens_per_s_per_gpu", value="200",
         notes="MBS 1, VP 4; full recompute"),
    _row(id="oom", model="Llama-2-70B", **dict(DECODE, hardware="l4"), metric="tokens_per_s",
         value="1"),
    # 140 GB of bf16 weights on one 24 GB L4: the row says neither how many devices ran it
    # nor a layout; or its notes record that the source's precision cannot be right
    _row(id="oom-unstated", model="Llama-2-70B", **dict(DECODE, hardware="l4", n_devices=""),
         metric="tokens_per_s", value="1"),
    _row(id="oom-anomaly", model="Llama-2-70B", **dict(
        DECODE, hardware="l4", notes="-fa 1; ANOMALY: bf16 as printed cannot fit in 24 GB"),
         metric="tokens_per_s", value="1"),
    _row(id="load", kind="serving_throughput", source=TRT, model="Llama-2-70B",
         hardware="h100-sxm", n_devices="8", tp="8", precision="fp8", batch="server (Poisson)",
         output_len="300", metric="output_tokens_per_s", value="20000"),
]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    path = write_csv(tmp_path_factory.mktemp("v") / "rows.csv", COLUMNS, ROWS)
    return path, validate(path, holdout=False)


def _pred(v, rid):
    return {r["id"]: r for r in v.rows()}[rid]["predicted"]


def test_metrics_are_read_consistently(result):
    """Identities derived by hand between readings of one run: decode tokens/s x
    TPOT = batch; ITL is TPOT; a system's tokens/s is per-GPU tokens/s x GPUs; requests/s
    = output tokens/s / output length; total tokens/s = output tokens/s x (input +
    output) / output; training tokens/s = per GPU x 64 GPUs and = global
    batch x sequence / step time."""
    _, v = result
    assert _pred(v, "dec-toks") * _pred(v, "dec-tpot") / 1e3 == pytest.approx(4.0, rel=1e-9)
    assert _pred(v, "dec-itl") == pytest.approx(_pred(v, "dec-tpot"), rel=1e-12)
    assert _pred(v, "srv-output_tokens_per_s") == pytest.approx(
        8 * _pred(v, "srv-tokens_per_s_per_gpu"), rel=1e-9)
    assert _pred(v, "srv-requests_per_s") == pytest.approx(
        _pred(v, "srv-output_tokens_per_s") / 1000, rel=1e-9)
    # vllm bench serve's "Total Token throughput" counts the 1000 prompt tokens too
    assert _pred(v, "srv-total_tokens_per_s") == pytest.approx(
        _pred(v, "srv-output_tokens_per_s") * (1000 + 1000) / 1000, rel=1e-9)
    per_gpu, job = _pred(v, "train-tokens_per_s_per_gpu"), _pred(v, "train-tokens_per_s")
    assert job == pytest.approx(64 * per_gpu, rel=1e-9)
    assert job * _pred(v, "train-step_time_s") == pytest.approx(128 * 4096, rel=1e-9)
    assert 0 < _pred(v, "train-mfu") < 1


def test_catalogue_models_bring_their_architecture(result):
    """A row naming a catalogue card or Hugging Face id needs no architecture columns
    (the decode rows above have none): it runs on the card, here the 8B's 32 layers."""
    _, v = result
    case = next(c for c in v.cases if c.id == "dec-toks")
    assert case.model.name == "llama-3-8b" and case.model.fields["n_layers"] == 32
    assert case.hardware == "h100-sxm"


def test_every_row_has_a_status_and_the_assumptions_are_said(result, tmp_path):
    path, v = result
    status = {r["id"]: r["status"] for r in v.rows()}
    assert len(status) == len(ROWS)
    assert {status[k] for k in status if k.startswith(("dec", "srv", "train"))} == {"scored"}
    assert (status["metric"], status["hw"], status["model"], status["oom"], status["load"]) == (
        "unknown_metric", "unknown_hardware", "unknown_model", "does_not_fit", "under_load")
    assert (status["oom-unstated"], status["oom-anomaly"]) == ("unstated_devices", "flagged")
    note = {r["id"]: r["note"] for r in v.rows()}
    assert note["oom-unstated"].startswith("the row does not say how many devices ran it")
    assert note["oom-anomaly"].startswith("source anomaly: bf16 as printed cannot fit")
    assert (status["infeasible"], status["lengths"], status["vendor"]) == (
        "infeasible", "bad_row", "scored")
    note = {r["id"]: r["note"] for r in v.rows()}
    assert "tp_indivisible" in note["infeasible"] and "input_len" in note["lengths"]
    assert note["vendor"].startswith("no framework named: the generic calibration")
    # the recomputation dse chose is the first that fits; stated "none" does not fit
    assert (status["rc-unstated"], status["rc-none"]) == ("scored", "does_not_fit")
    assert "full recomputation (not stated: the first that fits)" in note["rc-unstated"]
    split = next(c for c in v.cases if c.id == "vp-split")
    assert (split.knobs["first_stage_layers"], split.knobs["last_stage_layers"]) == (7, 7)
    assert status["vp-split"] == "scored" and "7 + 14 x 8 + 7" in note["vp-split"]
    counts = v.statuses()
    assert set(counts) == set(STATUSES) and sum(counts.values()) == len(ROWS)
    assert next(c for c in v.cases if c.id == "train-mfu").assumed.startswith(
        "micro-batch 1 (megatron default); distributed optimizer (ZeRO-1)")
    out = tmp_path / "r.csv"
    assert main(["validate", str(path), "--no-holdout", "-o", str(tmp_path / "o"),
                 "--rows", str(out)]) == 0
    lines = list(csv.DictReader(out.open()))
    assert [k for k in lines[0]] == ["id", "kind", "metric", "measured", "predicted", "ape",
                                     "status", "note", "model_card", "hardware_card"]
    assert {r["id"]: r["status"] for r in lines} == status
    # each scored row says which catalogue cards its strings resolved to (issue 40 item 4)
    cards = {c.id: (c.model.name, c.hardware) for c in v.cases}
    for r in lines:
        assert (r["model_card"], r["hardware_card"]) == cards.get(r["id"], ("", ""))
    scored = [r for r in lines if r["status"] == "scored"]
    assert all(np.isfinite(float(r["ape"])) for r in scored)


def test_a_bad_rows_path_is_refused_before_the_work(result, tmp_path, capsys):
    path, _ = result
    assert main(["validate", str(path), "--no-holdout", "-o", str(tmp_path / "o"),
                 "--rows", str(tmp_path / "r.txt")]) == 2
    err = capsys.readouterr().err
    assert "--rows" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("layers, pp, vp, split", [
    (126, 16, 4, (7, 7)),  # (126 + 2) / 64 = 2 per virtual stage: 7 + 14 x 8 + 7
    (61, 8, 4, (7, 6)),  # ceil(63 / 32) = 2: 7 + 6 x 8 + 6 (DeepSeek-V3's 61 layers)
    (94, 8, 3, (11, 11)),  # ceil(96 / 24) = 4: 11 + 6 x 12 + 11 (Qwen3-235B's 94)
    (61, 2, 4, (31, 30)),  # ceil(63 / 8) = 8: no middle stage, 31 + 30
])
def test_embedding_and_loss_accounted_in_the_pipeline_split(layers, pp, vp, split):
    from dse.validate.rows import accounted_split

    first, last = accounted_split(layers, pp, vp)
    assert (first, last) == split
    assert (layers - first - last) % max(pp - 2, 1) == 0


@pytest.mark.parametrize("notes, level", [
    ("act-ckpt True", 2), ("act-ckpt False", 0), ("MBS 1; full recompute", 2),
    ("counts the extra forward of full activation recomputation", 2),
    ("selective recomputation of core attention", 1), ("no recomputation", 0),
    ("model TFLOP/s (activation recomputation NOT counted)", None), ("MBS 2", None),
])
def test_a_stated_recomputation_is_the_one_applied(notes, level):
    """One reading decides both whether a row states its recomputation and which: a
    stated level is never replaced by dse's choice, nor an unstated one read as none."""
    from dse.validate.rows import recompute_level

    assert recompute_level(notes) == level


def test_a_row_with_no_prediction_says_why_and_its_json_is_standard():
    """A serving row whose offered load the calibrated model cannot carry has no number:
    the worst-rows table says which infeasibility (not "nan (nan%)") and the JSON summary
    writes null (JSON has no NaN; a strict parser refuses it)."""
    import json

    from dse.schema.outputs import REASON_BITS
    from dse.validate.validation import _json_safe, shown

    bits = REASON_BITS["overloaded"]
    assert shown(float("nan"), float("nan"), bits) == "no number (overloaded)"
    assert shown(float("nan"), float("nan"), 0) == "no number (not finite)"
    assert shown(12.5, 25.0, 0) == "      12.5 (25%)"  # 12.5 against a measured 10 or 16.7
    summary = _json_safe(dict(worst=[dict(predicted=float("nan"), ape=np.float64("inf"),
                                          measured=66.46, id="r")], stats={"p90": np.inf}))
    text = json.dumps(summary)

    def refuse(token):
        raise ValueError(token)

    parsed = json.loads(text, parse_constant=refuse)
    assert parsed == dict(worst=[dict(predicted=None, ape=None, measured=66.46, id="r")],
                          stats={"p90": None})

"""Which regime a point is in, and where the calibrated and plain-roofline answers part
(issue 37 item 3: formulas/parts.roof_seconds, run/regime.py, sensitivity/report.py)."""

import json
import tomllib

import numpy as np
import pytest

from dse.formulas import parts
from dse.formulas.types import Part
from dse.results.summary import sweep_summary
from dse.core import programs
from dse.run import regime
from dse.run.regime import compare, disagreement
from dse.run.sweep import sweep
from dse.sensitivity import sensitivity
from dse.sensitivity.report import disagreement_line, markdown, regime_text, workloads
from dse.study import parse_study

from ..conftest import ROOT
from ..helpers import study_text


def test_the_regime_is_the_roof_with_the_most_seconds():
    """By hand: parts with compute sides 1 + 1 + 0.3 = 2.3 s, memory sides 0.2 + 0.1 +
    2.5 = 2.8 s, a message of 0.5 s and a launch overhead of 4 s: host (4 > 2.8 > 2.3);
    without the overhead memory; with the memory part halved compute (2.3 > 1.55)."""
    phase = {"a": Part(1.0, 1.0, 1.0, 1.0, 0.2, 0.0), "b": Part(2.0, 1.0, 1.0, 1.0, 0.1, 0.0),
             "c": Part(2.5, 1.0, 1.0, 0.3, 2.5, 0.0), "d": Part(0.5, 0.0, 1.0, 0.0, 0.0, 0.5),
             "overhead": parts.overhead(4.0)}

    def regime(ph):
        total = parts.total(ph)
        return parts.REGIMES[int(parts.regime(parts.roof_seconds(
            total, ph.get("overhead", parts.ZERO).time_s)))]

    total = parts.total(phase)
    assert [float(x) for x in parts.roof_seconds(total, 4.0)] == pytest.approx(
        [2.3, 2.8, 0.5, 4.0])
    assert regime(phase) == "host"
    del phase["overhead"]
    assert regime(phase) == "memory"
    phase["c"] = Part(1.25, 1.0, 1.0, 0.3, 1.25, 0.0)
    assert regime(phase) == "compute"


def _one(text: str):
    return sweep(parse_study(text, "<t>"), progress=False)


def test_decode_streams_and_a_long_prompt_computes_on_the_roofline():
    """Llama-2-7B on one H100 (plain roofline). Batch 1, 512 in / 256 out: decode reads
    13.5 GB of weights per token (4.0 ms at 3.35 TB/s) for 14 GFLOP (14 us at 989
    TFLOP/s), 255 steps against one prefill: decode, memory. Batch 8 x 4000 in / 16 out:
    the prefill is 8 x 4000 x 14 GFLOP = 431 TFLOP (0.44 s) for 13.5 GB read, and the 15
    decode steps take ~60 ms: prefill, compute."""
    decode = _one(study_text(model="llama-2-7b", hardware="h100-sxm", batch=1, input_len=512,
                             output_len=256))
    assert (int(decode["dominant_phase"]), int(decode["regime"])) == (1, 1)
    prefill = _one(study_text(model="llama-2-7b", hardware="h100-sxm", batch=8,
                              input_len=4000, output_len=16))
    assert (int(prefill["dominant_phase"]), int(prefill["regime"])) == (0, 0)
    assert prefill["regime"].attrs["flag_meanings"] == "compute memory communication host"


def test_training_regime_is_a_dataset_variable():
    """A 7B model's training step on 8 A100s is compute-bound (its matmuls are large)."""
    text = study_text(model="llama-2-7b", hardware="a100-80gb", tp=1, pp=1, num_devices=8,
                      seq_len=4096, global_batch=64, micro_batch=1)
    ds = _one(text.replace('name = "t"', 'name = "t"\nmode = "training"'))
    assert parts.REGIMES[int(ds["regime"])] == "compute"


SMALL = """[study]
name = "small-decode"
calibration = "{root}/calibrations/public.toml"
framework = "llama.cpp"
dtype = "float64"
[axes]
model = "qwen3-0.6b"
hardware = "h100-sxm"
batch = 1
input_len = 1024
output_len = 1024
[sensitivity]
metrics = ["tpot_s", "ttft_s"]
"""


@pytest.fixture(scope="module")
def small_decode():
    study = parse_study(SMALL.format(root=ROOT), "<small>")
    return study, sensitivity(study)


def test_a_host_bound_decode_under_llama_cpp_says_so(small_decode):
    """Qwen3-0.6B at batch 1 on an H100 under llama.cpp's fit: per token, 28 layers x the
    fitted per-layer overhead + the per-step overhead + the per-sequence one (read from
    calibrations/public.toml; no family offsets on overheads) is ~3.0 ms of host time,
    against ~0.6 ms of streaming. Only the streaming scales with bandwidth, so by hand
    d log TPOT / d log BW = -(TPOT - host) / TPOT (~ -0.17); on the plain roofline decode
    is all streaming (-1). The report says host-bound against memory-bound and prints
    the disagreement line."""
    study, ds = small_decode
    fit = tomllib.loads((ROOT / "calibrations" / "public.toml").read_text())
    fit = fit["framework"]["llama.cpp"]
    layers = json.loads((ROOT / "tests" / "data" / "hf_configs" / "qwen3-0.6b.json"
                         ).read_text())["num_hidden_layers"]
    host = layers * fit["layer_overhead_s"] + fit["step_overhead_s"] + fit["seq_overhead_s"]
    tpot = float(ds["base_tpot_s"])
    assert host > 2 * (tpot - host)  # host-bound by the file's own numbers
    assert float(ds["tpot_s"].sel(hw_param="hbm_bw")) == pytest.approx(-(tpot - host) / tpot,
                                                                      abs=2e-3)
    assert float(ds["roofline_tpot_s"].sel(hw_param="hbm_bw")) == pytest.approx(-1.0, abs=2e-3)
    assert (int(ds["regime"]), int(ds["roofline_regime"])) == (3, 1)
    (_, one), = workloads(ds)
    assert regime_text(one).startswith("Regime: decode, host-bound calibrated; decode, "
                                       "memory-bound on the plain roofline")
    line = disagreement_line(one)
    assert "tpot_s to hbm_bw" in line and "hbm_efficiency" not in line  # said once
    assert line in markdown(ds, {}, ROOT / "x.nc")


def test_agreeing_answers_print_no_disagreement_line():
    """The plain roofline is its own twin: a study under it has no roofline_* variables,
    and identical elasticities are no disagreement."""
    ds = sensitivity(parse_study(study_text(model="llama-2-7b", hardware="h100-sxm", batch=1,
                                            input_len=512, output_len=256), "<t>"))
    assert "roofline_tpot_s" not in ds
    (_, one), = workloads(ds)
    assert regime_text(one) == ("Regime: decode, memory-bound (the roof with the most "
                                "seconds in the dominant phase).")
    assert disagreement_line(one) is None


# the README's study shape at two batches
TWO_BATCHES = """[study]
name = "s"
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
batch = [1, 64]
input_len = 512
output_len = 256
"""


def test_summary_rows_show_the_bound_and_the_roofline_twin_is_compared(monkeypatch):
    """The README's study shape under the generic fit: each summary row ends with its
    bound, and compare() re-evaluates the shown points on the plain roofline, whose
    times are never longer (every efficiency 1, no overheads)."""
    study = parse_study(TWO_BATCHES, "<s>")
    ds = sweep(study, progress=False)
    summary = sweep_summary(ds, 1.0)
    assert "bound" in summary and "decode: memory" in summary
    loaded = len(programs._LOADED)
    rows = compare(study, ds)
    assert len(rows) == 2
    for row in rows:
        assert row["roofline"]["tpot_s"] <= row["calibrated"]["tpot_s"]
        assert row["roofline"]["ttft_s"] <= row["calibrated"]["ttft_s"]
    # the twin ran through the sweep's own program (the roofline's tables with the study's
    # surfaces in them, unread): nothing compiled, and the values those of a program of
    # the shown points alone, bit for bit
    assert study.calibration is not None and ds.attrs.get("kernel_tables")
    assert programs.directory() is not None  # (the test run keeps programs: conftest)
    assert len(programs._LOADED) == loaded
    monkeypatch.setattr(regime, "REEVALUATED_POINTS", {"load": 0, "static": 0})
    assert compare(study, ds) == rows
    found = disagreement(study, ds)
    worst = max(abs(np.log(r["calibrated"][m] / r["roofline"][m])) for r in rows
                for m in r["calibrated"])
    assert (found is not None) == (worst > np.log(2.0))
    if found is not None:
        assert "calibrated vs plain roofline" in found.line()


def test_a_study_writing_fewer_outputs_compares_through_a_program_of_its_own():
    """A study whose [output] variables leave out the regime: the sweep's program does not
    compute it, so the shown points get a program of their own (it crashed on the missing
    output), with the same values as the whole grid's check would give."""
    text = TWO_BATCHES + """[output]
variables = ["tpot_s", "ttft_s", "valid", "reason", "throughput_per_device_tok_s"]
"""
    study = parse_study(text, "<s>")
    ds = sweep(study, progress=False)
    assert "regime" not in ds
    rows = compare(study, ds)
    full = parse_study(TWO_BATCHES, "<s>")
    whole = compare(full, sweep(full, progress=False))
    assert len(rows) == len(whole) == 2
    for mine, theirs in zip(rows, whole):  # (the regime labels: only the full study's)
        assert (mine["point"], mine["roofline"], mine["calibrated"], mine["valid"]) == (
            theirs["point"], theirs["roofline"], theirs["calibrated"], theirs["valid"])
        assert mine["regime_roofline"] == theirs["regime_roofline"]

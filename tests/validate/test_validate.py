"""dse validate / calibrate: row mapping, the fit's gradients, the shipped calibration's
errors on the public measurements, studies under a calibration, uncertainty bands."""

from __future__ import annotations

import csv
import io

import jax
import numpy as np
import pytest

from dse.catalogue import calibration as C
from dse.cli import main
from dse.study import parse_study
from dse.run.sweep import sweep
from dse.uncertainty import bands
from dse.validate import calibrate, default_calibration, validate
from dse.validate.validation import build_problem
from dse.validate import fit as F
from dse.validate.predict import predict
from dse.validate.rows import match_hardware, precision_bits, read

from ..conftest import ROOT

DATA = ROOT / "data" / "measured_public.csv"


@pytest.fixture(scope="module")
def public():
    return validate(DATA, holdout=False)


def test_every_row_is_predicted_or_listed(public):
    """Acceptance: every row is scored or has a status, and >= 98% are scored."""
    with DATA.open() as f:
        n_rows = sum(1 for _ in csv.DictReader(f))
    assert len(public.cases) + len(public.skips) == n_rows
    counts = public.statuses()
    assert sum(counts.values()) == n_rows and counts["scored"] >= 0.98 * n_rows, counts
    # the data README names these two source anomalies (4 rows): flagged, not scored
    flagged = {c.id for c in public.cases if c.flag}
    assert {"xd_l3_a100_sxm_80gb_x1_8B_F16_pp512", "xd_l3_a100_sxm_80gb_x1_8B_F16_pp4096",
            "xd_l3_l40s_48gb_x1_8B_F16_pp512", "xd_l3_l40s_48gb_x1_8B_F16_pp4096"} <= flagged
    # the others carry the inconsistency their notes record ("ANOMALY: ...")
    assert all(c.flag.startswith("source anomaly") for c in public.cases if c.flag)


def test_shipped_calibration_meets_the_error_target(public):
    """Median APE with the shipped calibration: <= 15% for training, decode and prefill;
    <= 25% for serving throughput, whose 1,125 rows span MoE models, Blackwell, FP4 and
    engines' attention-DP / wide-EP layouts the model does not represent; far better than
    the plain roofline on the same rows everywhere."""
    stats = public.stats()
    assert set(stats) == {"train", "serving_throughput", "infer_decode", "infer_prefill"}
    for kind, by in stats.items():
        target = 25.0 if kind == "serving_throughput" else 15.0
        assert by["calibrated"]["median_ape"] <= target, (kind, by["calibrated"])
        assert by["roofline"]["median_ape"] > 2 * by["calibrated"]["median_ape"], kind


def test_precision_strings_to_bits():
    # fp8 W/A/KV (TensorRT-LLM ModelOpt checkpoints)
    assert precision_bits("fp8 w/a, fp8 kv (ModelOpt ckpt)") == dict(
        weight_bits=8.0, act_bits=8.0, kv_bits=8.0, quant_group_size=0.0)
    # GGUF Q4_K_M: 4.84 bits per weight (llama.cpp examples/quantize/README.md, Llama 2 7B)
    assert precision_bits("gguf Q4_K_M weights, f16 act/kv")["weight_bits"] == 4.84
    assert precision_bits("gguf F16 weights, f16 act/kv")["weight_bits"] == 16.0
    # MXFP8 is an 8-bit format (OCP MX spec: an E8M0 scale per 32 values adds 0.25 bit):
    # its GEMMs and stored activations run at 8 bits
    assert precision_bits("mxfp8") == dict(weight_bits=8.25, act_bits=8.0, kv_bits=8.25,
                                           quant_group_size=0.0)
    # weight-only INT4 (uint4 in MLPerf's system descriptions) dequantizes to 16 bits
    assert precision_bits("uint4 weights")["act_bits"] == 16.0
    # NVFP4: 4-bit values + one fp8 scale per 16 = 4.5 bits, 4-bit compute
    assert precision_bits("nvfp4")["weight_bits"] == 4.5
    assert precision_bits("nvfp4")["act_bits"] == 4.0
    assert precision_bits("amp_bf16")["weight_bits"] == 16.0
    with pytest.raises(ValueError):
        precision_bits("q9_mystery")


def test_hardware_names_match_the_catalogue():
    assert match_hardware("A100-SXM4-80GB (RoCE 1600Gbps/node)") == "a100-80gb"
    assert match_hardware("A100 SXM 80GB") == "a100-80gb"
    assert match_hardware("A100 PCIe 80GB") == "a100-pcie-80gb"
    assert match_hardware("RTX 4000 Ada 20GB") == "rtx-4000-ada"
    # issue 40: names as sources write them, with the memory size, the GPU's core count
    # and the rack's NVLink domain beside the name (the memory matched in GB or GiB)
    assert match_hardware("GB200-192GB (NVL72)") == "gb200"
    assert match_hardware("NVIDIA GB200 NVL72") == "gb200"
    assert match_hardware("Apple M2 Ultra 76-Core GPU 192GB") == "m2-ultra"
    assert match_hardware("M3 Max 40-Core GPU") == "m3-max"
    assert match_hardware("MI300X 192GB") == "mi300x"
    # a size two cards share names neither: SXM or PCIe, H200 SXM or NVL
    assert match_hardware("A100 80GB") is None and match_hardware("H200 141GB") is None
    assert match_hardware("H100 80GB HBM3") is None  # the nvidia-smi string is an alias
    # devices issue 40 names, with cards now
    assert match_hardware("RTX 5080") == "rtx-5080" and match_hardware("RTX 3060") == "rtx-3060"
    assert match_hardware("DGX Spark") == "dgx-spark"
    assert match_hardware("Jetson AGX Orin 64GB") == "jetson-agx-orin"
    assert match_hardware("H100-SXM5-80GB") == "h100-sxm"
    assert match_hardware("Quantum Abacus 9000") is None


def test_roofline_decode_by_hand(public):
    """llama.cpp tg512, Llama-3-8B Q4_K_M, RTX 4090, batch 1: the plain roofline reads
    every weight but the embedding table once per token (the lookup reads one row), at
    4.84 bits, from 1008 GB/s; the KV cache (<= 512 tokens x 128 KiB) adds < 2%."""
    i = next(k for k, c in enumerate(public.cases) if c.id == "xd_l3_rtx_4090_24gb_x1_8B_Q4_K_M_tg512")
    d, v, layers, ff, kv = 4096, 128256, 32, 14336, 8 * 128
    params = layers * (d * d * 2 + 2 * d * kv + 3 * d * ff) + d * v  # attention, MLP, LM head
    hand = 1008e9 / (params * 4.84 / 8)
    assert public.predictions["roofline"][i] == pytest.approx(hand, rel=0.03)


@pytest.fixture(scope="module")
def small():
    """A dozen rows of every kind and framework (fast fits)."""
    cases, _ = read(DATA)
    pick = [c for k in ("train", "serving_throughput", "infer_decode", "infer_prefill")
            for c in [c for c in cases if c.kind == k][::12]]
    return build_problem(pick, None)


def test_gradient_matches_finite_differences(small):
    with jax.enable_x64(True):
        theta = F.start(small).theta + np.random.default_rng(0).normal(0, 0.3, F.start(small).theta.size)
        w = F.row_weights(small, np.ones(small.size, bool))
        prec = F.prior_precision(small)
        theta0 = F.start(small).theta
        loss = jax.jit(lambda t: F.objective(t, small, w, theta0, prec))
        grad = np.asarray(jax.jit(jax.grad(lambda t: F.objective(t, small, w, theta0, prec)))(theta))
        eps = 1e-5
        for j in range(theta.size):
            e = np.zeros_like(theta)
            e[j] = eps
            fd = (loss(theta + e) - loss(theta - e)) / (2 * eps)
            assert grad[j] == pytest.approx(float(fd), rel=1e-4, abs=1e-8), j


def test_fit_decreases_loss_and_error(small):
    include = np.ones(small.size, bool)
    theta, history = F.fit_folds(small, include[None], steps=150)
    assert history[0, -1] < 0.5 * history[0, 0]
    with jax.enable_x64(True):
        before = np.median(np.abs(np.log(np.asarray(predict(F.start(small).theta, small))
                                         / small.measured)))
        after = np.median(np.abs(np.log(np.asarray(predict(theta[0], small)) / small.measured)))
    assert after < before


def test_calibration_file_round_trip(tmp_path):
    cal = C.load(default_calibration())
    text = C.dumps(cal)
    again = C.loads(text)
    np.testing.assert_allclose(again.theta, cal.theta, rtol=1e-12)
    np.testing.assert_allclose(again.covariance, cal.covariance, rtol=1e-12)
    assert again.values("tensorrt-llm", "h200") == pytest.approx(cal.values("tensorrt-llm", "h200"))
    # a device of a family with no data gets the nearest fitted family's values (an M2
    # Ultra: consumer Ada's); one of no family at all (a user's own hardware file) the
    # framework base
    assert cal.values("llama.cpp", "m2-ultra") == cal.values("llama.cpp", "rtx-4090")
    assert cal.values("llama.cpp", "my-own-chip") == pytest.approx(
        dict(zip(C.NAMES, C.from_unconstrained_all(cal.base[cal.frameworks.index("llama.cpp")]))))


def test_a_floored_fraction_stays_above_its_floor_and_files_record_it(tmp_path, capsys):
    # hbm_efficiency = 0.5 + 0.5 sigmoid(z): z -> -inf gives the floor, z = 0 the middle
    # of (0.5, 1), and the transform round-trips (by hand: 0.75 <-> z = 0)
    assert C.from_unconstrained("hbm_efficiency", -50.0) == pytest.approx(0.5)
    assert C.from_unconstrained("hbm_efficiency", 0.0) == pytest.approx(0.75)
    assert C.to_unconstrained("hbm_efficiency", 0.75) == pytest.approx(0.0, abs=1e-12)
    assert C.from_unconstrained("gemm_efficiency", 0.0) == pytest.approx(0.5)  # no floor
    text = C.dumps(C.load(default_calibration()))
    assert "floors = {hbm_efficiency = 0.5}" in text
    # a file written with other transforms (an older dse: no floors) is refused, naming
    # the key, rather than read with its offsets meaning something else
    old = tmp_path / "old.toml"
    old.write_text(text.replace("floors = {hbm_efficiency = 0.5}\n", ""))
    assert main(["validate", str(DATA), "--calibration", str(old), "-o",
                 str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert "calibration.floors" in err and "hbm_efficiency >= 0.5" in err and err.count("\n") == 1
    assert not (tmp_path / "v").exists()


def test_a_csv_with_a_byte_order_mark_is_read_and_one_in_latin1_refused(tmp_path, capsys):
    # issue 36 rows 4 and 11: a spreadsheet's "CSV UTF-8" export starts with a byte-order
    # mark (it read as part of the first column's name: "id: column missing"); a Latin-1
    # byte was a UnicodeDecodeError traceback
    from dse.validate import rows

    head = b"".join(DATA.read_bytes().splitlines(keepends=True)[:3])
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + head)
    plain = tmp_path / "plain.csv"
    plain.write_bytes(head)
    assert [c.id for c in rows.read(bom)[0]] == [c.id for c in rows.read(plain)[0]]
    latin = tmp_path / "latin.csv"
    latin.write_bytes(head + head.splitlines(keepends=True)[1].replace(b",", b"\xe9,", 1))
    assert main(["validate", str(latin), "-o", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert "latin.csv: encoding: byte 0xe9 on line 4 is not UTF-8" in err and err.count("\n") == 1
    assert not (tmp_path / "v").exists()


DECODE_STUDY = """
[study]
name = "tg512"
dtype = "float64"
calibration = "{cal}"
framework = "llama.cpp"
[axes]
model = "llama-3-8b"
hardware = "rtx-4090"
batch = 1
input_len = 1
output_len = 512
weight_bits = 4.84
quant_group_size = 0
flash_attention = false
"""


def test_study_under_a_calibration_matches_validate(public):
    """A study naming the calibration predicts what validate predicts for the same row."""
    study = parse_study(DECODE_STUDY.format(cal=default_calibration()), "tg512.toml")
    ds = sweep(study, progress=False)
    i = next(k for k, c in enumerate(public.cases) if c.id == "xd_l3_rtx_4090_24gb_x1_8B_Q4_K_M_tg512")
    assert 1.0 / float(ds.tpot_s) == pytest.approx(public.predictions["calibrated"][i], rel=1e-9)
    assert "llama.cpp" in ds.attrs["calibration_framework"]


def test_bands_bracket_the_fitted_value():
    study = parse_study(DECODE_STUDY.format(cal=default_calibration()).replace(
        "batch = 1", "batch = [1, 8]"), "tg512.toml")
    b = bands(study, samples=48)
    point = sweep(study, progress=False)
    lo, mid, hi = (b.tpot_s.sel(quantile=q).values for q in (0.05, 0.5, 0.95))
    assert np.all(lo < mid) and np.all(mid < hi)
    assert np.all((point.tpot_s.values > lo) & (point.tpot_s.values < hi))


def test_cli_validate_prints_tables_and_lists_unexpressible_rows(tmp_path, capsys):
    text = DATA.read_text().splitlines()
    h100 = next(t for t in text if t.startswith("xd_l3_h100") and "H100 PCIe 80GB" in t)
    bad = text[0] + "\n" + "\n".join(text[1:40]) + "\n" + h100.replace(
        "H100 PCIe 80GB", "Quantum Abacus 9000").replace("xd_l3_h100", "weird_h100")
    path = tmp_path / "rows.csv"
    path.write_text(bad + "\n")
    assert main(["validate", str(path), "--no-holdout", "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "median APE" in out and "not expressible:" in out and "Quantum Abacus 9000" in out
    assert (tmp_path / "out" / "validate.png").stat().st_size > 10_000


def test_cli_exits_quietly_into_a_closed_pipe(tmp_path, monkeypatch):
    """``dse validate ... | head``: the reader is gone; exit 141 (as cat), no traceback."""
    import io
    import os

    path = tmp_path / "rows.csv"
    path.write_text("\n".join(DATA.read_text().splitlines()[:20]) + "\n")
    read, write = os.pipe()
    os.close(read)
    stdout = io.TextIOWrapper(os.fdopen(write, "wb"), write_through=False)
    monkeypatch.setattr("sys.stdout", stdout)
    assert main(["validate", str(path), "--no-holdout", "--json",
                 "-o", str(tmp_path / "out")]) == 141


def test_cli_validate_with_holdouts(tmp_path, capsys):
    """--holdout adds the leave-one-out columns (here on the first rows of three sources,
    to keep the fit small); --holdout-by names them, from a fixed set."""
    import json

    lines = DATA.read_text().splitlines()
    head, rows = lines[0], lines[1:]
    pick = [r for r in rows if r.startswith("foundry_")][:12] + [
        r for r in rows if r.startswith("xd_")][:12] + [r for r in rows if r.startswith("trtllm")][:12]
    path = tmp_path / "few.csv"
    path.write_text("\n".join([head, *pick]) + "\n")
    assert main(["validate", str(path), "--holdout", "--json", "-o", str(tmp_path / "a")]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    for kind in stats.values():
        assert set(kind) == {"calibrated", "roofline", "leave_one_hardware_out",
                             "leave_one_model_out", "leave_one_source_out"}
    assert main(["validate", str(path), "--holdout", "--holdout-by", "vendor"]) == 2
    err = capsys.readouterr().err
    assert "--holdout-by" in err and "hardware, model, source" in err


@pytest.mark.parametrize("argv, needle", [
    (["validate", "/nonexistent.csv"], "file not found"),
    (["calibrate", str(DATA), "-o", "out.json"], "a path ending in .toml"),
])
def test_cli_bad_input(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_study_calibration_errors(tmp_path):
    from dse.errors import InputError

    text = DECODE_STUDY.format(cal=default_calibration())
    with pytest.raises(InputError, match="study.framework"):
        parse_study(text.replace('"llama.cpp"', '"lmdeploy"'), "s.toml")
    with pytest.raises(InputError, match="study.calibration"):
        parse_study(text.replace(str(default_calibration()), "missing.toml"), "s.toml")


def test_bands_carry_the_model_error_on_timed_metrics_only():
    """With the model's error the 5-95% band of a time is at least the residual log-SD's
    lognormal band, exp(+-1.645 sigma), around its median; memory (bytes: no timing
    error) keeps the parameter draws' band."""
    study = parse_study(DECODE_STUDY.format(cal=default_calibration()), "tg512.toml")
    sigma = float(study.calibration.info["residual_log_sd"])
    wide, narrow = bands(study, samples=32), bands(study, samples=32, model_error=False)
    lo, mid, hi = (float(wide.tpot_s.sel(quantile=q)) for q in (0.05, 0.5, 0.95))
    assert np.log(hi / mid) >= 1.645 * sigma * (1 - 1e-9)
    assert np.log(mid / lo) >= 1.645 * sigma * (1 - 1e-9)
    n_lo, n_hi = (float(narrow.tpot_s.sel(quantile=q)) for q in (0.05, 0.95))
    assert np.log(n_hi / n_lo) < np.log(hi / lo)
    np.testing.assert_array_equal(wide.memory_bytes.values, narrow.memory_bytes.values)


def test_coverage_counts_held_out_rows_inside_the_interval_by_hand():
    """Ten rows of five models, held-out log errors 0.1 x (-4..5): the fixed interval
    exp(+-1.645 x 0.2) = +-0.329 holds |e| <= 0.329: the seven of -0.3..0.3. Nested: each model's pair is judged on the 5-95% quantiles of the other
    eight errors; the two extreme models' rows fall outside (their errors lie beyond
    the rest), the middle three inside: 6 of 10."""
    from types import SimpleNamespace

    from dse.validate.validation import Validation

    errors = 0.1 * np.arange(-4, 6)
    cases = [SimpleNamespace(kind="decode_throughput", metric="tokens_per_s", flag="",
                             measured=1.0, model_name=f"m{i // 2}") for i in range(10)]
    pred = np.exp(-errors)  # log(measured / predicted) = errors
    v = Validation(cases, [], {"calibrated": pred, "leave_one_model_out": pred},
                   np.zeros(10), "cal", "data", 0.2)
    got = v.coverage()["decode_throughput"]["leave_one_model_out"]
    assert got["n"] == 10 and got["fixed"] == pytest.approx(0.7)
    assert got["nested"] == pytest.approx(0.6)


def test_mean_ttft_rows_are_judged_at_the_ttft_scale():
    """Mean-TTFT rows take the calibration's TTFT scale (0.5 here: |e| <= 0.822 holds
    errors of 0.8 and not 0.9), TPOT rows the static fit's (0.2: 0.329)."""
    from types import SimpleNamespace

    from dse.validate.validation import Validation

    errors = np.array([0.3, 0.8, 0.9, 0.3, 0.8, 0.9])
    cases = [SimpleNamespace(kind="serving_latency", metric=m, flag="", measured=1.0,
                             model_name=f"m{i}") for i, m in enumerate(["ttft_ms"] * 3
                                                                       + ["tpot_ms"] * 3)]
    pred = np.exp(-errors)
    v = Validation(cases, [], {"calibrated": pred, "leave_one_model_out": pred},
                   np.zeros(6), "cal", "data", 0.2, 0.5)
    cover = v.coverage()
    assert cover["serving_latency ttft_ms"]["leave_one_model_out"]["fixed"] == pytest.approx(2 / 3)
    assert cover["serving_latency tpot_ms"]["leave_one_model_out"]["fixed"] == pytest.approx(1 / 3)

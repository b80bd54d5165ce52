"""The serving stack's frontend (calibration parameter request_overhead_s, output
frontend_s; dse.validate.frontend): what it adds to a deployment under load, by hand, and
its fit on serving-latency rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.catalogue import calibration as C
from dse.run.sweep import sweep
from dse.study import parse_study
from dse.validate import frontend

from ..helpers import study_text

ROOT = Path(__file__).resolve().parents[2]
F = 0.25  # seconds of frontend in the tests' calibration


@pytest.fixture(scope="module")
def calibrations(tmp_path_factory):
    """The shipped calibration with every framework's frontend at F, and at none."""
    cal = C.load(ROOT / "calibrations" / "public.toml")
    out = tmp_path_factory.mktemp("cal")
    with_f = C.save(frontend.set_frontend(cal, {fw: F for fw in cal.frameworks}),
                    out / "f.toml")
    without = C.save(frontend.set_frontend(cal, {fw: frontend.ZERO for fw in cal.frameworks}),
                     out / "zero.toml")
    return with_f, without


def _sweep(calibration, **axes):
    text = study_text(model="llama-3.1-8b", hardware="h100-sxm", framework="vllm",
                      input_len=1000, output_len=200, tp=1, **axes)
    text = text.replace('calibration = "none"',
                        f'calibration = "{calibration}"\ndtype = "float64"')
    return sweep(parse_study(text, "<t>"), progress=False)


def test_a_frontend_adds_to_ttft_and_e2e_and_a_closed_loop_runs_fewer(calibrations):
    """By hand: every TTFT and E2E (mean and percentiles) gains F, TPOT none. An open
    loop's throughput is its rate; a closed loop of c = 8 clients (all in the engine,
    which holds more) completes c / (c / X + F) requests/s where it completed X."""
    with_f, without = calibrations
    for load in (dict(request_rate=2.0), dict(concurrency=8)):
        a, b = _sweep(with_f, **load), _sweep(without, **load)
        assert float(a.frontend_s) == pytest.approx(F, rel=1e-12)
        assert float(b.frontend_s) == pytest.approx(0.0, abs=1e-8)
        for key in ("ttft_s", "e2e_s", "ttft_p50_s", "ttft_p99_s", "e2e_p90_s"):
            assert float(a[key] - b[key]) == pytest.approx(F, rel=1e-6), key
        for key in ("tpot_s", "tpot_p90_s", "queue_s"):
            assert float(a[key]) == pytest.approx(float(b[key]), rel=1e-9), key
        x = float(b.request_throughput_req_s)
        want = 2.0 if "request_rate" in load else 8.0 / (8.0 / x + F)
        assert float(a.request_throughput_req_s) == pytest.approx(want, rel=1e-9)


def test_a_disaggregated_deployment_counts_the_frontend_once(calibrations):
    with_f, without = calibrations
    axes = dict(serving="disagg", prefill_workers=1, prefill_tp=1, decode_workers=1,
                decode_tp=1, request_rate=1.0)
    a, b = _sweep(with_f, **axes), _sweep(without, **axes)
    for key in ("ttft_s", "e2e_s", "ttft_p99_s", "e2e_p99_s"):
        assert float(a[key] - b[key]) == pytest.approx(F, rel=1e-6), key
    assert float(a.tpot_s) == pytest.approx(float(b.tpot_s), rel=1e-9)


def test_fit_offset_recovers_a_known_frontend():
    """Engine TTFTs of 20 ms to 2 s, measured = engine + 0.1 s with 5% lognormal noise
    and a fifth of the rows 3x slower for reasons of their own: the median-log fit finds
    0.1 s within 10% (the grid's step is 2.4%)."""
    rng = np.random.default_rng(0)
    engine = np.exp(rng.uniform(np.log(0.02), np.log(2.0), 400))
    measured = (engine + 0.1) * np.exp(rng.normal(0.0, 0.05, 400))
    measured[:80] *= 3.0
    assert frontend.fit_offset(engine, measured) == pytest.approx(0.1, rel=0.1)


def test_a_framework_without_a_fit_joins_as_a_copy_of_its_chain():
    """SGLang joins a calibration without an SGLang fit as vLLM's fit (base and its
    covariance block), perfectly correlated with it: the covariance stays positive
    semidefinite."""
    cal = C.load(ROOT / "calibrations" / "generic.toml")
    cal = C.Calibration(("vllm", "generic"), cal.families,
                        np.vstack([cal.base, cal.base + 0.1]), cal.offset, cal.family_of,
                        None)
    n_p, n_fam = len(C.NAMES), len(cal.families)
    rng = np.random.default_rng(1)
    a = rng.normal(size=(n_p * (2 + n_fam),) * 2)
    cal = C.Calibration(cal.frameworks, cal.families, cal.base, cal.offset, cal.family_of,
                        a @ a.T)
    out = frontend.with_frameworks(cal, ["sglang", "vllm", "megatron"])
    assert out.frameworks == ("vllm", "generic", "sglang")
    assert np.array_equal(out.base[2], cal.base[0])
    new, src = slice(2 * n_p, 3 * n_p), slice(0, n_p)
    assert np.array_equal(out.covariance[new, new], cal.covariance[src, src])
    assert np.array_equal(out.covariance[new, src], cal.covariance[src, src])
    assert np.linalg.eigvalsh(out.covariance).min() > -1e-9 * np.abs(out.covariance).max()
    offsets = slice(3 * n_p, None)
    assert np.array_equal(out.covariance[new, offsets], cal.covariance[src, 2 * n_p:])


def test_the_fit_reads_each_frameworks_ttft_rows(tmp_path):
    """Two measured runs (tests/validate/test_silicon.py's MiniMax-M2.5 on vLLM and
    Llama-3.1-8B on TensorRT-LLM): each framework's frontend is fitted on its one TTFT
    row, so engine TTFT + frontend meets the measured TTFT within the grid's step
    (2.4%); a framework without rows keeps its value."""
    from dse.validate.calibrate import engine_ttft_s, fit_frontend
    from dse.validate.rows import case
    from dse.validate.silicon import convert

    from .test_silicon import UPSTREAM

    src = tmp_path / "silicon.csv"
    src.write_text(UPSTREAM)
    convert(src, tmp_path / "rows.csv", "0.12.0")
    import csv
    with (tmp_path / "rows.csv").open() as f:
        cases = [c for c in map(case, csv.DictReader(f))  # the aggregated runs
                 if hasattr(c, "knobs") and not c.knobs.get("serving")]
    cal = C.load(ROOT / "calibrations" / "public.toml")
    fitted, info = fit_frontend(cal, cases)
    # each row is met within the grid's step, |log error| < log 1.025, so TTFT's scale
    # (the 90% quantile of |log error| over 1.645) is below log(1.025) / 1.645
    assert info.pop("ttft_residual_log_sd") < np.log(1.025) / 1.645
    assert info == {"frontend_rows_vllm": 1, "frontend_rows_tensorrt-llm": 1}
    rows, engine, measured = engine_ttft_s(fitted, frontend.rows_of(cases))
    for c, e, m in zip(rows, engine, measured):
        f = fitted.values(c.framework, c.hardware)[frontend.NAME]
        assert abs((e + f) / m - 1.0) < 0.025
    assert fitted.values("llama.cpp", "h100-sxm")[frontend.NAME] == pytest.approx(
        cal.values("llama.cpp", "h100-sxm")[frontend.NAME])

"""dse sensitivity: elasticities vs finite differences, kinks, inverse answers, report."""

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from dse.catalogue import lookup as catalogue
from dse.core.evaluator import Evaluator
from dse.core.trace import function_dependencies
from dse.run.chunks import chunk_point, plan
from dse.cli import main
from dse.sensitivity import sensitivity
from dse.study import parse_study

from .conftest import STUDIES
from .helpers import study_text

HW_PARAMS = {"hbm_bw": "hbm_bw_bytes_per_s", "peak_flops_16": "flops_per_s_16",
             "intra_bw": "intra_bw_bytes_per_s", "intra_latency": "intra_latency_s"}


def one_point(**axes):
    text = study_text(**axes).replace('name = "t"', 'name = "t"\ndtype = "float64"')
    return parse_study(text, "<t>")


METRICS = ("ttft_s", "tpot_s")


def finite_differences(study, field, h=1e-5):
    """Central differences of log(metric) in log(field), changing the hardware table."""
    evaluator = Evaluator.of(study, METRICS)
    hardware = evaluator.hardware
    point = chunk_point(study, plan(study.shape, 1 << 20)[0])
    values = []
    with jax.enable_x64(True):
        for f in (1 + h, 1 - h):
            hw = dataclasses.replace(hardware, **{field: getattr(hardware, field) * f})
            out = evaluator.traced(point, hardware=hw)
            values.append({m: float(out[m]) for m in METRICS})
    return {m: (np.log(values[0][m]) - np.log(values[1][m])) / (np.log1p(h) - np.log1p(-h))
            for m in METRICS}


@settings(max_examples=12, deadline=None)
@given(model=st.sampled_from(["llama-2-7b", "llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b"]),
       hardware=st.sampled_from(["a100-80gb", "h100-sxm", "mi300x", "l40s"]),
       tp=st.sampled_from([1, 2, 4]), batch=st.integers(1, 256),
       input_len=st.integers(32, 4000), output_len=st.integers(2, 1000))
def test_elasticities_match_finite_differences(model, hardware, tp, batch, input_len,
                                               output_len):
    assume(catalogue.load_model(model).divisors_ok(tp))
    study = one_point(model=model, hardware=hardware, tp=tp, batch=batch, input_len=input_len,
                      output_len=output_len, memory_scale=100.0)
    ds = sensitivity(study)
    for param, field in HW_PARAMS.items():
        fd = finite_differences(study, field)
        for metric in METRICS:
            e = ds[metric].sel(hw_param=param).item()
            up = ds[metric + "_up"].sel(hw_param=param).item()
            down = ds[metric + "_down"].sel(hw_param=param).item()
            if not np.isfinite(e) or abs(up - down) > 1e-9:
                continue  # at a kink: no derivative to compare with
            assert e == pytest.approx(fd[metric], rel=1e-3, abs=1e-6), (param, metric)


def test_decode_is_bandwidth_bound_and_prefill_compute_bound():
    """Batch-1 decode on one device: TPOT elasticity -1 to HBM bandwidth, 0 to FLOPS.
    A 8 x 4000-token prefill: TTFT elasticity near -1 to FLOPS and near 0 to bandwidth
    (the norms, SiLU and KV append stay memory-bound: about 7% of the time)."""
    decode = sensitivity(one_point(model="llama-2-7b", hardware="h100-sxm", batch=1,
                                   input_len=512, output_len=256))
    assert decode["tpot_s"].sel(hw_param="hbm_bw").item() == pytest.approx(-1.0, abs=0.005)
    assert decode["tpot_s"].sel(hw_param="peak_flops_16").item() == pytest.approx(0.0, abs=1e-9)
    prefill = sensitivity(one_point(model="llama-2-7b", hardware="h100-sxm", batch=8,
                                    input_len=4000, output_len=16))
    assert -1.0 <= prefill["ttft_s"].sel(hw_param="peak_flops_16").item() < -0.9
    assert -0.1 < prefill["ttft_s"].sel(hw_param="hbm_bw").item() <= 0.0


def test_a_roofline_tie_is_reported_one_sided():
    """Scale the peak so the decode MLP gate/up matmul sits exactly on the ridge.

    Llama-2-7B, batch 64: gate/up is [64, 4096] x [4096, 22016] at 16 bits: compute
    2 x 64 x 4096 x 22016 / P, memory (4096 x 22016 + 64 x (4096 + 22016)) x 2 / BW.
    At P = their ratio x BW the two tie: JAX's derivative there would be the 0.5/0.5
    average; dse reports the two one-sided slopes and no single elasticity.
    """
    hw = catalogue.load_hardware("h100-sxm").spec()
    b, d, n = 64, 4096, 2 * 11008
    flops = 2 * b * d * n
    bytes_ = (d * n + b * (d + n)) * 2
    peak = flops / bytes_ * float(hw.hbm_bw_bytes_per_s)
    ds = sensitivity(one_point(model="llama-2-7b", hardware="h100-sxm", batch=b, input_len=128,
                               output_len=64, tflops_scale=peak / float(hw.flops_per_s_16)))
    tpot = ds["tpot_s"].sel(hw_param="hbm_bw")
    assert np.isnan(tpot.item())
    assert bool(ds["kink_at_point"].sel(hw_param="hbm_bw"))
    up = ds["tpot_s_up"].sel(hw_param="hbm_bw").item()
    down = ds["tpot_s_down"].sel(hw_param="hbm_bw").item()
    assert up > down  # more bandwidth helps less once the matmul turns compute-bound


def test_kink_flag_marks_roof_changes_inside_the_interval():
    ds = sensitivity(parse_study(study_text(
        model="llama-2-7b", hardware="h100-sxm", batch=[1, 8, 100, 150, 200, 250, 300],
        input_len=512, output_len=64), "<k>"))
    kink = ds["kink"].sel(hw_param="hbm_bw")
    assert not kink.sel(batch=1) and not kink.sel(batch=8)
    # H100 bf16 ridge: 989e12 / 3.35e12 = 295 FLOP/byte; decode matmuls have intensity
    # about the batch, so a +-10% bandwidth change flips them near batch 270-330
    assert kink.sel(batch=300)


def test_output_axes_are_those_of_a_shape_trace():
    """The sensitivity outputs' axes, read off the evaluator's dependencies, are those a
    shape trace of the differentiated program finds (axes of length 2). TTFT does not
    vary with output_len, TPOT does; the base values keep their own metric's axes."""
    import functools

    from dse.sensitivity.analysis import elasticity_dependencies, elasticity_variables
    from dse.sensitivity.elasticity import Spec, sensitivities

    study = parse_study(study_text(model="llama-2-7b", hardware=["h100-sxm", "a100-80gb"],
                                   batch=[1, 64], input_len=512, output_len=[64, 256],
                                   hbm_bw_scale=[1.0, 2.0]), "<deps>")
    cfg = study.sensitivity_config()
    spec = Spec(study.mode, cfg.metrics, cfg.params, cfg.delta, 1e-3, study.features)
    extra = {k: lead for k, (lead, _, _) in elasticity_variables(cfg, study.mode).items()}
    evaluator = Evaluator.of(study, cfg.metrics + ("valid", "bound_signature"))
    traced = function_dependencies(study, evaluator, functools.partial(sensitivities, spec=spec),
                                   extra)
    assert elasticity_dependencies(study, evaluator, extra) == traced
    assert "output_len" not in traced["base_ttft_s"] and "output_len" in traced["base_tpot_s"]


def test_inverse_answers_meet_the_target():
    ds = sensitivity(STUDIES / "sensitivity-genz.toml")
    study = parse_study((STUDIES / "sensitivity-genz.toml").read_text(), "<genz>")
    checked = 0
    for i, q in enumerate(ds["query"].values):
        param, metric, bound = q.split(" by ")[1], q.split(" ")[0], float(q.split(" ")[2])
        knob = {"hbm_bw": "hbm_bw_scale", "link_bw": "link_bw_scale",
                "tflops": "tflops_scale"}[param]
        for usecase in ds["usecase"].values:
            for batch in ds["batch"].values:
                scale = ds["required_scale"].isel(query=i).sel(usecase=usecase, batch=batch).item()
                if not np.isfinite(scale):
                    continue
                from dse.run.sweep import sweep

                again = sweep(study.at(usecase=str(usecase), batch=int(batch),
                                       **{knob: scale}), progress=False)
                value = again[metric].item()
                assert value <= bound * (1 + 1e-9)
                assert value == pytest.approx(bound, rel=0.005), (q, usecase, batch)
                checked += 1
    assert checked >= 6
    # 'no amount' answers are honest: at 1000x the resource the goal still fails
    assert np.isnan(ds["required_scale"].sel(query="ttft_s <= 0.5 by link_bw", usecase="chat",
                                             batch=16)).item()


def test_genz_report(genz_sensitivity):
    code, out = genz_sensitivity  # dse sensitivity GENZ -o OUT -q, shared with test_report
    assert code == 0
    tmp_path = out.parent
    md = (tmp_path / "genz.md").read_text()
    html = (tmp_path / "genz.html").read_text()
    assert "## usecase=chat, batch=1" in md and "## usecase=summarization, batch=16" in md
    assert "Effect of +-10%" in md and "| hbm_bw |" in md and "## Inverse questions" in md
    for i in range(4):
        png = tmp_path / f"genz-tornado-{i}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert png.name in md and png.name in html
    assert "Workload mix" in md


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

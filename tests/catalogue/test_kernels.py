"""Measured GEMM efficiency surfaces (dse.catalogue.kernels): the shipped tables give back
the upstream measurements at their nodes, the builder reproduces what it was given, the
evaluator divides the roofline at the point's peaks, and a broken file is one line."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from dse.catalogue import kernel_build, kernels
from dse.catalogue.lookup import load_hardware
from dse.formulas import operators as op, parts
from dse.formulas.types import Rates

ROOT = Path(__file__).resolve().parents[2]


def _rates(hardware: str, framework: str, weight_bits: float, act_bits: float) -> Rates:
    spec = load_hardware(hardware).spec()
    t = kernels.table_index(hardware, framework)
    assert t >= 0
    peak = {16: spec.flops_per_s_16, 8: spec.flops_per_s_8}[max(weight_bits, act_bits)]
    slot = 1.0 if max(weight_bits, act_bits) == 8 else 0.0
    # the calibrated rates are nonsense on purpose: a surface-priced matmul must not read them
    return Rates(1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 8.0,
                 gemm_surface=jnp.asarray(kernels.efficiency([int(t)])), kernel_table=0.0,
                 kernel_slot=slot, gemm_peak_flops_per_s=float(peak),
                 hbm_peak_bytes_per_s=float(spec.hbm_bw_bytes_per_s))


# aiconfigurator-core 0.12.0, systems/data/h200_sxm/gemm/trtllm/1.3.0rc20/gemm_perf.parquet
# (Apache-2.0): measured latency in ms of [m, k] x [k, n] GEMMs on an H200 SXM. Each
# shape sits on a node of the shipped grid, so the surface must give it back to the
# float16 rounding of its stored efficiency.
MEASURED_H200_TRTLLM = [  # (dtype bits, m, n, k, ms)
    (16, 4096, 4096, 4096, 0.17546133200327554),
    (16, 16, 8192, 8192, 0.03568000098069509),
    (8, 1, 4096, 4096, 0.01662000020345052),
]


@pytest.mark.parametrize("bits, m, n, k, ms", MEASURED_H200_TRTLLM)
def test_a_matmul_at_a_node_takes_its_measured_time(bits, m, n, k, ms):
    rates = _rates("h200", "trtllm", bits, bits)
    part = parts.of(op.matmul(float(m), float(k), float(n), float(bits), float(bits)), rates)
    assert float(part.time_s) == pytest.approx(ms * 1e-3, rel=2e-3)
    # the roofline's sides are divided alike: the bound is the roofline's
    roof_c = 2.0 * m * n * k / rates.gemm_peak_flops_per_s
    roof_m = (k * n + m * k + m * n) * bits / 8.0 / rates.hbm_peak_bytes_per_s
    assert float(part.compute_s) / float(part.memory_s) == pytest.approx(roof_c / roof_m, rel=1e-5)


def test_what_if_bandwidth_moves_a_memory_bound_matmul_one_for_one():
    """A shape-only efficiency: +10% HBM bandwidth makes a decode GEMM (M = 1) 1/1.1 as
    long; the same on the FLOP/s peak changes nothing."""
    rates = _rates("h200", "trtllm", 8, 8)
    cost = op.matmul(1.0, 4096.0, 4096.0, 8.0, 8.0)
    base = float(parts.of(cost, rates).time_s)
    faster = rates._replace(hbm_peak_bytes_per_s=rates.hbm_peak_bytes_per_s * 1.1)
    assert float(parts.of(cost, faster).time_s) == pytest.approx(base / 1.1, rel=1e-6)
    more = rates._replace(gemm_peak_flops_per_s=rates.gemm_peak_flops_per_s * 1.1)
    assert float(parts.of(cost, more).time_s) == pytest.approx(base, rel=1e-6)


def test_a_device_without_a_table_keeps_the_calibrated_rate():
    rates = _rates("h200", "trtllm", 16, 16)._replace(kernel_table=-1.0)
    cost = op.matmul(64.0, 4096.0, 4096.0, 16.0, 16.0)
    part = parts.of(cost, rates)
    assert float(part.time_s) == pytest.approx(max(float(cost.flops), float(cost.bytes)))
    assert kernels.table_index("m3-max", "generic") == -1.0  # Apple: no measured family


def test_devices_and_frameworks_find_their_tables():
    surf = kernels.surfaces()
    assert surf.table_of("h200", "vllm")[1] == "h200/vllm"
    assert surf.table_of("h200", "generic")[1] == "h200/trtllm"
    assert surf.table_of("h200-nvl", "sglang")[1] == "h200/sglang"  # nearest measured device
    assert surf.table_of("m4-max", "generic") is None


def test_the_builder_reproduces_a_smooth_surface_off_its_nodes():
    """Efficiency exp(-0.1 log2 m + 0.05 log2 n - 0.02 log2 k): the nodes take it exactly
    (the builder interpolates log-efficiency in log2 shape, where it is linear), and the
    evaluator's linear interpolation between half- and whole-octave nodes is within a
    fraction of a percent of it at every held-out row (its curvature over one node step:
    at most ~0.3%)."""
    rng = np.random.default_rng(0)
    # every (n, k) column measured at 35 m, the grid's two ends first (rows 0 and 1 of
    # each block of 35: never among the fifth rows left out), n and k spanning the grid
    rows = [(m, n, k) for n in (32.0, 512.0, 1536.0, 4096.0, 65536.0)
            for k in (32.0, 1024.0, 3072.0, 65536.0)
            for m in (1.0, 32768.0, *2.0 ** rng.uniform(0, 15, 33))]
    m, n, k = (np.array(c) for c in zip(*rows))
    eff = np.exp(-0.1 * np.log2(m) + 0.05 * np.log2(n) - 0.02 * np.log2(k))
    roof = 1e-6 * np.ones_like(m)
    table = {"bf16": dict(m=m, n=n, k=k, latency_s=roof / eff, efficiency=eff, roofline_s=roof)}
    _, _, report = kernel_build.build({("h200_sxm", "trtllm"): ("1", table)}, holdout=True)
    assert report["bf16"]["p90"] < 4e-3
    stored, entries, _ = kernel_build.build({("h200_sxm", "trtllm"): ("1", table)}, False)
    assert entries[0]["filled"] == {"fp8": "bf16", "fp8_block": "bf16", "nvfp4": "bf16"}
    # float16 storage: within its rounding of the exact value at a node
    i, j, l = 24, 7, 8  # m = 2^12, n = 2^12, k = 2^13
    expected = np.exp(-0.1 * 12 + 0.05 * 12 - 0.02 * 13)
    assert float(stored[0, 0, i, j, l]) == pytest.approx(expected, rel=1e-3)


def test_the_shipped_manifest_states_its_source_licence_and_holdout():
    manifest = json.loads((ROOT / "kernels" / "manifest.json").read_text())
    assert "Apache License, Version 2.0" in manifest["licence"]
    assert manifest["source"].startswith("aiconfigurator-core")
    for slot, r in manifest["holdout"].items():
        assert r["median"] <= 0.05, slot  # issue 35's acceptance on held-out rows
    assert (ROOT / "kernels" / "gemm.npz").stat().st_size < 4e6


def _catalogue_with(tmp_path, damage):
    root = tmp_path / "cat"
    shutil.copytree(ROOT / "kernels", root / "kernels")
    damage(root / "kernels")
    return root


def _moe_axes_changed(folder):
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["moe"]["axes"]["k"]["log2_last"] = 15.0  # not the evaluator's MoE grid
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage, said", [
    (lambda d: (d / "gemm.npz").write_bytes(b"not the file"), "sha256"),
    (lambda d: (d / "manifest.json").write_text("{"), "manifest"),
    (_moe_axes_changed, "moe"),
])
def test_a_surface_file_that_does_not_match_its_manifest_is_one_line(tmp_path, damage, said):
    root = _catalogue_with(tmp_path, damage)
    study = tmp_path / "s.toml"
    study.write_text('[study]\nname = "s"\n[axes]\nmodel = "llama-3-8b"\nhardware = "h100-sxm"\n'
                     f'[output]\npath = "{tmp_path / "out.nc"}"\n')
    env = {**__import__("os").environ, "DSE_CATALOGUE": str(root)}
    r = subprocess.run([sys.executable, "-m", "dse", "sweep", str(study)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "kernels" in lines[0], r.stderr
    assert not (tmp_path / "out.nc").exists()


def test_a_card_naming_a_device_without_tables_is_one_line(tmp_path):
    card = (ROOT / "hardware" / "h200.toml").read_text().replace(
        'name = "h200"', 'name = "my-h200"\nkernel_tables = "h300"').replace(
        "aliases = [", "aliases_old = [").splitlines()
    card = "\n".join(line for line in card if not line.startswith("aliases_old"))
    (tmp_path / "my-h200.toml").write_text(card)
    study = tmp_path / "s.toml"
    study.write_text('[study]\nname = "s"\n[axes]\nmodel = "llama-3-8b"\n'
                     f'hardware = "{tmp_path / "my-h200.toml"}"\n'
                     f'[output]\npath = "{tmp_path / "out.nc"}"\n')
    r = subprocess.run([sys.executable, "-m", "dse", "sweep", str(study)],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "kernel_tables" in lines[0] and "'h300'" in lines[0], r.stderr
    assert "my-h200.toml" in lines[0] and "h200" in lines[0].split("'h300'")[-1]
    # named right, the card's matmuls run on H200's tables
    assert kernels.surfaces().table_of("my-h200", "vllm", "h200")[1] == "h200/vllm"


# aiconfigurator-core 0.12.0, systems/data/h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet
# (Apache-2.0): DeepSeek-V3's routed experts (hidden 7168, expert width 2048, top-8 of 256,
# block-scaled FP8, CUTLASS) on one H200 of an EP-8 group, routing balanced, measured
# latency in ms by the tokens entering the group.
# The tolerance: 15% where the kernel streams its experts; 35% at 4,096 tokens (128 rows
# per expert, compute-bound), where the surface's three axes merge DeepSeek's block-scaled
# GEMMs (a quarter of the FP8 peak) with the faster ones of other models at the same shape.
MEASURED_H200_TRTLLM_MOE = [(8, 0.113717, 0.15), (64, 0.361376, 0.15), (512, 0.396517, 0.15),
                            (4096, 0.725787, 0.35)]


def _moe_rates(hardware: str, framework: str) -> Rates:
    surf = kernels.surfaces()
    t = int(kernels.table_index(hardware, framework))
    return _rates(hardware, framework, 8, 8)._replace(
        moe_surface=jnp.asarray(surf.moe_efficiency[[t]]))


@pytest.mark.parametrize("tokens, ms, tolerance", MEASURED_H200_TRTLLM_MOE)
def test_routed_experts_take_the_measured_moe_kernel_time(tokens, ms, tolerance):
    """By hand at 64 tokens: 64 x 8 / 8 = 64 token-expert rows on the device, a new expert
    for each until its 32 are all in use, so the kernel streams 32 x 3 x 7168 x 2048 bytes
    = 1.41 GB: 0.294 ms at 4.8 TB/s, 0.81 of the measured 0.361 ms. The evaluator prices
    the two grouped GEMMs at that shape through the MoE surface, which was built from
    these rows: within 15% of each where the experts stream, 35% where they compute (the
    surface smooths across the table's other models)."""
    rows, hit, width, shape = kernel_build.moe_shape(float(tokens), 7168.0, 2048.0, 8.0,
                                                     256.0, 1.0, 8.0)
    if tokens == 64:
        assert (rows, hit) == (64.0, 32.0)
        assert 32 * 3 * 7168 * 2048 / 4.8e12 == pytest.approx(0.294e-3, rel=2e-3)
    rates = _moe_rates("h200", "trtllm")._replace(kernel_slot=2.0)  # fp8_block
    up = op.grouped_matmul(rows, 7168.0, 2.0 * width, hit, 8.0, 8.0)
    down = op.grouped_matmul(rows, width, 7168.0, hit, 8.0, 8.0)
    total = sum(float(parts.of(c._replace(shape=shape + c.shape, surface="moe"), rates).time_s)
                for c in (up, down))
    assert total == pytest.approx(ms * 1e-3, rel=tolerance)
    # without the MoE surface the same matmuls read the GEMM surface at their own shapes
    plain = rates._replace(moe_surface=None)
    gemm = sum(float(parts.of(c._replace(shape=shape + c.shape, surface="moe"), plain).time_s)
               for c in (up, down))
    assert gemm == pytest.approx(sum(float(parts.of(c, plain).time_s) for c in (up, down)))


def test_the_moe_surface_is_read_as_the_builder_interpolates_it():
    """The evaluator's read (JAX, dse.formulas.roofline.surface_efficiency on the MoE grid)
    and the builder's (NumPy, kernel_build.interpolate) agree off the nodes, clamped at
    the edges too."""
    surf = kernels.surfaces()
    t = int(kernels.table_index("b200", "sglang"))
    grid = surf.moe_efficiency[t, 3]
    shapes = [(3.3, 40000.0, 5000.0), (700.0, 3e6, 7168.0), (0.2, 90.0, 900.0),
              (17.0, 1536.0 * 12, 4096.0)]
    rates = _moe_rates("b200", "sglang")._replace(kernel_slot=3.0)
    for m, n, k in shapes:
        expected = kernel_build.interpolate(grid, m, n, k, kernels.MOE_AXES)
        got = parts.surface_efficiency(rates.moe_surface, 0.0, 3.0, m, n, k,
                                       axes=parts.MOE_SURFACE_AXES)
        assert float(got) == pytest.approx(float(expected), rel=1e-5)


def test_the_moe_manifest_states_its_source_and_holdout():
    """Held out (every fifth shape of each table): the MoE surfaces' median errors are
    6-9% per slot and their p90 32-48% (the latest build; issue 35 asks 5% and 15%): a
    device's routed experts are more than three numbers (expert width and count trade at
    one total width). Bounds a little above the build's, so a worse builder fails."""
    moe = json.loads((ROOT / "kernels" / "manifest.json").read_text())["moe"]
    assert "moe_perf.parquet" in moe["licence"] and "Apache License" in moe["licence"]
    for slot, r in moe["holdout"].items():
        assert r["median"] <= 0.10 and r["p90"] <= 0.50, (slot, r)
    assert {e["from_backend"] for e in moe["tables"]} <= {"trtllm", "vllm", "sglang"}


def test_a_calibration_fitted_with_moe_surfaces_prices_the_routed_experts_by_them(tmp_path):
    """The MoE surfaces are opt-in (dse calibrate --moe-surfaces records them in the
    calibration's ``kernels``): under the shipped calibration a DeepSeek-V3 decode reads
    its experts off the GEMM surface; under the same calibration marked as fitted with the
    MoE surfaces only the MoE component moves (the attention, the projections and the
    collectives are bit for bit the same), and the Dataset names the MoE tables' source."""
    from dse.study import parse_study
    from dse.run.sweep import sweep

    text = (ROOT / "calibrations" / "public.toml").read_text()
    assert "GEMM surfaces" in text and kernels.MOE_WORDS not in text
    moe = tmp_path / "moe.toml"
    moe.write_text(text.replace("GEMM surfaces", kernels.MOE_WORDS))
    study = ('[study]\nname = "t"\ndtype = "float64"\ncalibration = "{}"\nframework = "tensorrt-llm"\n'
             '[axes]\nmodel = "deepseek-v3"\nhardware = "h200"\ntp = 8\nep = 8\n'
             'weight_bits = 8\nact_bits = 8\nbatch = 64\ninput_len = 1024\noutput_len = 256\n'
             '[output]\nbreakdown = true\n')
    plain, routed = (sweep(parse_study(study.format(p), "<t>"), progress=False).squeeze()
                     for p in (ROOT / "calibrations" / "public.toml", moe))
    assert "moe_perf.parquet" in routed.attrs["kernel_source"]
    assert "moe_perf.parquet" not in plain.attrs["kernel_source"]
    comp = {c: (float(plain.component_s.sel(phase="decode", component=c)),
                float(routed.component_s.sel(phase="decode", component=c)))
            for c in plain.component.values}
    assert comp["moe"][0] != comp["moe"][1]
    for c in ("attention", "qkv_proj", "o_proj", "ep_comm"):
        assert comp[c][0] == comp[c][1], c

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


@pytest.mark.parametrize("damage, said", [
    (lambda d: (d / "gemm.npz").write_bytes(b"not the file"), "sha256"),
    (lambda d: (d / "manifest.json").write_text("{"), "manifest"),
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

"""Build ``kernels/gemm.npz`` and ``kernels/manifest.json`` from aiconfigurator-core's
measured GEMM tables (:mod:`dse.catalogue.kernels` says what they hold).

    pip install "dse[kernels]"          # aiconfigurator-core, pandas, pyarrow
    python -m dse.catalogue.kernel_build -o kernels

For every system dse's catalogue names and every backend (TensorRT-LLM, vLLM, SGLang;
the newest version with a GEMM table), each measured row becomes an efficiency: dse's
roofline of that GEMM at the device's catalogue peaks over the measured latency. The
surface at a node of the fixed grid is the log-efficiency interpolated linearly in
log2 M along each measured (N, K) column, then in log2 N and log2 K (clamped at the
table's edges); between the nodes, the evaluator interpolates the efficiency linearly. A slot a table did not measure is filled from the nearest one measured
(fp8_block from fp8, nvfp4 from fp8, fp8 from bf16), and the manifest says so.

Held out: the build is repeated with every fifth measured row (in (dtype, N, K, M)
order) left out, and those rows are predicted from the surface exactly as the evaluator
interpolates it; the median and 90th percentile of |predicted / measured - 1| per
kernel kind go into the manifest (``holdout``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import zipfile
from pathlib import Path

import numpy as np

from .kernels import AIC_SYSTEMS, AXES, SLOTS, axis

SYSTEMS = AIC_SYSTEMS  # upstream system folder -> the catalogue's device
# slot -> (weight bits, activation bits) of dse's count of its bytes and its peak's width
UPSTREAM = {"bf16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
BITS = {"bf16": (16, 16), "fp8": (8, 8), "fp8_block": (8, 8), "nvfp4": (4, 4)}
FILL = {"fp8_block": ("fp8", "bf16"), "nvfp4": ("fp8", "bf16"), "fp8": ("bf16",),
        "bf16": ("fp8",)}
LICENCE = ("Derived from NVIDIA aiconfigurator-core {version} (systems/data/*/gemm/*/*/"
           "gemm_perf.parquet), Copyright (c) NVIDIA CORPORATION & AFFILIATES, licensed under "
           "the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0).")


def _version_key(v: str):
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.a-z]+", v) if x) + (v,)


def roofline_s(spec, m, n, k, slot):
    """dse's roofline of an [m, k] x [k, n] GEMM of ``slot`` at the device's peaks."""
    from ..formulas.operators import matmul
    w, a = BITS[slot]
    cost = matmul(m, k, n, w, a)
    peak = {16: spec.flops_per_s_16, 8: spec.flops_per_s_8, 4: spec.flops_per_s_4}[max(w, a)]
    return np.maximum(cost.flops / float(peak), cost.bytes / float(spec.hbm_bw_bytes_per_s))


def interpolate(grid, m, n, k):
    """Multilinear interpolation of ``grid`` [M, N, K] (efficiency at the nodes) at shapes
    (m, n, k), linear in each dimension between the nodes around it, clamped at the
    edges: the evaluator's rule (dse.formulas.roofline.surface_efficiency) in NumPy."""
    pos = []
    for name, x in (("m", m), ("n", n), ("k", k)):
        nodes = 2.0 ** axis(name)
        x = np.clip(np.asarray(x, float), nodes[0], nodes[-1])
        i = np.clip(np.searchsorted(nodes, x, side="right") - 1, 0, len(nodes) - 2)
        pos.append((i, (x - nodes[i]) / (nodes[i + 1] - nodes[i])))
    (i, fi), (j, fj), (l, fl) = pos
    out = 0.0
    for di, wi in ((0, 1 - fi), (1, fi)):
        for dj, wj in ((0, 1 - fj), (1, fj)):
            for dl, wl in ((0, 1 - fl), (1, fl)):
                out = out + wi * wj * wl * grid[i + di, j + dj, l + dl]
    return out


def _fill_nan(g):
    """Missing (N, K) columns take the nearest measured column along K, then N."""
    for ax in (2, 1):
        if not np.isnan(g).any():
            break
        idx = np.arange(g.shape[ax])
        moved = np.moveaxis(g, ax, -1)
        for pos in np.ndindex(moved.shape[:-1]):
            line = moved[pos]
            ok = ~np.isnan(line)
            if ok.any() and not ok.all():
                near = idx[ok][np.abs(idx[:, None] - idx[ok][None, :]).argmin(axis=1)]
                line[:] = line[near]
    return g


def grid_of(m, n, k, log_eff):
    """Node values [M, N, K] of log-efficiency from measured rows (any order)."""
    lm, ln, lk = np.log2(m), np.log2(n), np.log2(k)
    nv, kv = np.unique(ln), np.unique(lk)
    mn, nn, kn = axis("m"), axis("n"), axis("k")
    g = np.full((len(mn), len(nv), len(kv)), np.nan)
    for a, x in enumerate(nv):
        for b, y in enumerate(kv):
            sel = (ln == x) & (lk == y)
            if sel.any():
                order = np.argsort(lm[sel])
                g[:, a, b] = np.interp(mn, lm[sel][order], log_eff[sel][order])
    g = _fill_nan(g)
    along_n = np.stack([[np.interp(nn, nv, g[i, :, b]) for b in range(len(kv))]
                        for i in range(len(mn))])  # [M, K_meas, N]
    along_n = np.transpose(along_n, (0, 2, 1))  # [M, N, K_meas]
    return np.stack([[np.interp(kn, kv, along_n[i, j]) for j in range(len(nn))]
                     for i in range(len(mn))])


def read_tables(data: Path, catalogue_spec):
    """{(system, backend): (version, {slot: DataFrame of m, n, k, latency_s, efficiency})}."""
    import pandas as pd
    out = {}
    for system, hardware in SYSTEMS.items():
        spec = catalogue_spec(hardware)
        if spec is None:
            continue
        for backend_dir in sorted((data / system / "gemm").glob("*")):
            versions = sorted((v for v in backend_dir.iterdir()
                               if (v / "gemm_perf.parquet").is_file()),
                              key=lambda v: _version_key(v.name))
            if not versions:
                continue
            newest = versions[-1]
            df = pd.read_parquet(newest / "gemm_perf.parquet",
                                 columns=["gemm_dtype", "m", "n", "k", "latency"])
            slots = {}
            for slot in SLOTS:
                d = df[df.gemm_dtype == UPSTREAM[slot]]
                d = d[(d.latency > 0) & np.isfinite(d.latency)]
                if len(d) < 100:
                    continue
                d = d.groupby(["n", "k", "m"], as_index=False).latency.median()
                m, n, k = (d[c].to_numpy(float) for c in ("m", "n", "k"))
                lat = d.latency.to_numpy(float) * 1e-3  # upstream milliseconds
                eff = roofline_s(spec, m, n, k, slot) / lat
                slots[slot] = dict(m=m, n=n, k=k, latency_s=lat, efficiency=eff,
                                   roofline_s=lat * eff)
            if slots:
                out[(system, backend_dir.name)] = (newest.name, slots)
    return out


def build(tables, holdout: bool):
    """(efficiency array [T, S, M, N, K], table entries, held-out errors per slot)."""
    keys = sorted(tables)
    shape = (len(keys), len(SLOTS)) + tuple(len(axis(a)) for a in ("m", "n", "k"))
    eff = np.zeros(shape)
    entries, errors, spill = [], {s: [] for s in SLOTS}, {s: [] for s in SLOTS}
    for t, key in enumerate(keys):
        version, slots = tables[key]
        grids = {}
        for slot, d in slots.items():
            keep = np.ones(len(d["m"]), bool)
            if holdout:
                keep[4::5] = False
            grids[slot] = grid_of(d["m"][keep], d["n"][keep], d["k"][keep],
                                  np.log(d["efficiency"][keep]))
            if holdout:
                out = ~keep
                pred = interpolate(np.exp(grids[slot]), d["m"][out], d["n"][out], d["k"][out])
                errors[slot].append(np.abs(d["roofline_s"][out] / pred / d["latency_s"][out] - 1))
                # upstream measures M = 16 j + 1 beside 16 j: one row past a tile
                spill[slot].append((d["m"][out] > 17) & (d["m"][out] % 16 == 1))
        filled = {}
        for s, slot in enumerate(SLOTS):
            src = slot if slot in grids else next((f for f in FILL[slot] if f in grids), None)
            if src is None:
                src = next(iter(grids))
            if src != slot:
                filled[slot] = src
            eff[t, s] = np.exp(grids[src])
        system, backend = key
        entries.append(dict(system=system, hardware=SYSTEMS[system], backend=backend,
                            version=version, measured=sorted(grids, key=SLOTS.index),
                            filled=filled, rows=int(sum(len(d["m"]) for d in slots.values()))))
    report = {}
    for slot, errs in errors.items():
        if errs:
            e, past = np.concatenate(errs), np.concatenate(spill[slot])
            def p90(x):
                return float(np.quantile(x, 0.9)) if len(x) else None
            report[slot] = dict(rows=int(len(e)), median=float(np.median(e)), p90=p90(e),
                                p90_tile_rows=p90(e[past]), p90_other_rows=p90(e[~past]))
    return eff.astype(np.float16), entries, report


def npz_bytes(arrays: dict) -> bytes:
    """An .npz (what np.load reads) whose bytes depend on the arrays only: the same build
    gives the same SHA-256 (np.savez stamps each member with the current time)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, a in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(a), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, member.getvalue())
    return buf.getvalue()


def write(folder: Path, eff, entries, report, version: str):
    """The npz and its manifest, each written to a temporary file and moved into place."""
    from ..atomic import atomic_path
    folder.mkdir(parents=True, exist_ok=True)
    blob = npz_bytes(dict(efficiency=eff, **{f"log2_{a}": axis(a) for a in AXES}))
    manifest = dict(
        file="gemm.npz", sha256=hashlib.sha256(blob).hexdigest(), slots=list(SLOTS),
        axes={a: dict(log2_first=lo, log2_last=hi, log2_step=st) for a, (lo, hi, st)
              in AXES.items()},
        quantity="roofline time at the catalogue's peaks / measured time (dse.formulas."
                 "operators.matmul bytes and FLOPs; the dense peak of the slot's width)",
        source=f"aiconfigurator-core {version}", licence=LICENCE.format(version=version),
        holdout=report, tables=entries)
    with atomic_path(folder / "gemm.npz") as tmp:
        Path(tmp).write_bytes(blob)
    with atomic_path(folder / "manifest.json") as tmp:
        Path(tmp).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def package_data() -> tuple[Path, str]:
    from importlib.metadata import PackageNotFoundError, version
    from importlib.resources import files
    from ..errors import InputError
    try:
        v = version("aiconfigurator-core")
    except PackageNotFoundError:
        raise InputError("aiconfigurator-core", "package", "not installed",
                         'pip install "dse[kernels]", or --data DIR --version V') from None
    return Path(str(files("aiconfigurator_core") / "systems" / "data")), v


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dse.catalogue.kernel_build",
                                description="Build dse's GEMM efficiency surfaces from "
                                "aiconfigurator-core's measured kernel tables.")
    p.add_argument("-o", "--output", default="kernels")
    p.add_argument("--data", help="the upstream systems/data folder (default: the installed "
                   "package's)")
    p.add_argument("--version", help="the upstream package version (with --data)")
    a = p.parse_args(argv)
    from ..errors import InputError
    from .lookup import load_hardware
    try:
        if a.data:
            if not a.version:
                p.error("--data needs --version (the package version the tables come from)")
            data, version = Path(a.data), a.version
        else:
            data, version = package_data()
        if not data.is_dir():
            raise InputError(str(data), "data", "folder not found",
                             "aiconfigurator-core's systems/data")
        try:
            import pandas  # noqa: F401
            import pyarrow  # noqa: F401
        except ImportError as e:
            raise InputError("python", e.name or "pandas", "not installed",
                             'pip install "dse[kernels]"') from None

        def spec(hardware):
            try:
                return load_hardware(hardware).spec()
            except InputError:
                return None
        tables = read_tables(data, spec)
        if not tables:
            raise InputError(str(data), "gemm", "no GEMM table of a catalogue device",
                             "systems/data/<system>/gemm/<backend>/<version>/gemm_perf.parquet")
        _, _, report = build(tables, holdout=True)
        eff, entries, _ = build(tables, holdout=False)
        write(Path(a.output), eff, entries, report, version)
    except InputError as e:
        print(f"dse: error: {e}", file=sys.stderr)
        return 2
    print(f"{len(entries)} tables -> {a.output}/gemm.npz; held out (every fifth row):")
    for slot, r in report.items():
        print(f"  {slot:10s} {r['rows']:7d} rows  median {100 * r['median']:.1f}%  "
              f"p90 {100 * r['p90']:.1f}% (M one row past a tile {100 * r['p90_tile_rows']:.1f}%, "
              f"other rows {100 * r['p90_other_rows']:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

from .kernels import AIC_SYSTEMS, AXES, MOE_AXES, SLOTS, axis

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


def interpolate(grid, m, n, k, axes=None):
    """Multilinear interpolation of ``grid`` [M, N, K] (efficiency at the nodes) at shapes
    (m, n, k), linear in each dimension between the nodes around it, clamped at the
    edges: the evaluator's rule (dse.formulas.roofline.surface_efficiency) in NumPy.
    ``axes``: {name: (lo, hi, step)} of log2 nodes (the GEMM grid's by default)."""
    pos = []
    for name, x in (("m", m), ("n", n), ("k", k)):
        nodes = 2.0 ** (axis(name) if axes is None else nodes_of(axes[name]))
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


def _upstream(data: Path, op: str, file: str, catalogue_spec):
    """(system, its catalogue spec, backend folder, its version folders holding ``file``,
    oldest first) for every catalogue system's measured tables of ``op``."""
    for system, hardware in SYSTEMS.items():
        spec = catalogue_spec(hardware)
        if spec is None:
            continue
        for backend_dir in sorted((data / system / op).glob("*")):
            versions = sorted((v for v in backend_dir.iterdir() if (v / file).is_file()),
                              key=lambda v: _version_key(v.name))
            if versions:
                yield system, spec, backend_dir, versions


def read_tables(data: Path, catalogue_spec):
    """{(system, backend): (version, {slot: DataFrame of m, n, k, latency_s, efficiency})}."""
    import pandas as pd
    out = {}
    for system, spec, backend_dir, versions in _upstream(data, "gemm", "gemm_perf.parquet",
                                                         catalogue_spec):
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


# MoE: the upstream dtypes that stand for each slot, best first. An 8-bit MoE reads the
# block-scaled FP8 tables: the format of the published FP8 MoE checkpoints (DeepSeek-V3/R1,
# Qwen3-*-FP8, MiniMax-M2.5, GLM), and the kernels the engines run for them; vLLM's
# per-tensor FP8 MoE on Hopper measures 0.08-0.17 of the roofline where its block-scaled
# one measures 0.46-0.83 (decode shapes). Per-tensor FP8 where a table has no block rows;
# a 4-bit MoE as NVFP4, then MXFP4 with FP8 activations.
MOE_UPSTREAM = {"bf16": ("bfloat16",), "fp8": ("fp8_block", "fp8"),
                "fp8_block": ("fp8_block", "fp8"), "nvfp4": ("nvfp4", "w4a8_mxfp4_mxfp8")}
MOE_COLUMNS = ["moe_dtype", "kernel_source", "num_tokens", "hidden_size", "inter_size", "topk",
               "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"]
MOE_LICENCE = ("Derived from NVIDIA aiconfigurator-core {version} (systems/data/*/moe/*/*/"
               "moe_perf.parquet), Copyright (c) NVIDIA CORPORATION & AFFILIATES, licensed "
               "under the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0).")


def moe_shape(tokens, hidden, inter, topk, experts, moe_tp, moe_ep, balanced=True):
    """(rows, experts in use, expert width per device, surface (m, n, k)) of a routed MoE
    layer on one device of its EP group: ``tokens`` tokens enter the group, each routed to
    ``topk`` of ``experts``; a device holds experts / moe_ep of them, each split over
    moe_tp. The surface reads m = the device's token-expert rows (tokens x topk / ep),
    n = the width of every expert it holds side by side (experts / ep x inter / tp), k =
    the hidden size: dse.formulas.transformer prices the routed experts at the same
    shape."""
    local = experts / moe_ep
    width = inter / moe_tp
    rows = tokens * topk / moe_ep
    # balanced routing (upstream's "balanced"): a new expert for each token-expert pair
    # until every one has some; random routing: the expected distinct experts
    hit = np.where(balanced, np.minimum(local, rows),
                   local * (1.0 - (1.0 - topk / experts) ** tokens))
    return rows, hit, width, (rows / np.maximum(hit, 1.0), np.maximum(hit, 1.0) * width, hidden)


def moe_roofline_s(spec, rows, hit, width, hidden, matrices, slot):
    """dse's roofline of a device's routed experts (up/gate and down grouped matmuls,
    dse.formulas.operators.grouped_matmul) at the device's peaks, the slot's width."""
    from ..formulas.operators import grouped_matmul
    w, a = BITS[slot]
    peak = float({16: spec.flops_per_s_16, 8: spec.flops_per_s_8, 4: spec.flops_per_s_4}[max(w, a)])
    bw = float(spec.hbm_bw_bytes_per_s)
    total = 0.0
    for cost in (grouped_matmul(rows, hidden, (matrices - 1.0) * width, hit, w, a),
                 grouped_matmul(rows, width, hidden, hit, w, a)):
        total = total + np.maximum(np.asarray(cost.flops) / peak, np.asarray(cost.bytes) / bw)
    return total


def nodes_of(spec):
    lo, hi, step = spec
    return np.arange(lo, hi + step / 2, step)


def scattered_grid(m, n, k, log_eff, axes):
    """Node values [M, N, K] of log-efficiency from rows scattered in (M, N) (an MoE sweep
    over tokens moves both: rows per expert and the experts in use): for each measured K,
    linear interpolation on the Delaunay triangulation of the rows in (log2 M, log2 N),
    the nearest row outside their hull; then linear in log2 K between the measured K
    (clamped at the edges)."""
    from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator
    mn, nn, kn = (nodes_of(axes[a]) for a in ("m", "n", "k"))
    lm, ln, lk = np.log2(np.maximum(m, 2.0 ** mn[0])), np.log2(n), np.log2(k)
    nodes = np.stack(np.meshgrid(mn, nn, indexing="ij"), -1).reshape(-1, 2)
    kv = np.unique(lk)
    planes = []
    for y in kv:
        sel = lk == y
        pts = np.stack([lm[sel], ln[sel]], -1)
        near = NearestNDInterpolator(pts, log_eff[sel])(nodes)
        try:
            lin = LinearNDInterpolator(pts, log_eff[sel])(nodes)
        except Exception:  # too few or collinear rows: the nearest only
            lin = np.full(len(nodes), np.nan)
        planes.append(np.where(np.isnan(lin), near, lin).reshape(len(mn), len(nn)))
    planes = np.stack(planes, -1)  # [M, N, K_meas]
    return np.stack([[np.interp(kn, kv, planes[i, j]) for j in range(len(nn))]
                     for i in range(len(mn))])


def read_moe_tables(data: Path, catalogue_spec):
    """{(system, backend): {slot: (version, DataFrame-like dict of m, n, k, latency_s,
    efficiency, roofline_s)}} from the measured MoE tables (``moe_perf.parquet``): for
    each slot the version that measured the most shapes of its first dtype measured
    (:data:`MOE_UPSTREAM`; the newest of equals),
    routing balanced across experts (the smallest power law where a table has no
    balanced rows: dse's ``moe_imbalance`` adds the skew), the fastest kernel the engine
    offers at each shape (its MoE backends: CUTLASS, DeepGEMM, Triton, FlashInfer...)."""
    import pandas as pd
    out = {}
    for system, spec, backend_dir, versions in _upstream(data, "moe", "moe_perf.parquet",
                                                         catalogue_spec):
        frames = [(v.name, pd.read_parquet(v / "moe_perf.parquet", columns=MOE_COLUMNS))
                  for v in versions]
        slots = {}
        for slot in SLOTS:
            pick = None
            for dtype in MOE_UPSTREAM[slot]:
                found = [(version, df[(df.moe_dtype == dtype) & (df.latency > 0)
                                      & np.isfinite(df.latency)]) for version, df in frames]
                # the version that measured the most shapes (the newest of equals):
                # a release candidate that re-measured one kernel is not the table
                found = [f for f in found if len(f[1]) >= 100]
                if found:
                    pick = max(reversed(found), key=lambda f: len(f[1]))
                    break
            if pick is None:
                continue
            version, d = pick
            laws = sorted(d.distribution.unique(), key=lambda x: (
                x != "balanced", x != "uniform",
                float(x.split("_")[-1]) if x.startswith("power_law_") else 9.0))
            d = d[d.distribution == laws[0]]
            balanced = laws[0] == "balanced"
            d = d.assign(matrices=np.where(d.kernel_source.str.contains("nongated"), 2.0, 3.0))
            d = d.groupby(["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                           "moe_ep_size", "matrices", "num_tokens"],
                          as_index=False).latency.min()
            cols = {c: d[c].to_numpy(float) for c in d.columns}
            rows, hit, width, (m, n, k) = moe_shape(
                cols["num_tokens"], cols["hidden_size"], cols["inter_size"], cols["topk"],
                cols["num_experts"], cols["moe_tp_size"], cols["moe_ep_size"], balanced)
            lat = cols["latency"] * 1e-3  # upstream milliseconds
            roof = moe_roofline_s(spec, rows, hit, width, k, cols["matrices"], slot)
            # one efficiency per surface shape (different expert counts and top-k can
            # give one (m, n, k)): their median in the log
            g = pd.DataFrame(dict(m=m, n=n, k=k, lat=lat, roof=roof,
                                  le=np.log(roof / lat)))[rows >= 1.0]
            g = g.groupby(["n", "k", "m"], as_index=False).agg(
                le=("le", "median"), lat=("lat", "median"), roof=("roof", "median"))
            slots[slot] = (version, dict(
                m=g.m.to_numpy(float), n=g.n.to_numpy(float), k=g.k.to_numpy(float),
                latency_s=g.lat.to_numpy(float), efficiency=np.exp(g["le"].to_numpy(float)),
                roofline_s=g.roof.to_numpy(float)))
        if slots:
            out[(system, backend_dir.name)] = slots
    return out


def build_moe(tables, keys, holdout: bool):
    """(efficiency array [T, S, M, N, K] aligned with the GEMM ``keys``, per-table entries,
    held-out errors per slot). A table without MoE rows of its own backend takes its
    system's other backends' (TensorRT-LLM's first); a slot none measured is filled as
    the GEMM's are (:data:`FILL`)."""
    shape = (len(keys), len(SLOTS)) + tuple(len(axis(a, MOE_AXES)) for a in ("m", "n", "k"))
    eff = np.zeros(shape)
    entries, errors = [], {s: [] for s in SLOTS}
    grids_of = {}
    for key in sorted(tables):
        grids = {}
        for slot, (version, d) in tables[key].items():
            keep = np.ones(len(d["m"]), bool)
            if holdout:
                keep[4::5] = False
            grids[slot] = scattered_grid(d["m"][keep], d["n"][keep], d["k"][keep],
                                         np.log(d["efficiency"][keep]), MOE_AXES)
            if holdout:
                out = ~keep
                pred = interpolate(np.exp(grids[slot]), d["m"][out], d["n"][out], d["k"][out],
                                   MOE_AXES)
                errors[slot].append(np.abs(d["roofline_s"][out] / pred / d["latency_s"][out] - 1))
        grids_of[key] = grids
    for t, key in enumerate(keys):
        system, backend = key
        source = next((k for k in [key] + [(system, b) for b in ("trtllm", "vllm", "sglang")]
                       if k in grids_of), None)
        if source is None:
            raise ValueError(f"no measured MoE table for {system}")
        grids = grids_of[source]
        filled = {}
        for s, slot in enumerate(SLOTS):
            src = slot if slot in grids else next((f for f in FILL[slot] if f in grids),
                                                  next(iter(grids)))
            if src != slot:
                filled[slot] = src
            eff[t, s] = np.exp(grids[src])
        entries.append(dict(system=system, backend=backend, from_backend=source[1],
                            versions={s: v for s, (v, _) in tables[source].items()},
                            measured=sorted(grids, key=SLOTS.index), filled=filled,
                            rows=int(sum(len(d["m"]) for _, d in tables[source].values()))))
    report = {}
    for slot, errs in errors.items():
        if errs:
            e = np.concatenate(errs)
            report[slot] = dict(rows=int(len(e)), median=float(np.median(e)),
                                p90=float(np.quantile(e, 0.9)))
    return eff.astype(np.float16), entries, report


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


def write(folder: Path, eff, entries, report, version: str, moe=None):
    """The npz and its manifest, each written to a temporary file and moved into place.
    ``moe``: (efficiency, entries, held-out report) of the MoE surfaces."""
    from ..atomic import atomic_path
    folder.mkdir(parents=True, exist_ok=True)
    arrays = dict(efficiency=eff, **{f"log2_{a}": axis(a) for a in AXES})
    if moe is not None:
        arrays["moe_efficiency"] = moe[0]
    blob = npz_bytes(arrays)
    manifest = dict(
        file="gemm.npz", sha256=hashlib.sha256(blob).hexdigest(), slots=list(SLOTS),
        axes={a: dict(log2_first=lo, log2_last=hi, log2_step=st) for a, (lo, hi, st)
              in AXES.items()},
        quantity="roofline time at the catalogue's peaks / measured time (dse.formulas."
                 "operators.matmul bytes and FLOPs; the dense peak of the slot's width)",
        source=f"aiconfigurator-core {version}", licence=LICENCE.format(version=version),
        holdout=report, tables=entries)
    if moe is not None:
        manifest["moe"] = dict(
            array="moe_efficiency",
            axes={a: dict(log2_first=lo, log2_last=hi, log2_step=st) for a, (lo, hi, st)
                  in MOE_AXES.items()},
            quantity="roofline time of a device's routed experts at the catalogue's peaks "
                     "(dse.formulas.operators.grouped_matmul up/gate and down, the experts in "
                     "use) / measured time of the MoE kernel; m = rows per expert in use, "
                     "n = experts in use x expert width per device, k = hidden size",
            licence=MOE_LICENCE.format(version=version), holdout=moe[2], tables=moe[1])
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
        moe_tables = read_moe_tables(data, spec)
        keys = [(e["system"], e["backend"]) for e in entries]
        if any(system not in {s for s, _ in moe_tables} for system, _ in keys):
            raise InputError(str(data), "moe", "a system with GEMM tables has no MoE table",
                             "systems/data/<system>/moe/<backend>/<version>/moe_perf.parquet")
        _, _, moe_report = build_moe(moe_tables, keys, holdout=True)
        moe_eff, moe_entries, _ = build_moe(moe_tables, keys, holdout=False)
        write(Path(a.output), eff, entries, report, version,
              (moe_eff, moe_entries, moe_report))
    except InputError as e:
        print(f"dse: error: {e}", file=sys.stderr)
        return 2
    print(f"{len(entries)} tables -> {a.output}/gemm.npz; held out (every fifth row):")
    for slot, r in report.items():
        print(f"  {slot:10s} {r['rows']:7d} rows  median {100 * r['median']:.1f}%  "
              f"p90 {100 * r['p90']:.1f}% (M one row past a tile {100 * r['p90_tile_rows']:.1f}%, "
              f"other rows {100 * r['p90_other_rows']:.1f}%)")
    print("MoE held out (every fifth shape):")
    for slot, r in moe_report.items():
        print(f"  {slot:10s} {r['rows']:7d} rows  median {100 * r['median']:.1f}%  "
              f"p90 {100 * r['p90']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

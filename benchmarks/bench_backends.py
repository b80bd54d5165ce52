"""Every verb on every backend JAX has here: whole `dse` processes on the accelerator
(JAX's default backend) and on the host's CPU (``JAX_PLATFORMS=cpu``), same machine,
same run.

Each case runs cold (an empty cache directory: dse traces and compiles) and warm (the
same directory again), per backend; a case that fails says how (the last line of its
error), and the others go on. Sweeps that both backends finish are compared value by
value: the largest relative difference of any float output (float32 on both; XLA fuses
differently per backend, so the last places may differ).

Cases:

  example       studies/llama-serving.toml (the README's study, 1,728 points)
  serving-load  studies/serving-load.toml (closed and open loops under a load)
  disagg        studies/disagg-deepseek.toml (disaggregated prefill and decode)
  disagg-closed the same deployments under closed loops of 4-512 clients
  mtp           serving-load with speculative decoding (spec_tokens 0, 1, 3)
  training      studies/training-parallelism.toml
  pipeline      studies/pipeline-apple-lan.toml (cross-machine)
  2e6           the example widened to 1,996,800 points (bench_startup.py's)
  1e8           99.6 million points through the streamed reduction (bench_startup.py's)
  search        dse search studies/search-serving.toml
  sensitivity   dse sensitivity studies/sensitivity-genz.toml
  plan          dse plan studies/serving-load.toml --rate 50
  validate      dse validate data/measured_public.csv
  report        dse report of the example's sweep

Run: python benchmarks/bench_backends.py [--cases example,...] [--budget 300] [--json F]
Without an accelerator both columns are the CPU's (said so).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from bench_startup import EXAMPLE, STREAM, WIDER, _replaced

DSE = [sys.executable, "-m", "dse"]
STUDIES = ROOT / "studies"
SWEEPS = {"example": STUDIES / "llama-serving.toml", "serving-load": STUDIES / "serving-load.toml",
          "disagg": STUDIES / "disagg-deepseek.toml", "disagg-closed": None,
          "mtp": None,
          "training": STUDIES / "training-parallelism.toml",
          "pipeline": STUDIES / "pipeline-apple-lan.toml", "2e6": None, "1e8": None}
COMPARED = ("example", "serving-load", "disagg", "disagg-closed", "mtp", "training",
            "pipeline", "2e6")


def argv_of(case: str, out: Path, tmp: Path) -> list[str]:
    if case in SWEEPS:
        path = SWEEPS[case]
        if path is None:
            path = tmp / f"{case}.toml"
            if case == "disagg-closed":
                text = (STUDIES / "disagg-deepseek.toml").read_text().replace(
                    "request_rate = [2, 4, 8, 16]", "concurrency = [4, 32, 128, 512]")
                assert "concurrency" in text, "studies/disagg-deepseek.toml changed"
            elif case == "mtp":
                text = (STUDIES / "serving-load.toml").read_text().replace(
                    "tpot_slo_s = 0.05", "tpot_slo_s = 0.05\nspec_tokens = [0, 1, 3]\n"
                    "spec_acceptance = 0")
                assert "spec_tokens" in text, "studies/serving-load.toml changed"
            else:
                text = STREAM if case == "1e8" else _replaced(EXAMPLE, WIDER[case])
            path.write_text(text)
        return [*DSE, "sweep", str(path), "-o", str(out / f"{case}.nc"), "-q"]
    if case == "search":
        return [*DSE, "search", str(STUDIES / "search-serving.toml"), "-o",
                str(out / "search.nc"), "--no-progress"]
    if case == "sensitivity":
        return [*DSE, "sensitivity", str(STUDIES / "sensitivity-genz.toml"), "-o",
                str(out / "sensitivity.nc"), "-q"]
    if case == "plan":
        return [*DSE, "plan", str(STUDIES / "serving-load.toml"), "--rate", "50", "-o",
                str(out / "plan.csv")]
    if case == "validate":
        return [*DSE, "validate", str(ROOT / "data" / "measured_public.csv"), "-o",
                str(out / "validate.txt")]
    if case == "report":
        return [*DSE, "report", str(out / "example.nc"), "-o", str(out / "report.html")]
    raise SystemExit(f"unknown case {case!r}")


def run_case(case: str, platform: str | None, cache: Path, out: Path, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["DSE_CACHE_DIR"] = str(cache)
    if platform:
        env["JAX_PLATFORMS"] = platform
    result = {}
    for phase in ("cold", "warm"):
        start = time.perf_counter()
        done = subprocess.run(argv_of(case, out, tmp), env=env, capture_output=True,
                              text=True, cwd=ROOT, check=False)
        seconds = time.perf_counter() - start
        if done.returncode not in (0, 3):  # plan: 3 = no deployment serves the rate
            tail = (done.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            return {**result, "error": f"exit {done.returncode}: {tail[:300]}"}
        result[phase] = seconds
        result["stderr_lines"] = len(done.stderr.strip().splitlines())
    return result


def largest_difference(a: Path, b: Path) -> dict | None:
    """The largest relative difference of any float output between two results, over
    every point and over the points at most 90% utilized (near a deployment's capacity
    a latency's sensitivity to its inputs grows without bound: the last float32 place
    of a step time moves the running batch by whole requests), with the output named."""
    import numpy as np
    import xarray as xr

    if not (a.is_file() and b.is_file()):
        return None
    x, y = xr.open_dataset(a).load(), xr.open_dataset(b).load()
    worst = {"all": (0.0, ""), "utilization<=0.9": (0.0, "")}
    for name, var in x.data_vars.items():
        if var.dtype.kind != "f" or name not in y:
            continue
        extra = [x["utilization"]] if "utilization" in x else []
        p, q, *u = xr.broadcast(var.astype(np.float64), y[name].astype(np.float64), *extra)
        p_dims = p.dims
        p, q = p.values, q.transpose(*p_dims).values
        if not np.array_equal(np.isfinite(p), np.isfinite(q)):
            worst["all"] = (float("inf"), name)
        both = np.isfinite(p) & np.isfinite(q)
        scale = np.maximum(np.abs(p), np.abs(q))
        rel = np.where(both, np.abs(p - q) / np.where(scale > 0, scale, 1.0), 0.0)
        masks = {"all": np.ones(rel.shape, bool)}
        if u:
            masks["utilization<=0.9"] = ~(u[0].transpose(*p_dims).values > 0.9)
        for key, mask in masks.items():
            here = float(np.max(rel, where=mask, initial=0.0))
            if here > worst[key][0]:
                worst[key] = (here, name)
    return {k: {"relative": v, "output": n} for k, (v, n) in worst.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="example,serving-load,disagg,disagg-closed,mtp,"
                        "training,pipeline,"
                        "2e6,1e8,search,sensitivity,plan,validate,report")
    parser.add_argument("--platforms", default="default,cpu",
                        help="JAX platforms to run on (default: JAX's own choice)")
    parser.add_argument("--budget", type=float, default=1e9,
                        help="seconds after which no further case starts")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    import jax

    accelerator = jax.default_backend()
    kind = jax.devices()[0].device_kind
    print(f"JAX {jax.__version__}, default backend {accelerator} ({kind}), "
          f"{os.cpu_count()} CPU cores", flush=True)
    start = time.perf_counter()
    rows: dict = {}
    platforms = [None if p == "default" else p for p in args.platforms.split(",")]
    labels = [p or accelerator for p in platforms]
    with tempfile.TemporaryDirectory(prefix="dse-backends-") as tmp:
        tmp = Path(tmp)
        for label in labels:
            (tmp / f"out-{label}").mkdir()
        for case in args.cases.split(","):
            for platform, label in zip(platforms, labels):
                if time.perf_counter() - start > args.budget:
                    rows.setdefault(case, {})[label] = {"error": "skipped: over --budget"}
                    continue
                r = run_case(case, platform, tmp / f"cache-{label}", tmp / f"out-{label}", tmp)
                rows.setdefault(case, {})[label] = r
                print(f"{case:<13} {label:<5} " + "  ".join(
                    f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {v}"
                    for k, v in r.items()), flush=True)
        if len(labels) == 2:
            for case in COMPARED:
                if case in rows:
                    rows[case]["largest_relative_difference"] = largest_difference(
                        tmp / f"out-{labels[0]}" / f"{case}.nc",
                        tmp / f"out-{labels[1]}" / f"{case}.nc")
    print()
    head = " | ".join(f"{lb} cold, s | {lb} warm, s" for lb in labels)
    print(f"| case | {head} | largest relative difference |")
    print("|---" * (2 + 2 * len(labels)) + "|")
    for case, per in rows.items():
        cells = []
        for lb in labels:
            r = per.get(lb, {})
            if "error" in r:
                cells += [f"fails: {r['error'][:120]}", ""]
            else:
                cells += [f"{r.get('cold', float('nan')):.2f}", f"{r.get('warm', float('nan')):.2f}"]
        diff = per.get("largest_relative_difference")
        text = "" if not diff else "; ".join(
            f"{k}: {v['relative']:.1e} ({v['output']})" for k, v in diff.items() if v["output"])
        print(f"| {case} | " + " | ".join(cells) + f" | {text} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"jax": jax.__version__, "device": kind,
                                               "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

"""dse against llm-analysis (PyPI) on the same inference configurations.

llm-analysis evaluates one configuration per Python call; it runs here in its own
virtual environment (created on first use in benchmarks/.venv-llm-analysis, or give
--llm-analysis-python), over the 512 configurations of a grid both tools can express:
Llama-2 7B/70B x A100-80GB/H100-SXM x batch 1..128 x prompt 128..8192 x tp 1..8,
128 generated tokens, fp16, efficiencies 1. dse evaluates the same grid as one sweep,
and a 11-million-point grid for its steady-state rate. Printed, all measured now:
configurations/s of each, the per-configuration ratio, and the median ratio of the
two tools' decode latencies (a sanity check that they compute the same thing). Rates are best of 3 runs.

Run: python benchmarks/bench_peers.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dse.run.memory import run
from dse.results.dataset import to_dataset
from dse.study import parse_study

HERE = Path(__file__).resolve().parent
MODELS = {"llama-2-7b": "NousResearch_Llama-2-7b-hf",
          "llama-2-70b": "upstage_Llama-2-70b-instruct-v2"}
GPUS = {"a100-80gb": "a100-sxm-80gb", "h100-sxm": "h100-sxm-80gb"}
BATCH = [1, 2, 4, 8, 16, 32, 64, 128]
PROMPT = [128, 512, 2048, 8192]
TP = [1, 2, 4, 8]

PEER = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
from llm_analysis.analysis import infer
configs = json.load(sys.stdin)
best = None
for repeat in range(3):  # best of 3, as for dse
  out, failed, ok_seconds = [], 0, 0.0
  start = time.perf_counter()
  for c in configs:
    t0 = time.perf_counter()
    try:
        r = infer(model_name=c["model"], gpu_name=c["gpu"], dtype_name="w16a16e16",
                  log_level="CRITICAL", batch_size_per_gpu=c["batch"], tp_size=c["tp"],
                  seq_len=c["prompt"], num_tokens_to_generate=128, flops_efficiency=1.0,
                  hbm_memory_efficiency=1.0)
        out.append(r["decode_latency"])
        ok_seconds += time.perf_counter() - t0
    except Exception:
        failed += 1
        out.append(None)
  run = {"seconds": time.perf_counter() - start, "ok_seconds": ok_seconds,
         "decode_latency": out, "failed": failed}
  if best is None or run["ok_seconds"] < best["ok_seconds"]:
      best = run
json.dump(best, sys.stdout)
"""

STUDY = """
[study]
name = "peers"
calibration = "none"   # llm-analysis is a plain roofline too
[axes]
model = ["llama-2-7b", "llama-2-70b"]
hardware = ["a100-80gb", "h100-sxm"]
batch = [1, 2, 4, 8, 16, 32, 64, 128]
input_len = [128, 512, 2048, 8192]
tp = [1, 2, 4, 8]
output_len = 128
"""


def peer_python(given: str | None) -> Path:
    if given:
        return Path(given)
    venv = HERE / ".venv-llm-analysis"
    python = venv / "bin" / "python"
    if not python.exists():
        print("creating benchmarks/.venv-llm-analysis with llm-analysis from PyPI ...",
              file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        # the workplace's pinned set when it is there (../shared/peers), else PyPI's latest
        pinned = HERE.parents[1] / "shared" / "peers" / "requirements-llm-analysis.txt"
        what = ["-r", str(pinned)] if pinned.is_file() else ["llm-analysis"]
        subprocess.run([str(python), "-m", "pip", "install", "-q", *what], check=True)
    return python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm-analysis-python", help="python of an env with llm-analysis")
    args = parser.parse_args()

    configs = [{"model": MODELS[m], "gpu": GPUS[g], "batch": b, "prompt": s, "tp": t}
               for m in MODELS for g in GPUS for b in BATCH for s in PROMPT for t in TP]
    python = peer_python(args.llm_analysis_python)
    done = subprocess.run([str(python), "-c", PEER], input=json.dumps(configs),
                          capture_output=True, text=True, check=True)
    peer = json.loads(done.stdout)
    n_ok = len(configs) - peer["failed"]
    peer_rate = n_ok / peer["ok_seconds"]
    print(f"llm-analysis {len(configs)} configurations in a loop: {peer['seconds']:.3f} s; "
          f"{n_ok} evaluated at {peer_rate:,.0f} configurations/s ({peer['failed']} rejected "
          f"as infeasible, which dse returns as flagged results; their time is excluded)")

    study = parse_study(STUDY, "<bench>")
    start = time.perf_counter()
    arrays, deps = run(study)
    first = time.perf_counter() - start
    start = time.perf_counter()
    arrays, deps = run(study)
    again = time.perf_counter() - start
    print(f"dse, the same {study.size} configurations as one sweep: {first:.3f} s including "
          f"tracing and compilation ({study.size / first:,.0f}/s), {again * 1e3:.2f} ms "
          f"compiled ({study.size / again:,.0f}/s)")

    big = parse_study(STUDY.replace("tp = [1, 2, 4, 8]", "tp = [1, 2, 4, 8]\npp = [1, 2, 4]\n"
                                    "weight_bits = [16, 8, 4]\nkv_bits = [16, 8]\n"
                                    "tflops_scale = { start = 0.5, stop = 2.0, num = 24 }\n"
                                    "hbm_bw_scale = { start = 0.5, stop = 2.0, num = 24 }"),
                      "<bench>")
    run(big)
    t_big = float("inf")
    for _ in range(3):  # best of 3
        start = time.perf_counter()
        run(big)
        t_big = min(t_big, time.perf_counter() - start)
    rate = big.size / t_big
    print(f"dse steady state, {big.size:,}-point grid in memory: {rate:.3e} points/s")
    print(f"per configuration: dse is {rate / peer_rate:,.0f}x llm-analysis "
          f"(same 512 configurations, compiled: {study.size / again / peer_rate:,.0f}x; "
          f"including compilation: {study.size / first / peer_rate:.2f}x)")

    # Sanity: both tools' decode step latency, where llm-analysis returned one.
    ds = to_dataset(study, arrays, deps)
    dims = [a.name for a in study.dims]  # model, hardware, batch, input_len, tp: loop order
    ours = ds["tpot_s"].broadcast_like(ds["throughput_tok_s"]).transpose(*dims).values.ravel()
    theirs = np.array([np.nan if x is None else x for x in peer["decode_latency"]])
    ok = np.isfinite(theirs) & np.isfinite(ours) & (theirs > 0)
    ratio = ours[ok] / theirs[ok]
    print(f"decode latency dse / llm-analysis over {ok.sum()} configurations: median "
          f"{np.median(ratio):.2f}, 10-90% {np.percentile(ratio, 10):.2f}-"
          f"{np.percentile(ratio, 90):.2f} (definitions differ: dse's TPOT averages the "
          f"KV cache over the generation, llm-analysis decodes at the prompt length)")


if __name__ == "__main__":
    main()

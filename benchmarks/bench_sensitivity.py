"""Sensitivity throughput: elasticities per second on >= 10^6 points x 6 parameters.

Prints, measured in this run: the full `dse.sensitivity` (one-sided JVPs, exact +-10%
what-ifs with kink detection) and, as the baseline every re-running tool has, central
finite differences by two sweeps per parameter over the same grid.

Run: python benchmarks/bench_sensitivity.py
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from dse.core.evaluator import Evaluator
from dse.core.trace import dependencies
from dse.run.memory import run_function
from dse.sensitivity import sensitivity
from dse.study import parse_study

STUDY = """
[study]
name = "bench-sensitivity"
[axes]
model = ["llama-2-7b", "llama-2-70b", "llama-3-8b", "qwen2.5-72b"]
hardware = ["a100-80gb", "h100-sxm", "h200", "mi300x"]
batch = { start = 1, stop = 512, factor = 2 }
input_len = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
output_len = [128, 256, 512, 1024, 2048]
tp = [1, 2, 4, 8]
pp = [1, 2]
weight_bits = [16, 8]
kv_bits = [16, 8]
hbm_bw_scale = [0.5, 0.75, 1.0, 1.5, 2.0]
[sensitivity]
metrics = ["ttft_s", "tpot_s", "e2e_s", "throughput_tok_s"]
params = ["hbm_bw", "peak_flops_16", "peak_flops_8", "intra_bw", "inter_bw", "intra_latency"]
"""
FIELDS = {"hbm_bw": "hbm_bw_bytes_per_s", "peak_flops_16": "flops_per_s_16",
          "peak_flops_8": "flops_per_s_8", "intra_bw": "intra_bw_bytes_per_s",
          "inter_bw": "inter_bw_bytes_per_s", "intra_latency": "intra_latency_s"}


def main() -> None:
    study = parse_study(STUDY, "<bench>")
    n, params = study.size, 6
    print(f"grid: {n:,} points x {params} parameters x 4 metrics")
    start = time.perf_counter()
    sensitivity(study)
    print(f"first run (with compilation): {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    ds = sensitivity(study)
    t = time.perf_counter() - start
    print(f"dse.sensitivity: {t:.2f} s = {n * params / t:.3e} elasticities/s per metric "
          f"(with exact +-10% what-ifs and kink flags); "
          f"{int(ds['kink'].sum()):,} (point, parameter) pairs flagged")

    # baseline: two sweeps per parameter, the hardware table scaled by 1 +- h
    names = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s")
    evaluator = Evaluator.of(study, names)
    hardware = evaluator.hardware
    deps = dependencies(study, evaluator)

    h = 1e-3
    runs = []
    for scale in (1 + h, 1 - h):
        hw = dataclasses.replace(hardware, hbm_bw_bytes_per_s=hardware.hbm_bw_bytes_per_s * scale)
        runs.append(lambda hw=hw: run_function(
            study, evaluator, lambda p, m, _: evaluator.traced(p, m, hw),
            {k: 0 for k in names}, deps))
    runs[0]()  # compile
    start = time.perf_counter()
    for run in runs:
        run()
    t_fd = (time.perf_counter() - start) * params  # the same two sweeps for each parameter
    print(f"baseline, finite differences by re-running (2 sweeps x {params} parameters): "
          f"{t_fd:.2f} s = {n * params / t_fd:.3e} elasticities/s; "
          f"dse.sensitivity / baseline = {t_fd / t:.2f}x (and exact, one-sided, with what-ifs)")


if __name__ == "__main__":
    main()

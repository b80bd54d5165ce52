"""Serving under load: points/s of the load model against the static batch, same run.

The same grid (two models, three devices, layouts, precisions, lengths) is evaluated
twice in this process: with a request load (``request_rate`` or ``concurrency``: the
engine-step tables, the mean field's fixed point and the percentiles) and as static
batches (``batch``), each compiled once, then timed in memory (best of 3). A third row
times the load model without its percentiles (the means, capacity and goodput only:
what a study that asks for no percentile pays). Compilation is reported apart.

The fixed point costs iterations: ``ITERATIONS`` relaxations at a given rate (open loop),
or ``BISECTIONS`` x ``INNER`` bracketed trials then ``ITERATIONS`` relaxations (closed
loop, and the capacity every open loop needs), each relaxation a few engine steps.

Run: python benchmarks/bench_load.py [--points N]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from dse.core.evaluator import Evaluator
from dse.formulas import load
from dse.run.chunks import chunk_point, plan
from dse.study import parse_study

STUDY = """
[study]
name = "bench-load"
[axes]
model = ["llama-3.1-8b", "mixtral-8x7b"]
hardware = ["a100-80gb", "h100-sxm", "h200"]
tp = [1, 2, 4, 8]
weight_bits = [16, 8]
input_len = {{ start = 128, stop = 8192, factor = 2 }}
output_len = [128, 512]
input_len_cv = 0.5
output_len_cv = 0.7
{load}
"""
MEANS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "capacity_req_s", "goodput_req_s",
         "valid")


def timed(study, names=None):
    ev = Evaluator.of(study, names=names)
    blocks = plan(study.shape, 1 << 22)
    points = [chunk_point(study, b) for b in blocks]

    def once():
        with ev.precision():
            for p in points:
                jax.block_until_ready(ev(p))

    start = time.perf_counter()
    once()
    first = time.perf_counter() - start
    best = min(_timing(once) for _ in range(3))
    return first - best, best


def _timing(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=16, help="load values per grid")
    args = parser.parse_args()
    rows = []
    n = args.points
    loads = {
        "static (batch)": f"batch = {{ start = 1, stop = {2 ** (n - 1)}, factor = 2 }}"
        if n <= 12 else f"batch = {{ start = 1, stop = 512, num = {n} }}",
        "open loop (request_rate)": f"request_rate = {{ start = 0.25, stop = 64, num = {n}, "
                                    "log = true }",
        "closed loop (concurrency)": f"concurrency = {{ start = 1, stop = 512, num = {n}, "
                                     "log = true }",
    }
    base = None
    for label, text in loads.items():
        study = parse_study(STUDY.format(load=text), "<bench-load>")
        compile_s, run_s = timed(study)
        rate = study.size / run_s
        base = base or rate
        rows.append((label, study.size, compile_s, run_s, rate, rate / base))
        if label.startswith("open"):
            compile_s, run_s = timed(study, MEANS)
            rate = study.size / run_s
            rows.append(("open loop, means only", study.size, compile_s, run_s, rate,
                         rate / base))
    print(f"load model: {load.ITERATIONS} relaxations at a rate; closed loop and capacity: "
          f"{load.BISECTIONS} trials x {load.INNER} relaxations + {load.ITERATIONS}")
    print(f"{'':28s} {'points':>8s} {'compile s':>10s} {'run s':>8s} {'points/s':>11s} "
          f"{'vs static':>10s}")
    for label, size, c, r, rate, ratio in rows:
        print(f"{label:28s} {size:8,d} {c:10.2f} {r:8.3f} {rate:11.3g} {ratio:10.3g}")


if __name__ == "__main__":
    main()

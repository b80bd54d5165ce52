"""Sweep throughput: points/s of `dse.sweep` on a >= 10^7-point grid.

Prints, all measured in this run:
  - the in-memory sweep (compiled evaluator, best of 3),
  - the same with the netCDF write (as `dse sweep` does it: chunks written while the
    next ones evaluate), and the plain baseline: whole grid in memory, then one write,
  - a per-configuration baseline: the same jitted evaluator called once per point in a
    Python loop, as the one-configuration-per-call peer tools work,
  - the same streamed chunk by chunk into a zarr store (the resumable path),
  - the output-write floor: allocating and filling arrays of the outputs' sizes,
  - the in-memory sweep and the floor again in a second process with the other page size
    for XLA's buffers (glibc's ``glibc.malloc.hugetlb`` tunable, which only a process's
    starting environment can set; see dse.hugepages), when this system offers both.
The streaming reduction and its multi-process speed-up: bench_stream.py; against
llm-analysis: bench_peers.py.

Run: python benchmarks/bench_sweep.py [--scales N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from dse.core.evaluator import Evaluator
from dse.results.dataset import to_dataset
from dse.results.io import write_dataset
from dse.run import hugepages
from dse.run.chunks import chunk_budget, chunk_point, plan
from dse.run.memory import run
from dse.run.sweep import sweep_to_file
from dse.study import parse_study

STUDY = """
[study]
name = "bench"
[axes]
model = ["llama-2-7b", "llama-2-70b", "llama-3-8b", "mixtral-8x7b"]
hardware = ["a100-80gb", "h100-sxm", "h200", "mi300x"]
batch = {{ start = 1, stop = 512, factor = 2 }}
input_len = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
output_len = [128, 512, 2048]
tp = [1, 2, 4, 8]
pp = [1, 2, 4]
weight_bits = [16, 8, 4]
kv_bits = [16, 8]
tflops_scale = [0.5, 1.0, 1.5, 2.0]
hbm_bw_scale = {{ start = 0.5, stop = 2.0, num = {scales} }}
"""


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=int, default=10, help="length of the hbm_bw_scale axis")
    parser.add_argument("--baseline-points", type=int, default=300)
    parser.add_argument("--in-memory-only", action="store_true",
                        help="only the in-memory sweep and the floor (the second process)")
    args = parser.parse_args()

    study = parse_study(STUDY.format(scales=args.scales), "<bench>")
    n = study.size
    pages = "huge pages" if hugepages.for_malloc() else "4 KiB pages"
    chunks = plan(study.shape, chunk_budget(study, in_memory=True))  # as run() cuts it
    if not args.in_memory_only:
        print(f"grid: {n:,} points, dims {dict(zip([a.name for a in study.dims], study.shape))}")
    print(f"XLA's buffers: {pages}; the in-memory sweep evaluates {len(chunks)} chunk(s)")

    start = time.perf_counter()
    arrays, deps = run(study)
    print(f"first run (trace + compile + evaluate): {time.perf_counter() - start:.2f} s")
    t_mem = best_of(lambda: run(study), repeat=5)
    out_bytes = sum(a.nbytes for a in arrays.values())
    print(f"in-memory sweep (best of 5): {t_mem:.3f} s = {n / t_mem:.3e} points/s "
          f"({out_bytes / 1e9:.2f} GB of outputs)")

    def floor():
        # the output arrays allocated as the sweep allocates its results (numpy, which
        # asks for transparent huge pages) and written once: what merely writing the
        # outputs costs in this process, best of 3 like the sweep
        for a in arrays.values():
            np.empty(a.shape, a.dtype).fill(0)

    t_floor = best_of(floor, repeat=5)
    print(f"output-write floor (allocate and fill arrays of the outputs' sizes, best of 5): "
          f"{t_floor:.3f} s = {n / t_floor:.3e} points/s ({out_bytes / t_floor / 1e9:.2f} GB/s); "
          f"sweep / floor = {t_mem / t_floor:.2f}x")
    if args.in_memory_only:
        return
    # Where the sweep's time goes: the evaluator alone (every chunk computed, its
    # outputs dropped instead of copied into the result arrays), and the CPU time of
    # each against its wall time (XLA:CPU runs independent fusions on both cores).
    evaluator = Evaluator.of(study)
    points = [chunk_point(study, c) for c in chunks]

    def evaluator_alone():
        for p in points:
            jax.block_until_ready(evaluator(p))

    def cpu_of(fn):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        return time.process_time() - cpu, time.perf_counter() - wall

    evaluator_alone()
    t_eval = best_of(evaluator_alone)
    cpu_eval, wall_eval = min((cpu_of(evaluator_alone) for _ in range(3)), key=lambda x: x[1])
    cpu_mem, wall_mem = min((cpu_of(lambda: run(study)) for _ in range(3)),
                            key=lambda x: x[1])
    print(f"  of which the evaluator alone (chunks computed, outputs dropped): {t_eval:.3f} s "
          f"= {t_eval / t_floor:.2f}x floor, {cpu_eval / wall_eval:.2f} cores busy; "
          f"the sweep keeps {cpu_mem / wall_mem:.2f} cores busy ({cpu_mem:.3f} CPU s)")
    if hugepages.available():
        # the other page size for XLA's buffers needs a process started with it
        env = hugepages.environment(on=not hugepages.for_malloc())
        other = subprocess.run([sys.executable, __file__, "--scales", str(args.scales),
                                "--in-memory-only"], env=env, capture_output=True, text=True,
                               check=True).stdout
        print("  in a second process, " + other.strip().replace("\n", "\n    "))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.nc"

        def to_netcdf():
            sweep_to_file(study, path, progress=False)

        t_nc = best_of(to_netcdf, repeat=3)
        print(f"sweep + netCDF write (dse sweep's path: chunks written as evaluated): "
              f"{t_nc:.3f} s = {n / t_nc:.3e} points/s ({path.stat().st_size / 1e9:.2f} GB file)")

        def in_memory_then_write():
            a, d = run(study)
            write_dataset(to_dataset(study, a, d), path)

        t_seq = best_of(in_memory_then_write, repeat=2)
        print(f"  baseline: whole grid in memory, then one netCDF write: {t_seq:.3f} s = "
              f"{n / t_seq:.3e} points/s (streamed write is {t_seq / t_nc:.2f}x faster)")
        path.unlink()
        zpath = Path(tmp) / "bench.zarr"

        def to_zarr():
            sweep_to_file(study, zpath, progress=False, workers=1)

        t_z = best_of(to_zarr, repeat=2)
        print(f"sweep streamed to zarr (chunk by chunk, resumable): {t_z:.3f} s = "
              f"{n / t_z:.3e} points/s")

    # Baseline: one configuration per call, through the same compiled evaluator.
    rng = np.random.default_rng(0)
    points = []
    for _ in range(args.baseline_points):
        values = {a.name: a.values[rng.integers(len(a.values))] for a in study.dims}
        one = study.at(**values)
        points.append((chunk_point(one, plan((), 1)[0]), Evaluator.of(one)))
    for p, ev in points:  # compile every program the loop uses (dense and MoE models)
        ev(p)["ttft_s"].block_until_ready()
    start = time.perf_counter()
    for p, ev in points:
        {k: float(v) for k, v in ev(p).items()}
    per_point = (time.perf_counter() - start) / len(points)
    print(f"baseline, one configuration per call: {1 / per_point:,.0f} points/s; "
          f"vectorized sweep is {per_point * n / t_mem:,.0f}x faster")


if __name__ == "__main__":
    main()

"""Streaming reduction of a ~10^9-point grid: wall time, points/s and peak memory.

Runs the same reduction (best feasible throughput per model x hardware under a TTFT
limit, valid/feasible/reason counts, a TPOT histogram) three ways: one process on one
XLA device (the baseline), one process on one host device per core (dse's default,
dse.devices), and one worker process per core (a local dask cluster); checks the
results are identical and prints the speed-ups. Peak RSS is sampled every 50 ms over
the whole process tree (client, scheduler and workers).

Run: python benchmarks/bench_stream.py [--scale K]   (K x K what-if scales; 60 -> 0.995e9)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import psutil
import xarray as xr

from dse.run.devices import host_devices
from dse.run.xla import enable_compilation_cache
from dse.study import parse_study
from dse.run.sweep import sweep_to_file

STUDY = """
[study]
name = "stream-bench"
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
tflops_scale = {{ start = 0.5, stop = 2.0, num = {k} }}
hbm_bw_scale = {{ start = 0.5, stop = 2.0, num = {k} }}
[output]
workers = {workers}
chunk_points = {chunk}
[output.reduce]
by = ["model", "hardware"]
constraints = ["ttft_s <= 2"]
histogram = {{ variable = "tpot_s", bins = 50, range = [1e-3, 1.0], log = true }}
"""


class PeakRSS:
    """Peak resident memory of this process and all its descendants (sampled)."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for p in [me] + me.children(recursive=True):
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(self.interval)

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run(k: int, workers, out: Path, chunk: int, histogram: bool = True, devices=None):
    text = STUDY.format(k=k, workers=workers, chunk=chunk)
    if not histogram:
        text = "\n".join(line for line in text.splitlines() if not line.startswith("histogram"))
    study = parse_study(text, "<bench>")
    os.environ["DSE_HOST_DEVICES"] = str(devices or "")  # read by each sweep
    with PeakRSS() as rss:
        start = time.perf_counter()
        ds, _ = sweep_to_file(study, out, progress=False)
        seconds = time.perf_counter() - start
    return study.size, seconds, rss.peak, ds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=60, help="length of both what-if axes")
    parser.add_argument("--chunk-points", type=int, default=1 << 21,
                        help="points per chunk (2^21: a chunk's score array stays in cache)")
    parser.add_argument("--no-histogram", action="store_true",
                        help="best point and counts only")
    parser.add_argument("--workers", default="auto", help="worker processes for the "
                        "multi-process run (default: one per core)")
    args = parser.parse_args()
    enable_compilation_cache()
    workers = os.cpu_count() if args.workers == "auto" else int(args.workers)
    n_devices = len(host_devices())
    hist = not args.no_histogram
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        # compile every configuration once first, so each timed run loads its programs
        # from the on-disk cache as a repeated study does (first runs are printed too)
        for label, w, d in [("1 process, 1 device", 1, 1),
                            (f"1 process, {n_devices} host devices", 1, None),
                            (f"{workers} worker processes (local dask cluster, incl. "
                             "start-up)", workers, None)]:
            n, cold, _, _ = run(args.scale, w, Path(tmp) / "warm.nc", args.chunk_points, hist, d)
            n, t, rss, ds = run(args.scale, w, Path(tmp) / f"{len(runs)}.nc",
                                args.chunk_points, hist, d)
            runs[label] = t, ds
            print(f"{label:62s} {t:6.2f} s wall = {n / t:.3e} points/s, peak RSS "
                  f"{rss / 1e9:.2f} GB (first run, compiling: {cold:.2f} s)", flush=True)
    base, ref = next(iter(runs.values()))
    print(f"grid: {n:,} points reduced to {ref.sizes['model']} x {ref.sizes['hardware']} "
          f"groups{' with a ' + str(ref.sizes['tpot_s_bin']) + '-bin histogram' if hist else ''}")
    for label, (t, ds) in list(runs.items())[1:]:
        print(f"speed-up of {label.split(' (')[0]}: {base / t:.2f}x on {os.cpu_count()} cores")
        xr.testing.assert_identical(ref.drop_attrs(), ds.drop_attrs())
    print("results identical: yes")


if __name__ == "__main__":
    main()

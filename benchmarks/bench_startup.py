"""Time to answer: whole `dse` processes against llm-analysis processes, same run.

Each case is a whole CLI process timed from the shell's side, Python start-up and
imports included: cold (an empty cache directory: dse traces and compiles) and warm (the
same directory again: kept layouts and programs, XLA's compiled executables). Medians of
--repeat runs. Beside the warm time: the seconds its evaluations alone take (a third,
warm process that times each call of a kept program, loading included, to completion).
Cases:

  example      studies/llama-serving.toml (the README's study, 1,728 points) to netCDF
  1e4          the same axes widened to 10,368 points, to netCDF
  2e6          1,996,800 points, to netCDF
  1e8          99.6 million points through the streamed reduction (studies/stream-reduce
               with denser what-if axes); llm-analysis, which has no such path, at its rate
               on the 2e6 grid
  search       dse search studies/search-serving.toml
  sensitivity  dse sensitivity studies/sensitivity-genz.toml
  serving-load dse sweep studies/serving-load.toml (the load model: cold is its compile)
  disagg       dse sweep studies/disagg-deepseek.toml (disaggregated pools)
  plan         dse plan studies/serving-load.toml --rate 50
  validate     dse validate data/measured_public.csv (rows/s beside the seconds)

Each case is printed beside its target (issue 38's, on 2 cores) where it has one.

llm-analysis (PyPI, its own virtual environment: benchmarks/.venv-llm-analysis, as in
bench_peers.py) evaluates the same configurations of the sweep cases, one `infer` call
each, in a process of its own, import included. It has no pipeline of what-if axes, so
a dse HBM scale s is passed as achieved_memory_bandwidth_GBs = s x the device's peak,
and weight bits as its dtype names (w16a16e16, w8a16e16, w4a16e16). Where its run would
take longer than --peer-budget seconds it evaluates a sample, and its time is that
process's start-up plus the configurations at the sample's rate (said so). It has no
search or sensitivity verb.

Run: python benchmarks/bench_startup.py [--repeat 3] [--cases example,1e4,...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_peers import peer_python

ROOT = Path(__file__).resolve().parents[1]
DSE = [sys.executable, "-m", "dse"]

# The example's axes, and widened ones (the same models and devices llm-analysis knows)
EXAMPLE = (ROOT / "studies" / "llama-serving.toml").read_text()
WIDER = {
    "1e4": {"batch = [1, 8, 64]": "batch = [1, 2, 4, 8, 16, 32, 64, 128, 256]",
            "input_len = [512, 2048]": "input_len = [128, 512, 2048, 8192]"},
    "2e6": {"batch = [1, 8, 64]": "batch = { start = 1, stop = 512, factor = 2 }",
            "input_len = [512, 2048]": "input_len = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]",
            "output_len = 256": "output_len = [128, 256, 512, 1024, 2048]",
            "hbm_bw_scale = [0.9, 1.0, 1.1]":
                "hbm_bw_scale = { start = 0.5, stop = 2.0, num = 52 }"},
}
STREAM = (ROOT / "studies" / "stream-reduce.toml").read_text().replace(
    "num = 7", "num = 98")
# whole-verb cases beyond sweeps of the example's grid
OTHER = {
    "serving-load": ["sweep", str(ROOT / "studies" / "serving-load.toml"), "-o",
                     "{out}/serving-load.nc", "-q"],
    "disagg": ["sweep", str(ROOT / "studies" / "disagg-deepseek.toml"), "-o",
               "{out}/disagg.nc", "-q"],
    "plan": ["plan", str(ROOT / "studies" / "serving-load.toml"), "--rate", "50", "-o",
             "{out}/plan.csv"],
    "validate": ["validate", str(ROOT / "data" / "measured_public.csv"), "-o",
                 "{out}/validate.txt"],
}
# issue 38's targets on 2 cores: (cold or warm, seconds)
TARGETS = {"serving-load": ("cold", 8.0), "disagg": ("cold", 12.0), "plan": ("warm", 3.0),
           "search": ("warm", 4.0), "validate": ("warm", 1588 / 500.0),
           "example": ("warm", 1.0), "1e9": ("warm", 5.0)}
PEAK_GBS = {"a100-80gb": 2039.0, "h100-sxm": 3350.0}  # the catalogue's, as dse reads them
PEER_MODEL = {"llama-2-7b": "NousResearch_Llama-2-7b-hf",
              "llama-2-70b": "upstage_Llama-2-70b-instruct-v2"}
PEER_GPU = {"a100-80gb": "a100-sxm-80gb", "h100-sxm": "h100-sxm-80gb"}

PEER = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
from llm_analysis.analysis import infer
configs = json.load(sys.stdin)
start = time.perf_counter()
for c in configs:
    try:
        infer(log_level="CRITICAL", flops_efficiency=1.0, **c)
    except Exception:
        pass
json.dump({"loop_s": time.perf_counter() - start}, sys.stdout)
"""


def peer_configs(text: str) -> list[dict]:
    """The sweep's configurations as llm-analysis `infer` arguments."""
    keys = ("model", "hardware", "batch", "input_len", "output_len", "tp", "pp",
            "weight_bits", "hbm_bw_scale")
    from dse.study import parse_study

    study = parse_study(text, "<bench>")
    out = []
    for m, g, b, s, o, t, p, w, h in itertools.product(*(study.values(k) for k in keys)):
        out.append(dict(model_name=PEER_MODEL[m], gpu_name=PEER_GPU[g],
                        dtype_name=f"w{int(w)}a16e16", batch_size_per_gpu=int(b),
                        seq_len=int(s), num_tokens_to_generate=int(o), tp_size=int(t),
                        pp_size=int(p), achieved_memory_bandwidth_GBs=h * PEAK_GBS[g]))
    return out


def timed(argv, env=None, stdin=None) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True,
                          cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(map(str, argv))} failed:\n{done.stderr[-2000:]}")
    return seconds, done.stdout


# A warm dse process that also sums the seconds spent in its kept programs (loading
# them included), each call waited for: the evaluations alone.
EVALUATIONS = """
import json, sys, time
import jax
from dse.core import programs
spent = [0.0]
run = programs.run
def timed(*args, **kwargs):
    start = time.perf_counter()
    out = jax.block_until_ready(run(*args, **kwargs))
    spent[0] += time.perf_counter() - start
    return out
programs.run = timed
from dse.cli import main
code = main(sys.argv[1:])
print(json.dumps({"evaluations_s": spent[0]}))
sys.exit(code)
"""


def dse_times(argv, repeat: int) -> tuple[float, float, float]:
    """(median cold, median warm, median seconds of the warm run's evaluations) of a
    whole dse process; ``{out}`` in ``argv`` is a fresh output directory each run (a
    search would otherwise resume its study)."""
    cold, warm, evaluations = [], [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
            env = dict(os.environ, DSE_CACHE_DIR=str(Path(tmp) / "cache"))
            for runs, name in ((cold, "cold"), (warm, "warm")):
                out = Path(tmp) / name
                out.mkdir()
                runs.append(timed([a.replace("{out}", str(out)) for a in argv], env)[0])
            out = Path(tmp) / "evaluations"
            out.mkdir()
            _, stdout = timed([sys.executable, "-c", EVALUATIONS,
                               *[a.replace("{out}", str(out)) for a in argv[len(DSE):]]], env)
            evaluations.append(json.loads(stdout.strip().splitlines()[-1])["evaluations_s"])
    return statistics.median(cold), statistics.median(warm), statistics.median(evaluations)


def peer_time(python: Path, configs: list[dict], budget: float) -> tuple[float, str]:
    """Seconds of a whole llm-analysis process over ``configs`` (extrapolated past
    ``budget`` from a sample), and how it was measured."""
    empty, _ = timed([str(python), "-c", PEER], stdin="[]")  # start-up and import
    sample = configs
    if len(configs) > 2000:
        probe = configs[:: max(1, len(configs) // 200)][:200]
        _, out = timed([str(python), "-c", PEER], stdin=json.dumps(probe))
        rate = len(probe) / max(json.loads(out)["loop_s"], 1e-9)
        if len(configs) / rate > budget:
            step = max(1, len(configs) // 2000)
            sample = configs[::step][:2000]
    whole, out = timed([str(python), "-c", PEER], stdin=json.dumps(sample))
    if sample is configs:
        return whole, "measured"
    rate = len(sample) / json.loads(out)["loop_s"]
    return empty + len(configs) / rate, f"start-up + {len(configs):,} at the rate of {len(sample):,}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default="example,1e4,2e6,1e8,search,sensitivity,"
                        "serving-load,disagg,plan,validate")
    parser.add_argument("--peer-budget", type=float, default=120.0,
                        help="seconds llm-analysis may run per case before it is sampled")
    parser.add_argument("--llm-analysis-python", help="python of an env with llm-analysis")
    args = parser.parse_args()
    python = peer_python(args.llm_analysis_python)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dse-bench-studies-") as tmp:
        tmp = Path(tmp)
        studies = {"example": EXAMPLE, **{k: _replaced(EXAMPLE, v) for k, v in WIDER.items()},
                   "1e8": STREAM}
        for case in args.cases.split(","):
            if case in studies:
                path = tmp / f"{case}.toml"
                path.write_text(studies[case])
                argv = [*DSE, "sweep", str(path), "-o", "{out}/" + f"{case}.nc", "-q"]
                points = _points(path)
                repeat = args.repeat if points <= 1e7 else 1
            elif case in OTHER:
                argv, points, repeat = [*DSE, *OTHER[case]], None, args.repeat
            else:
                study = {"search": "search-serving.toml",
                         "sensitivity": "sensitivity-genz.toml"}[case]
                quiet = "--no-progress" if case == "search" else "-q"
                argv = [*DSE, case, str(ROOT / "studies" / study), "-o", "{out}/" + f"{case}.nc",
                        quiet]
                points, repeat = None, args.repeat
            cold, warm, evaluations = dse_times(argv, repeat)
            peer, how = (None, "no load model" if case in ("serving-load", "disagg")
                         else "no such verb")
            if case in studies and case != "1e8":
                peer, how = peer_time(python, peer_configs(studies[case]), args.peer_budget)
            elif case == "1e8":  # other models and devices: the rate of the 2e6 grid's
                peer, how = _extrapolated(python, studies["2e6"], points)
            rows.append((case, points, cold, warm, evaluations, peer, how))
            print(_line(*rows[-1]), flush=True)
    print()
    print("| case | points | dse cold, s | dse warm, s | warm: evaluations, s | warm / "
          "evaluations | llm-analysis, s | warm speed-up | target |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case, points, cold, warm, evaluations, peer, how in rows:
        ratio = f"{peer / warm:,.2f}x" if peer else ""
        size = f"{points:,}" if points else ""
        peer_s = f"{peer:,.1f} " if peer else ""
        # the streamed reduction runs its own fused program, not a kept one
        kept = case != "1e8"
        evals = f"{evaluations:.2f} | {warm / max(evaluations, 1e-9):.1f}x" if kept else "n/a | "
        target = ""
        if case in TARGETS:
            which, limit = TARGETS[case]
            got = cold if which == "cold" else warm
            target = f"{which} <= {limit:.1f} s: {'met' if got <= limit else 'not met'}"
            if case == "validate":
                target += f" ({1588 / warm:,.0f} rows/s; 500 asked)"
        print(f"| {case} | {size} | {cold:.2f} | {warm:.2f} | {evals} | {peer_s}({how}) | "
              f"{ratio} | {target} |")


def _replaced(text: str, changes: dict) -> str:
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def _points(path: Path) -> int:
    from dse.study import load_study

    return load_study(path).size


def _extrapolated(python, text, points) -> tuple[float, str]:
    """llm-analysis over ``points`` configurations at its rate on a sample of ``text``'s
    grid, its process start-up added (it has no streamed reduction to run)."""
    empty, _ = timed([str(python), "-c", PEER], stdin="[]")
    configs = peer_configs(text)[::1000][:2000]
    _, out = timed([str(python), "-c", PEER], stdin=json.dumps(configs))
    rate = len(configs) / json.loads(out)["loop_s"]
    return empty + points / rate, (f"extrapolated: {points / rate / 3600:,.1f} h at "
                                   f"{rate:,.0f} configurations/s")


def _line(case, points, cold, warm, evaluations, peer, how) -> str:
    return (f"{case:<12} {points or 0:>12,} points  dse cold {cold:7.2f} s  warm {warm:7.2f} s"
            f" (evaluations {evaluations:.2f} s)"
            f"  llm-analysis {'' if peer is None else f'{peer:,.1f} s'} ({how})")


if __name__ == "__main__":
    main()

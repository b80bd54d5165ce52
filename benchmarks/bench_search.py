"""When does each search mode win? Batched vs per-trial vs hybrid on the example study.

Runs studies/search-serving.toml (184,320 points) with in-memory storage and prints, all
measured in this run: wall time (excluding the first compilation), trials, configurations
evaluated, trials/s, and regret against the exhaustive optimum.

Run: python benchmarks/bench_search.py
"""

from __future__ import annotations

import re
import time

from dse.search import search
from dse.study import load_study, parse_study

BASE = load_study("studies/search-serving.toml").text


def variant(**keys) -> str:
    extra = "\n".join(f"{k} = {v}" for k, v in keys.items())
    out = re.sub(r"n_trials = \d+.*", f'storage = ":memory:"\nexhaustive = false\n{extra}', BASE,
                 count=1)
    assert "exhaustive = false" in out
    return out


RUNS = {
    "per-trial (batch_size 1), 300 trials": variant(n_trials=300, batch_size=1),
    "batched (batch_size 16), 300 trials": variant(n_trials=300, batch_size=16),
    "batched (batch_size 64), 1000 trials": variant(n_trials=1000, batch_size=64),
    "hybrid (inner tp x pp x batch), 30 trials": variant(
        n_trials=30, batch_size=8, mode='"hybrid"', inner='["tp", "pp", "batch"]'),
}


def main() -> None:
    optimum = None
    rows = []
    for label, text in RUNS.items():
        study = parse_study(text, "<bench>")
        search(parse_study(text.replace("n_trials = ", "n_trials = 1 #"), "<warm>"))  # compile
        start = time.perf_counter()
        result = search(study)
        seconds = time.perf_counter() - start
        cfg = result.config
        inner = 1
        for axis in study.dims:
            if axis.name in cfg.inner:
                inner *= len(axis.values)
        value = result.best[0]["objectives"]["throughput_tok_s"] if result.best else float("nan")
        rows.append((label, seconds, result.told, result.told * inner, value))
    from dse.search.results import exhaustive

    study = load_study("studies/search-serving.toml")
    optimum = exhaustive(study, study.search, [])["optimum"]
    print(f"exhaustive optimum (dse sweep of 184,320 points): {optimum:,.1f} tokens/s")
    print(f"{'mode':44s} {'seconds':>8s} {'trials':>7s} {'configs':>9s} {'trials/s':>9s} "
          f"{'configs/s':>10s} {'regret':>7s}")
    for label, seconds, trials, configs, value in rows:
        print(f"{label:44s} {seconds:8.2f} {trials:7d} {configs:9d} {trials / seconds:9.1f} "
              f"{configs / seconds:10.0f} {100 * (optimum - value) / optimum:6.2f}%")


if __name__ == "__main__":
    main()

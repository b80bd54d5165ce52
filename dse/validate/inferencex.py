"""The launch layouts of SemiAnalysis InferenceX's benchmark configurations, by run.

aiconfigurator-core's ``silicon_sample.csv`` carries InferenceX runs (its
``source_file=2026-03-25.csv`` and ``2026-04-06.csv`` rows) without two things a closed
loop's latency hangs on: the disaggregated runs' worker counts (1,328 runs leave them
empty) and whether a run decoded speculatively (MTP). InferenceX states both in the
configuration it launched each run from: ``nvidia-master.yaml`` (Apache-2.0,
github.com/SemiAnalysisAI/InferenceX), one entry per benchmark with, per sequence-length
pair, a search space of layouts (``prefill`` / ``decode``: ``num-worker``, ``tp``, ``ep``,
``dp-attn``; ``spec-decoding``) and the client concurrencies each was run at
(``conc-list``, or ``conc-start`` .. ``conc-end`` doubling, as InferenceX's
``utils/matrix_logic/generate_sweep_configs.py`` expands it).

:func:`build` reads every version of that file in a local clone's history and writes one
row per (configuration key, lengths, layout, speculative decoding, concurrency) with the
first and last commit dates it was seen; ``data/inferencex_layouts.csv`` is its output,
made again with::

    git clone https://github.com/SemiAnalysisAI/InferenceX
    git clone https://github.com/NVIDIA/srt-slurm
    pip install pyyaml
    python -m dse.validate.inferencex --repo InferenceX --recipes srt-slurm \
        -o data/inferencex_layouts.csv

(``--recipes``: the KV-cache dtype, redundant experts and batch cap each disaggregated
layout's recipe sets, :func:`recipe_settings`.)

:func:`candidates` is the join the silicon converter (:mod:`dse.validate.silicon`) makes:
the distinct layouts InferenceX ran a model on a system at a precision, framework,
ISL/OSL and client concurrency with the stated devices per worker. A run whose join
gives one layout takes it (the note says from where); two or more leave it as it was,
with the candidates in its note.

The InferenceX layout is the engine's: ``tp`` is the worker's tensor-parallel world size
(its devices), ``dp-attn`` runs attention data-parallel across all of them, ``ep`` the
experts' parallel size. In dse's columns an attention-DP worker of T devices is tp 1 x dp
T, otherwise tp T x dp 1; experts over ep devices leave moe_tp = T / ep.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import functools
import re
import subprocess
import sys
from pathlib import Path

# The configuration files, as the repository named them over time.
PATHS = (".github/configs/nvidia-master.yaml", "configs/nvidia-master.yaml")
COLUMNS = ("config_key", "model_prefix", "runner", "precision", "framework", "disagg",
           "isl", "osl", "spec_decoding", "conc",
           "prefill_workers", "prefill_tp", "prefill_ep", "prefill_dp_attn",
           "decode_workers", "decode_tp", "decode_ep", "decode_dp_attn",
           "recipe", "first_seen", "last_seen", "first_commit")
# What a layout's recipe (NVIDIA/srt-slurm, the launch files InferenceX's disaggregated
# configurations name) sets per pool: the KV-cache dtype, SGLang's redundant experts
# (ep-num-redundant-experts) or TensorRT-LLM's expert slots (moe_config.load_balancer
# num_slots), and the engine's running-batch cap (TensorRT-LLM max_batch_size), with the
# recipe's commit read.
RECIPE_COLUMNS = ("prefill_kv_dtype", "decode_kv_dtype", "prefill_redundant_experts",
                  "decode_redundant_experts", "prefill_expert_slots", "decode_expert_slots",
                  "decode_max_batch", "recipe_commit")
DEFAULT = Path(__file__).resolve().parents[2] / "data" / "inferencex_layouts.csv"
# aiconfigurator-core's names (silicon_data_source "model=", system) -> InferenceX's
MODELS = {"DeepSeek-R1": "dsr1", "DeepSeek-V3": "dsr1", "GPT-OSS-120B": "gptoss",
          "Kimi-K2.5": "kimik2.5", "GLM-5": "glm5", "Qwen3.5": "qwen3.5",
          "MiniMax-M2.5": "minimaxm2.5"}
RUNNERS = {"b200_sxm": "b200", "h200_sxm": "h200", "b300_sxm": "b300", "h100_sxm": "h100",
           "gb200": "gb200", "gb300": "gb300"}


def _concurrencies(space: dict) -> list[int]:
    if space.get("conc-list"):
        return [int(c) for c in space["conc-list"]]
    start, end = space.get("conc-start"), space.get("conc-end")
    if start is None or end is None:
        return []
    out, c = [], int(start)
    while c <= int(end):
        out.append(c)
        if c == int(end):
            break
        c = min(c * 2, int(end))
    return out


def _recipe(pool: dict) -> str:
    for setting in pool.get("additional-settings") or ():
        m = re.search(r"CONFIG_FILE=(\S+)", str(setting))
        if m:
            return m.group(1)
    return ""


def entries(config: dict) -> list[dict]:
    """The rows (:data:`COLUMNS` less the dates) of one version of nvidia-master.yaml."""
    out = []
    for key, c in config.items():
        if not isinstance(c, dict) or "seq-len-configs" not in c:
            continue
        disagg = bool(c.get("disagg"))
        for seq in c.get("seq-len-configs") or ():
            for space in seq.get("search-space") or ():
                row = dict(config_key=key, model_prefix=c.get("model-prefix", ""),
                           runner=str(c.get("runner", "")), precision=c.get("precision", ""),
                           framework=c.get("framework", ""), disagg=int(disagg),
                           isl=int(seq["isl"]), osl=int(seq["osl"]),
                           spec_decoding=str(space.get("spec-decoding", "none")))
                if disagg:
                    for pool in ("prefill", "decode"):
                        p = space.get(pool) or {}
                        row.update({f"{pool}_workers": p.get("num-worker", ""),
                                    f"{pool}_tp": p.get("tp", ""), f"{pool}_ep": p.get("ep", 1),
                                    f"{pool}_dp_attn": int(bool(p.get("dp-attn")))})
                    row["recipe"] = _recipe(space.get("prefill") or {}) or _recipe(
                        space.get("decode") or {})
                else:  # one pool: the worker's layout in the decode columns
                    row.update(prefill_workers="", prefill_tp="", prefill_ep="",
                               prefill_dp_attn="", decode_workers=1,
                               decode_tp=space.get("tp", ""), decode_ep=space.get("ep", 1),
                               decode_dp_attn=int(bool(space.get("dp-attn"))), recipe="")
                for conc in _concurrencies(space):
                    out.append(dict(row, conc=conc))
    return out


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                          text=True).stdout


def build(repo, since: str = "2025-10-01", until: str = "2026-04-30") -> list[dict]:
    """Every distinct row of nvidia-master.yaml's versions committed in [since, until] in
    the local clone ``repo``, with the first and last commit dates it was seen."""
    import yaml
    seen: dict[tuple, dict] = {}
    for path in PATHS:
        log = _git(repo, "log", "--reverse", "--format=%H %cs", f"--since={since}",
                   f"--until={until}", "--", path).split("\n")
        for line in filter(None, log):
            commit, date = line.split()
            try:
                config = yaml.safe_load(_git(repo, "show", f"{commit}:{path}")) or {}
            except yaml.YAMLError:
                continue  # a version that did not parse never ran
            for row in entries(config):
                key = tuple(row[c] for c in COLUMNS[:19])
                if key in seen:
                    seen[key]["last_seen"] = date
                else:
                    seen[key] = dict(row, first_seen=date, last_seen=date,
                                     first_commit=commit)
    return sorted(seen.values(), key=lambda r: tuple(str(r[c]) for c in COLUMNS))


def recipe_settings(recipes, path: str, when: str) -> dict:
    """:data:`RECIPE_COLUMNS` of the recipe file ``path`` (an override suffix
    ``:name[i]`` dropped: the base file's settings) in the srt-slurm clone ``recipes``,
    as committed on or before ``when`` (else its first version); empty where the file
    is not in the clone's history."""
    import yaml
    path = path.split(":", 1)[0]
    log = [line.split() for line in _git(recipes, "log", "--all", "--format=%H %cs", "--",
                                          path).split("\n") if line]
    if not log:
        return {}
    before = [c for c, d in log if d <= when]
    commit = before[0] if before else log[-1][0]
    try:
        recipe = yaml.safe_load(_git(recipes, "show", f"{commit}:{path}")) or {}
    except yaml.YAMLError:
        return {}
    backend = recipe.get("backend") or {}
    out = {"recipe_commit": commit}
    for pool in ("prefill", "decode"):
        trt = ((backend.get("trtllm_config") or {}).get(pool)) or {}
        sgl = ((backend.get("sglang_config") or {}).get(pool)) or {}
        kv = ((trt.get("kv_cache_config") or {}).get("dtype") or sgl.get("kv-cache-dtype")
              or "")
        out[f"{pool}_kv_dtype"] = "fp8" if str(kv).startswith("fp8") else str(kv)
        out[f"{pool}_redundant_experts"] = sgl.get("ep-num-redundant-experts", "")
        balancer = (trt.get("moe_config") or {}).get("load_balancer") or {}
        out[f"{pool}_expert_slots"] = (balancer.get("num_slots", "")
                                       if isinstance(balancer, dict) else "")
        if pool == "decode":
            out["decode_max_batch"] = trt.get("max_batch_size", "")
    return out


def with_recipes(rows: list[dict], recipes) -> list[dict]:
    """``rows`` with :data:`RECIPE_COLUMNS` read from the srt-slurm clone ``recipes``."""
    cache: dict[tuple, dict] = {}
    out = []
    for r in rows:
        key = (r["recipe"], r["first_seen"])
        if r["recipe"] and key not in cache:
            cache[key] = recipe_settings(recipes, r["recipe"], r["first_seen"])
        out.append(dict(dict.fromkeys(RECIPE_COLUMNS, ""), **r, **cache.get(key, {})))
    return out


def write(rows: list[dict], dst) -> None:
    from ..atomic import atomic_path
    columns = COLUMNS + (RECIPE_COLUMNS if rows and "recipe_commit" in rows[0] else ())
    with atomic_path(Path(dst)) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


@functools.lru_cache(maxsize=4)
def _table(path: str) -> dict[tuple, list[dict]]:
    index: dict[tuple, list[dict]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            fam = "trtllm" if "trt" in r["framework"] else (
                "sglang" if "sglang" in r["framework"] else "vllm" if "vllm" in r["framework"]
                else r["framework"])
            key = (r["model_prefix"], r["runner"].removesuffix("-multinode"), r["precision"],
                   fam, int(r["disagg"]), int(r["isl"]), int(r["osl"]), int(r["conc"]))
            index.setdefault(key, []).append(r)
    return index


def layout_of(r: dict) -> tuple:
    """What a table row says of the run's layout: (spec_decoding, prefill workers, tp,
    ep, dp-attn, decode workers, tp, ep, dp-attn)."""
    return (r["spec_decoding"], *(r[f"{p}_{k}"] for p in ("prefill", "decode")
                                  for k in ("workers", "tp", "ep", "dp_attn")))


def candidates(run: dict, path=DEFAULT) -> list[dict]:
    """The table rows (one per distinct layout) InferenceX ran ``run`` (an upstream
    silicon_sample.csv row) with: same model, system, precision, framework, lengths and
    client concurrency, and the devices per worker the run states, in a configuration
    committed no later than the run's source file is dated. Empty where the run is not an
    InferenceX one or the table is absent."""
    source = dict(kv.split("=", 1) for kv in run["silicon_data_source"].split("; ")
                  if "=" in kv)
    model, conc = MODELS.get(source.get("model", "")), source.get("silicon_concurrency")
    if not (source.get("source_file") and model and conc and Path(path).is_file()):
        return []
    disagg = run["mode"].strip().lower() == "disagg"
    key = (model, RUNNERS.get(run["system"], run["system"]), run["precision"],
           run["backend"], int(disagg), int(run["isl"]), int(run["osl"]), int(conc))

    def devices(p):
        return (int(run[f"{p}tp_size"] or 1) * int(run[f"{p}attention_dp_size"] or 1))

    stated = ((devices("prefill_"), devices("decode_")) if disagg else (devices(""),))
    # a configuration first committed after the source file was written never ran in it
    made = re.match(r"(\d{4}-\d{2}-\d{2})", source["source_file"])
    out: dict[tuple, dict] = {}
    for r in _table(str(path)).get(key, ()):
        if made and r["first_seen"] > made.group(1):
            continue
        pools = ((int(r["prefill_tp"]), int(r["decode_tp"])) if disagg
                 else (int(r["decode_tp"]),))
        if pools == stated:
            out.setdefault(layout_of(r), r)
    return list(out.values())


def dse_layout(r: dict, pool: str) -> dict:
    """dse's columns (tp, dp, ep, moe_tp, workers) of a table row's pool."""
    t, e = int(r[f"{pool}_tp"]), int(r[f"{pool}_ep"] or 1)
    attention_dp = r[f"{pool}_dp_attn"] == "1"
    return dict(tp=1 if attention_dp else t, dp=t if attention_dp else 1, ep=e,
                moe_tp=max(t // e, 1), workers=int(r[f"{pool}_workers"] or 1))


def is_clone(path) -> bool:
    """A local git clone (a work tree's .git, or a bare repository's HEAD)."""
    return (Path(path) / ".git").exists() or (Path(path) / "HEAD").is_file()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dse.validate.inferencex",
                                description="Tabulate InferenceX's benchmark layouts from "
                                "the history of its nvidia-master.yaml.")
    p.add_argument("--repo", required=True, help="a local clone of SemiAnalysisAI/InferenceX")
    p.add_argument("--recipes", help="a local clone of NVIDIA/srt-slurm: each layout's "
                   "recipe settings (KV-cache dtype, redundant experts, batch cap)")
    p.add_argument("-o", "--output", default=str(DEFAULT))
    p.add_argument("--since", default="2025-10-01")
    p.add_argument("--until", default="2026-04-30")
    a = p.parse_args(argv)
    for d in (a.since, a.until):
        try:
            dt.date.fromisoformat(d)
        except ValueError:
            print(f"dse: error: {d!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
            return 2
    for clone, what in ((a.repo, "--repo"), (a.recipes, "--recipes")):
        if clone and not is_clone(clone):
            print(f"dse: error: {what} {clone}: not a git clone of "
                  + ("SemiAnalysisAI/InferenceX" if what == "--repo" else "NVIDIA/srt-slurm"),
                  file=sys.stderr)
            return 2
    rows = build(a.repo, a.since, a.until)
    if a.recipes:
        rows = with_recipes(rows, a.recipes)
    write(rows, a.output)
    print(f"{len(rows)} layouts -> {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The engine settings of InferenceX's aggregated benchmark runs, read off its launch scripts.

A run of InferenceX's single-node benchmarks (the aggregated rows of aiconfigurator-core's
``silicon_sample.csv`` that come from InferenceX) is launched by a shell script of its
repository (github.com/SemiAnalysisAI/InferenceX, Apache-2.0):
``benchmarks/single_node/{model}_{precision}_{gpu}[_trt][_mtp].sh`` (before 2026-02:
``benchmarks/..._docker.sh`` / ``_slurm.sh``; later ``benchmarks/single_node/fixed_seq_len/``),
which starts the engine with flags the run's latency hangs on and that the silicon file
does not state: the KV-cache dtype, the token budget per step, the running-batch cap, the
memory fraction and SGLang's ``--scheduler-recv-interval``. Many are computed from the
run's TP, concurrency and lengths in bash (``if [[ $CONC -ge 16 ]]``, ``$((ISL * 2))``).

:func:`settings` evaluates a script as bash itself would, without running anything: in a
restricted shell (``bash -r``: no output redirection, no command named by a path, PATH
fixed) with an empty PATH, every external command answered by a no-op
(``command_not_found_handle``), ``set -e`` removed, a heredoc that writes a config file
(``cat > f << EOF``) read instead, and ``set -x`` tracing the engine's command line as the
script expands it, for the run's environment (TP, EP_SIZE, DP_ATTENTION, CONC, ISL,
OSL, ...). :func:`build` does that for every aggregated InferenceX run of an
aiconfigurator-core ``silicon_sample.csv``, at the repository's commit of the run's
measured date, and writes one row per run id (``data/inferencex_launch.csv``)::

    git clone https://github.com/SemiAnalysisAI/InferenceX
    pip install aiconfigurator-core
    python -m dse.validate.inferencex_scripts --repo InferenceX -o data/inferencex_launch.csv

The silicon converter (:mod:`dse.validate.silicon`) reads the table.
"""

from __future__ import annotations

import argparse
import csv
import functools
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "data" / "inferencex_launch.csv"
COLUMNS = ("id", "script", "commit", "commit_date", "engine", "status", "kv_dtype",
           "max_num_tokens", "max_num_seqs", "scheduler_recv_interval", "memory_fraction",
           "launch")
# the places a script lived, newest first (its name, then the runner variants of 2025)
DIRS = ("benchmarks/single_node/fixed_seq_len/", "benchmarks/single_node/", "benchmarks/")
VARIANTS = ("", "_docker", "_slurm")
# InferenceX's model prefixes (nvidia-master.yaml model-prefix) by aiconfigurator's names
# and as the database dump's ids write them (dots as underscores)
PREFIXES = ("dsr1", "gptoss", "kimik2.5", "glm5", "qwen3.5", "minimaxm2.5")
GPUS = {"b200_sxm": "b200", "b300_sxm": "b300", "h100_sxm": "h100", "h200_sxm": "h200"}
ENGINES = (("trtllm", ("trtllm-serve",)), ("sglang", ("sglang.launch_server", "sglang serve")),
           ("vllm", ("vllm serve", "vllm.entrypoints")))
# flags per engine: dse's setting -> the engine's flag names
FLAGS = {
    "vllm": {"kv_dtype": ("--kv-cache-dtype",), "max_num_tokens": ("--max-num-batched-tokens",),
             "max_num_seqs": ("--max-num-seqs",), "memory_fraction": ("--gpu-memory-utilization",)},
    "sglang": {"kv_dtype": ("--kv-cache-dtype",), "max_num_tokens": ("--chunked-prefill-size",),
               "max_num_seqs": ("--max-running-requests",),
               "memory_fraction": ("--mem-fraction-static",),
               "scheduler_recv_interval": ("--scheduler-recv-interval",)},
    "trtllm": {"max_num_tokens": ("--max_num_tokens",), "max_num_seqs": ("--max_batch_size",),
               "memory_fraction": ("--kv_cache_free_gpu_memory_fraction",)},
}
PRELUDE = r"""
command_not_found_handle() { return 0; }
dirname() { printf '.\n'; }
__dse_yaml() { local l; while IFS= read -r l; do printf 'DSE-YAML: %s\n' "$l"; done; }
PS4='+DSE-TRACE: '
set -x
source launch.sh
"""
# a heredoc that writes (or appends to) a file: read instead (the restricted shell may
# not write)
_HEREDOC = re.compile(r"\bcat\s*>>?\s*\S+\s*(<<-?\s*['\"]?\w+['\"]?)|\bcat\s*(<<-?\s*['\"]?\w+"
                      r"['\"]?)\s*>>?\s*\S+")


_TRACED = re.compile(r"^\++DSE-TRACE: ")  # bash repeats PS4's first character per level


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                          text=True).stdout


def script_name(prefix: str, precision: str, gpu: str, engine: str, mtp: bool) -> str:
    """The launch script's name as InferenceX's runners build it
    (``runners/launch_*.sh``: ``${EXP_NAME%%_*}_${PRECISION}_<gpu>${FRAMEWORK_SUFFIX}
    ${SPEC_SUFFIX}.sh``, the framework suffix ``_trt`` for TensorRT-LLM only)."""
    return (f"{prefix}_{precision}_{gpu}" + ("_trt" if engine == "trtllm" else "")
            + ("_mtp" if mtp else ""))


def _prepared(text: str) -> str:
    """The script as :func:`settings` evaluates it: no ``set -e`` (a no-op's status must
    not end it), a file-writing heredoc read."""
    text = re.sub(r"^\s*set\s+-[a-z]*e[a-z]*(\s+-?o?\s*pipefail)?\s*$", "", text, flags=re.M)
    text = re.sub(r"^\s*set\s+-o\s+errexit\s*$", "", text, flags=re.M)
    return _HEREDOC.sub(lambda m: "__dse_yaml " + (m.group(1) or m.group(2)), text)


def evaluate(text: str, env: dict[str, str], timeout: float = 20.0) -> tuple[int, str]:
    """(exit status, trace) of the script ``text`` in a restricted bash with ``env``:
    nothing is run but bash's builtins (see the module's docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "launch.sh").write_text(_prepared(text))
        full = {"PATH": "/nonexistent", "HOME": tmp, **env}
        try:
            done = subprocess.run(["/bin/bash", "--noprofile", "--norc", "-r", "-c", PRELUDE],
                                  cwd=tmp, env=full, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return 124, (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (
                e.stderr or "")
        return done.returncode, done.stdout + done.stderr


def launch_line(trace: str) -> tuple[str, list[str]]:
    """(engine, arguments) of the engine's command line in a trace; ("", []) if none."""
    for line in trace.splitlines():
        traced = _TRACED.match(line)
        if not traced:
            continue
        body = line[traced.end():].strip()
        for engine, marks in ENGINES:
            if any(m in body for m in marks):
                try:
                    return engine, shlex.split(body)
                except ValueError:
                    return engine, body.split()
    return "", []


def _flag(args: list[str], names) -> str:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return ""


def _yaml(trace: str) -> dict:
    import yaml
    lines = [line.split("DSE-YAML: ", 1)[1] for line in trace.splitlines()
             if line.startswith("DSE-YAML: ")]
    try:
        loaded = yaml.safe_load("\n".join(lines)) if lines else {}
    except yaml.YAMLError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def read_settings(engine: str, args: list[str], trace: str) -> dict[str, str]:
    """dse's settings (:data:`COLUMNS`) from the engine's arguments and, for TensorRT-LLM,
    the extra-options YAML the script wrote."""
    out = {k: _flag(args, names) for k, names in FLAGS.get(engine, {}).items()}
    if engine == "trtllm":
        y = _yaml(trace)
        kv = y.get("kv_cache_config") or {}
        out["kv_dtype"] = str(kv.get("dtype") or "")
        out["max_num_tokens"] = out["max_num_tokens"] or str(y.get("max_num_tokens") or "")
        out["max_num_seqs"] = out["max_num_seqs"] or str(y.get("max_batch_size") or "")
        out["memory_fraction"] = out["memory_fraction"] or str(
            kv.get("free_gpu_memory_fraction") or "")
    kv = out.get("kv_dtype", "").lower()
    out["kv_dtype"] = "fp8" if kv.startswith("fp8") else kv
    return out


def settings(text: str, env: dict[str, str]) -> dict[str, str]:
    """What a launch script starts its engine with for ``env``: the engine, the settings
    and its command line, or a status that says why not."""
    rc, trace = evaluate(text, env)
    engine, args = launch_line(trace)
    if not engine:
        return dict(status=f"no engine launched (exit {rc})")
    return dict(read_settings(engine, args, trace), engine=engine, status="ok",
                launch=" ".join(args))


@functools.lru_cache(maxsize=4096)
def _commit_at(repo: str, date: str) -> tuple[str, str]:
    line = _git(repo, "log", "-1", "--first-parent", "--format=%H %cs",
                f"--before={date} 23:59:59", "HEAD").strip()
    return tuple(line.split()) if line else ("", "")


@functools.lru_cache(maxsize=8192)
def _script(repo: str, commit: str, name: str) -> tuple[tuple[str, str], ...]:
    """(path, text) of every place a script of that name lived at the commit."""
    found = []
    for d in DIRS:
        for v in VARIANTS:
            path = f"{d}{name}{v}.sh"
            text = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"],
                                  capture_output=True, text=True)
            if text.returncode == 0:
                found.append((path, text.stdout))
        if found:
            return tuple(found)
    return ()


def _run_of(row: dict) -> dict | None:
    """An aggregated InferenceX run's (model prefix, precision, gpu, engine, date, layout,
    lengths, clients), or None for a run of another source."""
    src = row["silicon_data_source"]
    if row["mode"].strip().lower() != "agg" or not src.startswith(
            ("db-dump", "source_file=2026-")):
        return None
    fields = dict(kv.split("=", 1) for kv in src.split("; ") if "=" in kv)
    gpu = GPUS.get(row["system"])
    measured = (fields.get("measured") or "")[:10]
    conc = fields.get("silicon_concurrency")
    if not (gpu and measured and conc):
        return None
    from .inferencex import MODELS
    prefix = MODELS.get(fields.get("model", ""))
    if prefix is None:  # the database dump's ids: <prefix, dots as underscores>_<gpu>_...
        prefix = next((p for p in PREFIXES if row["id"].startswith(p.replace(".", "_") + "_")),
                      None)
    if prefix is None:
        return None
    tp, dp = int(row["tp_size"] or 1), int(row["attention_dp_size"] or 1)
    return dict(prefix=prefix, precision=row["precision"], gpu=gpu, engine=row["backend"],
                date=measured, devices=tp * dp, dp_attn=dp > 1,
                ep=int(row["moe_ep_size"] or 1), isl=int(row["isl"]), osl=int(row["osl"]),
                conc=int(conc), model=row["model_path"])


def environment(run: dict) -> dict[str, str]:
    """The variables InferenceX's workflow sets for a single-node run
    (.github/workflows/benchmark-tmpl.yml)."""
    return dict(MODEL=run["model"], TP=str(run["devices"]), EP_SIZE=str(run["ep"]),
                DP_ATTENTION="true" if run["dp_attn"] else "false", CONC=str(run["conc"]),
                ISL=str(run["isl"]), OSL=str(run["osl"]),
                MAX_MODEL_LEN=str(run["isl"] + run["osl"] + 256), RANDOM_RANGE_RATIO="0.8",
                RESULT_FILENAME="result", PORT="8888", PRECISION=run["precision"],
                FRAMEWORK=run["engine"], SPEC_DECODING="none", IMAGE="", RUNNER_TYPE=run["gpu"],
                EXP_NAME=f"{run['prefix']}_run", MODEL_PREFIX=run["prefix"])


def build(repo, src) -> list[dict]:
    """One row (:data:`COLUMNS`) per aggregated InferenceX run of the upstream CSV ``src``."""
    repo = str(repo)
    with open(src, newline="", encoding="utf-8") as f:
        runs = list(csv.DictReader(f))
    cache: dict[tuple, dict] = {}
    out = []
    for row in runs:
        run = _run_of(row)
        if run is None:
            continue
        commit, date = _commit_at(repo, run["date"])
        name = script_name(run["prefix"], run["precision"], run["gpu"], run["engine"], False)
        found = _script(repo, commit, name) if commit else ()
        base = dict(dict.fromkeys(COLUMNS, ""), id=row["id"], commit=commit, commit_date=date)
        if not found:
            out.append(dict(base, script=name + ".sh", status="no such script"))
            continue
        env = environment(run)
        results = []
        for path, text in found:
            key = (path, commit, tuple(sorted(env.items())))
            if key not in cache:
                cache[key] = settings(text, env)
            results.append((path, cache[key]))
        kept = {k: v for k, v in results[0][1].items() if k != "launch"}
        same = all({k: v for k, v in r.items() if k != "launch"} == kept for _, r in results)
        r = results[0][1]
        if not same:
            r = dict(status="runner variants differ: " + ", ".join(p for p, _ in results))
        elif r.get("engine") and r["engine"] != run["engine"]:
            r = dict(status=f"the script launches {r['engine']}, the run is {run['engine']}")
        out.append(dict(base, **r, script=results[0][0]))
    return out


def write(rows: list[dict], dst) -> None:
    from ..atomic import atomic_path
    with atomic_path(Path(dst)) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


@functools.lru_cache(maxsize=4)
def table(path: str = str(DEFAULT)) -> dict[str, dict]:
    """The launch table by run id (empty where the file is absent)."""
    if not Path(path).is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dse.validate.inferencex_scripts",
                                description="The engine settings of InferenceX's aggregated "
                                "benchmark runs, from its launch scripts.")
    p.add_argument("--repo", required=True, help="a local clone of SemiAnalysisAI/InferenceX")
    p.add_argument("--csv", help="aiconfigurator-core's silicon_sample.csv (default: the "
                   "installed package's)")
    p.add_argument("-o", "--output", default=str(DEFAULT))
    a = p.parse_args(argv)
    from .inferencex import is_clone
    from .upstream import missing_upstream, package_csv
    if not is_clone(a.repo):
        print(f"dse: error: --repo {a.repo}: not a git clone of SemiAnalysisAI/InferenceX",
              file=sys.stderr)
        return 2
    src = Path(a.csv) if a.csv else package_csv()[0]
    if not src.is_file():
        return missing_upstream(src)
    rows = build(a.repo, src)
    write(rows, a.output)
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"{len(rows)} aggregated InferenceX runs ({ok} with their settings) -> {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

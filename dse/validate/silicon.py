"""NVIDIA AIConfigurator's measured serving runs in dse's measured schema.

``aiconfigurator-core`` (Apache-2.0, PyPI) ships ``systems/silicon_sample.csv``: serving
runs of TensorRT-LLM, SGLang and vLLM measured by benchmark clients at a stated
concurrency (a closed loop, fixed ISL/OSL), aggregated or disaggregated, with the mean
TTFT and TPOT in milliseconds. :func:`convert` maps each run to two rows of kind
``serving_latency`` (``ttft_ms`` and ``tpot_ms``), keeping the upstream id in ``id`` and
the package version in ``source``; the upstream provenance string stays in ``notes``.
``data/measured_silicon.csv`` is its output; run it again on a newer release::

    pip install aiconfigurator-core
    python -m dse.validate.silicon -o data/measured_silicon.csv

(``--layouts``: InferenceX's launch layouts, ``data/inferencex_layouts.csv`` by default.)

What is read, field by field (upstream column -> dse column):

- ``system`` -> ``hardware`` (``b200_sxm`` is the catalogue's ``b200``, ...);
  ``backend`` -> ``framework`` and ``backend_version`` -> ``framework_version``;
  ``model_path`` -> ``model`` (a Hugging Face id, resolved through the catalogue's
  aliases).
- ``gemm_quant_mode`` / ``moe_quant_mode`` -> ``precision`` (``fp8`` and ``fp8_block``
  run FP8 GEMMs, ``nvfp4`` NVFP4 GEMMs, ``int4_wo`` INT4 weights at 16-bit compute) and
  the per-op modes themselves in ``gemm_quant``/``moe_quant``; the KV-cache dtype is not
  stated upstream: the engines' default (``auto``: the model's 16-bit dtype) is written.
- aggregated: ``tp_size`` -> ``tp``, ``attention_dp_size`` -> ``dp`` (attention data
  parallelism, one rank per DP group), ``moe_tp_size`` / ``moe_ep_size`` -> ``moe_tp`` /
  ``ep``; ``batch_size`` (the per-rank batch the run was configured for) ->
  ``max_num_seqs``; the devices of one worker are tp x dp.
- disaggregated: ``prefill_*`` / ``decode_*`` the same per pool (``{pool}_tp``,
  ``{pool}_dp``, ``{pool}_moe_tp``, ``{pool}_ep``, ``{pool}_batch``,
  ``{pool}_workers``). The InferenceX runs (``source_file=2026-...``) leave the worker
  counts empty and garble the decode pool's fields (attention DP written as tp, the
  prefill pool's ep copied); where InferenceX's own configuration history
  (:mod:`dse.validate.inferencex`, ``data/inferencex_layouts.csv``) launched the run's
  model, system, precision, framework, lengths and concurrency with its devices per
  worker in exactly one layout, the pools are that layout, and its recipe's KV-cache
  dtype, redundant experts and decode batch cap where the table has them, said in the
  notes; otherwise they stay empty and the run unscored, the note naming the
  candidates.
- speculative decoding: an InferenceX run whose every candidate layout decoded with MTP
  (and that run's twins) says ``MTP`` in its notes, which leaves it unscored (the
  acceptance is not stated); one that InferenceX ran both with and without says
  ``speculative decoding undetermined``, likewise unscored.
- the benchmark: InferenceX's runs (``db-dump/...`` and ``source_file=2026-...``) were
  measured by its ``utils/bench_serving/benchmark_serving.py`` (single node) or
  srt-slurm's ``sa-bench`` (multi-node): random prompts whose input and output lengths
  are uniform integers from int(0.8 x) to x of the stated ISL / OSL
  (``--random-range-ratio 0.8``), ``--num-prompts`` 10 x concurrency, all clients
  starting together after a warm-up (``--request-rate inf``), the mean TTFT and TPOT
  over every request (NVIDIA's aisimulate replays these runs so: ``request_count`` =
  concurrency x 10, ``random_range_ratio`` 0.8). So ``input_len`` / ``output_len`` are
  those uniforms' means, ``input_len_cv`` / ``output_len_cv`` their spreads, and
  ``num_prompts`` 10 x concurrency (:func:`inferencex_benchmark`). The other runs
  (aiconfigurator's own gap analyses) state neither: fixed lengths, the steady state.
- ``silicon_concurrency`` (in the provenance string) -> ``concurrency``: the benchmark
  client's concurrent requests; where it is missing, an aggregated row's batch x dp.
  Where it is k > 1 whole times an aggregated worker's batch x dp and the worker count is
  not stated (29 Dynamo gap-analysis runs), the run is a source anomaly (``ANOMALY:``):
  neither one worker at that cap nor k workers give its TTFT and TPOT.

What is checked across rows:

- **The same measurement, listed twice.** The file repeats runs across its source
  files: rows that share their system, architecture (DeepSeek-V3 and -R1 are one),
  backend, quantization, lengths, concurrency and measured TTFT and TPOT to every
  digit. The notes name the twin. Twins often disagree on the layout (the 2026 files
  write an attention-DP worker as tp 4, dp 1 where the older rows write tp 1, dp 4,
  the same world size), so neither lends the other its fields: each is read as it
  states itself (the MTP finding above excepted: it is the measurement's).
- **An id that contradicts its fields.** The ids of the 2026 source files name the
  worker (``..._tp8_ep8_941``: the engines' tensor-parallel world size, attention-DP
  ranks included, 8). An aggregated row whose fields put tp x attention-DP x pp at
  another count (234 rows of the 2026-04-06 file: 64 devices for a ``tp8`` id, the
  same TTFT and TPOT as the 2026-03-25 row that states 8) is marked a source anomaly
  (``ANOMALY:`` in its notes): reported, not scored or fitted.
"""

from __future__ import annotations

import argparse
import csv
import functools
import re
import sys
from pathlib import Path

from ..catalogue.kernels import AIC_SYSTEMS
from .inferencex import DEFAULT as INFERENCEX_LAYOUTS
from .inferencex_scripts import DEFAULT as INFERENCEX_LAUNCH, table as launch_table
from .upstream import missing_upstream, package_csv
from .rows import COLUMNS, DISAGG_COLUMNS, LOAD_COLUMNS

# The catalogue's name of each upstream system (aiconfigurator-core systems/*.yaml).
SYSTEMS = AIC_SYSTEMS
# dse's framework names (dse.validate.rows.FRAMEWORKS) of the upstream backends.
BACKENDS = {"trtllm": "tensorrt-llm", "sglang": "sglang", "vllm": "vllm"}
# Upstream quantization modes, as precision words dse reads (rows.precision_bits).
QUANT = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4", "mxfp4": "mxfp4",
         "int4_wo": "int4", "w4afp8": "int4", "bf16": "bf16", "float16": "bf16"}
UPSTREAM_COLUMNS = (
    "id", "silicon_data_source", "backend", "backend_version", "model_path", "system", "mode",
    "isl", "osl", "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size",
    "attention_dp_size", "moe_tp_size", "moe_ep_size",
    *(f"{p}_{k}" for p in ("prefill", "decode") for k in (
        "batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
        "moe_ep_size")), "silicon_ttft_ms", "silicon_tpot_ms")
EXTRA_COLUMNS = ("framework_version", "gemm_quant", "moe_quant")
FIELDS = (*COLUMNS[:-1], *LOAD_COLUMNS, *DISAGG_COLUMNS, *EXTRA_COLUMNS, "notes")


def _int(text: str) -> int | None:
    text = (text or "").strip()
    return int(float(text)) if text else None


def _precision(gemm: str, moe: str) -> tuple[str, str]:
    """(precision string, what was assumed) of the per-op quantization modes."""
    gemm, moe = gemm.strip().lower(), moe.strip().lower()
    words = {QUANT.get(m) for m in (gemm, moe) if m}
    if None in words:
        raise ValueError(f"unknown quantization mode gemm {gemm!r} / moe {moe!r}")
    if not words:
        return "bf16, bf16 kv", "quantization not stated: bf16 weights"
    w = QUANT[moe or gemm]
    if w == "int4":
        text = "int4 weight-only w4a16"
    elif w == "bf16":
        text = "bf16"
    else:
        text = f"{w} w/a"
    return f"{text}, bf16 kv", ""


_ID_LAYOUT = re.compile(r"_tp(\d+)(?:_\d+)?_ep\d*(?:_\d+)?_\d+$")


# the card fields that make two checkpoints one architecture to the cost model
ARCHITECTURE = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                "d_ff_expert", "n_experts", "top_k", "n_shared_experts", "n_dense_layers",
                "vocab_size", "kv_lora_rank", "q_lora_rank", "linear_layers")


@functools.lru_cache(maxsize=None)
def _architecture(model_path: str):
    """The model's architecture (its catalogue card's :data:`ARCHITECTURE` fields), so
    that the same run filed under DeepSeek-V3 and under DeepSeek-R1 is one measurement;
    the path itself for a model the catalogue does not know."""
    from ..catalogue.lookup import load_model, resolve_name
    name = resolve_name("models", model_path.strip())
    if name is None:
        return model_path
    fields = load_model(name).fields
    return tuple(fields.get(k) for k in ARCHITECTURE)


def _measurement(row: dict) -> tuple:
    conc = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"])
    return (row["system"], _architecture(row["model_path"]), row["backend"], row["mode"],
            row["isl"], row["gemm_quant_mode"], row["moe_quant_mode"],
            row["osl"], conc.group(1) if conc else "", row["silicon_ttft_ms"],
            row["silicon_tpot_ms"])


def with_twins(runs: list[dict], layouts=None) -> list[tuple[dict, list[str]]]:
    """Each run with the notes its twins (the same measurement listed again) call for:
    the first twin's id, an ``ANOMALY:`` note where an aggregated run's id contradicts
    its layout (see the module's docstring), and ``MTP:`` where a twin is a run
    InferenceX launched only with MTP (``layouts``: InferenceX's table, or None): the
    measurement decoded speculatively whichever row lists it."""
    twins: dict[tuple, list[dict]] = {}
    for run in runs:
        twins.setdefault(_measurement(run), []).append(run)
    out = []
    for run in runs:
        notes = []
        others = [t["id"] for t in twins[_measurement(run)] if t is not run]
        if others:
            notes.append(f"the same measurement as upstream row {others[0]}"
                         + (f" and {len(others) - 1} more" if len(others) > 1 else "")
                         + " (system, architecture, quantization, lengths, concurrency, TTFT "
                         "and TPOT alike)")
        if run["mode"].strip().lower() == "agg":
            named = _ID_LAYOUT.search(run["id"])
            world = ((_int(run["tp_size"]) or 1) * (_int(run["attention_dp_size"]) or 1)
                     * (_int(run["pp_size"]) or 1))
            if named and int(named.group(1)) != world:
                notes.append(f"ANOMALY: the id names a tp{named.group(1)} worker, the fields "
                             f"one of {world} devices (tp {run['tp_size']} x attention-DP "
                             f"{run['attention_dp_size']} x pp {run['pp_size'] or 1})")
        flagged = [t["id"] for t in twins[_measurement(run)]
                   if others and layouts and _is_mtp(t, layouts)]
        if flagged and run["id"] not in flagged:
            notes.append(f"MTP: the same measurement as upstream row {flagged[0]}, which "
                         "InferenceX ran only with spec-decoding mtp")
        out.append((run, notes))
    return out


def _where(r: dict) -> str:
    return (f"InferenceX's nvidia-master.yaml, {r['config_key']} (first committed "
            f"{r['first_seen']}, {r['first_commit'][:9]})"
            + (f", recipe {r['recipe']}" if r["recipe"] else ""))


def _speculation_of(row: dict, layouts) -> list[str]:
    """Notes on an InferenceX aggregated run's speculative decoding: the configurations
    that ran its layout at its concurrency all decoded with MTP (the row is then not
    scored: the notes state MTP and the acceptance is unknown), or some did and some did
    not (``speculative decoding undetermined``: likewise not scored)."""
    from .inferencex import candidates
    found = candidates(row, layouts) if layouts else []
    spec = {r["spec_decoding"] for r in found}
    if spec and spec <= {"mtp"}:
        return [f"MTP: {_where(found[0])} runs this layout at this concurrency only with "
                "spec-decoding mtp"]
    if len(spec) > 1:
        return ["speculative decoding undetermined: InferenceX configurations ran this "
                "layout at this concurrency with and without it ("
                + ", ".join(sorted({r['config_key'] for r in found})) + ")"]
    return []


def _experts(model_path: str) -> int:
    from ..catalogue.lookup import load_model, resolve_name
    name = resolve_name("models", model_path.strip())
    return int(load_model(name).fields.get("n_experts") or 0) if name else 0


def _recipe_settings(row: dict, out: dict, r: dict) -> list[str]:
    """Set what the lent layout's recipe states (the table's recipe columns, read from
    NVIDIA/srt-slurm): the KV-cache dtype where both pools agree, the redundant experts
    (SGLang's ep-num-redundant-experts, or TensorRT-LLM's expert slots less the model's
    experts) of the decode pool, whose wide expert parallelism needs them; notes."""
    if not r.get("recipe_commit"):
        return []
    notes = []
    kv = {r.get("prefill_kv_dtype", ""), r.get("decode_kv_dtype", "")}
    if kv == {"fp8"}:
        out["precision"] = out["precision"].replace(", bf16 kv", ", fp8 kv")
        notes.append("KV cache fp8 (the recipe's kv-cache dtype, both pools)")
    elif kv == {""}:
        notes.append("the recipe leaves the KV-cache dtype at auto (16-bit)")
    else:
        notes.append(f"the recipe's KV-cache dtypes differ by pool ({sorted(kv)}): 16-bit "
                     "taken")
    spare = str(r.get("decode_redundant_experts") or "").strip()
    slots = str(r.get("decode_expert_slots") or "").strip()
    if not spare and slots:
        spare = str(max(int(float(slots)) - _experts(row["model_path"]), 0))
    if spare and int(float(spare)) > 0:
        out["ep_redundant_experts"] = int(float(spare))
        notes.append(f"{out['ep_redundant_experts']} redundant experts (the decode pool's, "
                     "by the recipe)")
    return notes


def _lend_layout(row: dict, out: dict, layouts) -> list[str]:
    """Fill a disaggregated InferenceX run's pools (workers, tp, attention-DP, ep,
    moe_tp; the decode batch where a TensorRT-LLM recipe names it) from the one layout
    InferenceX launched it with (:func:`dse.validate.inferencex.candidates`); notes that
    say so, or why not."""
    from .inferencex import candidates, dse_layout
    found = candidates(row, layouts) if layouts else []
    if not found:
        return []
    if len(found) > 1:
        return [f"worker counts not lent: {len(found)} InferenceX layouts ran this model, "
                "system, precision, framework, lengths and concurrency with these devices "
                "per worker (" + ", ".join(sorted({r['config_key'] for r in found})) + ")"
                + ("; MTP in all" if all(r["spec_decoding"] == "mtp" for r in found) else "")]
    r = found[0]
    said = []
    for p in ("prefill", "decode"):
        was = {k: out[f"{p}_{k}"] for k in ("tp", "dp", "ep")}
        lent = dse_layout(r, p)
        out.update({f"{p}_{k}": v for k, v in lent.items()})
        if any(was[k] != lent[k] for k in was):
            said.append(f"{p} tp {was['tp']} x dp {was['dp']}, ep {was['ep']} upstream")
    recipe = re.search(r"_batch(\d+)_eplb\d+_mtp(\d+)", r["recipe"])
    if recipe:
        out["decode_batch"] = int(recipe.group(1))
    if str(r.get("decode_max_batch") or "").strip():
        out["decode_batch"] = int(float(r["decode_max_batch"]))
    set_by_recipe = _recipe_settings(row, out, r)
    notes = [f"layout from {_where(r)}: {out['prefill_workers']} prefill worker(s) of "
             f"{r['prefill_tp']} devices, {out['decode_workers']} decode worker(s) of "
             f"{r['decode_tp']}" + (f", decode batch {out['decode_batch']} per rank"
                                    if recipe else "")
             + (" (the fields said " + "; ".join(said) + ")" if said else "")] + set_by_recipe
    if r["spec_decoding"] == "mtp":
        n = recipe.group(2) if recipe else "?"
        notes.append(f"MTP: InferenceX ran this configuration with spec-decoding mtp "
                     f"({n} draft tokens); acceptance not stated")
    return notes


def _is_mtp(run: dict, layouts) -> bool:
    """InferenceX launched ``run`` only as MTP runs (every candidate layout)."""
    from .inferencex import candidates
    found = candidates(run, layouts)
    return bool(found) and all(r["spec_decoding"] == "mtp" for r in found)


# InferenceX's benchmark clients (benchmarks/benchmark_lib.sh run_benchmark_serving and
# srt-slurm's sa-bench/bench.sh, 2025-09 to 2026-04): --random-range-ratio 0.8 (the
# workflows' RANDOM_RANGE_RATIO), --num-prompts $((CONC * 10))
RANGE_RATIO = 0.8
PROMPTS_PER_CLIENT = 10


def is_inferencex(provenance: str) -> bool:
    """An InferenceX run: the database dump's rows and the 2026 source files'."""
    return provenance.startswith(("db-dump", "source_file=2026-"))


def uniform_lengths(length: int, ratio: float = RANGE_RATIO) -> tuple[float, float]:
    """(mean, coefficient of variation) of the benchmark's lengths for a stated
    ``length``: uniform integers from int(length x ratio) to length, both included
    (``np.random.randint(lower, upper + 1)``)."""
    lower = int(length * ratio)
    mean = 0.5 * (lower + length)
    var = ((length - lower + 1) ** 2 - 1) / 12.0
    return mean, var ** 0.5 / mean


def inferencex_benchmark(out: dict, row: dict, clients) -> list[str]:
    """Set an InferenceX run's lengths as its benchmark drew them and its requests
    (:data:`RANGE_RATIO`, :data:`PROMPTS_PER_CLIENT`); the note that says so."""
    isl, osl = int(float(row["isl"])), int(float(row["osl"]))
    (inp, inp_cv), (outp, out_cv) = uniform_lengths(isl), uniform_lengths(osl)
    out.update(input_len=f"{inp:g}", output_len=f"{outp:g}", input_len_cv=f"{inp_cv:.4f}",
               output_len_cv=f"{out_cv:.4f}")
    if clients:
        out["num_prompts"] = PROMPTS_PER_CLIENT * int(clients)
    return [f"InferenceX benchmark: lengths uniform from int({RANGE_RATIO} x) to x of ISL "
            f"{isl} / OSL {osl} (--random-range-ratio {RANGE_RATIO}: means {inp:g} / {outp:g}"
            f"), {PROMPTS_PER_CLIENT} x concurrency requests from a cold start "
            "(--num-prompts, --request-rate inf)"]


def launch_settings(row: dict, out: dict, launch) -> list[str]:
    """Set what an aggregated InferenceX run's launch script started its engine with
    (``launch``: :func:`dse.validate.inferencex_scripts.table`, by run id): the KV-cache
    dtype, the token budget, the running-batch cap (a worker without attention data
    parallelism: the flag's per-rank reading is the engine's own otherwise), SGLang's
    receive interval and the memory the engine leaves unused (vLLM's and SGLang's
    fractions; TensorRT-LLM's is of the memory left after the weights, not mapped); the
    notes that say so."""
    r = launch.get(row["id"]) if launch else None
    if not r:
        return []
    if r["status"] != "ok":
        return [f"launch settings not read: {r['script']} at {r['commit'][:9]}: {r['status']}"]
    said = []
    if r["kv_dtype"] == "fp8":
        out["precision"] = out["precision"].replace(", bf16 kv", ", fp8 kv")
        said.append("KV cache fp8")
    elif r["kv_dtype"] not in ("", "auto"):
        said.append(f"KV cache {r['kv_dtype']} (read as 16-bit)")
    if r["max_num_tokens"]:
        out["max_num_tokens"] = int(float(r["max_num_tokens"]))
        said.append(f"{out['max_num_tokens']} tokens a step")
    if r["max_num_seqs"] and str(out.get("dp") or 1) == "1":
        out["max_num_seqs"] = int(float(r["max_num_seqs"]))
        said.append(f"at most {out['max_num_seqs']} running")
    if r["scheduler_recv_interval"] and int(float(r["scheduler_recv_interval"])) > 1:
        out["scheduler_recv_interval"] = int(float(r["scheduler_recv_interval"]))
        said.append(f"new requests looked for every {out['scheduler_recv_interval']} "
                    "decode steps")
    if r["memory_fraction"] and r["engine"] in ("vllm", "sglang"):
        out["memory_reserve"] = f"{1.0 - float(r['memory_fraction']):.4g}"
        said.append(f"memory fraction {r['memory_fraction']}")
    return [f"launch settings from InferenceX's {r['script']} at {r['commit'][:9]} "
            f"({r['commit_date']}): " + (", ".join(said) or "the engine's defaults")]


def _past_the_batch(clients, batch: int, dp: int) -> bool:
    """An aggregated run whose concurrency is k > 1 whole times its worker's batch x
    attention-DP ranks. aiconfigurator's ``batch_size`` is one worker's; 29 gap-analysis
    runs of Dynamo deployments in 0.12.0 state 2-32 times it, and fit neither reading:
    Qwen3-32B on GB200, tp 2, batch 1 at 2 clients measures TTFT 226 ms (one worker
    capped at 1 would keep the second client waiting out the first's 500 tokens: about
    2 s) and TPOT 42 ms (two workers of 1 client would decode at the 8 ms its 1-client
    run measures)."""
    return bool(clients and batch) and clients > batch * dp and clients % (batch * dp) == 0


def convert_row(row: dict, version: str, lent: tuple[str, ...] = (),
                layouts=None, launch=None) -> list[dict]:
    """The two measured rows (ttft_ms, tpot_ms) of one upstream run (``lent``: what its
    twins say of it, as notes; ``layouts``: InferenceX's launch layouts,
    :mod:`dse.validate.inferencex`, or None; ``launch``: its aggregated runs' engine
    settings by run id, :mod:`dse.validate.inferencex_scripts`, or None)."""
    provenance = row["silicon_data_source"]
    conc = re.search(r"silicon_concurrency=(\d+)", provenance)
    precision, said = _precision(row.get("gemm_quant_mode", ""), row.get("moe_quant_mode", ""))
    mode = row["mode"].strip().lower()
    out = dict.fromkeys(FIELDS, "")
    out.update(source=f"aiconfigurator-core {version} (systems/silicon_sample.csv, "
                      "Apache-2.0)",
               kind="serving_latency", model=row["model_path"],
               hardware=SYSTEMS.get(row["system"], row["system"]),
               precision=precision, input_len=row["isl"], output_len=row["osl"],
               framework=BACKENDS.get(row["backend"], row["backend"]),
               framework_version=row.get("backend_version", ""),
               gemm_quant=row.get("gemm_quant_mode", ""), moe_quant=row.get("moe_quant_mode", ""))
    notes = [f"upstream: {provenance}", "KV-cache dtype not stated: the engines' auto "
             "(16-bit) taken"]
    if said:
        notes.append(said)
    notes += lent
    if mode == "agg":
        tp, dp = _int(row["tp_size"]) or 1, _int(row["attention_dp_size"]) or 1
        batch = _int(row["batch_size"])
        out.update(tp=tp, pp=_int(row["pp_size"]) or 1, dp=dp, n_devices=tp * dp,
                   max_num_seqs=batch or "", moe_tp=_int(row["moe_tp_size"]) or "",
                   ep=_int(row["moe_ep_size"]) or "")
        if not conc and batch:
            notes.append(f"silicon_concurrency not stated: batch {batch} x attention-DP {dp}")
        notes += _speculation_of(row, layouts)
        clients = int(conc.group(1)) if conc else (batch * dp if batch else "")
        if _past_the_batch(clients, batch, dp):
            notes.append(f"ANOMALY: silicon_concurrency {clients} is {clients // (batch * dp)} "
                         f"x the worker's batch {batch} x attention-DP {dp}, and the run's "
                         "worker count is not stated: one worker at that cap would keep the "
                         "other clients waiting out whole requests (the gap-analysis runs' "
                         "TTFTs show no such wait), several would decode at the pace of "
                         "fewer clients, faster than the TPOTs measured")
    elif mode == "disagg":
        out["serving"] = "disagg"
        for p in ("prefill", "decode"):
            out.update({f"{p}_tp": _int(row[f"{p}_tp_size"]) or 1,
                        f"{p}_pp": _int(row[f"{p}_pp_size"]) or 1,
                        f"{p}_dp": _int(row[f"{p}_attention_dp_size"]) or 1,
                        f"{p}_moe_tp": _int(row[f"{p}_moe_tp_size"]) or "",
                        f"{p}_ep": _int(row[f"{p}_moe_ep_size"]) or "",
                        f"{p}_batch": _int(row[f"{p}_batch_size"]) or "",
                        f"{p}_workers": _int(row[f"{p}_num_workers"]) or ""})
        clients = int(conc.group(1)) if conc else ""
        if not (out["prefill_workers"] and out["decode_workers"]):
            notes += _lend_layout(row, out, layouts)
            if any("recipe" in n and "kv-cache dtype" in n.lower() for n in notes):
                notes = [n for n in notes if not n.startswith("KV-cache dtype not stated")]
    else:
        raise ValueError(f"mode {mode!r} is not agg or disagg")
    out["concurrency"] = clients
    if is_inferencex(provenance):
        notes += inferencex_benchmark(out, row, clients)
        if mode == "agg":
            set_by_script = launch_settings(row, out, launch)
            if any("KV cache" in n for n in set_by_script):
                notes = [n for n in notes if not n.startswith("KV-cache dtype not stated")]
            notes += set_by_script
    out["notes"] = "; ".join(notes)
    rows = []
    for metric, column in (("ttft_ms", "silicon_ttft_ms"), ("tpot_ms", "silicon_tpot_ms")):
        rows.append(dict(out, id=row["id"], metric=metric, value=row[column]))
    return rows


def convert(src, dst, version: str, layouts=None, launch=None) -> int:
    """Write ``dst`` (the measured schema, two rows per upstream run) from the upstream
    CSV ``src``; returns the number of upstream runs. Written to a temporary file and
    moved into place. ``layouts``: the table of InferenceX's launch layouts
    (``data/inferencex_layouts.csv``) that InferenceX runs take their worker counts
    and speculative decoding from, or None; ``launch``: the table of the engine settings
    of InferenceX's aggregated runs (``data/inferencex_launch.csv``), or None."""
    from ..atomic import atomic_path
    from ..errors import InputError
    src, dst = Path(src), Path(dst)
    with src.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in UPSTREAM_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise InputError(str(src), missing[0], "column missing",
                             "the columns of aiconfigurator-core's silicon_sample.csv: "
                             + ", ".join(UPSTREAM_COLUMNS))
        runs = list(reader)
    if launch is not None:
        launch = launch_table(str(launch))
    with atomic_path(dst) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, FIELDS, lineterminator="\n")
        writer.writeheader()
        for run, lent in with_twins(runs, layouts):
            try:
                writer.writerows(convert_row(run, version, tuple(lent), layouts, launch))
            except ValueError as e:  # a mode or value a newer release added
                raise InputError(str(src), f"row {run['id']}", str(e),
                                 "the modes of dse.validate.silicon: " + ", ".join(QUANT)
                                 + "; agg or disagg; numbers in the size columns") from None
    return len(runs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dse.validate.silicon",
                                description="Convert aiconfigurator-core's "
                                "systems/silicon_sample.csv into dse's measured schema.")
    p.add_argument("-o", "--output", default="data/measured_silicon.csv")
    p.add_argument("--csv", help="the upstream CSV (default: the installed package's)")
    p.add_argument("--version", help="the upstream package version (with --csv)")
    p.add_argument("--layouts", default=str(INFERENCEX_LAYOUTS),
                   help="InferenceX's launch layouts (python -m dse.validate.inferencex); "
                   "'' for none")
    p.add_argument("--launch", default=str(INFERENCEX_LAUNCH),
                   help="the engine settings of InferenceX's aggregated runs (python -m "
                   "dse.validate.inferencex_scripts); '' for none")
    a = p.parse_args(argv)
    if a.csv:
        if not a.version:
            p.error("--csv needs --version (the package version the file comes from)")
        src, version = Path(a.csv), a.version
    else:
        src, version = package_csv()
    if not src.is_file():
        return missing_upstream(src)
    from ..errors import InputError
    try:
        if a.layouts and not Path(a.layouts).is_file():
            raise InputError(a.layouts, "--layouts", "file not found",
                             "the output of python -m dse.validate.inferencex, or ''")
        if a.launch and not Path(a.launch).is_file():
            raise InputError(a.launch, "--launch", "file not found",
                             "the output of python -m dse.validate.inferencex_scripts, or ''")
        n = convert(src, a.output, version, a.layouts or None, a.launch or None)
    except InputError as e:
        print(str(e) if str(e).startswith("dse:") else f"dse: error: {e}", file=sys.stderr)
        return 2
    print(f"{n} runs of aiconfigurator-core {version} -> {a.output} ({2 * n} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

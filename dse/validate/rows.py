"""Measured rows (the schema of ``measured_public.csv``) mapped to evaluation points.

Each row becomes a :class:`Case`: the model card (architecture from the row's columns,
styled after the catalogue's member of the same family), the catalogue hardware, the
framework, the knobs of one inference or training point, and how to read the metric
off the evaluator's outputs. A row that cannot be expressed becomes a :class:`Skip`
with the reason; nothing is dropped silently.

Metric definitions (../shared/data/README.md):

- ``infer_decode`` tokens_per_s: llama.cpp ``tgN``, batch 1, N tokens generated from an
  empty context: 1 / mean TPOT over the N steps.
- ``infer_prefill`` tokens_per_s: llama.cpp ``ppN``, an N-token prompt at batch 1,
  processed in micro-batches of 512 tokens: N / TTFT.
- ``serving_throughput`` output_tokens_per_s: TensorRT-LLM offline max throughput, the
  decode steady state at the largest batch the KV memory allows (capped at 8192):
  batch x output_len / (TTFT + (output_len - 1) TPOT) at that batch;
  ``total_tokens_per_s`` counts the prompts too: x (input_len + output_len) / output_len.
- ``serving_latency``: a deployment under a request load (a benchmark client's
  ``--max-concurrency`` closed loop or a ``--request-rate`` open loop, MLPerf Server and
  Interactive), read off the load model (dse.formulas.load): TTFT, TPOT (= ITL), request
  latency in ms, means unless the metric ends in ``_p50`` / ``_p90`` / ``_p99``; output
  tokens/s and requests/s completed. Load columns (optional in the CSV): ``concurrency`` or
  ``request_rate`` (one of them), ``arrival_cv``, ``framework``, ``max_num_seqs`` (else
  ``batch``: the running-batch cap per attention-DP rank), ``max_num_tokens``,
  ``input_len_cv``, ``output_len_cv``, ``prefix_cache_hit``, ``num_prompts`` (the
  requests of a closed-loop benchmark run whose clients start together: its first wave
  counts), ``scheduler_recv_interval`` (decode steps between the scheduler's looks for
  new requests: SGLang's flag), ``memory_reserve`` (the share of device memory the engine
  leaves unused: 1 - vLLM's ``--gpu-memory-utilization``, 1 - SGLang's
  ``--mem-fraction-static``), and ``moe_tp`` (a wide-EP layout: tp x dp = moe_tp x ep
  devices per worker).
  ``input_tokens_per_s`` counts prompt tokens.
- disaggregated ``serving_latency`` (``serving`` = ``disagg``, the pools' layouts in
  ``prefill_workers``, ``prefill_tp``, ... ``decode_batch``): the whole deployment under
  its open-loop ``request_rate`` (dse.formulas.disagg); or, with ``pool`` = ``prefill`` |
  ``decode``, one pool measured at its own limit with the other assumed unlimited (how
  SGLang's large-scale posts benchmark each phase): that pool's capacity, the prompt
  tokens/s of a prefill pool (each request's prompt and first token) or the output
  tokens/s of a decode pool (the rest, its cache transferred), per GPU over that pool's
  devices.
- ``train`` tokens_per_s_per_gpu: global batch x sequence length / step time / GPUs.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import re
from pathlib import Path
from typing import Any

from .. import checks
from ..catalogue.lookup import all_hardware, load_model, resolve_name
from ..errors import InputError
from ..catalogue.model import ModelCard

COLUMNS = ("id", "source", "kind", "model", "n_params_b", "layers", "hidden", "heads",
           "kv_heads", "ffn", "vocab", "moe_experts", "moe_topk", "hardware", "n_devices",
           "tp", "pp", "dp", "ep", "precision", "batch", "input_len", "output_len", "metric",
           "value", "notes")
KINDS = ("train", "infer_decode", "infer_prefill", "serving_throughput", "serving_latency")
# Columns a CSV may add for serving_latency rows (absent or empty: not stated).
LOAD_COLUMNS = ("concurrency", "request_rate", "arrival_cv", "framework", "moe_tp",
                "max_num_seqs", "max_num_tokens", "input_len_cv", "output_len_cv",
                "prefix_cache_hit", "spec_tokens", "spec_acceptance", "ep_redundant_experts",
                "num_prompts", "scheduler_recv_interval", "memory_reserve")
# Columns a CSV may add for disaggregated serving_latency rows (dse.formulas.disagg).
POOL_KEYS = ("workers", "tp", "pp", "dp", "ep", "moe_tp", "batch")
DISAGG_COLUMNS = ("serving", "pool", *(f"{p}_{k}" for p in ("prefill", "decode")
                                       for k in (*POOL_KEYS, "hardware")))
# Kinds no calibration is fitted on: they are scored with the calibration of the static
# kinds, so their calibrated predictions are held out by construction.
UNFITTED = ("serving_latency",)
# The metrics people publish, per kind (their readings: dse.validate.predict.metric_value).
# Inference tokens/s count output tokens (prefill: prompt tokens; "total_tokens_per_s":
# prompt and output tokens, as vllm bench serve's "Total Token throughput"); "_per_gpu"
# divides by the devices; latencies are means in milliseconds (itl_ms = tpot_ms: the mean
# gap between tokens is the mean time per output token); itl_ms_pNN are the gaps' percentiles.
_LATENCY = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
METRICS = {"train": ("tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu",
                     "tflops_per_s_per_gpu", "mfu", "step_time_s"),
           "infer_decode": ("tokens_per_s", "output_tokens_per_s", "tokens_per_s_per_gpu",
                            *_LATENCY),
           "infer_prefill": ("tokens_per_s", "tokens_per_s_per_gpu", "ttft_ms"),
           "serving_throughput": ("output_tokens_per_s", "tokens_per_s", "tokens_per_s_per_gpu",
                                  "total_tokens_per_s", "requests_per_s", *_LATENCY),
           "serving_latency": (*_LATENCY, *(f"{m}_p{q}" for m in ("ttft_ms", "tpot_ms", "e2e_ms",
                                                                  "itl_ms")
                                            for q in (50, 90, 99)),
                               "output_tokens_per_s", "tokens_per_s", "tokens_per_s_per_gpu",
                               "requests_per_s", "input_tokens_per_s",
                               "input_tokens_per_s_per_gpu", "total_tokens_per_s")}
# Metrics people publish that dse does not model, with why (none at present: the ITL
# percentiles, the gaps between tokens pooled over tokens, are itl_p50_s ... itl_p99_s).
UNMODELLED: dict[str, str] = {}
# Why a row is not scored (``dse validate --rows``): "scored" rows are in the error
# tables; the others are counted and listed.
STATUSES = ("scored", "flagged", "does_not_fit", "infeasible", "under_load", "unknown_model",
            "unknown_hardware", "unknown_metric", "unmodelled", "unstated_devices", "bad_row")
# Micro-batch of a training row that does not state one: the framework's documented
# default (Megatron-LM / NeMo / Megatron-Bridge recipes: --micro-batch-size 1).
DEFAULT_MICRO_BATCH = {"megatron": 1}
# Megatron-Core's performance recipes shard the optimizer over data parallelism
# (--use-distributed-optimizer: ZeRO-1) and run sequence parallelism with tensor
# parallelism; a row that does not say otherwise ran so.
DEFAULT_DISTRIBUTED_OPTIMIZER = {"megatron"}

# Framework by what the source or notes name (first match wins).
FRAMEWORKS = (("llama.cpp", ("llama.cpp", "llama-bench", "gpu-benchmarks-on-llm-inference")),
              ("tensorrt-llm", ("tensorrt-llm", "trtllm", "tensorrt")),
              ("vllm", ("vllm",)),
              ("megatron", ("megatron", "nemo", "mbridge")),
              ("sglang", ("sglang",)),
              ("llm-foundry", ("llm-foundry", "llm_foundry")))

# Bits per stored weight of GGUF types, scales included. Block formats from their
# layout (32 weights + fp16 scale [+ fp16 min]); k-quant mixes from llama.cpp's
# examples/quantize/README.md (Llama 2 7B table). The data README quotes ~4.9 for
# Llama-3-8B Q4_K_M.
GGUF_BITS = {"f32": 32.0, "f16": 16.0, "bf16": 16.0, "q8_0": 8.5, "q6_k": 6.56, "q5_k_m": 5.68,
             "q5_k_s": 5.52, "q5_0": 5.5, "q5_1": 6.0, "q4_k_m": 4.84, "q4_k_s": 4.58,
             "q4_0": 4.5, "q4_1": 5.0, "q3_k_l": 4.27, "q3_k_m": 3.91, "q3_k_s": 3.50,
             "q2_k": 3.35}
# Bits of named formats: NVFP4 keeps an fp8 scale per 16 values (4 + 8/16), MXFP4 an
# 8-bit scale per 32 (4 + 8/32).
FORMAT_BITS = {"fp32": 32.0, "bf16": 16.0, "fp16": 16.0, "f16": 16.0, "fp8": 8.0, "int8": 8.0,
               "mxfp8": 8.25, "nvfp4": 4.5, "mxfp4": 4.25, "fp4": 4.0, "int4": 4.0,
               "uint4": 4.0}

# Known anomalies of the sources (data README: "flag, don't fit").
ANOMALIES = (
    ("xd_", "infer_prefill", "A100 SXM 80GB", "gguf f16",
     "source anomaly: A100 SXM F16 prefill far below A100 PCIe (data README)"),
    ("xd_", "infer_prefill", "L40S 48GB", "gguf f16",
     "source anomaly: L40S F16 prefill below its Q4 figure (data README)"),
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One measured row as an evaluation point."""

    id: str
    kind: str
    metric: str
    measured: float
    mode: str  # "inference" | "training"
    model: ModelCard
    hardware: str  # catalogue name
    framework: str
    knobs: dict[str, Any]
    n_devices: int
    flag: str = ""  # non-empty: a known anomaly, reported but not fitted
    assumed: str = ""  # what the row did not state and dse assumed (said in the output)
    layout_stated: bool = True  # False: tp x dp over n_devices is for dse to choose
    recompute_stated: bool = True  # False (training): the least recomputation that fits
    devices_stated: bool = True  # False: no device count or layout (1 device assumed)
    source: str = ""  # the publication the row comes from (its id's leading letters)

    @property
    def model_name(self) -> str:
        return self.model.name


@dataclasses.dataclass(frozen=True)
class Skip:
    id: str
    kind: str
    reason: str
    status: str = "bad_row"  # one of STATUSES
    metric: str = ""
    measured: float = float("nan")


class _Unscorable(ValueError):
    """A row dse cannot score, with the status that says why."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def _tokens(text: str) -> list[str]:
    text = re.sub(r"\(.*?\)", " ", text.lower())
    # what sources add beside the name: GPU core counts ("76-Core GPU"), the rack's NVLink
    # domain ("NVL72"); a memory size is read apart (the memory kind, "HBM3", stays a word
    # to match: it tells an H100 SXM from a PCIe card)
    text = re.sub(r"\b\d+[\s-]*core\b|\bgpu\b|\bnvl\d+\b", " ", text)
    return [t for t in re.split(r"[\s\-_/,]+", text) if t and t not in ("nvidia", "geforce")]


def _memory_fits(token: str, card) -> bool:
    """A memory size a source writes ("192GB") is the card's, in GB or GiB (6%: vendors
    round, and "141GB" cards are GiB), where the card's names do not spell it."""
    size = re.fullmatch(r"(\d+)gb", token)
    if not size or "memory_gib" not in card.fields:
        return False
    gib = float(card.fields["memory_gib"])
    return any(abs(float(size.group(1)) * scale / gib - 1.0) <= 0.06
               for scale in (1.0, 1e9 / 2 ** 30))


def match_hardware(text: str, cards=None) -> str | None:
    """The catalogue device a free-text name denotes: every token of the text is a
    prefix of a token of the device's name or long name (a memory size may be the
    card's memory instead); the fewest extra tokens wins, and a tie is no answer (the
    caller says which names it may be)."""
    want = _tokens(text)
    best, best_extra, tie = None, None, False
    for card in cards if cards is not None else all_hardware():
        have = set(_tokens(card.long_name)) | set(_tokens(card.name.replace("-", " ")))
        if all(any(h.startswith(w) for h in have) or _memory_fits(w, card) for w in want):
            extra = len(have) - len(want)
            if best_extra is None or extra < best_extra:
                best, best_extra, tie = card.name, extra, False
            elif extra == best_extra:
                tie = True
    return None if tie else best


def _number(row, key, cast=float, default=None):
    text = (row.get(key) or "").strip()
    if not text:
        if default is not None:
            return default
        raise ValueError(f"column {key} is empty")
    try:
        return cast(float(text))
    except ValueError:
        raise ValueError(f"column {key} = {text!r} is not a number") from None


def precision_bits(text: str) -> dict[str, float]:
    """weight/act/kv bits of a precision string: 'fp8 w/a, fp8 kv', 'gguf Q4_K_M
    weights, f16 act/kv', 'amp_bf16', 'nvfp4', 'F16'."""
    t = text.lower()
    gguf = re.search(r"\b(q\d_k_[sml]|q\d_k|q\d_\d|f16|f32|bf16)\b", t)
    if "gguf" in t or (gguf and gguf.group(1).startswith("q")):
        if not gguf or gguf.group(1) not in GGUF_BITS:
            raise ValueError(f"precision {text!r}: unknown GGUF type")
        w = GGUF_BITS[gguf.group(1)]
        return dict(weight_bits=w, act_bits=16.0, kv_bits=16.0, quant_group_size=0.0)
    t = t.replace("amp_", "")
    found = [(m.start(), FORMAT_BITS[m.group(1)]) for m in
             re.finditer(r"\b(" + "|".join(sorted(FORMAT_BITS, key=len, reverse=True)) + r")\b", t)]
    if not found:
        raise ValueError(f"precision {text!r}: no known format (bf16, fp8, nvfp4, gguf Q4_K_M, ...)")
    w = found[0][1]
    kv = found[-1][1] if " kv" in t else (w if w >= 8.0 else 16.0)
    # The compute dtype: FP8/INT8 and the FP4 formats run their GEMMs at their width;
    # INT4 is weight-only (dequantized to 16 bits).
    # (MXFP8 is an 8-bit format: its 8.25 bits count the shared scales.)
    compute = 8.0 if 8.0 <= w < 9.0 else 4.0 if 4.0 < w < 5.0 or w == 4.0 and "int4" not in t \
        else (16.0 if w <= 16.0 else 32.0)
    return dict(weight_bits=w, act_bits=compute, kv_bits=kv, quant_group_size=0.0)


def _model_card(row) -> ModelCard:
    """The catalogue card the row's model names (by name, alias or Hugging Face id: its
    full architecture), else the architecture from the row's columns, styled (MLP, norm,
    positions, ties) after the catalogue model of the same family."""
    name = row["model"].strip().lower()
    card_name = resolve_name("models", row["model"].strip())
    if card_name is not None:
        card = load_model(card_name)
        # the run happened at its length: no context limit applies to a measured row
        return ModelCard.from_mapping(dict(card.fields, max_seq_len=1 << 21),
                                      card.file, card.name)
    family = (re.match(r"[a-z]+", name) or re.match("", "")).group(0)
    style_name = {"mpt": "mpt-7b", "llama": "llama-3-8b", "qwen": "qwen2.5-7b",
                  "mistral": "mistral-7b", "gpt": "gpt-3-6.7b", "opt": "opt-6.7b"}.get(family)
    if style_name is None:
        raise _Unscorable("unknown_model", f"model {row['model']!r}: not in the catalogue "
                          "and no catalogue model of its family to take the style from")
    style = load_model(style_name)
    f = {k: v for k, v in style.fields.items()
         if k not in ("source", "notes", "published_params_source", "long_name", "aliases",
                      "published_params_other", "published_active_convention")}
    f.update(name=name, long_name=row["model"].strip())
    try:
        heads = _number(row, "heads", int)
    except ValueError as e:
        raise _Unscorable("unknown_model", f"model {row['model']!r}: not in the catalogue "
                          f"and its architecture columns are incomplete ({e})") from None
    f.update(n_layers=_number(row, "layers", int), d_model=_number(row, "hidden", int),
             n_heads=heads, n_kv_heads=_number(row, "kv_heads", int, heads),
             d_ff=_number(row, "ffn", int), vocab_size=_number(row, "vocab", int))
    f.pop("head_dim", None)
    f.pop("published_params", None)
    f.pop("published_active_params", None)
    experts = _number(row, "moe_experts", int, 0)
    if experts:
        f.update(n_experts=experts, top_k=_number(row, "moe_topk", int), d_ff_expert=f["d_ff"])
    # the run happened at its length: no context limit applies to a measured row
    f["max_seq_len"] = 1 << 21
    return ModelCard.from_mapping(f, f"{row['id']}", name)


# A row that names none of FRAMEWORKS (an in-house or vendor stack) runs under this one:
# the pooled calibration of no framework in particular, said in the output.
NO_FRAMEWORK = "generic"


# A framework column's spellings of the names above.
FRAMEWORK_ALIASES = {"trtllm": "tensorrt-llm", "tensorrt_llm": "tensorrt-llm",
                     "trt-llm": "tensorrt-llm", "llamacpp": "llama.cpp",
                     "llama-cpp": "llama.cpp"}


def _framework(row) -> str:
    stated = (row.get("framework") or "").strip().lower()
    if stated:
        stated = FRAMEWORK_ALIASES.get(stated, stated)
        return stated if stated in dict(FRAMEWORKS) else NO_FRAMEWORK
    text = (row["source"] + " " + row["notes"]).lower()
    for name, keys in FRAMEWORKS:
        if any(k in text for k in keys):
            return name
    return NO_FRAMEWORK


def recompute_level(notes: str) -> int | None:
    """The recomputation a training row states (0 none, 1 selective, 2 full; llm-foundry's
    "act-ckpt True" is full), or None when it states none: dse then chooses the least
    that fits (validation._choose_layouts). One reading for both, so that a row is never
    taken as stating a level that is then not applied."""
    if re.search(r"act-ckpt True|recompute[^;,]*full|full (activation )?recomput", notes,
                 re.I):
        return 2
    if re.search(r"recompute[^;,]*selective|selective (activation )?recomput", notes, re.I):
        return 1
    if re.search(r"act-ckpt False|recompute[^;,]*none|no (activation )?recomput", notes,
                 re.I):
        return 0
    return None


def _training_knobs(row, precision, framework: str, model_layers) -> tuple[dict, str]:
    """(knobs, what was assumed) of a training row."""
    notes = row["notes"]
    n = _number(row, "n_devices", int)
    tp, pp = _number(row, "tp", int, 1), _number(row, "pp", int, 1)
    cp = re.search(r"\bCP (\d+)", notes)
    cp = int(cp.group(1)) if cp else 1
    dp = _number(row, "dp", int, max(n // (tp * pp * cp), 1))
    batch = _number(row, "batch", int)
    micro = re.search(r"micro-batch (\d+)|\bMBS (\d+)", notes)
    assumed = ""
    if micro:
        micro = int(micro.group(1) or micro.group(2))
    elif framework in DEFAULT_MICRO_BATCH:
        micro = DEFAULT_MICRO_BATCH[framework]
        assumed = f"micro-batch {micro} ({framework} default)"
    elif pp > 1:
        micro = 1
        assumed = "micro-batch 1 (pipelined; not stated)"
    else:
        micro = max(batch // dp, 1)
        assumed = f"micro-batch {micro} (no gradient accumulation)"
    virtual = re.search(r"\bVP (\d+)", notes)
    fsdp = re.search(r"\bFSDP (\d+)", notes)
    stage = re.search(r"\bZeRO-(\d)", notes)
    zero = 3 if "FULL_SHARD" in notes or (fsdp and int(fsdp.group(1)) > 1) else (
        2 if "SHARD_GRAD_OP" in notes else int(stage.group(1)) if stage else 0)
    sequence_parallel = False
    if zero == 0 and framework in DEFAULT_DISTRIBUTED_OPTIMIZER:
        zero, sequence_parallel = 1, tp > 1
        assumed = "; ".join(filter(None, (assumed, "distributed optimizer (ZeRO-1)"
                                          + (" and sequence parallelism" if tp > 1 else "")
                                          + f" ({framework} default)")))
    recompute = recompute_level(notes) or 0
    bits = precision["weight_bits"]
    knobs = dict(global_batch=batch, micro_batch=micro, seq_len=_number(row, "input_len", int),
                 tp=tp, pp=pp, dp=dp, cp=cp, ep=_number(row, "ep", int, 1), zero_stage=zero,
                 recompute=recompute, weight_bits=bits, act_bits=precision["act_bits"],
                 grad_bits=16.0, master_weight_bits=32.0, flash_attention=1.0,
                 sequence_parallel=sequence_parallel)
    if virtual and pp > 1:
        knobs["virtual_stages"] = v = int(virtual.group(1))
        layers = int(model_layers)
        if v > 1 and layers % (pp * v):
            first, last = accounted_split(layers, pp, v)
            knobs.update(first_stage_layers=first, last_stage_layers=last)
            assumed = "; ".join(filter(None, (assumed, (
                f"embedding and loss accounted as pipeline layers: {first} + "
                f"{pp - 2} x {(layers - first - last) // max(pp - 2, 1)} + {last} layers "
                "(Megatron-Core --account-for-embedding/loss-in-pipeline-split)")
                if pp > 2 else (f"embedding and loss accounted as pipeline layers: {first} + "
                                f"{last} layers"))))
    return knobs, assumed


def accounted_split(layers: int, pp: int, v: int) -> tuple[int, int]:
    """(first, last) stage layers when the embedding and the loss count as one pipeline
    layer each (Megatron-Core's --account-for-embedding-in-pipeline-split and
    --account-for-loss-in-pipeline-split, as Megatron-Bridge's recipes for layer counts
    that do not divide by pp x v): n = ceil((L + 2) / (pp v)) layers per virtual stage,
    the middle stages n v each, the first n v - 1, the last the rest."""
    n = -(-(layers + 2) // (pp * v))
    first = n * v - 1
    last = layers - first - (pp - 2) * n * v
    if not 1 <= last <= n * v:
        raise ValueError(f"{layers} layers do not split over pp {pp} x vp {v}")
    return first, last


# Serving measured under a request load (arrivals at a rate, latency limits): the static
# batch of this model cannot express it (MLPerf Server / Interactive scenarios).
_UNDER_LOAD = re.compile(r"\b(server|interactive)\b.*poisson|poisson", re.I)


def case(row: dict) -> Case | Skip:
    rid, kind = row["id"], row["kind"]
    metric = row.get("metric", "")
    try:
        measured = float(row.get("value") or "nan")
    except ValueError:
        measured = float("nan")
    try:
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
        if metric in UNMODELLED and kind == "serving_latency":
            raise _Unscorable("unknown_metric", f"metric {metric!r}: {UNMODELLED[metric]}")
        if metric not in METRICS[kind]:
            raise _Unscorable("unknown_metric", f"metric {metric!r} for kind {kind} (known: "
                              f"{', '.join(METRICS[kind])})")
        measured = _number(row, "value")
        if not measured > 0:
            raise ValueError(f"value {measured} is not positive")
        hardware = resolve_name("hardware", row["hardware"].strip()) or match_hardware(
            row["hardware"])
        if hardware is None:
            raise _Unscorable("unknown_hardware", f"hardware {row['hardware']!r} matches no "
                              "single catalogue device")
        precision = precision_bits(row["precision"])
        model = _model_card(row)
        if not model.fields.get("n_experts"):
            # a dense model has no expert layout: MoE columns (a converter's 1s) say nothing
            row = dict(row, moe_tp="", **({"ep": ""} if kind == "serving_latency" else {}),
                       **{f"{p}_{k}": "" for p in ("prefill", "decode")
                          for k in ("moe_tp", "ep")})
        framework = _framework(row)
        if kind == "serving_throughput" and _UNDER_LOAD.search(
                row.get("batch", "") + " " + row["notes"]):
            raise _Unscorable("under_load", "measured under a request load with latency "
                              "limits (not a static batch)")
        n_devices = _number(row, "n_devices", int, 1)
        devices_stated = any((row.get(k) or "").strip() for k in (
            "n_devices", "tp", "pp", "dp", "prefill_workers", "decode_workers"))
        stated = (row.get("framework") or "").strip()
        assumed = "" if framework != NO_FRAMEWORK else (
            f"framework {stated!r} is none dse models: the generic calibration and engine"
            if stated else "no framework named: the generic calibration")
        recompute_stated = True
        if kind == "train":
            knobs, said = _training_knobs(row, precision, framework,
                                          model.fields["n_layers"])
            assumed = "; ".join(filter(None, (assumed, said)))
            mode = "training"
            layout_stated = bool((row.get("tp") or "").strip()) or n_devices == 1
            recompute_stated = recompute_level(row["notes"]) is not None
        else:
            tp, pp = _number(row, "tp", int, 1), _number(row, "pp", int, 1)
            inp, out = _number(row, "input_len", int, 0), _number(row, "output_len", int, 0)
            # llama-bench ran without FlashAttention by default (-fa 0) in 2024
            flash = 0.0 if framework == "llama.cpp" and " -fa 1" not in row["notes"] else 1.0
            dp = _number(row, "dp", int, max(n_devices // (tp * pp), 1))
            layout_stated = bool((row.get("tp") or "").strip()) or n_devices == 1
            knobs = dict(precision, tp=tp, pp=pp, dp=dp, ep=_number(row, "ep", int, 1),
                         memory_reserve=0.1, flash_attention=flash)
            if kind == "infer_decode":
                knobs.update(batch=_number(row, "batch", int, 1), input_len=max(inp, 1),
                             output_len=out)
            elif kind == "serving_latency" and _serving(row) == "disagg":
                said = _disagg_knobs(row, knobs, framework)
                assumed = "; ".join(filter(None, (assumed, said)))
                n_devices = int(knobs.pop("n_devices"))
            elif kind == "serving_latency":
                said = _load_knobs(row, knobs, n_devices, framework)
                assumed = "; ".join(filter(None, (assumed, said)))
                n_devices = int(knobs.pop("n_devices"))
                layout_stated = bool((row.get("tp") or "").strip()) or n_devices == 1
            elif kind == "infer_prefill":
                chunk = re.search(r"ubatch (\d+)", row["notes"])
                knobs.update(batch=_number(row, "batch", int, 1), input_len=inp, output_len=2,
                             prefill_chunk=float(chunk.group(1)) if chunk else 0.0)
            else:
                if not (inp > 0 and out > 0):
                    raise ValueError("input_len and output_len are needed (dataset means "
                                     "where lengths vary)")
                knobs.update(batch=1, input_len=inp, output_len=out)
            mode = "inference"
        # a row whose notes record an inconsistency of its source is reported, not fitted
        anomaly = re.search(r"ANOMALY: ([^;]*)", row["notes"])
        flag = f"source anomaly: {anomaly.group(1).strip()}" if anomaly else ""
        for prefix, k, hw, prec, why in ANOMALIES:
            if (rid.startswith(prefix) and kind == k and row["hardware"] == hw
                    and row["precision"].lower().startswith(prec)):
                flag = why
        return Case(rid, kind, metric, measured, mode, model, hardware, framework,
                    knobs, n_devices, flag, assumed, layout_stated, recompute_stated,
                    devices_stated, source_of(rid))
    except (ValueError, InputError) as e:
        status = getattr(e, "status", "bad_row")
        return Skip(rid, kind, str(e).removeprefix("dse: error: "), status, metric, measured)


def _serving(row) -> str:
    serving = (row.get("serving") or "").strip().lower() or "agg"
    if serving not in ("agg", "disagg"):
        raise ValueError(f"serving {serving!r} is not one of agg, disagg")
    return serving


# Notes that speak of speculative decoding (DeepSeek's MTP, EAGLE) without spec_tokens.
_SPECULATIVE = re.compile(r"(?<!no )\bMTP\b|\bEAGLE\b|\bNEXTN\b")


def _speculation(row) -> dict:
    """A row's speculative decoding (``spec_tokens``, ``spec_acceptance``); notes that
    speak of it (MTP, EAGLE) leave the row unscorable unless ``spec_tokens`` is stated
    (``0``: a run that states it decoded without, e.g. a table's "without EAGLE" column)."""
    k = _number(row, "spec_tokens", int, 0)
    stated = bool((row.get("spec_tokens") or "").strip())
    accepted = _number(row, "spec_acceptance", float, 0.0)
    if k < 0 or accepted < 0 or (accepted and not 1.0 <= accepted <= k + 1.0):
        raise ValueError(f"spec_acceptance {accepted:g} with spec_tokens {k}: the tokens a "
                         "step yields are 1 .. spec_tokens + 1")
    if not k and "speculative decoding undetermined" in row.get("notes", ""):
        raise _Unscorable("unmodelled", "speculative decoding undetermined: the run's "
                          "source ran its layout at its concurrency with and without it")
    if not stated and _SPECULATIVE.search(row.get("notes", "")):
        raise _Unscorable("unmodelled", "the notes state speculative decoding (MTP / EAGLE) "
                          "and spec_tokens does not")
    return dict(spec_tokens=float(k), spec_acceptance=accepted)


def _pool_layout(row, pool: str) -> dict:
    """A pool's worker layout from its columns (``{pool}_tp`` ...)."""
    if not any((row.get(f"{pool}_{k}") or "").strip() for k in ("tp", "dp")):
        raise ValueError(f"a disaggregated row states its {pool} pool's layout ({pool}_tp, "
                         f"{pool}_dp)")
    layout = {k: _number(row, f"{pool}_{k}", int, 1) for k in ("workers", "tp", "pp", "dp")}
    layout["ep"] = _number(row, f"{pool}_ep", int, 1)
    layout["moe_tp"] = _number(row, f"{pool}_moe_tp", int, 0)
    layout["batch"] = _number(row, f"{pool}_batch", int, 0)
    if layout["workers"] < 1:
        raise ValueError(f"{pool}_workers {layout['workers']} is not at least 1")
    return layout


def _disagg_knobs(row, knobs: dict, framework: str) -> str:
    """Add a disaggregated serving_latency row's pools, load, lengths and engine to
    ``knobs`` (in place, with ``n_devices``); returns what was assumed.

    A ``pool`` row runs that pool's worker as dse.core.evaluate runs it inside a
    disaggregated deployment (a prefill worker: the prompt and the first token; a decode
    worker: the rest, the prompt's cache transferred), read at its capacity (the other
    pool unlimited); ``knobs["pool"]`` and ``knobs["workers"]`` say so."""
    _speculation(row)

    def device(text):
        return resolve_name("hardware", text.strip()) or match_hardware(text)

    for p in ("prefill", "decode"):
        named = (row.get(f"{p}_hardware") or "").strip()
        if named and device(named) != device(row["hardware"]):
            raise _Unscorable("unmodelled", f"{p}_hardware {named!r}: pools on different "
                              "devices are not scored yet (one hardware entry per row)")
    pool = (row.get("pool") or "").strip().lower()
    if pool not in ("", "prefill", "decode"):
        raise ValueError(f"pool {pool!r} is not one of prefill, decode (or empty: the whole "
                         "deployment)")
    inp, out = _number(row, "input_len", float, 0.0), _number(row, "output_len", float, 0.0)
    if pool:
        if "_ms" in row.get("metric", ""):
            raise ValueError(f"a {pool} pool row (measured at its limit) states a throughput, "
                             f"not {row['metric']}")
        layout = _pool_layout(row, pool)
        if pool == "decode" and out < 2.0:
            raise ValueError("a decode pool row needs output_len (at least 2)")
        lengths = dict(output_len="1", prefix_cache_hit="0") if pool == "prefill" else dict(
            output_len=str(out - 1.0), prefix_cache_hit=str((inp - 1.0) / max(inp, 1.0)))
        worker = dict(row, tp=str(layout["tp"]), pp=str(layout["pp"]), dp=str(layout["dp"]),
                      ep=str(layout["ep"]), moe_tp=str(layout["moe_tp"] or ""),
                      max_num_seqs=str(layout["batch"] or row.get("max_num_seqs") or ""),
                      batch="", concurrency="", request_rate="", n_devices="", **lengths)
        knobs.update(tp=layout["tp"], pp=layout["pp"], dp=layout["dp"], ep=layout["ep"])
        said = _load_knobs(worker, knobs, 0, framework, load=False)
        knobs.update(pool=pool, workers=layout["workers"])
        return said
    if _number(row, "concurrency", float, 0.0) > 0.0:
        missing = [f"{p}_workers" for p in ("prefill", "decode")
                   if not (row.get(f"{p}_workers") or "").strip()]
        if missing:  # a closed loop's clients per worker follow from the worker counts
            raise _Unscorable("unmodelled", f"a closed loop under disaggregation without "
                              f"{' and '.join(missing)}: the clients per worker are unknown")
    layouts = {p: _pool_layout(row, p) for p in ("prefill", "decode")}
    d = layouts["decode"]
    # the deployment's own layout (the aggregated slot of the pool axis) is the decode
    # worker's: only the pools are read
    knobs.update(tp=d["tp"], pp=d["pp"], dp=d["dp"], ep=d["ep"])
    said = _load_knobs(dict(row, tp=str(d["tp"]), moe_tp=str(d["moe_tp"] or ""),
                            ep=str(d["ep"]), n_devices=""), knobs, 0, framework)
    for p, layout in layouts.items():
        if layout["moe_tp"] and layout["tp"] * layout["dp"] != layout["moe_tp"] * layout["ep"]:
            raise ValueError(f"{p}_tp x {p}_dp = {layout['tp'] * layout['dp']} devices per "
                             f"worker, {p}_moe_tp x {p}_ep = {layout['moe_tp'] * layout['ep']}")
        knobs.update({f"{p}_{k}": float(v) for k, v in layout.items()})
    knobs.update(serving=1.0, n_devices=sum(
        v["workers"] * v["tp"] * v["pp"] * v["dp"] for v in layouts.values()))
    return said


def _load_knobs(row, knobs: dict, n_devices: int, framework: str, load: bool = True) -> str:
    """Add a serving_latency row's load, lengths and engine to ``knobs`` (in place, with
    ``n_devices``: the devices the layout spans); returns what was assumed. ``load``
    False: a pool read at its capacity, whatever the load (the row states none)."""
    from ..catalogue.frameworks import ALIASES, FRAMEWORKS as ENGINES

    said = []
    clients = _number(row, "concurrency", float, 0.0)
    rate = _number(row, "request_rate", float, 0.0)
    if load and (clients > 0.0) == (rate > 0.0):
        raise ValueError("a serving_latency row states one of concurrency (closed-loop "
                         "clients) and request_rate (requests/s)")
    inp, out = _number(row, "input_len", float, 0.0), _number(row, "output_len", float, 0.0)
    if not (inp >= 1.0 and out >= 1.0):
        raise ValueError("input_len and output_len are needed (dataset means where lengths "
                         "vary)")
    tp, dp, ep = knobs["tp"], knobs["dp"], knobs["ep"]
    moe_tp = _number(row, "moe_tp", int, 0)
    if moe_tp:
        if not (row.get("ep") or "").strip():
            if (tp * dp) % moe_tp:
                raise ValueError(f"moe_tp {moe_tp} does not divide tp x dp = {tp * dp}")
            ep = knobs["ep"] = tp * dp // moe_tp
        elif tp * dp != moe_tp * ep:
            raise ValueError(f"tp x dp = {tp * dp} devices per worker, moe_tp x ep = "
                             f"{moe_tp * ep}: a wide-EP layout has tp x dp = moe_tp x ep")
    cap = _number(row, "max_num_seqs", int, 0) or _number(row, "batch", int, 0)
    cvs = {k: _number(row, k, float, 0.0) for k in ("input_len_cv", "output_len_cv")}
    if not any(cvs.values()):
        said.append("lengths not stated as distributions: every request at the means")
    arrival = _number(row, "arrival_cv", float, 1.0)
    if rate > 0.0 and load and not (row.get("arrival_cv") or "").strip():
        said.append("Poisson arrivals (arrival_cv 1)")
    if not cap:
        said.append("the framework's default running-batch cap")
    prompts = _number(row, "num_prompts", int, 0)
    if prompts and not clients:
        raise ValueError("num_prompts (a closed-loop benchmark run's requests) with no "
                         "concurrency")
    if prompts and prompts < clients:
        raise ValueError(f"num_prompts {prompts} is fewer than the {clients:g} clients")
    if clients and not prompts and load:
        said.append("the steady state (num_prompts not stated)")
    recv = _number(row, "scheduler_recv_interval", int, 1)
    if recv < 1:
        raise ValueError(f"scheduler_recv_interval {recv} is not a positive number of steps")
    if (row.get("memory_reserve") or "").strip():
        reserve = _number(row, "memory_reserve", float)
        if not 0.0 <= reserve < 1.0:
            raise ValueError(f"memory_reserve {reserve:g} is not a share in [0, 1)")
        knobs["memory_reserve"] = reserve
    engine = ALIASES.get(framework, framework)
    knobs.update(_speculation(row),
                 ep_redundant_experts=float(_number(row, "ep_redundant_experts", int, 0)))
    if knobs["spec_tokens"] and not knobs["spec_acceptance"]:
        said.append("acceptance not stated: acceptance_rate's default")
    knobs.update(batch=1, input_len=inp, output_len=out, concurrency=clients,
                 request_rate=rate, arrival_cv=arrival, max_num_seqs=float(cap),
                 max_num_tokens=_number(row, "max_num_tokens", float, 0.0),
                 prefix_cache_hit=_number(row, "prefix_cache_hit", float, 0.0),
                 num_prompts=float(prompts), scheduler_recv_interval=float(recv),
                 engine=engine if engine in ENGINES else "generic",
                 n_devices=n_devices if (row.get("n_devices") or "").strip()
                 else tp * knobs["pp"] * dp, **cvs)
    return "; ".join(said)


def source_of(row_id: str) -> str:
    """The publication a row comes from: its id's leading letters ("foundry_...",
    "trtllm-v1.0-...", "mlperf-v5.1-...": data/README.md names each)."""
    return re.match(r"[a-z]*", row_id.lower()).group(0) or row_id


def pooled(cases: list[Case], framework: str | None) -> list[Case]:
    """``cases`` as measured with one framework ``framework`` (None: as they are), for a
    calibration of no framework in particular (``generic``)."""
    if framework is None:
        return cases
    return [dataclasses.replace(c, framework=framework) for c in cases]


# The most rows one CSV may hold: 20x data/measured_silicon.csv. Every row is a point of
# the evaluator (dse validate scores the 10,442 silicon rows in ~40 s on 2 cores, so the
# limit is about 13 minutes); a 1e6-row file ran for minutes without a word.
MAX_ROWS = 200_000


def read(path) -> tuple[list[Case], list[Skip]]:
    """Every row of a measured-results CSV as a Case or a Skip (with its reason)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "DATA", "not a regular file" if path.exists() else
                         "file not found", "a CSV in the measured_public schema")
    # UTF-8, with or without the byte-order mark a spreadsheet's "CSV UTF-8" export writes
    # (read as part of the first column's name, it made "id: column missing"), bounded
    text = checks.read_text(path, checks.MAX_CSV_BYTES, "a CSV")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(str(path), missing[0], "column missing",
                         "the columns of measured_public.csv: " + ", ".join(COLUMNS))
    rows = list(itertools.islice(reader, MAX_ROWS + 1))
    if len(rows) > MAX_ROWS:
        raise InputError(str(path), "rows", f"more than {MAX_ROWS:,} rows",
                         f"at most {MAX_ROWS:,} rows per file (split it)")
    if not rows:
        raise InputError(str(path), "rows", "no data rows", "at least one measured row")
    cases, skips = [], []
    for row in rows:
        (cases if isinstance(c := case(row), Case) else skips).append(c)
    return cases, skips

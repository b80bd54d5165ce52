"""Predict every measured row at once, as a jit-compiled function of the calibration.

A :class:`Problem` holds the rows as evaluator inputs (one inference and one training
point batch, a model table, a hardware table with one entry per row); :func:`predict`
maps an unconstrained calibration vector to the predicted metric of every row, so
``jax.grad`` of a loss over it is the gradient the fit descends.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..catalogue import calibration as C, kernels
from ..catalogue.lookup import load_hardware
from ..catalogue.model import model_features, stack as stack_models
from ..core.evaluator import Evaluator
from ..core.fusion import tracing
from ..core.tables import with_framework
from ..schema.knobs import (KV_OFFLOAD, OPTIMIZERS, PP_SCHEDULES, RECOMPUTE, ROUTING, SERVING,
                            InferencePoint, TrainingPoint)
from .rows import Case

# TensorRT-LLM's default max_batch_size (perf-overview: "batch up to 8192").
SERVING_BATCH_CAP = 8192.0


@dataclasses.dataclass(frozen=True)
class ModeBatch:
    """The rows of one mode as one evaluator call (float64: one hardware entry per row)."""

    rows: np.ndarray  # positions in Problem.cases
    point: Any
    evaluator: Evaluator
    kind: tuple[str, ...]
    mode: str = ""  # "inference", "training", or "load" (inference under a request load)


@dataclasses.dataclass(frozen=True)
class Problem:
    cases: tuple[Case, ...]
    batches: tuple[ModeBatch, ...]
    frameworks: tuple[str, ...]
    families: tuple[str, ...]
    framework_index: np.ndarray  # [row]
    family_index: np.ndarray  # [row]; len(families) = no family
    measured: np.ndarray  # [row]

    @property
    def size(self) -> int:
        return len(self.cases)


def _leaf(name: str, values: list, default) -> np.ndarray:
    out = []
    for v in (default if v is None else v for v in values):
        if name == "recompute" and isinstance(v, str):
            v = RECOMPUTE.index(v)
        elif name == "pp_schedule" and isinstance(v, str):
            v = PP_SCHEDULES.index(v)
        elif name == "optimizer" and isinstance(v, str):
            v = OPTIMIZERS[v]
        elif name == "serving" and isinstance(v, str):
            v = SERVING.index(v)
        elif name == "routing" and isinstance(v, str):
            v = ROUTING.index(v)
        elif name == "kv_offload" and isinstance(v, str):
            v = KV_OFFLOAD.index(v)
        elif v is None:
            v = 0.0
        out.append(float(v))
    return np.asarray(out, np.float64)


def _point(point_type, cases: list[Case], model_index: dict[str, int]):
    leaves = {}
    for f in dataclasses.fields(point_type):
        if f.name in ("model", "draft_model"):
            leaves[f.name] = np.asarray([model_index[c.model_name] for c in cases], np.int32)
        elif f.name == "hardware":
            leaves[f.name] = np.arange(len(cases), dtype=np.int32)
        elif f.name == "usecase":
            leaves[f.name] = np.full(len(cases), -1, np.int32)
        elif f.name == "framework":  # one hardware entry per row: no framework blocks
            leaves[f.name] = np.zeros(len(cases), np.int32)
        elif f.name in ("prefill_hardware", "decode_hardware"):  # the row's own device
            leaves[f.name] = np.full(len(cases), -1, np.int32)
        else:
            leaves[f.name] = _leaf(f.name, [c.knobs.get(f.name) for c in cases], f.default)
    return point_type(**leaves)


def _features(cases: list[Case]) -> frozenset:
    disagg = any(c.knobs.get("serving") == SERVING.index("disagg") for c in cases)
    return model_features(c.model for c in cases) | ({"disagg"} if disagg else set())


# The evaluator calls of a problem: (batch mode, evaluator mode, point type, kinds).
_MODES = (("inference", "inference", InferencePoint,
           ("infer_decode", "infer_prefill", "serving_throughput")),
          ("load", "inference", InferencePoint, ("serving_latency",)),
          ("training", "training", TrainingPoint, ("train",)))


def _hardware(c: Case, mode: str, with_kernels: bool):
    card = load_hardware(c.hardware)
    spec = card.spec()
    if with_kernels:
        engine = c.knobs.get("engine", c.framework) if mode == "load" else c.framework
        spec = dataclasses.replace(spec, kernel_table=kernels.table_index(card.name, engine, card))
    if mode != "load":
        return spec
    return with_framework(spec, c.knobs["engine"], card.name)


def problem(cases: list[Case], frameworks, families, family_of: dict[str, str],
            with_kernels: bool = False, with_moe: bool = False) -> Problem:
    """The rows as evaluator inputs. Serving rows get their batch here: the largest the
    KV memory allows (independent of the calibration), capped at the engine's maximum.
    Rows under a request load run the load model (feature "load") on their framework's
    engine (scheduling and default caps). ``with_kernels``: matmuls priced by the measured
    GEMM surfaces of each row's device and framework (dse.catalogue.kernels) when
    calibrated; ``with_moe``: routed experts by its MoE surfaces too."""
    cases = tuple(cases)
    models = {}
    for c in cases:
        models.setdefault(c.model_name, c.model)
    model_index = {name: i for i, name in enumerate(models)}
    model_table = stack_models([m.spec() for m in models.values()])
    batches = []
    with jax.enable_x64(True):
        for mode, evaluator_mode, point_type, mode_kinds in _MODES:
            rows = np.asarray([i for i, c in enumerate(cases) if c.kind in mode_kinds],
                              np.int64)
            if not len(rows):
                continue
            sub = [cases[i] for i in rows]
            point = _point(point_type, sub, model_index)
            hardware = kernels.stack([_hardware(c, mode, with_kernels) for c in sub],
                                     moe=with_moe)
            features = _features(sub) | ({"load"} if mode == "load" else set())
            if mode == "load" and any(c.knobs.get("spec_tokens", 0) > 0 for c in sub):
                features = features | {"mtp"}
            kinds = tuple(c.kind for c in sub)
            evaluator = Evaluator(evaluator_mode, model_table, hardware, features=features,
                                  names=_NAMES[mode], dtype="float64")
            if mode == "inference" and "serving_throughput" in kinds:
                cap = np.asarray(evaluator.with_names(("max_batch",))(point)["max_batch"])
                serving = np.asarray([k == "serving_throughput" for k in kinds])
                batch = np.where(serving, np.clip(cap, 1.0, SERVING_BATCH_CAP), point.batch)
                point = dataclasses.replace(point, batch=batch)
            batches.append(ModeBatch(rows, point, evaluator, kinds, mode))
    fam_names = list(families)
    return Problem(
        cases, tuple(batches), tuple(frameworks), tuple(families),
        np.asarray([list(frameworks).index(c.framework) for c in cases], np.int32),
        np.asarray([fam_names.index(family_of[c.hardware]) if family_of.get(c.hardware) in
                    fam_names else len(fam_names) for c in cases], np.int32),
        np.asarray([c.measured for c in cases], np.float64))


def row_parameters(theta, prob: Problem, xp=jnp):
    """[row, param] unconstrained calibration of every row: base[framework] + offset[family]."""
    n_fw, n_p = len(prob.frameworks), len(C.NAMES)
    base = theta[: n_fw * n_p].reshape(n_fw, n_p)
    offset = theta[n_fw * n_p:].reshape(len(prob.families), n_p)
    offset = xp.concatenate([offset, xp.zeros((1, n_p), offset.dtype)])
    return base[prob.framework_index] + offset[prob.family_index]


_NAMES = {"inference": ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "n_devices", "reason"),
          "load": ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "n_devices", "reason",
                   "request_throughput_req_s", "capacity_req_s",
                   *(f"{m}_p{q}_s" for m in ("ttft", "tpot", "e2e", "itl") for q in (50, 90, 99))),
          "training": ("throughput_per_device_tok_s", "model_flops_per_step", "step_s",
                       "mfu", "n_devices", "reason")}


def pool_value(metric: str, pool: str, workers, out: dict, point, i):
    """A throughput of one pool of a disaggregated deployment measured at its own limit
    (dse.validate.rows: ``pool`` rows): the worker's capacity in prompt tokens/s (prefill)
    or output tokens/s (decode: its share of the output, the first token being the
    prefill worker's), per GPU over the worker's devices, else times the workers."""
    tokens = point.input_len[i] if pool == "prefill" else point.output_len[i]
    if metric == "requests_per_s":
        tokens = 1.0
    per = out["n_devices"][i] if metric.endswith("_per_gpu") else 1.0 / workers
    return out["capacity_req_s"][i] * tokens / per


def metric_value(kind: str, metric: str, out: dict, point, i):
    """A published metric (dse.validate.rows.METRICS) read off the evaluator's outputs.

    Latencies are means in ms (itl = tpot). Training: tokens/s of the job or per GPU,
    model TFLOP/s per GPU and MFU count 6 N + 3 A per token (the MFU convention of
    Chowdhery et al. 2022 that Megatron-LM and the Llama 3 report also use: attention
    included, recomputation not), step_time_s the optimizer step. Under a load
    (``serving_latency``), ``_p50`` / ``_p90`` / ``_p99`` read the percentiles and
    throughputs count what the deployment completes."""
    if kind == "serving_latency":
        stem, _, q = metric.partition("_p")
        if stem.endswith("_ms"):
            # the mean ITL is the mean TPOT; its percentiles are the gaps' (itl_pNN_s)
            name = {"itl_ms": "itl" if q else "tpot"}.get(stem, stem.removesuffix("_ms"))
            return out[f"{name}_p{q}_s" if q else f"{name}_s"][i] * 1e3
        if metric == "requests_per_s":
            return out["request_throughput_req_s"][i]
        per = out["n_devices"][i] if metric.endswith("_per_gpu") else 1.0
        if metric.startswith("input_tokens"):
            return out["request_throughput_req_s"][i] * point.input_len[i] / per
        if metric == "total_tokens_per_s":  # prompt and output tokens
            return out["request_throughput_req_s"][i] * (point.input_len[i] + point.output_len[i])
        return out["throughput_tok_s"][i] / per
    if metric == "ttft_ms":
        return out["ttft_s"][i] * 1e3
    if metric in ("tpot_ms", "itl_ms"):
        return out["tpot_s"][i] * 1e3
    if metric == "e2e_ms":
        return out["e2e_s"][i] * 1e3
    devices = out["n_devices"][i]
    per = devices if metric.endswith("_per_gpu") else 1.0
    if kind == "train":
        if metric in ("tflops_per_gpu", "tflops_per_s_per_gpu"):
            return out["model_flops_per_step"][i] / out["step_s"][i] / devices / 1e12
        if metric == "mfu":
            return out["mfu"][i]
        if metric == "step_time_s":
            return out["step_s"][i]
        return out["throughput_per_device_tok_s"][i] * devices / per
    if kind == "infer_decode":
        return point.dp[i] * point.batch[i] / out["tpot_s"][i] / per
    if kind == "infer_prefill":
        return point.dp[i] * point.batch[i] * point.input_len[i] / out["ttft_s"][i] / per
    if metric == "requests_per_s":
        return out["throughput_tok_s"][i] / point.output_len[i]
    if metric == "total_tokens_per_s":  # prompt and output tokens
        return (out["throughput_tok_s"][i] * (point.input_len[i] + point.output_len[i])
                / point.output_len[i])
    return out["throughput_tok_s"][i] / per


def predict_with_reasons(theta, prob: Problem, calibrated: bool = True):
    """(predicted metric [row], infeasibility flags [row]). ``calibrated`` False: the plain
    roofline (every efficiency 1, no overheads), whatever ``theta``.

    Traced (a fit's gradient), all of it is JAX; called with values, only the evaluator
    is (its kept programs, at the evaluator's precision) and reading the metrics off its
    outputs is numpy: run eagerly in JAX, each of those few hundred small operations
    compiled a program of its own on every run (``dse validate``: 3.6 of its 15 s)."""
    traced = tracing(theta)
    xp = jnp if traced else np
    z = row_parameters(theta if traced else np.asarray(theta), prob, xp)
    values = C.from_unconstrained_all(z, xp)
    pred = xp.zeros(prob.size, z.dtype)
    reason = xp.zeros(prob.size, np.uint16)
    for b in prob.batches:
        hw = b.evaluator.hardware
        if calibrated:
            hw = dataclasses.replace(hw, **{f: v[b.rows] for f, v in zip(C.NAMES, values)})
        else:  # the plain roofline: no measured kernel either
            hw = dataclasses.replace(hw, kernel_table=np.full(len(b.rows), -1.0))
        point = b.point
        if traced:
            out = b.evaluator.traced(point, hardware=hw)
        else:  # through the kept program (dse.core.programs): nothing traced when kept
            out = {k: np.asarray(v) for k, v in b.evaluator(point, hardware=hw).items()}
            point = jax.tree_util.tree_map(np.asarray, point)
        kinds = np.asarray(b.kind)
        metric = xp.zeros(len(b.rows), z.dtype)
        for kind in dict.fromkeys(b.kind):
            sel = np.flatnonzero(kinds == kind)
            def key(j):
                c = prob.cases[b.rows[j]]
                return c.metric, c.knobs.get("pool", "")

            for m, pool in dict.fromkeys(key(j) for j in sel):
                idx = np.asarray([j for j in sel if key(j) == (m, pool)])
                if pool:
                    workers = np.asarray([prob.cases[b.rows[j]].knobs["workers"] for j in idx],
                                         np.float64)
                    value = pool_value(m, pool, workers, out, point, idx)
                else:
                    value = metric_value(kind, m, out, point, idx)
                metric = _set(metric, idx, value)
        pred = _set(pred, b.rows, metric)
        reason = _set(reason, b.rows, out["reason"])
    return pred, reason


def _set(array, index, value):
    """``array`` with ``array[index] = value``: a JAX array's copy, a numpy array itself."""
    if isinstance(array, np.ndarray):
        array[index] = value
        return array
    return array.at[index].set(value)


def predict(theta, prob: Problem, calibrated: bool = True):
    return predict_with_reasons(theta, prob, calibrated)[0]

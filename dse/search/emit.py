"""Deployable output of a search: the engines' launch commands and config files for the
best configurations (``dse search STUDY --emit FORMAT -o DIR``).

Every flag and config key written here is in :data:`FLAGS`, each engine's documented
names with the file and version they were read from; the tests check the files against
that table and parse the YAML and JSON. What an engine cannot be told by a flag (a
4-bit checkpoint's method, TensorRT-LLM's quantization) is written as a comment.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("vllm", "sglang", "trtllm", "dynamo")

# The flags and config keys dse writes, per engine, where they are documented.
FLAGS = {
    # vLLM 0.11.0, vllm/engine/arg_utils.py (EngineArgs.add_cli_args) and config/*.py;
    # --speculative-config's JSON: config/speculative.py (method "mtp",
    # num_speculative_tokens; docs/features/speculative_decoding/mtp.md)
    "vllm": {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
             "--enable-expert-parallel", "--max-num-seqs", "--max-num-batched-tokens",
             "--kv-cache-dtype", "--quantization", "--max-model-len",
             "--gpu-memory-utilization", "--kv-transfer-config", "--speculative-config",
             "--port"},
    # SGLang 0.5.3, python/sglang/srt/server_args.py (ServerArgs.add_cli_args);
    # sglang_router.launch_router for the PD router; speculative decoding as the docs'
    # advanced_features/speculative_decoding (MTP runs as EAGLE with the model's own
    # draft layer); EPLB as the team's large-scale EP launch commands (sglang#6017)
    "sglang": {"--model-path", "--tp-size", "--pp-size", "--dp-size", "--enable-dp-attention",
               "--ep-size", "--max-running-requests", "--chunked-prefill-size",
               "--kv-cache-dtype", "--quantization", "--context-length",
               "--mem-fraction-static", "--disaggregation-mode", "--port",
               "--pd-disaggregation", "--prefill", "--decode", "--speculative-algorithm",
               "--speculative-num-steps", "--speculative-eagle-topk",
               "--speculative-num-draft-tokens", "--ep-num-redundant-experts",
               "--enable-eplb"},
    # TensorRT-LLM, tensorrt_llm/commands/serve.py (trtllm-serve options) and
    # tensorrt_llm/llmapi/llm_args.py (the --extra_llm_api_options YAML keys);
    # examples/disaggregated/README.md and disagg_config.yaml for disaggregation
    "trtllm": {"--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--max_num_tokens",
               "--max_seq_len", "--extra_llm_api_options", "--port", "-c"},
    # NVIDIA Dynamo 1.6.1, dynamo/vllm/backend_args.py and args.py (the worker takes
    # vLLM's engine flags); DynamoGraphDeployment manifests (docs.nvidia.com/dynamo)
    "dynamo": {"--model", "--disaggregation-mode", "--tensor-parallel-size",
               "--pipeline-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
               "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype",
               "--quantization", "--max-model-len", "--gpu-memory-utilization",
               "--kv-transfer-config", "--speculative-config"},
}
# YAML keys of TensorRT-LLM's LLM API options (llm_args.py) and disaggregated server config
# (speculative_config with decoding_type MTP: docs/source/features/speculative-decoding.md)
TRTLLM_KEYS = {"enable_attention_dp", "enable_chunked_prefill", "kv_cache_config", "dtype",
               "free_gpu_memory_fraction", "cache_transceiver_config", "backend",
               "disable_overlap_scheduler", "hostname", "port", "context_servers",
               "generation_servers", "num_instances", "urls", "speculative_config",
               "decoding_type", "num_nextn_predict_layers", "attention_dp_config",
               "enable_balance", "batching_wait_iters", "timeout_iters"}
# DynamoGraphDeployment keys (the CRD's manifests)
DYNAMO_KEYS = {"apiVersion", "kind", "metadata", "name", "spec", "services", "componentType",
               "subComponentType", "replicas", "resources", "limits", "gpu",
               "extraPodSpec", "mainContainer", "args", "command"}


@dataclass(frozen=True)
class Pool:
    """One kind of worker: its role, count and layout."""

    role: str  # "agg", "prefill" or "decode"
    workers: int
    tp: int
    pp: int
    dp: int
    ep: int
    batch: int  # running-batch cap per DP rank (0: the engine's default)
    hardware: str

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class Deployment:
    rank: int
    model: str  # the Hugging Face repository
    pools: tuple[Pool, ...]
    weight_bits: float
    kv_bits: float
    budget: int  # tokens per step (0: the engine's default)
    max_len: int
    memory_fraction: float
    moe: bool
    expected: dict
    spec_tokens: int = 0  # MTP draft tokens per step (0: none)
    redundant: int = 0  # redundant expert copies per MoE layer (EPLB)

    @property
    def disagg(self) -> bool:
        return self.pools[0].role != "agg"


def deployments(result, top: int = 3) -> list[Deployment]:
    """The ``top`` best feasible configurations of a search result as deployments."""
    study = result.study
    models = {c.name: c for c in study.models}
    out = []
    if hasattr(result, "optuna_study"):
        from .results import ranked

        chosen = ranked(result, top)
    else:  # a result given as its best configurations only
        chosen = result.best[:top]
    for rank, best in enumerate(chosen, 1):
        k = dict(study.fixed)
        k.update(best["axes"])
        card = models[k["model"]]
        repo = next((a for a in card.fields.get("aliases", ()) if "/" in a), card.name)

        def i(key, default=0):
            v = k.get(key, default)
            return int(v) if v is not None else default

        batch = i("max_num_seqs")
        if k.get("serving", "agg") == "disagg":
            pools = tuple(Pool(role, i(f"{role}_workers", 1), i(f"{role}_tp") or i("tp", 1),
                               i(f"{role}_pp") or i("pp", 1), i(f"{role}_dp") or 1,
                               i(f"{role}_ep") or i("ep", 1), i(f"{role}_batch") or batch,
                               k.get(f"{role}_hardware") or k["hardware"])
                          for role in ("prefill", "decode"))
        else:
            pools = (Pool("agg", 1, i("tp", 1), i("pp", 1), i("dp", 1), i("ep", 1), batch,
                          k["hardware"]),)
        out.append(Deployment(rank, repo, pools, float(k.get("weight_bits", 16)),
                              float(k.get("kv_bits", 16)), i("max_num_tokens"),
                              i("input_len", 512) + i("output_len", 128),
                              round(1.0 - float(k.get("memory_reserve", 0.1)), 3),
                              card.is_moe, best["outputs"], i("spec_tokens"),
                              i("ep_redundant_experts")))
    return out


def _quant_note(d: Deployment) -> tuple[str | None, str]:
    """(the --quantization value, a comment) for the weight bits."""
    if d.weight_bits >= 16:
        return None, ""
    if d.weight_bits == 8:
        return "fp8", ""
    return None, (f"# {d.weight_bits:g}-bit weights: serve a checkpoint quantized to them "
                  "(AWQ, GPTQ, NVFP4); the engine reads the method from it\n")


def _vllm_args(d: Deployment, p: Pool, dynamo: bool = False) -> list[str]:
    quant, _ = _quant_note(d)
    args = ["--tensor-parallel-size", str(p.tp), "--pipeline-parallel-size", str(p.pp)]
    if p.dp > 1:
        args += ["--data-parallel-size", str(p.dp)]
    if d.moe and p.ep > 1:
        args += ["--enable-expert-parallel"]  # EP size = tp x dp
    if p.batch:
        args += ["--max-num-seqs", str(p.batch)]
    if d.budget:
        args += ["--max-num-batched-tokens", str(d.budget)]
    if d.kv_bits == 8:
        args += ["--kv-cache-dtype", "fp8"]
    if quant:
        args += ["--quantization", quant]
    args += ["--max-model-len", str(d.max_len),
             "--gpu-memory-utilization", str(d.memory_fraction)]
    if d.spec_tokens and p.role != "prefill":
        args += ["--speculative-config",
                 json.dumps({"method": "mtp", "num_speculative_tokens": d.spec_tokens})]
    if p.role != "agg":
        role = "kv_producer" if p.role == "prefill" else "kv_consumer"
        args += ["--kv-transfer-config",
                 json.dumps({"kv_connector": "NixlConnector", "kv_role": role})]
    return args


def _sglang_args(d: Deployment, p: Pool) -> list[str]:
    quant, _ = _quant_note(d)
    args = ["--model-path", d.model, "--tp-size", str(p.tp * p.dp)]
    if p.pp > 1:
        args += ["--pp-size", str(p.pp)]
    if p.dp > 1:  # attention data-parallel over the worker's tp x dp devices
        args += ["--dp-size", str(p.dp), "--enable-dp-attention"]
    if d.moe and p.ep > 1:
        args += ["--ep-size", str(p.ep)]
    if p.batch:
        args += ["--max-running-requests", str(p.batch * p.dp)]
    if d.budget:
        args += ["--chunked-prefill-size", str(d.budget)]
    if d.kv_bits == 8:
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    if quant:
        args += ["--quantization", quant]
    args += ["--context-length", str(d.max_len), "--mem-fraction-static",
             str(d.memory_fraction)]
    if d.spec_tokens and p.role != "prefill":
        args += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps",
                 str(d.spec_tokens), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(d.spec_tokens + 1)]
    if d.moe and p.ep > 1 and d.redundant:
        args += ["--ep-num-redundant-experts", str(d.redundant), "--enable-eplb"]
    if p.role != "agg":
        args += ["--disaggregation-mode", p.role]
    return args


def _trtllm_options(d: Deployment, p: Pool) -> dict:
    opts = {"enable_chunked_prefill": bool(d.budget), "kv_cache_config": {
        "free_gpu_memory_fraction": d.memory_fraction}}
    if d.kv_bits == 8:
        opts["kv_cache_config"]["dtype"] = "fp8"
    if p.dp > 1:
        opts["enable_attention_dp"] = True
        if d.moe and p.ep > 1 and p.role == "agg":
            # the context balancing dse's model of TensorRT-LLM assumes (and NVIDIA's
            # DeepSeek-R1 recipes set): prompts wait for every rank to have one, <= 60 steps
            opts["attention_dp_config"] = {"enable_balance": True, "batching_wait_iters": 0,
                                           "timeout_iters": 60}
    if d.spec_tokens and p.role != "prefill":
        opts["speculative_config"] = {"decoding_type": "MTP",
                                      "num_nextn_predict_layers": d.spec_tokens}
    if p.role != "agg":
        opts["cache_transceiver_config"] = {"backend": "DEFAULT"}
        if p.role == "prefill":
            opts["disable_overlap_scheduler"] = True
    return opts


def _trtllm_args(d: Deployment, p: Pool, options: str, port: int) -> list[str]:
    args = ["--tp_size", str(p.tp * p.dp), "--pp_size", str(p.pp)]
    if d.moe and p.ep > 1:
        args += ["--ep_size", str(p.ep)]
    if p.batch:  # per rank under attention data parallelism
        args += ["--max_batch_size", str(p.batch)]
    if d.budget:
        args += ["--max_num_tokens", str(d.budget)]
    return args + ["--max_seq_len", str(d.max_len), "--extra_llm_api_options", options,
                   "--port", str(port)]


def _line(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


def render(d: Deployment, fmt: str) -> dict[str, str]:
    """{file name: text} of one deployment in one engine's format."""
    import yaml

    _, note = _quant_note(d)
    files: dict[str, str] = {}
    if fmt == "vllm":
        lines = ["#!/usr/bin/env bash", note.rstrip()]
        for n, p in enumerate(d.pools):
            port = 8100 + n
            lines.append(f"# {p.role}: {p.workers} worker(s) of {p.devices} x {p.hardware}; "
                         "one command per worker")
            lines.append(_line(["vllm", "serve", d.model] + _vllm_args(d, p)
                               + ["--port", str(port)]))
        if d.disagg:
            lines.append("# then a proxy that sends each request to a prefill worker, then a "
                         "decode worker (vLLM's examples/online_serving/disaggregated_serving)")
        files["launch.sh"] = "\n".join(x for x in lines if x) + "\n"
    elif fmt == "sglang":
        lines = ["#!/usr/bin/env bash", note.rstrip()]
        for n, p in enumerate(d.pools):
            lines.append(f"# {p.role}: {p.workers} worker(s) of {p.devices} x {p.hardware}")
            lines.append(_line(["python", "-m", "sglang.launch_server"] + _sglang_args(d, p)
                               + ["--port", str(30000 + n)]))
        if d.disagg:
            lines.append(_line(["python", "-m", "sglang_router.launch_router",
                                "--pd-disaggregation", "--prefill", "http://127.0.0.1:30000",
                                "--decode", "http://127.0.0.1:30001"]))
        files["launch.sh"] = "\n".join(x for x in lines if x) + "\n"
    elif fmt == "trtllm":
        lines = ["#!/usr/bin/env bash", note.rstrip() or "# quantization: from the checkpoint "
                 "(trtllm-serve has no flag for it)"]
        servers = {}
        for n, p in enumerate(d.pools):
            name = f"{p.role}.yml"
            files[name] = yaml.safe_dump(_trtllm_options(d, p), sort_keys=False)
            port = 8001 + n
            lines.append(f"# {p.role}: {p.workers} worker(s) of {p.devices} x {p.hardware}")
            lines.append(_line(["trtllm-serve", d.model] + _trtllm_args(d, p, name, port)))
            servers[p.role] = (p.workers, port)
        if d.disagg:
            cfg = {"hostname": "localhost", "port": 8000, "backend": "pytorch",
                   "context_servers": {"num_instances": servers["prefill"][0],
                                       "urls": [f"localhost:{servers['prefill'][1]}"]},
                   "generation_servers": {"num_instances": servers["decode"][0],
                                          "urls": [f"localhost:{servers['decode'][1]}"]}}
            files["disagg_config.yaml"] = yaml.safe_dump(cfg, sort_keys=False)
            lines.append(_line(["trtllm-serve", "disaggregated", "-c", "disagg_config.yaml"]))
        files["launch.sh"] = "\n".join(lines) + "\n"
    elif fmt == "dynamo":
        services = {"Frontend": {"componentType": "frontend", "replicas": 1}}
        for p in d.pools:
            mode = {"agg": "agg", "prefill": "prefill", "decode": "decode"}[p.role]
            args = (["--model", d.model, "--disaggregation-mode", mode]
                    + _vllm_args(d, p, dynamo=True))
            service = {"componentType": "worker", "replicas": p.workers,
                       "resources": {"limits": {"gpu": str(p.devices)}},
                       "extraPodSpec": {"mainContainer": {
                           "command": ["python3", "-m", "dynamo.vllm"], "args": args}}}
            if p.role != "agg":
                service["subComponentType"] = p.role
            services[f"VllmWorker{p.role.capitalize()}" if p.role != "agg" else
                     "VllmWorker"] = service
        manifest = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                    "metadata": {"name": f"dse-rank-{d.rank}"}, "spec": {"services": services}}
        files["deployment.yaml"] = yaml.safe_dump(manifest, sort_keys=False)
    else:
        raise ValueError(fmt)
    files["README.md"] = _readme(d, fmt)
    return files


_EXPECTED = (("ttft_s", "TTFT, mean", 1e3, "ms"), ("ttft_p99_s", "TTFT, P99", 1e3, "ms"),
             ("tpot_s", "TPOT, mean", 1e3, "ms"), ("tpot_p90_s", "TPOT, P90", 1e3, "ms"),
             ("e2e_s", "request latency, mean", 1.0, "s"),
             ("request_throughput_req_s", "requests/s", 1.0, ""),
             ("throughput_tok_s", "output tokens/s", 1.0, ""),
             ("throughput_per_device_tok_s", "output tokens/s per device", 1.0, ""),
             ("goodput_req_s", "goodput, requests/s", 1.0, ""),
             ("kv_transfer_s", "KV transfer per request", 1e3, "ms"),
             ("n_devices", "devices", 1.0, ""), ("cost_per_mtok", "USD per million tokens", 1.0,
                                                 ""))


def _readme(d: Deployment, fmt: str) -> str:
    lines = [f"# Rank {d.rank}: {d.model}, {'disaggregated' if d.disagg else 'aggregated'} "
             f"({fmt})", "", "| pool | workers | devices each | device | tp | pp | dp | ep |",
             "|---|---|---|---|---|---|---|---|"]
    for p in d.pools:
        lines.append(f"| {p.role} | {p.workers} | {p.devices} | {p.hardware} | {p.tp} | "
                     f"{p.pp} | {p.dp} | {p.ep} |")
    lines += ["", "What dse expects of it (its model, at the study's load):", "",
              "| | value |", "|---|---|"]
    for key, label, scale, unit in _EXPECTED:
        v = d.expected.get(key)
        if isinstance(v, (int, float)):
            lines.append(f"| {label} | {v * scale:.4g} {unit} |")
    if d.spec_tokens:
        lines += ["", f"Speculative decoding: {d.spec_tokens} MTP draft token(s) per decode "
                  "step, the model's own draft layer (a checkpoint that ships it)."]
    if d.redundant and d.moe and fmt != "sglang":
        lines += ["", f"Redundant experts: {d.redundant} copies per MoE layer (EPLB) were "
                  f"assumed; set them in {fmt}'s expert load balancer (not written here)."]
    lines += ["", "Ports and hosts are placeholders: one command per worker, on its own "
              "devices."]
    return "\n".join(lines) + "\n"


def emit(result, fmt: str, out_dir: str | Path, top: int = 3) -> list[Path]:
    """Write the launch files of the ``top`` best configurations under ``out_dir``
    (``rank-1/``, ...); returns the paths written."""
    from ..atomic import atomic_path

    out_dir = Path(out_dir)
    files = {out_dir / f"rank-{d.rank}" / name: text  # all rendered before any is written
             for d in deployments(result, top) for name, text in render(d, fmt).items()}
    for path, text in files.items():
        with atomic_path(path) as tmp:
            tmp.write_text(text)
    return list(files)

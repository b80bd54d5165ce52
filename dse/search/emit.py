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
    # multi-node: docs/serving/data_parallel_deployment.md (--data-parallel-size-local,
    # --data-parallel-address, --data-parallel-rpc-port, --data-parallel-start-rank,
    # --headless on the nodes after the first) and docs/serving/distributed_serving.md (a
    # Ray cluster, --distributed-executor-backend ray, for a tp x pp beyond one node);
    # vllm bench serve: vllm/benchmarks/serve.py and datasets.py (random dataset)
    # EPLB: --enable-eplb and --eplb-config's JSON (config/parallel.py EPLBConfig,
    # num_redundant_experts; docs/serving/expert_parallel_deployment.md)
    "vllm": {"--enable-eplb", "--eplb-config","--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
             "--enable-expert-parallel", "--max-num-seqs", "--max-num-batched-tokens",
             "--kv-cache-dtype", "--quantization", "--max-model-len",
             "--gpu-memory-utilization", "--kv-transfer-config", "--speculative-config",
             "--port", "--data-parallel-size-local", "--data-parallel-address",
             "--data-parallel-rpc-port", "--data-parallel-start-rank", "--headless",
             "--distributed-executor-backend", "--head", "--address", "--model",
             "--dataset-name", "--random-input-len", "--random-output-len",
             "--random-range-ratio", "--num-prompts", "--max-concurrency", "--request-rate"},
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
               "--enable-eplb", "--nnodes", "--node-rank", "--dist-init-addr",
               # python -m sglang.bench_serving (python/sglang/bench_serving.py)
               "--backend", "--dataset-name", "--random-input-len", "--random-output-len",
               "--random-range-ratio", "--num-prompts", "--max-concurrency",
               "--request-rate"},
    # TensorRT-LLM, tensorrt_llm/commands/serve.py (trtllm-serve options) and
    # tensorrt_llm/llmapi/llm_args.py (the --extra_llm_api_options YAML keys);
    # examples/disaggregated/README.md and disagg_config.yaml for disaggregation
    # multi-node: srun (Slurm) or mpirun starting one trtllm-llmapi-launch task per GPU
    # (docs/source/commands/trtllm-serve: "multi-node"; examples/llm-api/
    # llm_mgmn_trtllm_serve.sh); the benchmark client: genai-perf profile (triton-inference-
    # server/perf_analyzer genai-perf README: synthetic token counts, concurrency, rate)
    "trtllm": {"--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--max_num_tokens",
               "--max_seq_len", "--extra_llm_api_options", "--port", "-c", "-N",
               "--ntasks-per-node", "--mpi", "-m", "--endpoint-type", "--streaming", "--url",
               "--synthetic-input-tokens-mean", "--synthetic-input-tokens-stddev",
               "--output-tokens-mean", "--output-tokens-stddev", "--concurrency",
               "--request-rate", "--request-count"},
    # NVIDIA Dynamo 1.6.1, dynamo/vllm/backend_args.py and args.py (the worker takes
    # vLLM's engine flags); DynamoGraphDeployment manifests (docs.nvidia.com/dynamo)
    "dynamo": {"--model", "--disaggregation-mode", "--enable-eplb", "--eplb-config", "--tensor-parallel-size",
               "--pipeline-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
               "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype",
               "--quantization", "--max-model-len", "--gpu-memory-utilization",
               "--kv-transfer-config", "--speculative-config",
               # the benchmark client, as for TensorRT-LLM: genai-perf profile
               "-m", "--endpoint-type", "--streaming", "--url",
               "--synthetic-input-tokens-mean", "--synthetic-input-tokens-stddev",
               "--output-tokens-mean", "--output-tokens-stddev", "--concurrency",
               "--request-rate", "--request-count"},
}
# YAML keys of TensorRT-LLM's LLM API options (llm_args.py) and disaggregated server config
# (speculative_config with decoding_type MTP: docs/source/features/speculative-decoding.md)
TRTLLM_KEYS = {"enable_attention_dp", "enable_chunked_prefill", "kv_cache_config", "dtype",
               "free_gpu_memory_fraction", "cache_transceiver_config", "backend",
               "disable_overlap_scheduler", "hostname", "port", "context_servers",
               "generation_servers", "num_instances", "urls", "speculative_config",
               "decoding_type", "num_nextn_predict_layers", "attention_dp_config",
               "enable_balance", "batching_wait_iters", "timeout_iters",
               # EPLB: moe_config.load_balancer (llm_args.py MoeConfig and
               # MoeLoadBalancerConfig: num_slots physical experts, layer_updates_per_iter;
               # examples/wide_ep)
               "moe_config", "load_balancer", "num_slots", "layer_updates_per_iter"}
# DynamoGraphDeployment keys (the CRD's manifests)
DYNAMO_KEYS = {"apiVersion", "kind", "metadata", "name", "spec", "services", "componentType",
               "subComponentType", "replicas", "resources", "limits", "gpu",
               "extraPodSpec", "mainContainer", "args", "command",
               # a worker over several nodes (docs: multinode deployments): nodeCount nodes,
               # the gpu limit per node
               "multinode", "nodeCount"}


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
    per_node: int = 8  # devices per node of the hardware (its NVLink domain for GB200/GB300)

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def nodes(self) -> int:
        """Nodes one worker spans (its devices over a node's, rounded up)."""
        return max(1, -(-self.devices // max(self.per_node, 1)))

    @property
    def local(self) -> int:
        """Devices of one worker on each of its nodes."""
        return self.devices // self.nodes


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
    # the load the prediction is for: closed-loop clients or open-loop requests/s, and
    # the lengths (means and coefficients of variation)
    concurrency: float = 0.0
    request_rate: float = 0.0
    input_len: int = 512
    output_len: int = 128
    input_cv: float = 0.0
    output_cv: float = 0.0
    experts: int = 0  # routed experts per MoE layer (the model's)

    @property
    def disagg(self) -> bool:
        return self.pools[0].role != "agg"


def deployments(result, top: int = 3) -> list[Deployment]:
    """The ``top`` best feasible configurations of a search result as deployments."""
    study = result.study
    models = {c.name: c for c in study.models}
    per_node = {c.name: int(c.fields.get("devices_per_node", 8)) for c in study.hardware}
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
                               k.get(f"{role}_hardware") or k["hardware"],
                               per_node.get(k.get(f"{role}_hardware") or k["hardware"], 8))
                          for role in ("prefill", "decode"))
        else:
            pools = (Pool("agg", 1, i("tp", 1), i("pp", 1), i("dp", 1), i("ep", 1), batch,
                          k["hardware"], per_node.get(k["hardware"], 8)),)
        out.append(Deployment(rank, repo, pools, float(k.get("weight_bits", 16)),
                              float(k.get("kv_bits", 16)), i("max_num_tokens"),
                              i("input_len", 512) + i("output_len", 128),
                              round(1.0 - float(k.get("memory_reserve", 0.1)), 3),
                              card.is_moe, best["outputs"], i("spec_tokens"),
                              i("ep_redundant_experts"), float(k.get("concurrency") or 0.0),
                              float(k.get("request_rate") or 0.0), i("input_len", 512),
                              i("output_len", 128), float(k.get("input_len_cv") or 0.0),
                              float(k.get("output_len_cv") or 0.0),
                              experts=int(card.fields.get("n_experts") or 0)))
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
    if d.moe and p.ep > 1 and d.redundant:
        args += ["--enable-eplb", "--eplb-config",
                 json.dumps({"num_redundant_experts": d.redundant})]
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
    if d.moe and p.ep > 1 and d.redundant:  # the physical experts: routed + redundant
        opts["moe_config"] = {"load_balancer": {"num_slots": d.experts + d.redundant,
                                                "layer_updates_per_iter": 1}}
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


HEAD = "$HEAD_IP"  # node 0's address, set in the launch script's environment
HEAD_LINE = 'HEAD_IP="${HEAD_IP:?set HEAD_IP to the address of each worker\'s node 0}"'


def _line(cmd: list[str]) -> str:
    """A shell command; the head node's address stays a variable."""
    return " ".join(c if c.startswith(HEAD) else shlex.quote(c) for c in cmd)


def _vllm_launch(d: Deployment, p: Pool, port: int) -> list[str]:
    """vLLM commands of one worker: one line on one node; over several, its DP ranks
    spread over the nodes (tp x pp within one), else a Ray cluster."""
    base = ["vllm", "serve", d.model] + _vllm_args(d, p) + ["--port", str(port)]
    if p.nodes == 1:
        return [_line(base)]
    if p.dp > 1 and p.tp * p.pp <= p.per_node and p.dp % p.nodes == 0:
        local = p.dp // p.nodes
        shared = ["--data-parallel-size-local", str(local), "--data-parallel-address", HEAD,
                  "--data-parallel-rpc-port", "13345"]
        lines = [f"# node 0 of {p.nodes} ({local} DP ranks on each node)", _line(base + shared)]
        for n in range(1, p.nodes):
            lines += [f"# node {n}", _line(base + shared + [
                "--headless", "--data-parallel-start-rank", str(n * local)])]
        return lines
    return [f"# a Ray cluster over the worker's {p.nodes} nodes: on node 0",
            _line(["ray", "start", "--head", "--port", "6379"]),
            "# on each other node", _line(["ray", "start", "--address", f"{HEAD}:6379"]),
            "# then on node 0", _line(base + ["--distributed-executor-backend", "ray"])]


def _sglang_launch(d: Deployment, p: Pool, port: int) -> list[str]:
    base = ["python", "-m", "sglang.launch_server"] + _sglang_args(d, p) + ["--port", str(port)]
    if p.nodes == 1:
        return [_line(base)]
    lines = []
    for n in range(p.nodes):
        lines += [f"# node {n} of {p.nodes}", _line(base + [
            "--nnodes", str(p.nodes), "--node-rank", str(n), "--dist-init-addr",
            f"{HEAD}:5000"])]
    return lines


def _trtllm_launch(d: Deployment, p: Pool, options: str, port: int) -> list[str]:
    serve = ["trtllm-serve", d.model] + _trtllm_args(d, p, options, port)
    if p.nodes == 1:
        return [_line(serve)]
    return [f"# one MPI task per GPU over {p.nodes} nodes (Slurm; mpirun -H works alike)",
            _line(["srun", "-N", str(p.nodes), "--ntasks-per-node", str(p.local), "--mpi",
                   "pmix", "trtllm-llmapi-launch"] + serve)]


def _lengths_ratio(cv: float, engine: str) -> float:
    """The random dataset's --random-range-ratio for a length spread ``cv`` (uniform
    lengths): vLLM draws from [L (1 - r), L (1 + r)] (cv = r / sqrt 3); SGLang from
    [r L, L] (1: fixed; its mean then moves, see :func:`_sglang_len`)."""
    if engine == "vllm":
        return round(min(3 ** 0.5 * cv, 0.95), 3)
    return round((1 - 3 ** 0.5 * cv) / (1 + 3 ** 0.5 * cv), 3) if cv > 0 else 1.0


def _sglang_len(mean: int, cv: float) -> int:
    """SGLang's --random-*-len L for a mean length: uniform on [r L, L] has mean L (1 + r) / 2."""
    return round(2 * mean / (1 + _lengths_ratio(cv, "sglang"))) if cv > 0 else mean


def _prompts(d: Deployment) -> int:
    """Requests a benchmark sends: ten per client, or two minutes of the rate; >= 200."""
    return int(max(200, 10 * d.concurrency, 120 * d.request_rate))


def bench_command(d: Deployment, fmt: str, port: int) -> str:
    """The benchmark client's command at the load and lengths of the prediction."""
    n = str(_prompts(d))
    load = (["--max-concurrency", f"{d.concurrency:g}"] if d.concurrency
            else ["--request-rate", f"{d.request_rate:g}"] if d.request_rate else [])
    if fmt == "vllm":
        return _line(["vllm", "bench", "serve", "--model", d.model, "--port", str(port),
                      "--dataset-name", "random", "--random-input-len", str(d.input_len),
                      "--random-output-len", str(d.output_len), "--random-range-ratio",
                      f"{_lengths_ratio(max(d.input_cv, d.output_cv), 'vllm'):g}",
                      "--num-prompts", n] + load)
    if fmt == "sglang":
        return _line(["python", "-m", "sglang.bench_serving", "--backend", "sglang",
                      "--port", str(port), "--dataset-name", "random", "--random-input-len",
                      str(_sglang_len(d.input_len, d.input_cv)), "--random-output-len",
                      str(_sglang_len(d.output_len, d.output_cv)), "--random-range-ratio",
                      f"{_lengths_ratio(max(d.input_cv, d.output_cv), 'sglang'):g}",
                      "--num-prompts", n] + load)
    load = (["--concurrency", f"{d.concurrency:g}"] if d.concurrency
            else ["--request-rate", f"{d.request_rate:g}"] if d.request_rate else [])
    return _line(["genai-perf", "profile", "-m", d.model, "--endpoint-type", "chat",
                  "--streaming", "--url", f"localhost:{port}",
                  "--synthetic-input-tokens-mean", str(d.input_len),
                  "--synthetic-input-tokens-stddev", f"{d.input_cv * d.input_len:g}",
                  "--output-tokens-mean", str(d.output_len),
                  "--output-tokens-stddev", f"{d.output_cv * d.output_len:g}",
                  "--request-count", n] + load)


def render(d: Deployment, fmt: str) -> dict[str, str]:
    """{file name: text} of one deployment in one engine's format."""
    import yaml

    _, note = _quant_note(d)
    files: dict[str, str] = {}
    if fmt == "vllm":
        lines = ["#!/usr/bin/env bash", note.rstrip(), _head(d)]
        for n, p in enumerate(d.pools):
            port = 8100 + n
            lines.append(f"# {p.role}: {p.workers} worker(s) of {p.devices} x {p.hardware}"
                         f"{_spans(p)}; one command per worker")
            lines += _vllm_launch(d, p, port)
        if d.disagg:
            lines.append("# then a proxy on port 8000 that sends each request to a prefill "
                         "worker, then a decode worker (vLLM's examples/online_serving/"
                         "disaggregated_serving)")
        files["launch.sh"] = "\n".join(x for x in lines if x) + "\n"
        files["bench.sh"] = _bench(d, fmt, 8000 if d.disagg else 8100)
    elif fmt == "sglang":
        lines = ["#!/usr/bin/env bash", note.rstrip(), _head(d)]
        for n, p in enumerate(d.pools):
            lines.append(f"# {p.role}: {p.workers} worker(s) of {p.devices} x {p.hardware}"
                         f"{_spans(p)}")
            lines += _sglang_launch(d, p, 30000 + n)
        if d.disagg:
            lines.append(_line(["python", "-m", "sglang_router.launch_router",
                                "--pd-disaggregation", "--prefill", "http://127.0.0.1:30000",
                                "--decode", "http://127.0.0.1:30001", "--port", "8000"]))
        files["launch.sh"] = "\n".join(x for x in lines if x) + "\n"
        files["bench.sh"] = _bench(d, fmt, 8000 if d.disagg else 30000)
    elif fmt == "trtllm":
        lines = ["#!/usr/bin/env bash", note.rstrip() or "# quantization: from the checkpoint "
                 "(trtllm-serve has no flag for it)"]
        if _head(d):
            lines.append("# workers over several nodes run under Slurm (srun); no head address")
        servers = {}
        for n, p in enumerate(d.pools):
            name = f"{p.role}.yml"
            files[name] = yaml.safe_dump(_trtllm_options(d, p), sort_keys=False)
            port = 8001 + n
            lines.append(f"# {p.role}: {p.workers} worker(s) of {p.devices} x {p.hardware}"
                         f"{_spans(p)}")
            lines += _trtllm_launch(d, p, name, port)
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
        files["bench.sh"] = _bench(d, fmt, 8000 if d.disagg else 8001)
    elif fmt == "dynamo":
        services = {"Frontend": {"componentType": "frontend", "replicas": 1}}
        for p in d.pools:
            mode = {"agg": "agg", "prefill": "prefill", "decode": "decode"}[p.role]
            args = (["--model", d.model, "--disaggregation-mode", mode]
                    + _vllm_args(d, p, dynamo=True))
            service = {"componentType": "worker", "replicas": p.workers,
                       "resources": {"limits": {"gpu": str(p.local)}},
                       "extraPodSpec": {"mainContainer": {
                           "command": ["python3", "-m", "dynamo.vllm"], "args": args}}}
            if p.nodes > 1:  # the gpu limit is per node
                service["multinode"] = {"nodeCount": p.nodes}
            if p.role != "agg":
                service["subComponentType"] = p.role
            services[f"VllmWorker{p.role.capitalize()}" if p.role != "agg" else
                     "VllmWorker"] = service
        manifest = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                    "metadata": {"name": f"dse-rank-{d.rank}"}, "spec": {"services": services}}
        files["deployment.yaml"] = yaml.safe_dump(manifest, sort_keys=False)
        files["bench.sh"] = _bench(d, fmt, 8000)
    else:
        raise ValueError(fmt)
    files["README.md"] = _readme(d, fmt)
    return files


def _head(d: Deployment) -> str:
    """The head-address line where a worker spans nodes ('' otherwise)."""
    return HEAD_LINE if any(p.nodes > 1 for p in d.pools) else ""


def _spans(p: Pool) -> str:
    return f", over {p.nodes} nodes of {p.local}" if p.nodes > 1 else ""


def _bench(d: Deployment, fmt: str, port: int) -> str:
    what = (f"{d.concurrency:g} concurrent clients" if d.concurrency else
            f"{d.request_rate:g} requests/s" if d.request_rate else "no load: a static batch")
    return "\n".join(["#!/usr/bin/env bash",
                      f"# the load dse's prediction is for: {what}, {d.input_len} prompt and "
                      f"{d.output_len} output tokens (cv {d.input_cv:g} / {d.output_cv:g})",
                      bench_command(d, fmt, port)]) + "\n"


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
             f"({fmt})", "", "| pool | workers | devices each | nodes each | device | tp | pp | "
             "dp | ep |", "|---|---|---|---|---|---|---|---|---|"]
    for p in d.pools:
        lines.append(f"| {p.role} | {p.workers} | {p.devices} | {p.nodes} | {p.hardware} | "
                     f"{p.tp} | {p.pp} | {p.dp} | {p.ep} |")
    lines += ["", "What dse expects of it (its model, at the study's load):", "",
              "| | value |", "|---|---|"]
    for key, label, scale, unit in _EXPECTED:
        v = d.expected.get(key)
        if isinstance(v, (int, float)):
            lines.append(f"| {label} | {v * scale:.4g} {unit} |")
    if d.spec_tokens:
        lines += ["", f"Speculative decoding: {d.spec_tokens} MTP draft token(s) per decode "
                  "step, the model's own draft layer (a checkpoint that ships it)."]
    if d.redundant and d.moe:
        lines += ["", f"Redundant experts: {d.redundant} copies per MoE layer (EPLB) on the "
                  "workers whose experts span several devices, written as the engine's "
                  "expert load balancer."]
    if any(p.nodes > 1 for p in d.pools):
        lines += ["", "A worker over several nodes is launched the engine's own way (vLLM: DP "
                  "ranks per node with --headless on the others, or a Ray cluster; SGLang: "
                  "--nnodes/--node-rank/--dist-init-addr; TensorRT-LLM: srun with "
                  "trtllm-llmapi-launch; Dynamo: multinode.nodeCount); set HEAD_IP to each "
                  "worker's node 0."]
    lines += ["", "`bench.sh` measures it: the benchmark client at the load and lengths this "
              "prediction is for, against the endpoint launch.sh opens.",
              "", "Ports and hosts are placeholders: one command per worker, on its own "
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

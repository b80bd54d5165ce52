"""``dse search --emit``: launch files of the best configurations, checked against the
engines' documented flags (dse.search.emit.FLAGS, each with its source), YAML and JSON
that parse, and the expected figures in a README."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

import pytest
import yaml

from dse.cli import main
from dse.search.emit import DYNAMO_KEYS, FLAGS, FORMATS, TRTLLM_KEYS, emit
from dse.study import parse_study

from ..conftest import STUDIES

DISAGG = """[study]
name = "emit"
[axes]
model = "deepseek-v3"
hardware = "h200"
framework = "sglang"
weight_bits = 8
kv_bits = 8
tp = 8
ep = 8
serving = "disagg"
prefill_workers = 2
prefill_tp = 8
decode_workers = 1
decode_tp = 1
decode_dp = 8
decode_ep = 8
decode_batch = 64
max_num_tokens = 8192
input_len = 4000
output_len = 1000
request_rate = 8
"""


def _result(text: str, outputs: dict):
    """A search result with one best trial: the study's fixed configuration."""
    study = parse_study(text, "<emit>")
    return SimpleNamespace(study=study, best=[{"axes": {}, "outputs": outputs}])


def _flags(line: str) -> list[str]:
    """The engine's options of a command line (python's own -m aside)."""
    words = shlex.split(line)
    return [w for i, w in enumerate(words) if w.startswith("-")
            and not (w == "-m" and i and words[i - 1].startswith("python"))]


def _keys(tree) -> set[str]:
    if isinstance(tree, dict):
        return set(tree) | {k for v in tree.values() for k in _keys(v)}
    if isinstance(tree, list):
        return {k for v in tree for k in _keys(v)}
    return set()


@pytest.mark.parametrize("fmt", FORMATS)
def test_disaggregated_deployment_in_every_format(fmt, tmp_path):
    result = _result(DISAGG, {"ttft_s": 0.25, "tpot_s": 0.02, "n_devices": 24.0,
                              "kv_transfer_s": 0.0004})
    paths = emit(result, fmt, tmp_path)
    files = {p.name: p.read_text() for p in paths}
    assert all(p.parent.name == "rank-1" for p in paths)
    readme = files.pop("README.md")
    assert "| prefill | 2 | 8 | 1 | h200 | 8 | 1 | 1 | 8 |" in readme
    assert "| decode | 1 | 8 | 1 | h200 | 1 | 1 | 8 | 8 |" in readme
    assert "| TTFT, mean | 250 ms |" in readme and "| devices | 24  |" in readme
    commands = [line for line in files.get("launch.sh", "").splitlines()
                if line and not line.startswith("#")]
    for line in commands:
        assert set(_flags(line)) <= FLAGS[fmt], line
    if fmt == "vllm":
        assert len(commands) == 2
        roles = [json.loads(shlex.split(c)[shlex.split(c).index("--kv-transfer-config") + 1])
                 for c in commands]
        assert [r["kv_role"] for r in roles] == ["kv_producer", "kv_consumer"]
        assert "--tensor-parallel-size 1" in commands[1] and "--data-parallel-size 8" in commands[1]
        assert "--kv-cache-dtype fp8" in commands[0] and "--quantization fp8" in commands[0]
    if fmt == "sglang":
        prefill, decode, router = commands
        assert "--disaggregation-mode prefill" in prefill and "--tp-size 8" in prefill
        assert ("--dp-size 8" in decode and "--enable-dp-attention" in decode
                and "--ep-size 8" in decode and "--max-running-requests 512" in decode)
        assert "sglang_router.launch_router" in router and "--pd-disaggregation" in router
    if fmt == "trtllm":
        for name in ("prefill.yml", "decode.yml", "disagg_config.yaml"):
            assert _keys(yaml.safe_load(files[name])) <= TRTLLM_KEYS, name
        decode = yaml.safe_load(files["decode.yml"])
        assert decode["enable_attention_dp"] and decode["kv_cache_config"]["dtype"] == "fp8"
        assert yaml.safe_load(files["prefill.yml"])["disable_overlap_scheduler"]
        cfg = yaml.safe_load(files["disagg_config.yaml"])
        assert cfg["context_servers"]["num_instances"] == 2
        assert cfg["generation_servers"]["num_instances"] == 1
    if fmt == "dynamo":
        manifest = yaml.safe_load(files["deployment.yaml"])
        assert _keys(manifest) - set(manifest["spec"]["services"]) <= DYNAMO_KEYS
        workers = [s for s in manifest["spec"]["services"].values()
                   if s["componentType"] == "worker"]
        assert sorted((s["subComponentType"], s["replicas"]) for s in workers) == [
            ("decode", 1), ("prefill", 2)]
        for s in workers:
            assert set(_flags(shlex.join(s["extraPodSpec"]["mainContainer"]["args"]))) \
                <= FLAGS["dynamo"]


def test_cli_emits_the_best_of_a_search(tmp_path, capsys):
    """The whole verb on an example search: trials and launch files in one directory."""
    out = tmp_path / "deploy"
    assert main(["search", str(STUDIES / "search-serving.toml"), "-n", "40", "--emit", "vllm",
                 "--top", "2", "-o", str(out)]) == 0
    assert (out / "search.nc").exists()
    ranks = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert ranks == ["rank-1", "rank-2"]
    line = next(x for x in (out / "rank-1" / "launch.sh").read_text().splitlines()
                if x.startswith("vllm serve"))
    assert set(_flags(line)) <= FLAGS["vllm"]
    assert "vllm files under" in capsys.readouterr().out


def test_emit_into_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("")
    assert main(["search", str(STUDIES / "search-serving.toml"), "--emit", "sglang",
                 "-o", str(target)]) == 2
    assert "-o" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", FORMATS)
def test_speculative_decoding_and_redundant_experts_reach_the_launch_files(fmt, tmp_path):
    """A deployment searched with spec_tokens = 2 and 32 redundant experts: the decode
    pool's command drafts 2 tokens in each engine's own terms (SGLang: EAGLE over the
    model's draft layer, 2 steps, 3 tokens verified; vLLM and Dynamo: method "mtp";
    TensorRT-LLM: decoding_type MTP), the prefill pool does not speculate, the workers
    whose experts span devices write the EPLB settings in each engine's terms (SGLang's
    flags, vLLM's --eplb-config, TensorRT-LLM's load balancer of 256 + 32 = 288 slots),
    and every flag and key is in the sourced tables."""
    text = DISAGG.replace("request_rate = 8", "request_rate = 8\nspec_tokens = 2\n"
                          "ep_redundant_experts = 32")
    files = {p.name: p.read_text() for p in emit(_result(text, {"tpot_s": 0.01}), fmt,
                                                   tmp_path)}
    assert "2 MTP draft token(s)" in files["README.md"]
    commands = [line for line in files.get("launch.sh", "").splitlines()
                if line and not line.startswith("#")]
    for line in commands:
        assert set(_flags(line)) <= FLAGS[fmt], line
    if fmt in ("vllm", "dynamo"):
        if fmt == "vllm":
            args = [shlex.split(c) for c in commands]
        else:
            services = yaml.safe_load(files["deployment.yaml"])["spec"]["services"]
            args = [services[f"VllmWorker{r}"]["extraPodSpec"]["mainContainer"]["args"]
                    for r in ("Prefill", "Decode")]
        prefill, decode = args
        assert "--speculative-config" not in prefill
        spec = json.loads(decode[decode.index("--speculative-config") + 1])
        assert spec == {"method": "mtp", "num_speculative_tokens": 2}
        assert "Redundant experts: 32" in files["README.md"]
        eplb = json.loads(decode[decode.index("--eplb-config") + 1])
        assert eplb == {"num_redundant_experts": 32} and "--enable-eplb" in decode
        assert "--eplb-config" in prefill  # tp 8, ep 8: its experts span the devices too
    if fmt == "sglang":
        prefill, decode, _ = commands
        assert "--speculative-algorithm" not in prefill
        assert ("--speculative-algorithm EAGLE --speculative-num-steps 2 "
                "--speculative-eagle-topk 1 --speculative-num-draft-tokens 3") in decode
        assert "--ep-num-redundant-experts 32 --enable-eplb" in decode
    if fmt == "trtllm":
        decode = yaml.safe_load(files["decode.yml"])
        assert decode["speculative_config"] == {"decoding_type": "MTP",
                                                "num_nextn_predict_layers": 2}
        assert "speculative_config" not in yaml.safe_load(files["prefill.yml"])
        assert _keys(decode) <= TRTLLM_KEYS
        assert decode["moe_config"] == {"load_balancer": {"num_slots": 288,
                                                          "layer_updates_per_iter": 1}}


def test_trtllm_attention_dp_writes_the_context_balancing_the_model_assumes(tmp_path):
    """An aggregated DeepSeek-V3 worker on 8 attention-DP ranks with its experts over them
    (TensorRT-LLM): agg.yml turns attention DP on with the context balancing of NVIDIA's
    DeepSeek-R1 recipes (enable_balance, batching_wait_iters 0, timeout_iters 60), which
    the `trtllm` framework's load model assumes (dse.catalogue.frameworks); a worker
    without expert parallelism has no balancing to write."""
    agg = """[study]
name = "adp"
[axes]
model = "deepseek-v3"
hardware = "h200"
framework = "trtllm"
weight_bits = 8
tp = 1
dp = 8
ep = 8
input_len = 4000
output_len = 1000
concurrency = 64
"""
    files = {p.name: p.read_text() for p in emit(_result(agg, {"tpot_s": 0.02}), "trtllm",
                                                   tmp_path / "ep")}
    options = yaml.safe_load(files["agg.yml"])
    assert options["enable_attention_dp"]
    assert options["attention_dp_config"] == {"enable_balance": True, "batching_wait_iters": 0,
                                              "timeout_iters": 60}
    assert _keys(options) <= TRTLLM_KEYS
    files = {p.name: p.read_text() for p in emit(_result(agg.replace("ep = 8", "ep = 1"),
                                                         {"tpot_s": 0.02}), "trtllm",
                                                 tmp_path / "no-ep")}
    assert "attention_dp_config" not in yaml.safe_load(files["agg.yml"])


BIG = """[study]
name = "four-nodes"
[axes]
model = "deepseek-v3"
hardware = "h200"
framework = "vllm"
weight_bits = 8
tp = 8
dp = 4
ep = 32
max_num_seqs = 64
input_len = 4000
output_len = 1000
output_len_cv = 0.5
concurrency = 256
"""


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_four_node_worker_is_launched_the_engines_own_way(fmt, tmp_path):
    """A 32-GPU DeepSeek-V3 worker on H200 (8 per node: tp 8 x attention-DP 4, experts
    over 32) at 256 clients: 4 nodes. vLLM spreads its 4 DP ranks one per node (node 0
    with the DP address, the others --headless from start rank 1, 2, 3: its data-parallel
    deployment docs); SGLang runs the same command on each node with --nnodes 4 and
    --node-rank 0-3; TensorRT-LLM runs under srun, 4 nodes of 8 tasks; Dynamo's worker
    asks for 8 GPUs on each of multinode.nodeCount 4. Every file names the batch cap
    (64 per rank) and parses, every flag is in the sourced table, and bench.sh runs the
    engine's benchmark client at 256 clients, ISL 4,000 and OSL 1,000 (cv 0.5)."""
    files = {p.name: p.read_text() for p in emit(_result(BIG, {"tpot_s": 0.03}), fmt, tmp_path)}
    launch = files.get("launch.sh", "")
    lines = [x for x in launch.splitlines() + files["bench.sh"].splitlines()
             if x and not x.startswith("#") and "=" not in x.split()[0]]
    for line in lines:
        assert set(_flags(line)) <= FLAGS[fmt], line
    bench = files["bench.sh"].splitlines()[-1]
    if fmt == "vllm":
        serve = [x for x in lines if x.startswith("vllm serve")]
        assert len(serve) == 4 and all("--max-num-seqs 64" in x for x in serve)
        assert "--headless" not in serve[0] and "--data-parallel-address $HEAD_IP" in serve[0]
        assert [x.split("--data-parallel-start-rank ")[1].split()[0] for x in serve[1:]] == [
            "1", "2", "3"]
        assert all("--data-parallel-size-local 1" in x for x in serve)
        assert "--max-concurrency 256" in bench and "--random-input-len 4000" in bench
        # uniform lengths in [L (1 - r), L (1 + r)] have cv r / sqrt 3: r = 0.866 for 0.5
        assert "--random-range-ratio 0.866" in bench
    if fmt == "sglang":
        serve = [x for x in lines if "sglang.launch_server" in x]
        assert [x.split("--node-rank ")[1].split()[0] for x in serve] == ["0", "1", "2", "3"]
        assert all("--nnodes 4" in x and "--dist-init-addr $HEAD_IP:5000" in x
                   and "--max-running-requests 256" in x for x in serve)
        assert "--max-concurrency 256" in bench and "sglang.bench_serving" in bench
    if fmt == "trtllm":
        (serve,) = [x for x in lines if "trtllm-serve" in x]
        assert serve.startswith("srun -N 4 --ntasks-per-node 8 --mpi pmix trtllm-llmapi-launch")
        assert "--max_batch_size 64" in serve and "--tp_size 32" in serve
        assert yaml.safe_load(files["agg.yml"])["enable_attention_dp"]
    if fmt in ("trtllm", "dynamo"):
        assert bench.startswith("genai-perf profile") and "--concurrency 256" in bench
        assert "--output-tokens-mean 1000 --output-tokens-stddev 500" in bench
    if fmt == "dynamo":
        worker = yaml.safe_load(files["deployment.yaml"])["spec"]["services"]["VllmWorker"]
        assert worker["multinode"] == {"nodeCount": 4}
        assert worker["resources"]["limits"]["gpu"] == "8"
        assert "--max-num-seqs" in worker["extraPodSpec"]["mainContainer"]["args"]
        manifest = yaml.safe_load(files["deployment.yaml"])
        assert _keys(manifest) - set(manifest["spec"]["services"]) <= DYNAMO_KEYS
    assert "nodes each" in files["README.md"] and "HEAD_IP" in files["README.md"]


def test_a_worker_of_one_node_has_no_multi_node_launch(tmp_path):
    """The disaggregated DeepSeek-V3 above: every worker fits its 8-GPU node, so no line
    names a head address, Ray, srun or nodes; the benchmark runs against the router."""
    for fmt in FORMATS:
        files = {p.name: p.read_text() for p in emit(_result(DISAGG, {"tpot_s": 0.01}), fmt,
                                                       tmp_path / fmt)}
        text = files.get("launch.sh", "") + files.get("deployment.yaml", "")
        assert not any(w in text for w in ("HEAD_IP", "ray start", "srun", "--nnodes",
                                           "multinode"))
        assert "8000" in files["bench.sh"] and "--request-rate 8" in files["bench.sh"]

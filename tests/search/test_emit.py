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
    assert "| prefill | 2 | 8 | h200 | 8 | 1 | 1 | 8 |" in readme
    assert "| decode | 1 | 8 | h200 | 1 | 1 | 8 | 8 |" in readme
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
    TensorRT-LLM: decoding_type MTP), the prefill pool does not speculate, SGLang writes
    the EPLB flags, and every flag and key is in the sourced tables."""
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

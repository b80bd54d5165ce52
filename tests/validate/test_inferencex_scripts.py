"""The engine settings of InferenceX's aggregated runs read off its launch scripts
(dse.validate.inferencex_scripts): a script is evaluated as bash expands it, in a
restricted shell that runs nothing but bash's builtins, and the engine's command line is
read off the trace; the silicon converter takes them by run id."""

from __future__ import annotations

import csv

from dse.validate import inferencex_scripts as S
from dse.validate.rows import case
from dse.validate.silicon import convert

from .test_inferencex import HEADER

# A launch script in the style of InferenceX's benchmarks/single_node/*.sh (Apache-2.0):
# settings computed from TP, CONC and ISL in bash, an engine started in the background
# with its log redirected, and commands that would write or delete files if they ran.
SGLANG = r"""#!/usr/bin/env bash
set -euo pipefail
source "$(dirname "$0")/../benchmark_lib.sh"
check_env_vars MODEL TP CONC ISL OSL
hf download "$MODEL"
rm -rf "$HOME/should_survive"
if [[ $TP -eq 8 ]]; then
  if [[ $CONC -ge 16 ]]; then SCHEDULER_RECV_INTERVAL=30; else SCHEDULER_RECV_INTERVAL=10; fi
  MAX_RUNNING_REQUESTS=128
else
  SCHEDULER_RECV_INTERVAL=10
  MAX_RUNNING_REQUESTS=32
fi
echo "written" > written.txt
SERVER_LOG=/tmp/dse_launch_test_server.log
set -x
PYTHONNOUSERSITE=1 python3 -m sglang.launch_server --model-path=$MODEL \
  --tensor-parallel-size=$TP --max-running-requests $MAX_RUNNING_REQUESTS \
  --mem-fraction-static 0.82 --kv-cache-dtype fp8_e4m3 \
  --chunked-prefill-size $(( ISL * 4 )) --scheduler-recv-interval $SCHEDULER_RECV_INTERVAL \
  > $SERVER_LOG 2>&1 &
wait_for_server_ready --port 8888
"""
# TensorRT-LLM's: the KV-cache dtype in an extra-options YAML the script writes with cat
TRT = r"""#!/usr/bin/env bash
cat > config.yml << EOF
kv_cache_config:
    dtype: fp8
    free_gpu_memory_fraction: 0.75
cuda_graph_config:
    max_batch_size: 128
enable_attention_dp: $DP_ATTENTION
EOF
MAX_NUM_TOKENS=$(( (CONC + ISL + 64 + 63) / 64 * 64 ))
MAX_NUM_TOKENS=$(( MAX_NUM_TOKENS > 8192 ? MAX_NUM_TOKENS : 8192 ))
set -x
mpirun -n 1 trtllm-serve $MODEL --max_num_tokens=$MAX_NUM_TOKENS --tp_size=$TP \
  --extra_llm_api_options=config.yml > /workspace/server.log 2>&1 &
"""
ENV = dict(MODEL="deepseek-ai/DeepSeek-R1", TP="8", EP_SIZE="1", DP_ATTENTION="false",
           CONC="64", ISL="1024", OSL="1024")


def test_a_scripts_settings_are_its_bash_expansion(tmp_path):
    """TP 8 at 64 clients: the receive interval 30 and the cap 128 of the TP-8 branch, a
    chunk of 4 x 1,024 tokens, the FP8 KV cache; at 4 clients the interval is 10."""
    got = S.settings(SGLANG, ENV)
    assert (got["engine"], got["status"]) == ("sglang", "ok")
    assert (got["scheduler_recv_interval"], got["max_num_seqs"], got["max_num_tokens"],
            got["kv_dtype"], got["memory_fraction"]) == ("30", "128", "4096", "fp8", "0.82")
    assert S.settings(SGLANG, dict(ENV, CONC="4"))["scheduler_recv_interval"] == "10"
    assert S.settings(SGLANG, dict(ENV, TP="4"))["max_num_seqs"] == "32"


def test_nothing_the_script_names_runs(tmp_path, monkeypatch):
    """The restricted shell writes no file (the redirections are refused), runs no
    external command (rm, hf, python3 are answered by a no-op) and the launch is read
    from the trace alone."""
    keep = tmp_path / "should_survive"
    keep.write_text("x")
    rc, trace = S.evaluate(SGLANG, dict(ENV, HOME=str(tmp_path)))
    assert keep.exists()
    assert "restricted" in trace
    import os
    assert not os.path.exists("/tmp/dse_launch_test_server.log")
    assert not (tmp_path / "written.txt").exists()


def test_trtllm_settings_come_from_its_yaml_and_arithmetic():
    """max_num_tokens = max(8,192, floor((64 + 1,024 + 127) / 64) x 64 = 1,152): 8,192 (at
    ISL 8,192: 8,320); the
    KV-cache dtype and memory fraction from the YAML, not the CUDA-graph batch size."""
    got = S.settings(TRT, ENV)
    assert (got["engine"], got["max_num_tokens"], got["kv_dtype"], got["memory_fraction"],
            got["max_num_seqs"]) == ("trtllm", "8192", "fp8", "0.75", "")
    assert S.settings(TRT, dict(ENV, ISL="8192"))["max_num_tokens"] == "8320"


def test_a_script_without_an_engine_says_so():
    assert S.settings("echo nothing here\nexit 3\n", ENV)["status"] == (
        "no engine launched (exit 3)")


RUN = ("dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg99,db-dump/2026-04-27; config_id=99; "
       "silicon_concurrency=64; measured=2026-03-01T00:00:00.000Z; workflow_run_id=1; "
       "lmsysorg/sglang:v0.5.9,sglang,0.5.9,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,1024,"
       "1024,fp8,fp8,64,8,1,1,8,1,,,,,,,,,,,,,,,900.0,20.0\n")


def test_the_converter_takes_a_runs_settings_by_id(tmp_path):
    """A run the table knows: FP8 KV cache, the budget, the cap, the interval and the
    memory fraction (as memory_reserve 0.18) in its columns, said in its notes, read as
    the knobs of its point."""
    src = tmp_path / "silicon_sample.csv"
    src.write_text(HEADER + RUN)
    table = tmp_path / "launch.csv"
    row = dict(dict.fromkeys(S.COLUMNS, ""), **S.settings(SGLANG, ENV),
               id="dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg99",
               script="benchmarks/single_node/dsr1_fp8_b200.sh", commit="a" * 40,
               commit_date="2026-02-28")
    S.write([row], table)
    out = tmp_path / "measured.csv"
    convert(src, out, "0.12.0", launch=table)
    rows = list(csv.DictReader(out.open(newline="")))
    r = rows[0]
    assert r["precision"] == "fp8 w/a, fp8 kv" and "KV-cache dtype not stated" not in r["notes"]
    assert (r["max_num_tokens"], r["max_num_seqs"], r["scheduler_recv_interval"],
            r["memory_reserve"]) == ("4096", "128", "30", "0.18")
    assert "launch settings from InferenceX's benchmarks/single_node/dsr1_fp8_b200.sh" in r[
        "notes"]
    k = case(r).knobs
    assert (k["kv_bits"], k["max_num_tokens"], k["scheduler_recv_interval"],
            k["memory_reserve"]) == (8.0, 4096.0, 30.0, 0.18)
    # without the table the run keeps what the silicon file states
    convert(src, out, "0.12.0")
    bare = list(csv.DictReader(out.open(newline="")))[0]
    assert bare["precision"] == "fp8 w/a, bf16 kv" and bare["scheduler_recv_interval"] == ""

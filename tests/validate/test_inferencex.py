"""InferenceX's launch layouts (dse.validate.inferencex) and what the silicon converter
takes from them: the worker counts and speculative decoding that aiconfigurator-core's
InferenceX rows leave out."""

from __future__ import annotations

import csv
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from dse.validate import inferencex as ix
from dse.validate.rows import Skip, case
from dse.validate.silicon import convert

ROOT = Path(__file__).resolve().parents[2]

# Shaped as InferenceX's nvidia-master.yaml writes its entries (SemiAnalysisAI/InferenceX,
# Apache-2.0): a disaggregated benchmark with a conc-list per layout, and an aggregated
# one whose concurrencies are a doubling range.
CONFIG = """
dsr1-fp4-gb200-dynamo-trt:
  model-prefix: dsr1
  runner: gb200
  precision: fp4
  framework: dynamo-trt
  disagg: true
  seq-len-configs:
  - isl: 8192
    osl: 1024
    search-space:
    - conc-list: [ 333, 666 ]
      prefill:
        num-worker: 3
        tp: 4
        ep: 4
        dp-attn: true
        additional-settings:
        - "CONFIG_FILE=recipes/trtllm/gb200-fp4/8k1k/stp/ctx3_gen1_dep32_batch16_eplb0_mtp0.yaml"
      decode:
        num-worker: 1
        tp: 32
        ep: 32
        dp-attn: true
    - spec-decoding: "mtp"
      conc-list: [ 666 ]
      prefill: { num-worker: 2, tp: 4, ep: 4, dp-attn: true }
      decode: { num-worker: 1, tp: 16, ep: 16, dp-attn: true }
    - spec-decoding: "mtp"
      conc-list: [ 12 ]
      prefill: { num-worker: 1, tp: 4, ep: 4, dp-attn: true }
      decode: { num-worker: 4, tp: 8, ep: 8, dp-attn: false }
dsr1-fp8-b200-trt:
  model-prefix: dsr1
  runner: b200
  precision: fp8
  framework: trt
  seq-len-configs:
  - isl: 1024
    osl: 1024
    search-space:
    - { tp: 8, ep: 8, dp-attn: true, conc-start: 4, conc-end: 48 }
"""

HEADER = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,"
          "isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,"
          "attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,"
          "prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,"
          "prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,"
          "decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,"
          "silicon_ttft_ms,silicon_tpot_ms\n")


def _disagg_run(conc: int, decode_devices: int, ident: str) -> str:
    """An InferenceX run as aiconfigurator-core 0.12.0 lists them (its 2026-03-25 file):
    no worker counts, attention-DP written as tp, the decode pool's ep copied from the
    prefill pool's."""
    return (f"{ident},source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency="
            f"{conc}; measured=2026-02-01T00:00:00Z,trtllm,,deepseek-ai/DeepSeek-R1,gb200,"
            f"fp4,disagg,8192,1024,nvfp4,nvfp4,,,,,,,,,4,1,1,,4,,,{decode_devices},1,1,,4,"
            "900.0,20.0\n")


def _git(repo: Path, home: Path, *args, date: str) -> None:
    """git in ``repo`` with a fixed author and commit date (no user configuration)."""
    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "HOME": str(home),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


def _table(tmp_path) -> Path:
    rows = [dict(r, first_seen="2026-01-30", last_seen="2026-03-20", first_commit="0" * 40)
            for r in ix.entries(yaml.safe_load(CONFIG))]
    path = tmp_path / "layouts.csv"
    ix.write(rows, path)
    return path


def test_entries_expand_concurrencies_as_inferencex_does():
    """conc-list as written; conc-start 4 .. conc-end 48 doubles and ends at the end
    (4, 8, 16, 32, 48: generate_sweep_configs.py with its default step 2)."""
    rows = ix.entries(yaml.safe_load(CONFIG))
    agg = [r["conc"] for r in rows if r["config_key"] == "dsr1-fp8-b200-trt"]
    assert agg == [4, 8, 16, 32, 48]
    disagg = [(r["conc"], r["spec_decoding"], r["prefill_workers"], r["decode_tp"])
              for r in rows if r["disagg"]]
    assert disagg == [(333, "none", 3, 32), (666, "none", 3, 32), (666, "mtp", 2, 16),
                      (12, "mtp", 1, 8)]
    assert rows[0]["recipe"].endswith("ctx3_gen1_dep32_batch16_eplb0_mtp0.yaml")


def test_an_engine_layout_reads_as_dse_columns():
    """tp 32 with attention DP is one worker of 32 attention ranks (tp 1 x dp 32), experts
    over 32; tp 8 without it is tensor parallel 8 with experts over 8 (moe_tp 1); tp 4 with
    ep 1 keeps the experts tensor-parallel (moe_tp 4)."""
    def pool(tp, ep, dp_attn):
        return ix.dse_layout({"decode_tp": str(tp), "decode_ep": str(ep),
                              "decode_dp_attn": "1" if dp_attn else "0",
                              "decode_workers": "2"}, "decode")
    assert pool(32, 32, True) == dict(tp=1, dp=32, ep=32, moe_tp=1, workers=2)
    assert pool(8, 8, False) == dict(tp=8, dp=1, ep=8, moe_tp=1, workers=2)
    assert pool(4, 1, False) == dict(tp=4, dp=1, ep=1, moe_tp=4, workers=2)


def test_a_run_with_one_layout_takes_it_and_others_say_why_not(tmp_path):
    """Concurrency 333 with 32 decode devices: one layout (3 prefill workers of attention
    DP 4, 1 decode worker of 32, decode batch 16 per rank from the recipe's name): lent,
    and the run reads as a closed loop of 333 clients. Concurrency 666: a non-MTP and an
    MTP layout ran it, with different decode devices; the run states 32, which picks the
    first. Concurrency 12 on 8-device decode workers: InferenceX ran it only with MTP,
    so the layout is lent and the row is not scored (acceptance unknown)."""
    src = tmp_path / "silicon_sample.csv"
    src.write_text(HEADER + _disagg_run(333, 32, "a_c333") + _disagg_run(666, 32, "b_c666")
                   + _disagg_run(12, 8, "c_c12") + _disagg_run(333, 16, "d_c333"))
    out = tmp_path / "measured.csv"
    convert(src, out, "0.12.0", _table(tmp_path))
    rows = {(r["id"], r["metric"]): r for r in csv.DictReader(out.open(newline=""))}
    a = rows["a_c333", "tpot_ms"]
    assert (a["prefill_workers"], a["prefill_tp"], a["prefill_dp"], a["prefill_ep"]) == (
        "3", "1", "4", "4")
    assert (a["decode_workers"], a["decode_tp"], a["decode_dp"], a["decode_ep"],
            a["decode_batch"]) == ("1", "1", "32", "32", "16")
    assert "dsr1-fp4-gb200-dynamo-trt" in a["notes"] and "decode tp 32 x dp 1, ep 4" in a["notes"]
    k = case(a).knobs
    assert (k["concurrency"], k["prefill_workers"], k["decode_dp"], k["decode_ep"]) == (
        333.0, 3.0, 32.0, 32.0)
    assert rows["b_c666", "ttft_ms"]["prefill_workers"] == "3"
    c = rows["c_c12", "tpot_ms"]
    assert (c["decode_workers"], c["decode_tp"]) == ("4", "8")
    skip = case(c)
    assert isinstance(skip, Skip) and skip.status == "unmodelled" and "MTP" in skip.reason
    # 16 decode devices at concurrency 333: InferenceX never ran it; nothing lent
    d = rows["d_c333", "tpot_ms"]
    assert d["prefill_workers"] == "" and "layout from InferenceX" not in d["notes"]
    assert isinstance(case(d), Skip) and case(d).status == "unmodelled"


def test_two_layouts_for_one_run_lend_nothing(tmp_path):
    """The same concurrency, devices and lengths in two layouts that differ in the decode
    workers' attention DP: neither is taken; the note names the configurations."""
    text = CONFIG.replace("conc-list: [ 12 ]", "conc-list: [ 333 ]").replace(
        "decode: { num-worker: 4, tp: 8, ep: 8, dp-attn: false }",
        "decode: { num-worker: 1, tp: 32, ep: 32, dp-attn: false }").replace(
        'spec-decoding: "mtp"\n      conc-list: [ 333 ]', 'conc-list: [ 333 ]')
    rows = [dict(r, first_seen="2026-01-30", last_seen="2026-03-20", first_commit="0" * 40)
            for r in ix.entries(yaml.safe_load(text))]
    table = tmp_path / "layouts.csv"
    ix.write(rows, table)
    src = tmp_path / "silicon_sample.csv"
    src.write_text(HEADER + _disagg_run(333, 32, "a_c333"))
    out = tmp_path / "measured.csv"
    convert(src, out, "0.12.0", table)
    row = next(csv.DictReader(out.open(newline="")))
    assert row["prefill_workers"] == "" and "worker counts not lent: 2 InferenceX" in row["notes"]


def test_a_configuration_committed_after_the_source_file_is_not_a_candidate(tmp_path):
    rows = [dict(r, first_seen="2026-03-26", last_seen="2026-04-01", first_commit="0" * 40)
            for r in ix.entries(yaml.safe_load(CONFIG))]
    table = tmp_path / "layouts.csv"
    ix.write(rows, table)
    run = next(csv.DictReader((HEADER + _disagg_run(333, 32, "a")).splitlines()))
    assert ix.candidates(run, table) == []


def test_build_reads_every_version_of_the_file(tmp_path):
    """Two commits of configs/nvidia-master.yaml: a layout in both is first seen at the
    first and last seen at the second; one dropped by the second keeps its last date."""
    repo = tmp_path / "InferenceX"
    (repo / "configs").mkdir(parents=True)

    def git(*args, date):
        _git(repo, tmp_path, *args, date=date)

    git("init", "-q", date="2026-01-01T00:00:00Z")
    (repo / "configs" / "nvidia-master.yaml").write_text(CONFIG)
    git("add", ".", date="2026-01-10T00:00:00Z")
    git("commit", "-q", "-m", "a", date="2026-01-10T00:00:00Z")
    (repo / "configs" / "nvidia-master.yaml").write_text(
        CONFIG.replace("[ 333, 666 ]", "[ 333 ]"))
    git("commit", "-q", "-am", "b", date="2026-02-10T00:00:00Z")
    rows = ix.build(repo, "2025-12-01", "2026-03-01")
    dates = {(r["conc"], r["spec_decoding"], r["disagg"]): (r["first_seen"], r["last_seen"])
             for r in rows if r["disagg"]}
    assert dates[333, "none", 1] == ("2026-01-10", "2026-02-10")
    assert dates[666, "none", 1] == ("2026-01-10", "2026-01-10")


def test_the_shipped_lent_layouts_agree_with_the_runs_stated_elsewhere():
    """An independent check of the join: InferenceX runs that aiconfigurator-core also
    lists from its own database (the same measurement to every digit: a twin) with the
    worker counts stated there. Every such lent layout must state the same workers,
    tp, attention DP and ep per pool as the twin does (the decode batch may differ: the
    database writes the clients per rank, the recipe the engine's cap)."""
    with (ROOT / "data" / "measured_silicon.csv").open(newline="") as f:
        rows = {r["id"]: r for r in csv.DictReader(f) if r["metric"] == "ttft_ms"}
    fields = [f"{p}_{k}" for p in ("prefill", "decode") for k in ("workers", "tp", "dp", "ep")]
    lent = [r for r in rows.values() if "layout from InferenceX" in r["notes"]]
    checked = 0
    for r in lent:
        for twin in re.findall(r"upstream row (\S+)", r["notes"]):
            t = rows[twin.rstrip(",")]
            if "layout from" in t["notes"] or not t["prefill_workers"]:
                continue
            assert [r[f] for f in fields] == [t[f] for f in fields], (r["id"], t["id"])
            checked += 1
    assert len(lent) >= 500 and checked >= 50


@pytest.mark.parametrize("argv,needle", [
    (["--repo", "/nonexistent"], "not a git clone"),
    (["--repo", str(ROOT), "--recipes", "/nonexistent"], "--recipes /nonexistent: not a git"),
    (["--repo", ".", "--since", "March"], "is not a date")])
def test_the_builder_refuses_bad_input_in_one_line(argv, needle, capsys):
    assert ix.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


SGLANG_RECIPE = """
backend:
  sglang_config:
    prefill:
      tp-size: 8
      kv-cache-dtype: "fp8_e4m3"
      ep-num-redundant-experts: 32
    decode:
      tp-size: 48
      kv-cache-dtype: "fp8_e4m3"
      ep-num-redundant-experts: 32
"""
TRTLLM_RECIPE = """
backend:
  trtllm_config:
    prefill:
      kv_cache_config: { dtype: fp8 }
      max_batch_size: 16
    decode:
      kv_cache_config: { dtype: fp8 }
      max_batch_size: 128
      moe_config:
        load_balancer: { num_slots: 288 }
"""


def _recipes_clone(tmp_path) -> Path:
    """A git clone shaped as NVIDIA/srt-slurm: an SGLang recipe (the shape of its
    recipes/gb200-fp8/1k1k/mid-curve.yaml: 48-rank decode, 32 redundant experts, FP8 KV)
    committed twice, and a TensorRT-LLM one with 288 expert slots."""
    repo = tmp_path / "srt-slurm"
    (repo / "recipes" / "trtllm").mkdir(parents=True)

    def git(*args, date):
        _git(repo, tmp_path, *args, date=date)

    git("init", "-q", date="2026-01-01T00:00:00Z")
    (repo / "recipes" / "mid-curve.yaml").write_text(SGLANG_RECIPE)
    (repo / "recipes" / "trtllm" / "ctx1_gen1_dep32_batch128_eplb288_mtp0.yaml").write_text(
        TRTLLM_RECIPE)
    git("add", ".", date="2026-01-10T00:00:00Z")
    git("commit", "-q", "-m", "a", date="2026-01-10T00:00:00Z")
    (repo / "recipes" / "mid-curve.yaml").write_text(
        SGLANG_RECIPE.replace("ep-num-redundant-experts: 32", "ep-num-redundant-experts: 16"))
    git("commit", "-q", "-am", "b", date="2026-03-10T00:00:00Z")
    return repo


def test_a_recipe_is_read_as_committed_when_its_configuration_first_ran(tmp_path):
    """Read at 2026-02-01 the SGLang recipe is its first version (32 redundant experts);
    at 2026-04-01 its second (16); an override suffix reads the base file; a path the
    clone never had gives nothing."""
    repo = _recipes_clone(tmp_path)
    first = ix.recipe_settings(repo, "recipes/mid-curve.yaml:override_lowlat[0]", "2026-02-01")
    assert (first["decode_kv_dtype"], first["prefill_kv_dtype"]) == ("fp8", "fp8")
    assert (first["prefill_redundant_experts"], first["decode_redundant_experts"]) == (32, 32)
    assert ix.recipe_settings(repo, "recipes/mid-curve.yaml",
                              "2026-04-01")["decode_redundant_experts"] == 16
    trt = ix.recipe_settings(repo, "recipes/trtllm/ctx1_gen1_dep32_batch128_eplb288_mtp0.yaml",
                             "2026-02-01")
    assert (trt["decode_expert_slots"], trt["decode_max_batch"], trt["decode_kv_dtype"]) == (
        288, 128, "fp8")
    assert ix.recipe_settings(repo, "recipes/none.yaml", "2026-02-01") == {}


def test_a_lent_layout_takes_its_recipes_kv_dtype_and_redundant_experts(tmp_path):
    """The 32-device decode layout of the table, its recipe stating FP8 KV in both pools
    and 288 expert slots for DeepSeek-R1's 256 experts: the row reads fp8 KV, 32
    redundant experts, the recipe's batch cap, and drops the note that the KV dtype was
    not stated."""
    repo = _recipes_clone(tmp_path)
    rows = [dict(r, first_seen="2026-01-30", last_seen="2026-03-20", first_commit="0" * 40,
                 recipe="recipes/trtllm/ctx1_gen1_dep32_batch128_eplb288_mtp0.yaml")
            for r in ix.entries(yaml.safe_load(CONFIG))]
    table = tmp_path / "layouts.csv"
    ix.write(ix.with_recipes(rows, repo), table)
    src = tmp_path / "silicon_sample.csv"
    src.write_text(HEADER + _disagg_run(333, 32, "a_c333"))
    out = tmp_path / "measured.csv"
    convert(src, out, "0.12.0", table)
    row = next(csv.DictReader(out.open(newline="")))
    assert row["precision"] == "nvfp4 w/a, fp8 kv"
    assert (row["ep_redundant_experts"], row["decode_batch"]) == ("32", "128")
    assert "KV-cache dtype not stated" not in row["notes"]
    k = case(row).knobs
    assert (k["kv_bits"], k["ep_redundant_experts"]) == (8.0, 32.0)

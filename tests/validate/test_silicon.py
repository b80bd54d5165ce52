"""AIConfigurator's measured serving runs (aiconfigurator-core systems/silicon_sample.csv,
Apache-2.0) in dse's measured schema (dse.validate.silicon), and the shipped conversion
data/measured_silicon.csv."""

from __future__ import annotations

import csv
from pathlib import Path

from dse.validate.rows import case, Case, Skip
from dse.validate.silicon import convert

ROOT = Path(__file__).resolve().parents[2]
# Three upstream rows as aiconfigurator-core 0.12.0 ships them (Apache-2.0): MiniMax-M2.5
# on 16 B300 (attention tp 4 x dp 4, experts over 16 ranks), a disaggregated Kimi-K2.5 on
# GB200 (1 prefill worker of attention-DP 4, 4 decode workers of tp 8 / ep 8), and a
# Llama-3.1-8B run that states no quantization.
UPSTREAM = """\
id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms
minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c512_cfg734,db-dump/2026-04-27; config_id=734; silicon_concurrency=512; measured=2026-04-21T00:00:00.000Z; workflow_run_id=797; vllm/vllm-openai:v0.19.0-cu130,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b300_sxm,fp8,agg,1024,1024,fp8,fp8,128,4,1,4,1,16,,,,,,,,,,,,,,,727.8426075309881,31.74447123107922
kimik2_5_gb200_trtllm_fp4_disagg_1024x1024_c4_cfg759,db-dump/2026-04-27; config_id=759; silicon_concurrency=4; measured=2026-04-18T00:00:00.000Z; workflow_run_id=778; nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.1.0-dev.2,trtllm,1.1.0-dev.2,moonshotai/Kimi-K2.5,gb200,fp4,disagg,1024,1024,nvfp4,nvfp4,,,,,,,1,1,1,1,4,1,4,1,4,8,1,1,1,8,195.51323120103916,5.316830920749418
meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg_1024x128_c8_tp1_epnone_1,source_file=/Users/harrli/projects/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=8,trtllm,1.0.0rc3,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,1024,128,,,8,1,1,,1,1,,,,,,,,,,,,,,,190.9545068625,7.94357745
"""


def _converted(tmp_path) -> list[dict]:
    src = tmp_path / "silicon_sample.csv"
    src.write_text(UPSTREAM)
    out = tmp_path / "measured_silicon.csv"
    assert convert(src, out, "0.12.0") == 3
    with out.open(newline="") as f:
        return list(csv.DictReader(f))


def test_each_run_becomes_a_ttft_and_a_tpot_row_with_its_fields(tmp_path):
    rows = _converted(tmp_path)
    assert [(r["id"][:14], r["metric"]) for r in rows] == [
        ("minimaxm2_5_b3", "ttft_ms"), ("minimaxm2_5_b3", "tpot_ms"),
        ("kimik2_5_gb200", "ttft_ms"), ("kimik2_5_gb200", "tpot_ms"),
        ("meta_llama_lla", "ttft_ms"), ("meta_llama_lla", "tpot_ms")]
    mm, _, kimi, _, llama, _ = rows
    assert mm["source"].startswith("aiconfigurator-core 0.12.0")
    assert float(mm["value"]) == 727.8426075309881
    # attention tp 4 x dp 4 on 16 devices, experts over 16 ranks; 128 per DP rank, 512
    # clients in all
    assert (mm["tp"], mm["dp"], mm["ep"], mm["moe_tp"], mm["n_devices"]) == (
        "4", "4", "16", "1", "16")
    assert (mm["concurrency"], mm["max_num_seqs"]) == ("512", "128")
    assert (mm["hardware"], mm["framework"], mm["framework_version"]) == ("b300", "vllm", "0.19.0")
    assert mm["precision"] == "fp8 w/a, bf16 kv"
    assert kimi["serving"] == "disagg" and kimi["precision"] == "nvfp4 w/a, bf16 kv"
    assert (kimi["prefill_workers"], kimi["prefill_dp"], kimi["prefill_ep"]) == ("1", "4", "4")
    assert (kimi["decode_workers"], kimi["decode_tp"], kimi["decode_dp"], kimi["decode_ep"]) == (
        "4", "8", "1", "8")
    assert llama["precision"] == "bf16, bf16 kv"
    assert "quantization not stated" in llama["notes"]


def test_converted_rows_read_as_load_points(tmp_path):
    """The aggregated MiniMax row is a closed loop of 512 clients over 4 attention-DP
    ranks (128 each, the cap), FP8; the Llama row's MoE columns (1, 1) say nothing of a
    dense model and are dropped; the disaggregated closed loop of 4 clients has one
    prefill worker (attention DP 4, experts over 4) and four decode workers (tp 8, ep 8)."""
    mm, _, kimi, _, llama, _ = (case(r) for r in _converted(tmp_path))
    assert isinstance(mm, Case) and mm.model.name == "minimax-m2.5"
    k = mm.knobs
    assert (k["tp"], k["dp"], k["ep"], k["concurrency"], k["max_num_seqs"]) == (4, 4, 16, 512.0,
                                                                              128.0)
    assert (k["weight_bits"], k["act_bits"], k["kv_bits"]) == (8.0, 8.0, 16.0)
    assert mm.framework == "vllm" and mm.n_devices == 16
    assert isinstance(llama, Case) and llama.knobs["tp"] == 1
    assert isinstance(kimi, Case) and kimi.model.name == "kimi-k2.5"
    k = kimi.knobs
    assert (k["serving"], k["concurrency"], k["prefill_workers"], k["decode_workers"]) == (
        1.0, 4.0, 1.0, 4.0)
    assert (k["prefill_dp"], k["prefill_ep"], k["decode_tp"], k["decode_ep"]) == (
        4.0, 4.0, 8.0, 8.0)


def test_inferencex_runs_take_their_benchmarks_lengths_and_requests(tmp_path):
    """The MiniMax and Kimi runs come from InferenceX's database: its benchmark clients
    draw lengths uniformly from int(0.8 x 1,024) = 819 to 1,024 tokens (mean 921.5, SD
    sqrt((206^2 - 1) / 12) = 59.46, a CV of 0.0645) and run 10 x concurrency requests
    (5,120 and 40); the Llama run (aiconfigurator's own gap analysis) states neither and
    keeps its fixed lengths and the steady state. Read as load points, the InferenceX
    run's knobs carry them."""
    mm, _, kimi, _, llama, _ = rows = _converted(tmp_path)
    assert (mm["input_len"], mm["output_len"]) == ("921.5", "921.5")
    assert float(mm["input_len_cv"]) == float(mm["output_len_cv"]) == 0.0645
    assert (mm["num_prompts"], kimi["num_prompts"]) == ("5120", "40")
    assert "--random-range-ratio 0.8" in mm["notes"] and "10 x concurrency" in mm["notes"]
    assert (llama["input_len"], llama["output_len"], llama["input_len_cv"],
            llama["num_prompts"]) == ("1024", "128", "", "")
    k = case(rows[0]).knobs
    assert (k["input_len"], k["input_len_cv"], k["num_prompts"]) == (921.5, 0.0645, 5120.0)


def test_the_shipped_conversion_is_whole():
    """data/measured_silicon.csv: the 5,221 runs of aiconfigurator-core 0.12.0, two rows
    each, every id with its TTFT and its TPOT, positive values."""
    with (ROOT / "data" / "measured_silicon.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 5221
    pairs = {(r["id"], r["metric"]) for r in rows}
    assert len(pairs) == len(rows)
    assert {r["metric"] for r in rows} == {"ttft_ms", "tpot_ms"}
    assert {r["kind"] for r in rows} == {"serving_latency"}
    assert all(r["source"].startswith("aiconfigurator-core 0.12.0") for r in rows)
    assert all(float(r["value"]) > 0 for r in rows)
    assert sum(r["serving"] == "disagg" for r in rows) == 2 * 1602


def test_an_upstream_file_without_a_column_is_refused_in_one_line(tmp_path, capsys):
    """A newer release that renames a column: exit code 2, one line naming the file and
    the column, and no output file."""
    from dse.validate.silicon import main
    src = tmp_path / "silicon_sample.csv"
    src.write_text(UPSTREAM.replace("silicon_concurrency", "concurrency").replace(
        "silicon_ttft_ms", "ttft_ms", 1))
    out = tmp_path / "out.csv"
    assert main(["--csv", str(src), "--version", "9.9", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(src) in err[0] and "silicon_ttft_ms: column missing" in err[0]
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_rows_of_a_framework_without_a_fit_run_under_the_fit_a_study_gives_it(tmp_path):
    """The shipped calibration has no SGLang fit of its own (its static parameters are
    vLLM's); a study runs SGLang under vLLM's (dse.catalogue.frameworks), and so does
    validate: a static row named SGLang is predicted exactly as the same row named vLLM
    (once it ran at the fit's starting point). Each engine's matmuls run on its own
    measured kernels (dse.catalogue.kernels), so the check takes the calibration without
    them; with them, the two differ by SGLang's and vLLM's GEMM tables."""
    from dse.validate import default_calibration, validate
    from dse.validate.rows import COLUMNS, LOAD_COLUMNS
    from dse.catalogue.frameworks import fit_of as calibration_fit

    from ..helpers import write_csv

    assert calibration_fit("sglang", ("vllm", "generic")) == "vllm"
    assert calibration_fit("tensorrt-llm", ("generic",)) == "generic"
    assert calibration_fit("megatron", ("vllm",)) is None
    row = dict(dict.fromkeys(COLUMNS + LOAD_COLUMNS, ""), kind="serving_throughput",
               source="test", model="meta-llama/Llama-3.1-8B-Instruct", hardware="h100-sxm",
               precision="fp8", input_len="1024", output_len="1024", batch="64",
               metric="output_tokens_per_s", value="5000")
    rows = [dict(row, id=f"t-{fw}", framework=fw) for fw in ("sglang", "vllm")]
    data = write_csv(tmp_path / "rows.csv", COLUMNS + LOAD_COLUMNS, rows)
    text = default_calibration().read_text()
    assert 'kernels = "' in text
    plain = tmp_path / "cal.toml"
    plain.write_text("\n".join(line for line in text.splitlines()
                               if not line.startswith("kernels = ")) + "\n")
    sglang, vllm = validate(data, calibration=plain).predictions["calibrated"]
    assert sglang == vllm
    sglang, vllm = validate(data).predictions["calibrated"]
    assert sglang != vllm


def test_an_unknown_quantization_mode_is_refused_in_one_line(tmp_path, capsys):
    """A quantization mode a newer release adds: exit code 2, one line naming the file,
    the row and the mode, and no output file."""
    from dse.validate.silicon import main
    src = tmp_path / "silicon_sample.csv"
    src.write_text(UPSTREAM.replace(",fp8,fp8,128,4,", ",mxfp8,mxfp8,128,4,"))
    out = tmp_path / "out.csv"
    assert main(["--csv", str(src), "--version", "9.9", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(src) in err[0] and "mxfp8" in err[0]
    assert "minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c512_cfg734" in err[0]
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_an_unknown_system_is_kept_and_scored_as_unknown_hardware(tmp_path):
    """A newer release may measure a system dse has no card for: the converter keeps
    its upstream name, and validation gives those rows the status that says so."""
    src = tmp_path / "silicon_sample.csv"
    src.write_text(UPSTREAM.replace(",h100_sxm,", ",x9000_sxm,"))
    out = tmp_path / "measured_silicon.csv"
    assert convert(src, out, "0.12.0") == 3
    with out.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["hardware"] == "x9000_sxm"]
    assert len(rows) == 2  # its TTFT and its TPOT
    skipped = [case(r) for r in rows]
    assert all(isinstance(s, Skip) and s.status == "unknown_hardware" for s in skipped)
    assert all("x9000_sxm" in s.reason for s in skipped)


def test_twins_are_named_and_an_id_that_contradicts_its_fields_is_an_anomaly(tmp_path):
    """The same DeepSeek-R1 run on 8 H200 as aiconfigurator-core 0.12.0 lists it twice
    (rows 1242 of its 2026-03-25 file and 941 of its 2026-04-06 file: TTFT and TPOT
    equal to every digit). The first states the worker its id names (``tp8_0_ep8_0``:
    attention-DP 8 x tp 1 = 8 devices); the second names ``tp8_ep8`` but its fields put
    64 devices in the worker (attention-DP 64): an ANOMALY, read and reported but not
    scored. Each names the other as its twin."""
    head = UPSTREAM.splitlines()[0]
    same = ("trtllm,1.1.0rc2.post2,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,agg,8192,1024,fp8,fp8,"
            "{batch},1,1,{dp},{moe_tp},8,,,,,,,,,,,,,,,6421.963939832494,39.754702652637185")
    src = tmp_path / "silicon_sample.csv"
    src.write_text("\n".join([
        head,
        "2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_agg_8192x1024_c64_tp8_0_ep8_0_1242,"
        "source_file=2026-03-25.csv; silicon_concurrency=64,"
        + same.format(batch=8, dp=8, moe_tp=1),
        "2026_04_06_deepseek_r1_h200_sxm_trtllm_fp8_agg_8192x1024_c64_tp8_ep8_941,"
        "source_file=2026-04-06.csv; silicon_concurrency=64,"
        + same.format(batch=1, dp=64, moe_tp=8)]) + "\n")
    out = tmp_path / "measured_silicon.csv"
    assert convert(src, out, "0.12.0") == 2
    with out.open(newline="") as f:
        good, _, bad, _ = list(csv.DictReader(f))
    assert "the same measurement as upstream row 2026_04_06_deepseek_r1" in good["notes"]
    assert "the same measurement as upstream row 2026_03_25_deepseek_r1" in bad["notes"]
    assert "ANOMALY" not in good["notes"]
    assert "ANOMALY: the id names a tp8 worker, the fields one of 64 devices" in bad["notes"]
    first, second = case(good), case(bad)
    assert isinstance(first, Case) and not first.flag
    assert isinstance(second, Case) and second.flag.startswith("source anomaly: the id names")


# Two runs of one Dynamo deployment as aiconfigurator-core 0.12.0 ships them (Apache-2.0):
# Qwen3-32B on GB200, TensorRT-LLM, tp 2; 1 client with batch 1, 8 clients with batch 4.
DYNAMO = """\
id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms
qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_2000x500_c1_tp2_epnone_2,source_file=/Users/harrli/projects/aic-auto-gap-analysis/data/gb200/trtllm/1.3.0rc1/Qwen_Qwen3-32B.csv; gtl_task_id=dynamo_trtllm_agg-20260323-001201-060256; silicon_concurrency=1; measured=2026-03-23; image=nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.9.0; dynamo_version=0.9.0,trtllm,1.3.0rc1,Qwen/Qwen3-32B,gb200,,agg,2000,500,,,1,2,1,0,0,0,,,,,,,,,,,,,,,102.75674709999998,8.069687527755512
qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_2000x500_c8_tp2_epnone_4,source_file=/Users/harrli/projects/aic-auto-gap-analysis/data/gb200/trtllm/1.3.0rc1/Qwen_Qwen3-32B.csv; gtl_task_id=dynamo_trtllm_agg-20260323-001201-060256; silicon_concurrency=8; measured=2026-03-23; image=nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.9.0; dynamo_version=0.9.0,trtllm,1.3.0rc1,Qwen/Qwen3-32B,gb200,,agg,2000,500,,,4,2,1,0,0,0,,,,,,,,,,,,,,,533.97033451875,27.639192036335167
"""


def test_a_concurrency_past_the_workers_batch_is_an_anomaly(tmp_path):
    """batch_size is one aggregated worker's: 8 clients at batch 4 (tp 2, attention-DP
    1) state a worker count neither reading fits (one worker capped at 4 would make 4
    clients wait out whole requests, TTFT about 4 s against 0.53 s measured; two
    workers of 4 would decode at about the 1-client run's 8 ms, against 27.6 ms): the
    row is marked, kept as stated, and not scored; 1 client at batch 1 is read as it
    is."""
    src = tmp_path / "silicon_sample.csv"
    src.write_text(DYNAMO)
    out = tmp_path / "measured_silicon.csv"
    assert convert(src, out, "0.12.0") == 2
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    one, eight = rows[0], rows[2]
    assert (one["concurrency"], one["max_num_seqs"]) == ("1", "1")
    assert "ANOMALY" not in one["notes"]
    assert (eight["concurrency"], eight["max_num_seqs"], eight["n_devices"]) == ("8", "4", "2")
    assert "ANOMALY: silicon_concurrency 8 is 2 x the worker's batch 4" in eight["notes"]
    kinds = [case(r) for r in rows]
    assert isinstance(kinds[0], Case) and not kinds[0].flag
    assert isinstance(kinds[2], Case) and kinds[2].flag.startswith("source anomaly")

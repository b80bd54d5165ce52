"""Bad input: one line naming file and key, exit code 2, no traceback, nothing written."""

import subprocess
import sys

import pytest

from dse.cli import main

GOOD = """[study]
name = "bad"
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
batch = [1, 8]
[output]
path = "{out}"
"""

TRAIN = """[study]
name = "bad"
mode = "training"
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
tp = [1, 2]
zero_stage = 1
[output]
path = "{out}"
"""

CASES = {
    "malformed_toml": (GOOD.replace("[axes]", "[axes"), "not valid TOML"),
    "unknown_section": (GOOD + "[axis]\ntp = 2\n", "[axis]"),
    "unknown_key": (GOOD.replace("batch =", "bacth ="), "axes.bacth"),
    "unknown_model": (GOOD.replace('"llama-2-7b"', '"llama-9-7b"'), "axes.model"),
    "unknown_hardware": (GOOD.replace('"h100-sxm"', '"h900"'), "axes.hardware"),
    "tp_not_dividing_heads": (GOOD.replace("batch =", "tp = 3\nbatch ="), "axes.tp"),
    "negative_bandwidth": (GOOD.replace("batch =", "hbm_bw_scale = -1.0\nbatch ="),
                           "axes.hbm_bw_scale"),
    "zero_batch": (GOOD.replace("[1, 8]", "[0, 8]"), "axes.batch[0]"),
    "fractional_batch": (GOOD.replace("[1, 8]", "1.5"), "axes.batch"),
    # issue 36 row 3: past 2^53 - 1 no float holds a whole number exactly (1e300 became a
    # 301-digit int and an xarray traceback)
    "huge_batch_float": (GOOD.replace("[1, 8]", "1e300"), "axes.batch"),
    "huge_batch_int": (GOOD.replace("[1, 8]", "99999999999999999999"), "axes.batch"),
    "huge_batch_range": (GOOD.replace("[1, 8]", "{ start = 1, stop = 1e300, factor = 10 }"),
                         "axes.batch.stop"),
    "empty_axis": (GOOD.replace("[1, 8]", "[]"), "axes.batch"),
    "duplicate_values": (GOOD.replace("[1, 8]", "[8, 8]"), "axes.batch"),
    "bad_range": (GOOD.replace("[1, 8]", "{ start = 8, stop = 1, step = 1 }"), "axes.batch"),
    "range_without_step": (GOOD.replace("[1, 8]", "{ start = 1, stop = 8 }"), "axes.batch"),
    "bad_mode": (GOOD.replace('name = "bad"', 'name = "bad"\nmode = "serving"'), "study.mode"),
    "efficiency_above_one": (GOOD.replace("batch =", "flops_efficiency = 1.5\nbatch ="),
                             "axes.flops_efficiency"),
    "act_bits_not_a_width": (GOOD.replace("batch =", "act_bits = 12\nbatch ="),
                             "axes.act_bits"),
    "bad_output_extension": (GOOD.replace("{out}", "{out}.csv"), "output.path"),
    "missing_model": (GOOD.replace('model = "llama-2-7b"\n', ""), "axes.model"),
    "wrong_type": (GOOD.replace("[1, 8]", '"eight"'), "axes.batch"),
    "pp_beyond_layers": (GOOD.replace("batch =", "pp = 64\nbatch ="), "axes.pp"),
    "missing_hf_config": (GOOD.replace('"llama-2-7b"', '"nowhere/config.json"'), "axes.model"),
    "unknown_output_variable": (GOOD.replace('path =', 'variables = ["ttft"]\npath ='),
                                "output.variables"),
    # training keys
    "training_key_in_inference": (GOOD.replace("batch =", "zero_stage = 1\nbatch ="),
                                  "axes.zero_stage"),
    "bad_recompute": (TRAIN.replace("zero_stage = 1", 'recompute = "partial"'), "axes.recompute"),
    "bad_zero_stage": (TRAIN.replace("zero_stage = 1", "zero_stage = 4"), "axes.zero_stage"),
    "unknown_optimizer": (TRAIN.replace("zero_stage = 1", 'optimizer = "adagrad"'),
                          "axes.optimizer"),
    "negative_optimizer_bytes": (TRAIN.replace("zero_stage = 1", "optimizer = -2"),
                                 "axes.optimizer"),
    "inference_key_in_training": (TRAIN.replace("zero_stage = 1", "batch = 8"), "axes.batch"),
    "dp_with_num_devices": (GOOD.replace("batch =", "dp = 2\nnum_devices = 8\nbatch ="),
                            "axes.dp"),
    "dp_with_num_devices_training": (TRAIN.replace("zero_stage = 1", "dp = [1, 2]\n"
                                                   "num_devices = [0, 16]"), "axes.dp"),
    "ep_splits_no_moe_experts": (GOOD.replace('"llama-2-7b"', '["llama-2-7b", "mixtral-8x7b"]')
                                 .replace("batch =", "ep = 3\nbatch ="), "axes.ep"),
    # analysis sections are checked when the study loads, whichever verb runs it
    "search_unknown_key": (GOOD + '[search]\nobjective = "ttft_s"\nn_trails = 5\n',
                           "search.n_trails"),
    "search_unknown_objective": (GOOD + '[search]\nobjective = "tok_s"\n', "search.objective"),
    "search_bad_constraint": (GOOD + '[search]\nobjective = "ttft_s"\nconstraints = '
                              '["ttft_s << 2"]\n', "search.constraints"),
    "search_inner_not_an_axis": (GOOD + '[search]\nobjective = "ttft_s"\nmode = "hybrid"\n'
                                 'inner = ["tp"]\n', "search.inner"),
    "sensitivity_unknown_key": (GOOD + "[sensitivity]\ndelta = 0.1\nmetricz = []\n",
                                "sensitivity.metricz"),
    "sensitivity_bad_delta": (GOOD + "[sensitivity]\ndelta = 2\n", "sensitivity.delta"),
    "sensitivity_bad_goal": (GOOD + '[sensitivity]\ninverse = [{ param = "hbm_bw", '
                             'goal = "tpot_s <= fast" }]\n', "sensitivity.inverse[0].goal"),
    "reduce_unknown_key": (GOOD.replace("[output]", "[output.reduce]\nbyy = []\n[output]"),
                           "output.reduce.byy"),
    # serving under load
    "both_loads": (GOOD.replace("batch = [1, 8]", "concurrency = 8\nrequest_rate = [1, 2]"),
                   "axes.request_rate"),
    "negative_rate": (GOOD.replace("batch = [1, 8]", "request_rate = [-1, 2]"),
                      "axes.request_rate[0]"),
    "negative_concurrency": (GOOD.replace("batch = [1, 8]", "concurrency = -4"),
                             "axes.concurrency"),
    "negative_cv": (GOOD.replace("batch = [1, 8]", "request_rate = 2\ninput_len_cv = -0.5"),
                    "axes.input_len_cv"),
    "zero_arrival_cv": (GOOD.replace("batch = [1, 8]", "request_rate = 2\narrival_cv = 0"),
                        "axes.arrival_cv"),
    "prefix_hit_of_one": (GOOD.replace("batch = [1, 8]", "request_rate = 2\n"
                                       "prefix_cache_hit = 1.0"), "axes.prefix_cache_hit"),
    "unknown_framework": (GOOD.replace("batch = [1, 8]", 'request_rate = 2\n'
                                       'framework = ["vllm", "ollama"]'), "axes.framework[1]"),
    "framework_twice": (GOOD.replace('name = "bad"', 'name = "bad"\nframework = "vllm"')
                        .replace("batch = [1, 8]", 'framework = "sglang"'), "axes.framework"),
    "batch_under_load": (GOOD.replace("batch = [1, 8]", "batch = [1, 8]\nrequest_rate = 2"),
                         "axes.batch"),
    "speculation_under_load": (GOOD.replace("batch = [1, 8]", 'request_rate = 2\n'
                                            'draft_model = "llama-3.2-1b"\ndraft_len = 4'),
                               "axes.draft_len"),
    "percentiles_of_nothing": (GOOD.replace('path =', 'variables = ["ttft_p99_s"]\npath ='),
                               "output.variables"),
    "percentile_constraint_of_nothing": (GOOD + '[search]\nobjective = "throughput_tok_s"\n'
                                         'constraints = ["ttft_p99_s <= 2"]\n',
                                         "search.constraints"),
    "slo_without_load": (GOOD.replace("batch = [1, 8]", "ttft_slo_s = 0.5"), "axes.ttft_slo_s"),
    # disaggregated serving
    "disagg_keys_with_agg": (GOOD.replace("batch = [1, 8]", 'request_rate = 2\n'
                                          'serving = "agg"\nprefill_workers = [1, 2]'),
                             "axes.prefill_workers"),
    "disagg_keys_without_serving": (GOOD.replace("batch = [1, 8]", "request_rate = 2\n"
                                                 "decode_tp = 2"), "axes.decode_tp"),
    "unknown_serving": (GOOD.replace("batch = [1, 8]", 'request_rate = 2\nserving = "split"'),
                        "axes.serving"),
    "zero_workers": (GOOD.replace("batch = [1, 8]", 'request_rate = 2\nserving = "disagg"\n'
                                  "decode_workers = 0"), "axes.decode_workers"),
    "pool_layout_contradicts": (GOOD.replace("batch = [1, 8]", 'request_rate = 2\n'
                                             'serving = "disagg"\ndecode_tp = 2\ndecode_dp = 2\n'
                                             "decode_ep = 2\ndecode_moe_tp = 4"),
                                "axes.decode_moe_tp"),
    "disagg_without_load": (GOOD.replace("batch = [1, 8]", 'serving = "disagg"'),
                            "axes.serving"),
    # speculative decoding under a load (issue 34): more tokens accepted per step than
    # drafted, drafts without a load, an acceptance below one token
    "spec_acceptance_past_drafts": (GOOD.replace("batch = [1, 8]", "concurrency = 8\n"
                                                 "spec_tokens = [1, 3]\n"
                                                 "spec_acceptance = 2.5"),
                                    "axes.spec_acceptance"),
    # a benchmark run's requests (num_prompts): without clients, fewer than the clients,
    # beside points with no load
    "num_prompts_without_clients": (GOOD.replace("batch = [1, 8]", "request_rate = 4\n"
                                                 "num_prompts = 100"), "axes.num_prompts"),
    "num_prompts_fewer_than_clients": (GOOD.replace("batch = [1, 8]", "concurrency = [8, 64]\n"
                                                    "num_prompts = 32"), "axes.num_prompts"),
    "num_prompts_beside_static_points": (GOOD.replace("batch = [1, 8]", "concurrency = [0, 8]"
                                                      "\nnum_prompts = 80"), "axes.num_prompts"),
    "spec_tokens_without_load": (GOOD.replace("batch = [1, 8]", "spec_tokens = 1"),
                                 "axes.spec_tokens"),
    "spec_tokens_beside_static_points": (GOOD.replace("batch = [1, 8]", "concurrency = [0, 8]"
                                                      "\nspec_tokens = 1"),
                                         "axes.spec_tokens"),
    "spec_acceptance_below_one": (GOOD.replace("batch = [1, 8]", "concurrency = 8\n"
                                               "spec_tokens = 1\nspec_acceptance = 0.5"),
                                  "axes.spec_acceptance"),
    "disagg_closed_loop_without_load": (GOOD.replace("batch = [1, 8]", 'serving = "disagg"\n'
                                                     "concurrency = [0, 8]"),
                                        "axes.concurrency"),
    "disagg_output_of_nothing": (GOOD.replace("batch = [1, 8]", "request_rate = 2").replace(
        "path =", 'variables = ["kv_transfer_s"]\npath ='), "output.variables"),
    "unknown_pool_hardware": (GOOD.replace("batch = [1, 8]", 'request_rate = 2\n'
                                           'serving = "disagg"\nprefill_hardware = "h900"'),
                              "axes.prefill_hardware"),
    # agentic sessions (issue 39): turns < 1, a tier without bandwidth, session keys with a
    # static batch, two session loads, a request load beside sessions, an unknown router
    "turns_below_one": (GOOD.replace("batch = [1, 8]", "sessions = 8\nturns = 0"), "axes.turns"),
    "dram_tier_without_bandwidth": (GOOD.replace("batch = [1, 8]", "sessions = 8\nturns = 4\n"
                                                 "kv_dram_bytes = 1e11"),
                                    "axes.kv_dram_bw_bytes_per_s"),
    "ssd_tier_without_bandwidth": (GOOD.replace("batch = [1, 8]", "session_rate = 1\n"
                                                "kv_ssd_bytes = [0, 1e12]"),
                                   "axes.kv_ssd_bw_bytes_per_s"),
    "session_keys_with_a_static_batch": (GOOD.replace("batch = [1, 8]", "turns = 8\n"
                                                      "think_time_s = 2"), "axes.turns"),
    "sessions_beside_static_points": (GOOD.replace("batch = [1, 8]", "sessions = [0, 8]\n"
                                                   "turns = 4"), "axes.sessions"),
    "two_session_loads": (GOOD.replace("batch = [1, 8]", "sessions = 8\nsession_rate = 1"),
                          "axes.session_rate"),
    "request_load_beside_sessions": (GOOD.replace("batch = [1, 8]", "sessions = 8\n"
                                                  "concurrency = 8"), "axes.concurrency"),
    "batch_beside_sessions": (GOOD.replace("batch = [1, 8]", "sessions = 8\nbatch = 4"),
                              "axes.batch"),
    "unknown_router": (GOOD.replace("batch = [1, 8]", 'sessions = 8\nrouting = "round-robin"'),
                       "axes.routing"),
    "tier_with_offload_none": (GOOD.replace("batch = [1, 8]", 'sessions = 8\nkv_dram_bytes = '
                                            '1e11\nkv_dram_bw_bytes_per_s = 5e10\n'
                                            'kv_offload = "none"'), "axes.kv_offload"),
    "session_output_without_sessions": (GOOD.replace("batch = [1, 8]", "concurrency = 8").replace(
        "path =", 'variables = ["prefix_hit_rate"]\npath ='), "output.variables"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_study_input(case, tmp_path, capsys):
    text, key = CASES[case]
    out = tmp_path / "result.nc"
    study = tmp_path / "study.toml"
    study.write_text(text.replace("{out}", str(out)))
    assert main(["sweep", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("dse: error: ") and str(study) in err and key in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == [study]


def test_bad_hardware_file(tmp_path, capsys):
    """A custom hardware file with a negative bandwidth names that file and key."""
    chip = tmp_path / "chip.toml"
    chip.write_text('name = "chip"\nmemory_gib = 80\nhbm_bw_gb_per_s = -3000\n'
                    'bf16_tflops = 1000\ndevices_per_node = 1\ninter_node_bw_gb_per_s = 50\n')
    study = tmp_path / "study.toml"
    study.write_text(GOOD.replace('"h100-sxm"', '"chip.toml"').replace("{out}",
                                                                      str(tmp_path / "o.nc")))
    assert main(["sweep", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(chip) in err and "hbm_bw_gb_per_s" in err and "-3000" in err


def test_missing_study_file(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.toml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_bad_input_from_a_real_process(tmp_path):
    """The installed entry point: exit status 2 and one stderr line, no traceback."""
    study = tmp_path / "study.toml"
    study.write_text(CASES["unknown_model"][0].replace("{out}", str(tmp_path / "o.nc")))
    proc = subprocess.run([sys.executable, "-m", "dse", "sweep", str(study)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "llama-9-7b" in proc.stderr and "did you mean" in proc.stderr


def test_usecase_conflicts_with_explicit_lengths(tmp_path, capsys):
    from dse.cli import main

    study = tmp_path / "s.toml"
    study.write_text('[axes]\nmodel = "llama-2-7b"\nhardware = "h100-sxm"\n'
                     'usecase = "chat"\ninput_len = 100\n')
    assert main(["sweep", str(study)]) == 2
    assert "axes.input_len" in capsys.readouterr().err


def test_an_endless_or_foreign_encoded_study_is_refused_and_a_bom_read(tmp_path, capsys):
    # issue 36 row 1: a study that is a symlink to /dev/zero was read until the kernel's
    # OOM killer stopped it; now reading stops at the input limit (16 MiB)
    endless = tmp_path / "zero.toml"
    endless.symlink_to("/dev/zero")
    assert main(["sweep", str(endless), "-o", str(tmp_path / "o.nc")]) == 2
    err = capsys.readouterr().err
    assert "zero.toml: larger than 16 MiB" in err and err.count("\n") == 1
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'[study]\nname = "caf\xe9"\n')
    assert main(["sweep", str(latin), "-o", str(tmp_path / "o.nc")]) == 2
    err = capsys.readouterr().err
    assert "latin.toml: encoding: byte 0xe9 on line 2 is not UTF-8" in err
    # an editor's byte-order mark is not TOML, but it is UTF-8: read as the text after it
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + GOOD.format(out=tmp_path / "bom.nc").encode())
    assert main(["sweep", str(bom), "-q"]) == 0
    assert (tmp_path / "bom.nc").exists() and not (tmp_path / "o.nc").exists()


def test_a_csv_past_the_row_limit_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    # issue 36 row 8: a 1e6-row CSV ran for minutes without a word
    from dse.validate import rows

    from ..conftest import ROOT

    monkeypatch.setattr(rows, "MAX_ROWS", 2)
    head = b"".join((ROOT / "data" / "measured_public.csv").read_bytes().splitlines(True)[:4])
    big = tmp_path / "big.csv"
    big.write_bytes(head)
    assert main(["validate", str(big), "-o", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert "big.csv: rows: more than 2 rows" in err and err.count("\n") == 1
    assert not (tmp_path / "v").exists()

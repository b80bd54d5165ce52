"""Sensitivities of agentic sessions (issue 39). A closed loop's turn rate is found by
bisection, which has no derivative; its elasticities are central finite differences over
+-delta, stated in the Dataset's method. They are checked here against a plain sweep of
the same study with the device's bandwidth scaled by hand (hbm_bw_scale 0.9 and 1.1: the
same difference taken outside dse.sensitivity), and must be finite: before, the load
model's NaN tangents left them n/a, and cost per session came out 0."""

from __future__ import annotations

import numpy as np

import dse

STUDY = """[study]
name = "sessions-sensitivity"
calibration = "none"  # (a calibrated study analyses its plain-roofline twin too)
[axes]
model = "llama-3.1-8b"
hardware = "h100-sxm"
framework = "vllm"
sessions = 24
turns = 10
turn_input_len = 1500
output_len = 200
shared_prefix_len = 2000
think_time_s = 2.0
kv_dram_bytes = 100e9
kv_dram_bw_bytes_per_s = 55e9
kv_dram_usd_per_gb_h = 0.01
[sensitivity]
metrics = ["ttft_s", "tpot_s", "session_s", "cost_per_session_usd"]
params = ["hbm_bw"]
delta = 0.1
"""
METRICS = ("ttft_s", "tpot_s", "session_s", "cost_per_session_usd")


def test_a_closed_session_loop_has_the_elasticities_of_its_re_evaluations():
    ds = dse.sensitivity(dse.parse_study(STUDY))
    assert "closed loops of agentic sessions: central finite difference" in ds.attrs["method"]
    swept = dse.sweep(dse.parse_study(STUDY.replace(
        "think_time_s = 2.0", "think_time_s = 2.0\nhbm_bw_scale = [0.9, 1.1]").split(
        "[sensitivity]")[0]))
    for m in METRICS:
        got = float(ds[m].sel(hw_param="hbm_bw").squeeze())
        lo, hi = (float(v) for v in swept[m].values.ravel())
        by_hand = (np.log(hi) - np.log(lo)) / (np.log(1.1) - np.log(0.9))
        assert np.isfinite(got), m
        assert abs(got - by_hand) <= 1e-3 * max(abs(by_hand), 1e-3), (m, got, by_hand)
    # a faster memory decodes faster: TPOT and the session shorter, each session cheaper
    assert float(ds["tpot_s"].sel(hw_param="hbm_bw").squeeze()) < -0.3
    assert float(ds["cost_per_session_usd"].sel(hw_param="hbm_bw").squeeze()) < 0.0

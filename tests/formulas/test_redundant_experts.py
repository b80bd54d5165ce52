"""Redundant experts (EPLB, ``ep_redundant_experts``): DeepSeek-V3's 256 routed experts
with R copies over ep ranks hold (256 + R) / ep experts per device. By hand from the
card (models/deepseek-v3.toml: 58 MoE layers of 256 experts, 3 x 7168 x 2048 weights
each): 72 and 48 ranks divide no 256, and with 32 copies they hold 4 and 6."""

from __future__ import annotations

import pytest

from dse.run.sweep import sweep
from dse.schema.outputs import REASON_BITS
from dse.study import parse_study

EXPERT = 3 * 7168 * 2048  # one routed expert's gate, up and down projections
MOE_LAYERS = 58

STUDY = """
[study]
name = "eplb"
dtype = "float64"
calibration = "none"
[axes]
model = "deepseek-v3"
hardware = "h200"
weight_bits = 8
dp = {dp}
ep = {ep}
ep_redundant_experts = [0, 32]
batch = 64
input_len = 2000
output_len = 100
[output]
variables = "all"
"""


def _run(dp, ep):
    return sweep(parse_study(STUDY.format(dp=dp, ep=ep), "eplb.toml"), progress=False)


def test_redundant_copies_make_72_and_48_rank_layouts():
    for ranks, per_device in ((72, 4), (48, 6)):
        ds = _run(ranks, ranks)
        plain = ds.sel(ep_redundant_experts=0)
        copies = ds.sel(ep_redundant_experts=32)
        assert int(plain.reason) == REASON_BITS["ep_indivisible"]
        assert bool(copies.valid), ranks
        # 256 / ep experts would be fractional; with 32 copies the device holds
        # per_device whole experts: its MoE weights are per_device experts x 58 layers
        assert float(copies.weight_bytes - plain.weight_bytes) == pytest.approx(
            (per_device - 256 / ranks) * EXPERT * MOE_LAYERS, rel=1e-9)


def test_a_device_with_as_many_experts_weighs_the_same():
    """72 ranks with 32 copies and 64 ranks without hold 4 experts per device each; the
    rest of a DP-attention device (attention, shared expert, router, ends) is the same."""
    a = _run(72, 72).sel(ep_redundant_experts=32)
    b = _run(64, 64).sel(ep_redundant_experts=0)
    assert float(a.weight_bytes) == pytest.approx(float(b.weight_bytes), rel=1e-12)

"""Cross-machine pipelines: network requirements (together-LLM's estimate), layer split."""

from __future__ import annotations

import pytest

from dse.study import parse_study
from dse.run.sweep import sweep

from ..helpers import pipeline_study


def run(axes, pipeline):
    return sweep(parse_study(pipeline_study(axes, pipeline), "<test>"), progress=False)


TOGETHER = """loop = true
stages = [ {hw}, {hw}, {hw}, {hw}, {hw}, {hw}, {hw}, {hw} ]
link = {{ bandwidth = "1 Gbit/s", direction = "{direction}" }}
""".replace("{hw}", '{{ hardware = "m2-ultra", layers = 10 }}')  # 80 layers, 10 per stage


def test_together_llm_network_estimate_decode():
    # together-LLM README, "网络要求估算": Llama-70B (hidden 8192), bf16 hidden states
    # (16,384 bytes per token), PP = 8 (8 transfers per token, the last back to the client),
    # bidirectional (x2), TPOT 0.05 s with communication:compute 1:4 -> 0.01 s of links.
    #   bytes/s = 8 x 2 x 16,384 / 0.01 = 26,214,400 bytes/s = 209,715,200 bit/s.
    # The README writes "26,214,400 bytes/s = 26 Mbps": the figure is bytes/s; in bits it
    # is 8x more (210 Mbit/s).
    ds = run(dict(model="llama-2-70b", target_tpot_s=0.05, comm_share=0.2),
             TOGETHER.format(direction="round_trip"))
    assert ds.required_link_bw_decode_bytes_per_s.item() == pytest.approx(26_214_400)
    assert ds.required_link_bw_decode_bit_per_s.item() == pytest.approx(209_715_200)
    # with 1 Gbit/s links the same budget leaves room for latency: transfers take
    # 8 x 2 x 16,384 / 125e6 s; the rest of 0.01 s over 16 one-way messages
    transfer = 8 * 2 * 16_384 / 125e6
    assert ds.max_link_latency_decode_s.item() == pytest.approx((0.01 - transfer) / 16)


@pytest.mark.parametrize("direction,factor", [("one_way", 1), ("round_trip", 2)])
def test_together_llm_network_estimate_prefill(direction, factor):
    # TTFT 3 s at 1:2 -> 1 s of links, 1,000 prompt tokens: 16,384,000 bytes per transfer,
    # 8 transfers. The README's arithmetic (one way) gives 131,072,000 bytes/s, which it
    # labels "bits/s = 131 Mbps": it is 1.05 Gbit/s; bidirectional, as its decode case
    # assumes, doubles it to 262,144,000 bytes/s (2.1 Gbit/s).
    ds = run(dict(model="llama-2-70b", input_len=1000, target_ttft_s=3.0, comm_share=1 / 3),
             TOGETHER.format(direction=direction))
    expected = factor * 8 * 1000 * 16_384 / 1.0
    assert ds.required_link_bw_prefill_bytes_per_s.item() == pytest.approx(expected)
    assert ds.required_link_bw_prefill_bit_per_s.item() == pytest.approx(8 * expected)


def test_required_bandwidth_from_the_engines_own_compute_time_meets_the_target():
    # comm_share = 0: the budget is what the target leaves after the stages' compute. A
    # link at exactly that bandwidth must give TPOT = target (batch 1: TPOT = traversal).
    pipe = """stages = [ { hardware = "m3-pro" }, { hardware = "m2" } ]
link = { bandwidth = "100 Mbit/s", latency_ms = 0.4, overhead_ms = 2.0, direction = "round_trip" }
"""
    target = 0.06
    ds = run(dict(model="llama-3.2-1b", target_tpot_s=target), pipe)
    need = ds.required_link_bw_decode_bytes_per_s.item()
    scale = need / (100e6 / 8)
    again = run(dict(model="llama-3.2-1b", link_bw_scale=scale), pipe)
    assert again.tpot_s.item() == pytest.approx(target, rel=1e-9)


def test_no_bandwidth_suffices_when_latency_alone_exceeds_the_budget():
    pipe = """stages = [ { hardware = "m3-pro" }, { hardware = "m2" } ]
link = { bandwidth = "1 Gbit/s", latency_ms = 50.0 }
"""
    ds = run(dict(model="llama-3.2-1b", target_tpot_s=0.06, comm_share=0.5), pipe)
    assert ds.required_link_bw_decode_bytes_per_s.isnull().item()


SPLIT_PIPE = """stages = [ {{ hardware = "m3-pro"{a} }}, {{ hardware = "m2"{b} }}, {{ hardware = "m1"{c} }} ]
link = {{ bandwidth = "1 Gbit/s", latency_ms = 0.5, overhead_ms = 1.0 }}
objective = "{objective}"
"""


@pytest.mark.parametrize("objective,memory_scale", [("tpot", 1.0), ("ttft", 1.0),
                                                    ("tpot", 0.1)])
def test_recommended_split_is_never_worse_than_any_other(objective, memory_scale):
    # Brute force: every split of Llama-3.2-1B's 16 layers over 3 devices, each evaluated
    # as its own study with every stage's layers fixed. With memory_scale = 0.1 the M2
    # and M1 hold only a few layers, so many splits do not fit and must not be chosen.
    axes = dict(model="llama-3.2-1b", batch=[1, 4], input_len=1024, output_len=128,
                memory_scale=memory_scale)
    auto = run(axes, SPLIT_PIPE.format(a="", b="", c="", objective=objective))
    metric = {"tpot": "tpot_s", "ttft": "ttft_s"}[objective]
    best = {}
    for a in range(1, 15):
        for b in range(1, 16 - a):
            c = 16 - a - b
            fixed = run(axes, SPLIT_PIPE.format(a=f", layers = {a}", b=f", layers = {b}",
                                                c=f", layers = {c}", objective=objective))
            for batch in (1, 4):
                point = fixed.sel(batch=batch)
                if bool(point.fits):
                    value = float(point[metric])
                    if value < best.get(batch, (float("inf"),))[0]:
                        best[batch] = (value, (a, b, c))
    assert best, "some split must fit"
    for batch, (value, split) in best.items():
        chosen = auto.sel(batch=batch)
        assert bool(chosen.fits)
        assert float(chosen[metric]) == pytest.approx(value, rel=1e-12)
        assert float(chosen[metric]) <= value * (1 + 1e-12)
        assert int(chosen.feasible_splits) >= 1
    if memory_scale < 1.0:
        assert int(auto.sel(batch=1).feasible_splits) < 105  # memory excluded some splits


def test_pipeline_outputs_per_stage_and_in_total():
    pipe = """stages = [ { hardware = "m3-pro" }, { hardware = "m2" } ]
link = { bandwidth = "1 Gbit/s", latency_ms = 0.5, overhead_ms = 1.0 }
"""
    ds = run(dict(model="llama-3.2-3b", batch=1, input_len=256, output_len=64), pipe)
    assert ds.split_layers.dims == ("stage",)
    assert ds.stage.values.tolist() == ["0:m3-pro", "1:m2"]
    assert ds.split_layers.sum().item() == 28
    # batch 1: the pipeline is a chain, TPOT = stages + link
    assert ds.tpot_s.item() == pytest.approx(ds.stage_decode_s.sum().item()
                                             + ds.link_decode_s.sum().item())
    share = ds.link_decode_s.sum().item() / ds.tpot_s.item()
    assert ds.comm_share_decode.item() == pytest.approx(share)
    assert ds.throughput_tok_s.item() == pytest.approx(64 / ds.e2e_s.item())
    assert (ds.stage_memory_bytes <= ds.stage_capacity_bytes).all()
    assert ds.ttft_s.attrs["units"] == "s"


def test_link_time_with_round_trip_and_compression_by_hand():
    # One decode token of Llama-3.2-1B (d = 2048, bf16): 4,096 bytes per message.
    # round trip: 2 x (latency + overhead) + 2 x bytes / ratio / bw + 2 x bytes / throughput
    pipe = """stages = [ { hardware = "m3-pro" }, { hardware = "m2" } ]
link = { bandwidth = "100 Mbit/s", latency_ms = 0.5, overhead_ms = 2.0, direction = "round_trip" }
compression = { ratio = 2.0, throughput = "400 MB/s" }
"""
    ds = run(dict(model="llama-3.2-1b"), pipe)
    bytes_ = 2048 * 2
    expected = 2 * (0.5e-3 + 2e-3) + 2 * bytes_ / 2.0 / 12.5e6 + 2 * bytes_ / 400e6
    assert ds.link_decode_s.item() == pytest.approx(expected, rel=1e-12)

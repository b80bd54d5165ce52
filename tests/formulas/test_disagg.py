"""Disaggregated serving (dse.formulas.disagg): KV bytes and transfer times by hand, rate
matching, and a disaggregated deployment against the aggregated one at no load.

The numbers by hand come from the model cards' config.json values and the hardware
cards' link figures (models/*.toml, hardware/*.toml), under the plain roofline."""

from __future__ import annotations

import numpy as np
import pytest

from dse.run.sweep import sweep
from dse.study import parse_study

from ..helpers import study_text

H100_INTRA, H100_INTER = 450e9, 50e9  # hardware/h100-sxm.toml, bytes/s per device
H100_INTRA_LAT, H100_INTER_LAT = 0.6e-6, 2.7e-6
# bytes of one token's cache over the whole model, 16-bit
LLAMA70B_TOKEN = 80 * 2 * 8 * 128 * 2  # layers x (K, V) x kv heads x head_dim x bytes
DSV3_TOKEN = 61 * (512 + 64) * 2  # layers x (kv_lora_rank + qk_rope_head_dim) x bytes (MLA)
PROMPT = 2000


@pytest.fixture(scope="module")
def ds():
    text = study_text(
        model=["llama-3.1-70b", "deepseek-v3"], hardware="h100-sxm", framework="vllm",
        weight_bits=4, tp=8, serving=["agg", "disagg"], prefill_workers=[1, 2],
        prefill_tp=[2, 4, 8], decode_tp=8, input_len=[200, PROMPT, 8000],
        output_len=[50, 2000], request_rate=[0.001, 1000.0])
    study = parse_study(text.replace('name = "t"', 'name = "t"\ndtype = "float64"'), "<t>")
    return sweep(study, progress=False)


def test_kv_bytes_and_transfer_by_hand(ds):
    at = dict(serving="disagg", input_len=PROMPT, output_len=50, request_rate=0.001)
    for model, per_token in (("llama-3.1-70b", LLAMA70B_TOKEN), ("deepseek-v3", DSV3_TOKEN)):
        kv = PROMPT * per_token
        for workers, ptp in ((1, 2), (1, 4), (2, 2), (2, 4)):
            devices = workers * ptp + 8
            streams = min(ptp, 8)  # the prefill worker's devices send, the decoder's receive
            if devices <= 8:  # one NVLink domain
                want = kv / (streams * H100_INTRA) + H100_INTRA_LAT
            else:
                want = kv / (streams * H100_INTER) + H100_INTER_LAT
            got = ds["kv_transfer_s"].sel(model=model, prefill_workers=workers,
                                          prefill_tp=ptp, **at).item()
            assert got == pytest.approx(want, rel=1e-9), (model, workers, ptp)
            assert ds["n_devices"].sel(serving="disagg", prefill_workers=workers,
                                       prefill_tp=ptp).item() == devices


def _sel(ds, **at):
    return {k: ds[k].sel({d: v for d, v in dict(model="llama-3.1-70b", **at).items()
                          if d in ds[k].dims}).item() for k in (
        "prefill_capacity_req_s", "decode_capacity_req_s", "capacity_req_s", "bottleneck",
        "ttft_s", "valid", "reason", "prefill_utilization", "decode_utilization")}


def test_rate_matching(ds):
    """Long prompts and short answers: the prefill pool limits; short prompts and long
    answers: the decode pool. Capacity is the smaller pool's, a second prefill worker
    doubles the prefill pool's, and a rate past capacity overloads."""
    low = dict(serving="disagg", prefill_tp=4, request_rate=0.001)
    prefill_bound = _sel(ds, prefill_workers=1, input_len=8000, output_len=50, **low)
    assert prefill_bound["bottleneck"] == 0.0
    assert prefill_bound["prefill_capacity_req_s"] < prefill_bound["decode_capacity_req_s"]
    decode_bound = _sel(ds, prefill_workers=2, input_len=200, output_len=2000, **low)
    assert decode_bound["bottleneck"] == 1.0
    assert decode_bound["decode_capacity_req_s"] < decode_bound["prefill_capacity_req_s"]
    for case in (prefill_bound, decode_bound):
        assert case["capacity_req_s"] == min(case["prefill_capacity_req_s"],
                                             case["decode_capacity_req_s"])
        assert case["valid"]
        assert case["prefill_utilization"] == pytest.approx(
            0.001 / case["prefill_capacity_req_s"])
    one = _sel(ds, prefill_workers=1, input_len=PROMPT, output_len=50, **low)
    two = _sel(ds, prefill_workers=2, input_len=PROMPT, output_len=50, **low)
    assert two["prefill_capacity_req_s"] == pytest.approx(2 * one["prefill_capacity_req_s"])
    assert two["decode_capacity_req_s"] == pytest.approx(one["decode_capacity_req_s"])
    past = _sel(ds, prefill_workers=1, input_len=PROMPT, output_len=50, serving="disagg",
                prefill_tp=4, request_rate=1000.0)
    assert not past["valid"] and np.isnan(past["ttft_s"])


def test_agg_and_disagg_of_one_layout_at_no_load(ds):
    """At no load (0.001 requests/s) nothing queues: the disaggregated request is the
    prefill worker's prompt, the KV transfer, then the decode worker's steps. With both
    pools at tp 8 the steps are the aggregated deployment's, so by hand: TTFT(disagg) =
    TTFT(agg) + kv_transfer_s + the decode worker's wait for its step in progress (the
    load model's residual E[T^2] / 2E[T], half a step T = TPOT at a fixed step; the
    prefill worker's residual is the aggregated deployment's), and TPOT(disagg) =
    TPOT(agg)."""
    at = dict(model="llama-3.1-70b", prefill_workers=1, input_len=PROMPT, output_len=2000,
              request_rate=0.001)
    agg = {k: ds[k].sel(serving="agg", prefill_tp=4, **at).item()
           for k in ("ttft_s", "tpot_s")}
    d = {k: ds[k].sel(serving="disagg", prefill_tp=8, **at).item()
         for k in ("ttft_s", "tpot_s", "kv_transfer_s")}
    assert d["kv_transfer_s"] == pytest.approx(PROMPT * LLAMA70B_TOKEN / (8 * H100_INTER)
                                               + H100_INTER_LAT, rel=1e-9)
    assert d["tpot_s"] == pytest.approx(agg["tpot_s"], rel=0.01)
    assert d["ttft_s"] == pytest.approx(
        agg["ttft_s"] + d["kv_transfer_s"] + agg["tpot_s"] / 2.0, rel=0.002)


def test_share_within_reads_the_percentiles():
    """P(X <= limit) from P50/P90/P99: exactly 0.5, 0.9 and 0.99 at them; a lognormal's
    share in between (here the percentiles of a lognormal, sigma = 0.5: exact); 1 with
    no objective."""
    from statistics import NormalDist

    from dse.formulas.disagg import share_within

    z = NormalDist()
    q = {p: float(np.exp(0.5 * z.inv_cdf(p))) for p in (0.5, 0.9, 0.99)}
    for p, x in q.items():
        assert float(share_within(x, q[0.5], q[0.9], q[0.99])) == pytest.approx(p, abs=1e-6)
    x = float(np.exp(0.5 * z.inv_cdf(0.95)))
    assert float(share_within(x, q[0.5], q[0.9], q[0.99])) == pytest.approx(0.95, abs=1e-6)
    assert float(share_within(0.0, q[0.5], q[0.9], q[0.99])) == 1.0

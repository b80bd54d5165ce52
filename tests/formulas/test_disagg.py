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


def test_prefill_queue_by_hand():
    """The closed loop's throughput X and wait W at the prefill workers, solved by hand
    from X (Z + W(X)) = C with the M/D/1 wait W = rho S / (2 (1 - rho)), rho = X S / P:
    times (1 - X S / P), X Z (1 - X S / P) + X^2 S^2 / (2 P) = C (1 - X S / P), the
    quadratic a X^2 + b X + c = 0 with a = S / P (S / 2 - Z), b = Z + C S / P, c = -C,
    whose smaller positive root is X. S = 0.1 s, Z = 1 s:

    - C = 5, P = 1: 0.095 X^2 - 1.5 X + 5 = 0, X = (1.5 - sqrt(0.35)) / 0.19 = 4.7810/s,
      W = C / X - Z = 0.0458 s;
    - C = 50 (near the worker's 10/s): X = (6 - sqrt(17)) / 0.19 = 9.8781/s;
    - C = 10, P = 2: 0.0475 X^2 - 1.5 X + 10 = 0.
    - C = 2 on a short cycle (Z = 0.01 s): the worker's bound, X = P / S = 10/s, where
      Little's law leaves W = 2 / 10 - 0.01 = 0.19 s."""
    import jax

    from dse.formulas.disagg import prefill_queue

    def by_hand(c, p, s, z):
        a, b = -s / p * (s / 2 - z), -(z + c * s / p)  # -a X^2 - b X - C = 0 flipped
        return (-b - np.sqrt(b * b - 4 * a * c)) / (2 * a)

    with jax.enable_x64(True):
        def solve(c, p, s, z):
            x, w = prefill_queue(np.float64(c), np.float64(p), np.float64(s), np.float64(z))
            return float(x), float(w)

        x, w = solve(5, 1, 0.1, 1.0)
        assert x == pytest.approx((1.5 - np.sqrt(0.35)) / 0.19, rel=1e-9)
        assert w == pytest.approx(5 / x - 1.0, rel=1e-9)
        assert w == pytest.approx(0.1 * x * 0.1 / (2 * (1 - 0.1 * x)), rel=1e-9)
        assert solve(50, 1, 0.1, 1.0)[0] == pytest.approx((6 - np.sqrt(17)) / 0.19, rel=1e-9)
        for c, p in ((5, 1), (50, 1), (10, 2), (30, 4)):
            assert solve(c, p, 0.1, 1.0)[0] == pytest.approx(by_hand(c, p, 0.1, 1.0),
                                                             rel=1e-9), (c, p)
        x, w = solve(2, 1, 0.1, 0.01)
        assert x == pytest.approx(10.0, rel=1e-9) and w == pytest.approx(0.19, rel=1e-6)


def test_a_closed_loop_of_one_client_waits_for_nothing():
    """One client under disaggregation meets no queue: its TTFT is the open loop's at a
    vanishing rate (the prompt alone, the transfer, the decode worker's step in progress
    aside: a closed loop's client arrives as its last request ends, the open loop's at
    random, so that residual is compared apart), its throughput 1 / E2E; more clients
    queue at the prefill worker and share the decode worker's batch, and Little's law
    holds: throughput x E2E = clients."""
    text = study_text(
        model="llama-3.1-70b", hardware="h100-sxm", framework="vllm", weight_bits=8,
        tp=8, serving="disagg", prefill_workers=1, prefill_tp=8, decode_workers=1,
        decode_tp=8, input_len=PROMPT, output_len=500, concurrency=[1, 8, 64])
    study = parse_study(text.replace('name = "t"', 'name = "t"\ndtype = "float64"'), "<t>")
    closed = sweep(study, progress=False)
    opened = sweep(parse_study(text.replace("concurrency = [1, 8, 64]",
                                            "request_rate = 1e-6").replace(
        'name = "t"', 'name = "t"\ndtype = "float64"'), "<t>"), progress=False)
    one = {k: closed[k].sel(concurrency=1).item()
           for k in ("ttft_s", "e2e_s", "request_throughput_req_s", "queue_s", "tpot_s")}
    assert one["request_throughput_req_s"] == pytest.approx(1.0 / one["e2e_s"], rel=1e-9)
    assert one["tpot_s"] == pytest.approx(float(opened.tpot_s), rel=1e-3)
    # the open loop's TTFT counts half a decode step of residual at the decode worker;
    # the rest agrees to the open loop's 1e-6 requests/s (the closed and open branches
    # of the load model meet there: 2.3e-5 apart)
    assert one["ttft_s"] == pytest.approx(float(opened.ttft_s) - float(opened.queue_s)
                                          + one["queue_s"], rel=1e-4)
    x = closed["request_throughput_req_s"].values
    e2e = closed["e2e_s"].values
    np.testing.assert_allclose(x * e2e, [1.0, 8.0, 64.0], rtol=1e-9)
    ttft = closed["ttft_s"].values
    assert ttft[0] < ttft[1] < ttft[2]
    assert bool(closed["valid"].all())

"""Training mode: memory (ZeRO, Korthikanti activations), step time, bubbles, comm, MFU.

Every expected number is derived by hand in the test from the cited formula; the model
dimensions come from the catalogue cards (published architectures).
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from dse.catalogue.lookup import load_hardware, load_model
from dse.formulas import params as P
from dse.formulas.training import layer_activation_bytes
from dse.formulas.types import Bits, Layout, Schedule
from dse.study import load_study, parse_study
from dse.run.sweep import sweep

from ..conftest import STUDIES
from ..helpers import study_text

KINDS = ("tp", "pp", "dp", "ep", "cp")


def train(**axes) -> dict:
    """Every output of one training configuration (float64), comm_s split by kind."""
    text = study_text(**axes).replace('name = "t"', 'name = "t"\nmode = "training"\n'
                                      'dtype = "float64"')
    ds = sweep(parse_study(text, "<test>"), progress=False)
    out = {k: ds[k].item() for k in ds.data_vars if k != "comm_s"}
    out.update({f"comm_{k}": ds["comm_s"].sel(comm_kind=k).item() for k in KINDS})
    return out


def n_params(model: str) -> float:
    with jax.enable_x64(True):  # 1e12 parameters need more than float32's 24 bits
        return float(P.total_params(load_model(model).spec()))


# --- memory: ZeRO ---------------------------------------------------------------------


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_mixed_precision_adam_is_16_bytes_per_parameter_sharded_by_zero(stage):
    # Rajbhandari et al. 2020 (ZeRO), Sec. 3.1 and Fig. 1: fp16 weights (2) and grads (2),
    # fp32 master weights, momentum and variance (12): 16 bytes per parameter. Stage 1
    # shards the 12, stage 2 also the gradients, stage 3 also the weights, over N_d.
    dp = 8
    out = train(model="llama-2-7b", hardware="h100-sxm", dp=dp, zero_stage=stage,
                global_batch=dp)
    psi = n_params("llama-2-7b")
    expected = {0: 2 + 2 + 12, 1: 2 + 2 + 12 / dp, 2: 2 + (2 + 12) / dp, 3: 16 / dp}[stage]
    states = out["weight_bytes"] + out["grad_bytes"] + out["optimizer_bytes"]
    gathered = 0.0
    if stage == 3:  # two layers' fp16 parameters gathered at a time (running + prefetched)
        m = load_model("llama-2-7b").fields
        d, f = m["d_model"], m["d_ff"]
        gathered = 2 * 2 * (4 * d * d + 3 * d * f + 2 * d)
    assert states == pytest.approx(expected * psi + gathered, rel=1e-9)


def test_megatron_distributed_optimizer_is_6_plus_12_over_d_bytes_per_parameter():
    # Megatron-LM docs (docs/source/distrib_optimizer.md, bytes per parameter with the
    # distributed optimizer over d data-parallel ranks): bf16 params with fp32 gradients
    # 6 + 12/d; fp32 params and gradients 8 + 8/d (no separate master copy).
    d = 16
    psi = n_params("llama-2-7b")
    bf16 = train(model="llama-2-7b", hardware="h100-sxm", dp=d, zero_stage=1, grad_bits=32,
                 global_batch=d)
    fp32 = train(model="llama-2-7b", hardware="h100-sxm", dp=d, zero_stage=1, grad_bits=32,
                 weight_bits=32, act_bits=32, global_batch=d)
    for out, per_param in ((bf16, 6 + 12 / d), (fp32, 8 + 8 / d)):
        states = out["weight_bytes"] + out["grad_bytes"] + out["optimizer_bytes"]
        assert states == pytest.approx(per_param * psi, rel=1e-9)


def test_optimizer_by_name_or_by_bytes():
    psi = n_params("llama-2-7b")
    sgd = train(model="llama-2-7b", hardware="h100-sxm", optimizer="sgd")
    lion = train(model="llama-2-7b", hardware="h100-sxm", optimizer="lion")
    custom = train(model="llama-2-7b", hardware="h100-sxm", optimizer=6)
    assert sgd["optimizer_bytes"] == pytest.approx(4 * psi, rel=1e-9)  # master weights only
    assert lion["optimizer_bytes"] == pytest.approx(8 * psi, rel=1e-9)
    assert custom["optimizer_bytes"] == pytest.approx(10 * psi, rel=1e-9)
    pure_bf16 = train(model="llama-2-7b", hardware="h100-sxm", master_weight_bits=16)
    assert pure_bf16["optimizer_bytes"] == pytest.approx(8 * psi, rel=1e-9)  # no copy


# --- memory: activations (Korthikanti et al. 2022) --------------------------------------


def _gpt3_layer(tp, sp, recompute, flash=False, dropout=True, b=1, s=2048):
    spec = load_model("gpt-3-175b").spec()
    shard = P.shard(spec, float(tp))
    lay = Layout(float(tp), 1.0, 1.0, 1.0, 1.0, 1.0, float(sp))
    bits = Bits(16.0, 16.0, 32.0, 16.0, 8.0)
    sch = Schedule(0.0, float(recompute), float(flash), float(dropout), 0.0, 0.0, 0.0)
    dense, _ = layer_activation_bytes(spec, shard, lay, float(b * s), float(s), bits, sch,
                                      float(recompute))
    return float(dense)


@pytest.mark.parametrize("tp", [1, 8])
def test_korthikanti_activation_memory_per_layer(tp):
    # Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    # Models", Eq. 1-2, Table 2: bytes per layer, 16-bit activations with dropout:
    #   no parallelism / tensor parallel:  s b h (10 + 24/t + 5 a s / (h t))
    #   + sequence parallel:               s b h / t (34 + 5 a s / h)
    #   selective recompute:               s b h (10 + 24/t),  s b h / t x 34 with SP
    #   full recompute:                    2 s b h (/ t with SP)
    s, b, h, a, t = 2048, 1, 12288, 96, tp
    sbh = s * b * h
    assert _gpt3_layer(t, 0, 0) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert _gpt3_layer(t, 1, 0) == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    assert _gpt3_layer(t, 0, 1) == pytest.approx(sbh * (10 + 24 / t))
    assert _gpt3_layer(t, 1, 1) == pytest.approx(sbh / t * 34)
    assert _gpt3_layer(t, 0, 2) == pytest.approx(2 * sbh)
    assert _gpt3_layer(t, 1, 2) == pytest.approx(2 * sbh / t)


def test_flash_attention_stores_no_scores_and_no_dropout_saves_masks():
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    # FlashAttention: the 5as/h term becomes one fp32 log-sum-exp per query and head
    assert _gpt3_layer(t, 1, 0, flash=True) == pytest.approx(sbh / t * 34 + s * b * a / t * 4)
    # without dropout the two residual masks (1 byte each) and the score mask go away:
    # 34 - 2 = 32, and the scores keep only the softmax output (2 a s / h)
    assert _gpt3_layer(t, 1, 0, dropout=False) == pytest.approx(sbh / t * (32 + 2 * a * s / h))


def test_activation_bytes_sum_layers_in_flight_and_logits():
    # pp = 1: all L layers of one micro-batch, plus the fp32 logits 4 s b V / t
    # (Korthikanti et al. 2022, Sec. 4.3 output layer).
    t, L, V, s = 8, 96, 50257, 2048
    out = train(model="gpt-3-175b", hardware="h100-sxm", tp=t, sequence_parallel=True,
                recompute="selective", flash_attention=False, dropout=True, seq_len=s)
    layer = _gpt3_layer(t, 1, 1)
    assert out["activation_bytes"] == pytest.approx(L * layer + 4 * s * math.ceil(V / t))
    # 1F1B: the first stage keeps p micro-batches of its L/p layers in flight; the
    # interleaved schedule multiplies that by 1 + (p - 1)/(p v) (their Sec. 4.2.3).
    p, v, m = 4, 2, 16
    one = train(model="gpt-3-175b", hardware="h100-sxm", tp=t, pp=p, sequence_parallel=True,
                recompute="selective", flash_attention=False, dropout=True, seq_len=s,
                global_batch=m)
    inter = train(model="gpt-3-175b", hardware="h100-sxm", tp=t, pp=p, virtual_stages=v,
                  sequence_parallel=True, recompute="selective", flash_attention=False,
                  dropout=True, seq_len=s, global_batch=m)
    assert one["activation_bytes"] == pytest.approx(L / p * layer * p)
    assert inter["activation_bytes"] == pytest.approx(L / p * layer * p * (1 + (p - 1) / (p * v)))


def test_max_micro_batch_is_the_largest_that_fits():
    base = dict(model="llama-3-8b", hardware="h100-sxm", tp=2, seq_len=8192,
                recompute="selective", zero_stage=1, dp=8)
    best = int(train(micro_batch=1, global_batch=8, **base)["max_micro_batch"])
    assert best >= 1
    assert train(micro_batch=best, global_batch=8 * best, **base)["fits"]
    assert not train(micro_batch=best + 1, global_batch=8 * (best + 1), **base)["fits"]


# --- time -------------------------------------------------------------------------------


@pytest.mark.parametrize("p,v,m", [(8, 1, 64), (8, 2, 64), (4, 4, 8), (2, 1, 1)])
def test_pipeline_bubble_fraction(p, v, m):
    # Narayanan et al. 2021, Sec. 2.2.1-2.2.2: bubble = (p - 1)/m of the ideal time for
    # 1F1B, (p - 1)/(v m) with v interleaved chunks; the step is (m + (p - 1)/v) t_mb.
    out = train(model="llama-2-7b", hardware="h100-sxm", pp=p, virtual_stages=v,
                global_batch=m, pp_overlap=1.0)
    assert out["bubble_fraction"] == pytest.approx((p - 1) / (v * m))
    assert out["step_s"] == pytest.approx(out["compute_s"] * (1 + (p - 1) / (v * m)))
    assert out["valid"]


def test_data_parallel_gradient_all_reduce_is_a_ring():
    # A ring all-reduce of S bytes over g devices: 2 (g-1)/g S / bw + 2 (g-1) latency
    # (Patarasuk & Yuan 2009). 8 devices of one node (NVLink), fp16 gradients.
    g = 8
    hw = load_hardware("h100-sxm").fields
    bw = hw["intra_node_bw_gb_per_s"] * 1e9
    latency = hw["intra_node_latency_us"] * 1e-6
    out = train(model="llama-2-7b", hardware="h100-sxm", dp=g, global_batch=g)
    grads = 2 * n_params("llama-2-7b")
    assert out["comm_dp"] == pytest.approx(2 * (g - 1) / g * grads / bw + 2 * (g - 1) * latency)
    hidden = train(model="llama-2-7b", hardware="h100-sxm", dp=g, global_batch=g, dp_overlap=0.75)
    assert hidden["comm_dp"] == pytest.approx(0.25 * out["comm_dp"])


def test_zero3_moves_one_and_a_half_times_the_all_reduce_volume():
    # ZeRO (Rajbhandari et al. 2020, Sec. 7.2): stages 1-2 communicate 2 Psi per step, as
    # plain data parallelism; stage 3 3 Psi (all-gather forward and backward, reduce-scatter).
    base = dict(model="llama-2-7b", hardware="h100-sxm", dp=8, global_batch=8)
    zero = {z: train(zero_stage=z, **base)["comm_dp"] for z in range(4)}
    assert zero[1] == pytest.approx(zero[0])
    assert zero[2] == pytest.approx(zero[0])
    assert zero[3] == pytest.approx(1.5 * zero[0])


def test_data_parallel_peers_across_nodes_use_the_network():
    # tp = 8 fills a node; every data-parallel peer sits in another node: one device per
    # node, so the ring runs at the inter-node bandwidth.
    hw = load_hardware("h100-sxm").fields
    bw, latency = hw["inter_node_bw_gb_per_s"] * 1e9, hw["inter_node_latency_us"] * 1e-6
    g = 4
    out = train(model="llama-2-70b", hardware="h100-sxm", tp=8, dp=g, global_batch=g)
    # tp shards every matrix (8 kv heads, 8 ranks) and the vocabulary; norms are replicated
    norms = (2 * 80 + 1) * 8192
    grads = 2 * ((n_params("llama-2-70b") - norms) / 8 + norms)
    assert out["comm_dp"] == pytest.approx(2 * (g - 1) / g * grads / bw + 2 * (g - 1) * latency,
                                           rel=1e-6)


def test_context_parallel_splits_the_work():
    # Ring attention with load balancing: each of cp devices does 1/cp of the tokens and
    # of the causal pairs; per-device compute halves, total FLOPs do not change.
    base = dict(model="llama-3.1-8b", hardware="h100-sxm", seq_len=32768, flash_attention=True)
    one, two = train(cp=1, **base), train(cp=2, **base)
    assert two["compute_s"] == pytest.approx(one["compute_s"] / 2, rel=0.01)
    assert two["hardware_flops_per_step"] == pytest.approx(one["hardware_flops_per_step"], rel=1e-9)
    assert two["n_devices"] == 2


def test_mfu_at_efficiency_one_without_communication_is_one():
    # One device, efficiency 1: every matmul at peak. What remains below 1 is the
    # memory-bound norms and GELU (~1/h of the layer's time) and FlashAttention's 2.5x
    # backward; for the 1T model (h = 25600) that is under 1%.
    out = train(model="megatron-gpt-1t", hardware="a100-80gb", seq_len=2048)
    assert out["mfu"] == pytest.approx(1.0, abs=0.01)
    assert out["comm_tp"] == out["comm_dp"] == out["comm_pp"] == 0.0
    # MFU convention (PaLM App. B, made causal): 6 N + 3 x (4 L h per (query, key) pair,
    # (s + 1)/2 pairs per token) per token, N the parameters in matmuls
    m = load_model("megatron-gpt-1t").fields
    L, h, V, s = m["n_layers"], m["d_model"], m["vocab_size"], 2048
    n_matmul = n_params("megatron-gpt-1t") - (V + s) * h + V * h  # tied head is a matmul
    per_token = 6 * n_matmul + 3 * L * 4 * h * (s + 1) / 2
    assert out["model_flops_per_step"] == pytest.approx(s * per_token, rel=1e-9)


# Narayanan et al. 2021, Table 1: achieved teraFLOP/s per GPU of each row.
PUBLISHED_TFLOPS = {"1.7b": 137, "3.6b": 138, "7.5b": 142, "18.4b": 135, "39.1b": 138,
                    "76.1b": 140, "145.6b": 148, "310.1b": 155, "529.6b": 163, "1t": 163}


def test_narayanan_flops_per_iteration_formula():
    # Narayanan et al. 2021, Sec. 5.1: with full recomputation and unfused attention,
    # F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per iteration. The engine's count adds
    # bias adds, norm and GELU FLOPs and the loss (O(1/h) of the total).
    ds = sweep(load_study(STUDIES / "training-narayanan-table1.toml"), progress=False)
    rows = [("1.7b", 1, 1, 32, 512), ("3.6b", 2, 1, 64, 512), ("7.5b", 4, 1, 128, 512),
            ("18.4b", 8, 1, 256, 1024), ("39.1b", 8, 2, 512, 1536),
            ("76.1b", 8, 4, 1024, 1792), ("145.6b", 8, 8, 1536, 2304),
            ("310.1b", 8, 16, 1920, 2160), ("529.6b", 8, 35, 2520, 2520),
            ("1t", 8, 64, 3072, 3072)]
    errors = []
    for size, tp, pp, gpus, batch in rows:
        name = f"megatron-gpt-{size}"
        row = ds.sel(model=name, tp=tp, pp=pp, num_devices=gpus, global_batch=batch)
        m = load_model(name).fields
        L, h, V, s = m["n_layers"], m["d_model"], m["vocab_size"], 2048
        flops = 96 * batch * s * L * h ** 2 * (1 + s / (6 * h) + V / (16 * L * h))
        assert float(row.hardware_flops_per_step) == pytest.approx(flops, rel=2e-3), name
        assert bool(row.valid), name  # every published configuration fits and divides
        assert float(row.bubble_fraction) == pytest.approx((pp - 1) / (batch / (gpus / tp / pp)))
        # Held out (no row of Table 1 is in the calibration data): the default generic
        # calibration against their measured TFLOP/s per GPU (Table 1; A100 peak 312).
        # hardware FLOPs include the recomputation, as their count does. Latest run:
        # -5% to -20%, median -15% (docs/validation.md: the HBM floor).
        assert ds.attrs["calibration"].endswith("generic.toml")
        measured = PUBLISHED_TFLOPS[size] * 1e12
        errors.append(float(row.hfu) * 312e12 / measured - 1.0)
    assert abs(float(np.median(errors))) <= 0.25 and max(map(abs, errors)) <= 0.35, errors


def test_time_to_train():
    out = train(model="llama-2-7b", hardware="h100-sxm", dp=8, global_batch=64,
                total_tokens=1e12)
    seconds = 1e12 / out["throughput_tok_s"]
    price = load_hardware("h100-sxm").fields["price_per_hour_usd"]
    assert out["train_days"] == pytest.approx(seconds / 86400)
    assert out["device_hours"] == pytest.approx(8 * seconds / 3600)
    assert out["train_cost_usd"] == pytest.approx(8 * seconds / 3600 * price)
    assert math.isnan(train(model="llama-2-7b", hardware="h100-sxm")["train_days"])


def test_num_devices_derives_dp_and_global_batch_defaults_to_one_micro_batch_each():
    out = train(model="llama-2-7b", hardware="h100-sxm", num_devices=64, tp=2, pp=2)
    assert out["dp_size"] == 16 and out["n_devices"] == 64
    assert out["grad_accum_steps"] == 1


def test_moe_expert_parallel_training():
    base = dict(model="mixtral-8x7b", hardware="h100-sxm", tp=1, dp=8, global_batch=8)
    dense_dp = train(ep=1, **base)
    ep8 = train(ep=8, **base)
    assert not int(ep8["reason"]) & (1 << 4)  # ep divides the 8 experts and tp x dp
    assert ep8["comm_ep"] > 0 and dense_dp["comm_ep"] == 0
    # each device holds 1 of the 8 experts: far less weight memory
    assert ep8["weight_bytes"] < 0.4 * dense_dp["weight_bytes"]


@pytest.mark.parametrize("axes,reason", [
    (dict(global_batch=10, dp=4), 1 << 5),
    (dict(num_devices=10, tp=4), 1 << 6),
    (dict(virtual_stages=2), 1 << 7),  # interleaving needs pp > 1
    (dict(cp=3, seq_len=4096), 1 << 7),  # load-balanced ring needs 2 cp | seq_len
    (dict(seq_len=8192), 1 << 3),
])
def test_infeasible_training_points_carry_a_reason(axes, reason):
    out = train(model="llama-2-7b", hardware="h100-sxm", **axes)
    assert not out["valid"]
    assert int(out["reason"]) & reason


def test_training_grid_is_one_broadcast_evaluation():
    text = study_text(model=["llama-2-7b", "llama-3-8b"], hardware="h100-sxm", tp=[1, 2, 4, 8],
                      pp=[1, 2, 4], zero_stage=[0, 1, 2, 3], recompute=["none", "full"],
                      num_devices=64, global_batch=256)
    ds = sweep(parse_study(text.replace('name = "t"', 'name = "t"\nmode = "training"'),
                           "<t>"), progress=False)
    assert ds["step_s"].dims == ("model", "tp", "pp", "zero_stage", "recompute")
    assert ds["comm_s"].dims[0] == "comm_kind"
    assert ds["recompute"].values.tolist() == ["none", "full"]
    for name in ("step_s", "memory_bytes", "mfu"):
        assert ds[name].attrs["units"] and ds[name].attrs["long_name"]
    assert np.isfinite(ds["step_s"].values).all()
    # full recompute never uses more memory, never less time
    none, full = ds.sel(recompute="none"), ds.sel(recompute="full")
    assert (full["activation_bytes"] <= none["activation_bytes"]).all()
    assert (full["step_s"] >= none["step_s"]).all()


def test_training_keeps_a_memory_reserve_by_default():
    """A 7B job taking 75.1 GiB per device (micro-batch 16 x 4096 tokens, full recompute,
    tp 2) fits an 80 GiB H100 only without a reserve: by default 10% is kept for the
    CUDA context, NCCL buffers and fragmentation, as in inference (80 x 0.9 = 72 GiB)."""
    from dse.study import parse_study
    from dse.run.sweep import sweep

    text = ('[study]\nname = "t"\nmode = "training"\n[axes]\nmodel = "llama-2-7b"\n'
            'hardware = "h100-sxm"\nmicro_batch = 16\nseq_len = 4096\nglobal_batch = 64\n'
            'num_devices = 8\nrecompute = "full"\ntp = 2\nmemory_reserve = {reserve}\n')
    default = sweep(parse_study(text.replace("memory_reserve = {reserve}\n", ""), "<t>"),
                    progress=False)
    none = sweep(parse_study(text.format(reserve=0.0), "<t>"), progress=False)
    memory = float(default["memory_bytes"]) / 2**30
    assert 72.0 < memory < 80.0
    assert not bool(default["fits"]) and bool(none["fits"])

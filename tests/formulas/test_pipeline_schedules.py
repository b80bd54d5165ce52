"""Pipeline schedules (1F1B, GPipe, ZB-H1, DualPipe) and uneven first/last stages.

Every expected number is derived in the test from the cited formula:

- 1F1B: bubble (p - 1)(T_F + T_B + T_W) over v interleaved chunks, fraction (p - 1)/(v m)
  (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", Sec. 2.2);
- GPipe: bubble (p - 1)/m of the ideal time, all m micro-batches' activations in flight
  (Huang et al. 2019, "GPipe", Sec. 2.3);
- ZB-H1: bubble (p - 1)(T_F + T_B - T_W), T_B the backward for the inputs and T_W the
  backward for the weights, 1F1B's peak activation memory (Qi et al. 2023, "Zero Bubble
  Pipeline Parallelism", ICLR 2024, Sec. 2.1 and Table 2);
- DualPipe: bubble (PP/2 - 1)(F&B + B - 3W), B the full backward, parameters 2x,
  activations PP + 1 micro-batches (DeepSeek-AI 2024, DeepSeek-V3 technical report,
  arXiv 2412.19437, Table 2; the same table in deepseek-ai/DualPipe's README);
- uneven stages: Megatron-LM's --decoder-first-pipeline-num-layers /
  --decoder-last-pipeline-num-layers (megatron/training/arguments.py): that many layers on
  the first / last stage, the rest divided evenly over the middle stages, each stage's
  count divisible by the virtual stages (TransformerConfig.__post_init__).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dse.catalogue.lookup import load_model
from dse.errors import InputError
from dse.formulas import params as P
from dse.formulas import training as T
from dse.formulas.training import end_train_parts, layer_activation_bytes, layer_train_parts
from dse.formulas.types import Bits, Job, Layout, Precision, Rates, Schedule
from dse.run.sweep import sweep
from dse.schema.knobs import PP_SCHEDULES
from dse.schema.outputs import REASON_BITS
from dse.study import parse_study

from ..helpers import study_text

SCHEDULE = REASON_BITS["schedule_indivisible"]


def study(**axes):
    text = study_text(**axes).replace('name = "t"', 'name = "t"\nmode = "training"\n'
                                      'dtype = "float64"')
    return parse_study(text, "<test>")


def train(**axes) -> dict:
    """Every output of one training configuration (float64) as Python numbers."""
    ds = sweep(study(**axes), progress=False)
    return {k: ds[k].item() for k in ds.data_vars if k != "comm_s"}


def test_schedule_codes_and_the_static_feature():
    # the knob's names index the formulas' codes
    assert PP_SCHEDULES.index("1f1b") == T.ONE_F_ONE_B
    assert PP_SCHEDULES.index("gpipe") == T.GPIPE
    assert PP_SCHEDULES.index("zb-h1") == T.ZB_H1
    assert PP_SCHEDULES.index("dualpipe") == T.DUALPIPE
    base = dict(model="llama-2-7b", hardware="h100-sxm", pp=2)
    assert T.PP_LAYOUT not in study(**base).features
    assert T.PP_LAYOUT not in study(**base, pp_schedule="1f1b", first_stage_layers=0).features
    assert T.PP_LAYOUT in study(**base, pp_schedule=["1f1b", "gpipe"]).features
    assert T.PP_LAYOUT in study(**base, last_stage_layers=10).features


def test_unknown_schedule_is_bad_input():
    with pytest.raises(InputError, match="pp_schedule"):
        study(model="llama-2-7b", hardware="h100-sxm", pp_schedule="1f1f")
    text = study_text(model="llama-2-7b", hardware="h100-sxm")
    with pytest.raises(InputError, match="pp_schedule"):  # a categorical key takes no range
        parse_study(text.replace('name = "t"', 'name = "t"\nmode = "training"')
                    + "pp_schedule = { start = 0, stop = 1, step = 1 }\n", "<test>")


# --- the bubble formulas, on numbers ------------------------------------------------------


@pytest.mark.parametrize("f,b,w", [(1.0, 1.0, 1.0), (2.0, 3.0, 1.5)])
def test_bubble_formulas_by_hand(f, b, w):
    # p = 8 stages, m = 32 micro-batches; T_F = f, T_B = b (inputs), T_W = w (weights)
    p, m = 8.0, 32.0
    t = f + b + w
    lay = Layout(1.0, p, 1.0, 1.0, 1.0, 1.0, 0.0)
    expected = {
        "1f1b": (p - 1) * (f + b + w),  # Narayanan et al.: (p-1)(t_f + t_b)
        "gpipe": (p - 1) * (f + b + w),  # Huang et al.: (K-1)/M of M micro-batches' time
        "zb-h1": (p - 1) * (f + b - w),  # Qi et al. Table 2
        # DeepSeek-V3 Table 2, B the full backward b + w, F&B = F + B (not overlapped)
        "dualpipe": (p / 2 - 1) * ((f + (b + w)) + (b + w) - 3 * w),
    }
    for name, bubble in expected.items():
        sch = Schedule(0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, float(PP_SCHEDULES.index(name)))
        got, fraction = T.pipeline_bubble(lay, sch, m, t, f, w)
        assert float(got) == pytest.approx(bubble, rel=1e-6), name
        assert float(fraction) == pytest.approx(bubble / (m * t), rel=1e-6), name
    if f == b == w:
        # the papers' headline numbers: ZB-H1 a third of 1F1B (Qi et al. Sec. 2.1); with
        # DeepSeek's PP = 8 and F = B = W = 1: 1F1B 7 x 3 = 21, ZB1P 7, DualPipe 3 x 2 = 6
        assert expected["zb-h1"] == pytest.approx(expected["1f1b"] / 3)
        assert (expected["1f1b"], expected["zb-h1"], expected["dualpipe"]) == (21.0, 7.0, 6.0)
        assert expected["gpipe"] / (m * t) == pytest.approx((p - 1) / m)


# --- the F / B / W split of a micro-batch, end to end ---------------------------------------


def _rates() -> Rates:
    f = np.float64
    return Rates(f(989e12), f(989e12), f(60e12), f(3.35e12), f(450e9), f(2e-6), f(50e9),
                 f(1e-5), f(8.0))


@pytest.mark.parametrize("recompute,flash", [(0.0, 1.0), (2.0, 1.0), (1.0, 0.0)])
def test_schedule_bubbles_from_the_forward_backward_weight_split(recompute, flash):
    """The step of each schedule on a 4-stage Llama-2-7B (8 layers per stage, tp 1, so no
    communication inside a layer), with T_F, T_B, T_W summed here from the parts of one
    layer and of the last stage's head by the documented rule: a part's backward is twice
    its forward, half of it (W) for the weights, none for the attention core
    (FlashAttention's 2.5x backward is all input gradient); recomputation belongs to B."""
    with jax.enable_x64(True):
        spec = load_model("llama-2-7b").spec().astype(np.float64)
        s = P.shard(spec, 1.0)
        p, m, n = 4.0, 8.0, 8.0
        lay = Layout(1.0, p, 1.0, 1.0, 1.0, 1.0, 0.0)
        job = Job(m, 1.0, 4096.0, 0.0)
        bits = Bits(16.0, 16.0, 32.0, 16.0, 8.0)
        rates = _rates()
        prec = Precision(16.0, 16.0, 16.0)

        def schedule(name):
            return Schedule(0.0, recompute, flash, 0.0, 0.0, 0.0, 0.0,
                            float(PP_SCHEDULES.index(name)))

        layer, _ = layer_train_parts(spec, s, prec, lay, job, bits, schedule("1f1b"), rates,
                                     frozenset())
        embedding, head = end_train_parts(spec, s, prec, lay, job, rates)
        full, selective = recompute == 2.0, recompute == 1.0
        k_attention = 3.0 + 0.5 * flash + full + selective
        k_other = 3.0 + full
        # tp = cp = 1: no communication inside a layer
        assert float(layer["tp_comm"].time_s) == float(layer["cp_comm"].time_s) == 0.0
        time = {k: float(v.time_s) for k, v in layer.items()}
        f_layer = sum(v / k_other for k, v in time.items() if k != "attention") + (
            time["attention"] / k_attention)
        w_layer = sum(v / k_other for k, v in time.items() if k != "attention")
        # the last stage, the slowest: 8 layers, the final norm and LM head (x3 each), the
        # loss (once, in F)
        t = n * sum(time.values()) + sum(float(v.time_s) for v in head.values())
        norms, lm_head = float(head["norms"].time_s), float(head["lm_head"].time_s)
        forward = n * f_layer + norms / 3 + lm_head / 3 + float(head["loss"].time_s)
        w = n * w_layer + norms / 3 + lm_head / 3
        b = t - forward - w
        # DualPipe: a device runs the first stage (8 layers, the embedding lookup x3) and
        # the last on half the micro-batches each: the mean of the two
        lookup = float(embedding["embedding"].time_s)
        t_pair = (t + n * sum(time.values()) + lookup) / 2
        f_pair = (forward + n * f_layer + lookup / 3) / 2
        w_pair = (w + n * w_layer + lookup / 3) / 2
        b_pair = t_pair - f_pair - w_pair
        expected = {"1f1b": (p - 1) * t, "gpipe": (p - 1) * t,
                    "zb-h1": (p - 1) * (forward + b - w),
                    "dualpipe": (p / 2 - 1) * ((f_pair + (b_pair + w_pair)) + (b_pair + w_pair)
                                               - 3 * w_pair)}
        for name, bubble in expected.items():
            out = T.training(spec, rates, 8e10, 989e12, 0.0, job, lay, bits, schedule(name),
                             frozenset({T.PP_LAYOUT}))
            assert float(out["bubble_s"]) == pytest.approx(bubble, rel=1e-9), name
            assert float(out["step_s"]) == pytest.approx(
                float(out["compute_s"]) + bubble + float(np.sum(out["comm_s"])), rel=1e-12)
            t_device = t_pair if name == "dualpipe" else t
            assert float(out["bubble_fraction"]) == pytest.approx(bubble / (m * t_device),
                                                                  rel=1e-9)
        assert expected["zb-h1"] < expected["1f1b"] and expected["dualpipe"] < expected["zb-h1"]


# --- memory by schedule -----------------------------------------------------------------


def _gpt3_layer(t, s, b=1):
    """Korthikanti et al. 2022 bytes per layer, sequence parallel, selective recompute,
    16-bit with dropout: s b h / t x 34 (their Table 2), here from the formula's function
    (checked against that expression in test_training.py)."""
    spec = load_model("gpt-3-175b").spec()
    lay = Layout(float(t), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    sch = Schedule(0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0)
    dense, _ = layer_activation_bytes(spec, P.shard(spec, float(t)), lay, float(b * s),
                                      float(s), Bits(16.0, 16.0, 32.0, 16.0, 8.0), sch, 1.0)
    h = 12288
    assert float(dense) == pytest.approx(s * b * h / t * 34)
    return float(dense)


def test_activation_memory_by_schedule():
    # GPT-3 175B, 96 layers over p = 4 stages (24 each), tp 8, m = 16 micro-batches
    t, L, V, s, p, m = 8, 96, 50257, 2048, 4, 16
    layer = _gpt3_layer(t, s)
    logits = 4 * s * -(-V // t)  # fp32 logits of the vocab-parallel shard
    base = dict(model="gpt-3-175b", hardware="h100-sxm", tp=t, pp=p, sequence_parallel=True,
                recompute="selective", flash_attention=False, dropout=True, seq_len=s,
                global_batch=m)
    out = {name: train(pp_schedule=name, **base) for name in PP_SCHEDULES}
    # 1F1B and ZB-H1: the first stage keeps p micro-batches of its L/p layers
    assert out["1f1b"]["activation_bytes"] == pytest.approx(L / p * layer * p)
    assert out["zb-h1"]["activation_bytes"] == pytest.approx(L / p * layer * p)
    # GPipe: all m micro-batches on every stage; the last also keeps m micro-batches' logits
    assert out["gpipe"]["activation_bytes"] == pytest.approx(m * (L / p * layer + logits))
    # DualPipe: p + 1 micro-batches of the device's two stages (first and last: L/p each)
    # and one micro-batch of logits; the parameters (and their gradients and optimizer
    # states) of two stages: 2x
    assert out["dualpipe"]["activation_bytes"] == pytest.approx((p + 1) * L / p * layer + logits)
    for key in ("weight_bytes", "grad_bytes", "optimizer_bytes"):
        assert out["dualpipe"][key] == pytest.approx(2 * out["1f1b"][key], rel=1e-12)
        assert out["gpipe"][key] == out["zb-h1"][key] == out["1f1b"][key]
    for o in out.values():
        assert o["memory_bytes"] == pytest.approx(o["weight_bytes"] + o["grad_bytes"]
                                                  + o["optimizer_bytes"] + o["activation_bytes"])
        assert not int(o["reason"]) & SCHEDULE  # m = 16 >= 2p: DualPipe applies


# --- uneven stages ------------------------------------------------------------------------


def _llama_layer_params(d=4096, f=11008):
    """Llama-2-7B per layer: q, k, v, o (4 d^2, MHA), gate/up/down (3 d f), two RMSNorms."""
    return 4 * d * d + 3 * d * f + 2 * d


def test_uneven_stages_move_the_busiest_device_by_hand():
    # Llama-2-7B (32 layers, d 4096, V 32000) over 4 stages, mixed-precision Adam at ZeRO-0
    # (16 bytes per parameter), FlashAttention, no recompute, m = 8 micro-batches.
    d, V, s, p, m = 4096, 32000, 4096, 4, 8
    base = dict(model="llama-2-7b", hardware="h100-sxm", pp=p, seq_len=s, global_batch=m)
    spec = load_model("llama-2-7b").spec()
    with jax.enable_x64(True):
        act, _ = layer_activation_bytes(
            spec.astype(np.float64), P.shard(spec.astype(np.float64), 1.0),
            Layout(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0), float(s), float(s),
            Bits(16.0, 16.0, 32.0, 16.0, 8.0), Schedule(0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0), 0.0)
    a = float(act)  # one layer, one micro-batch
    states = 16 * _llama_layer_params()  # bytes per layer
    ends = 16 * (V * d + d)  # each end stage: the embedding table (or head) and final norm
    logits = 4 * s * V

    # even: 8 layers everywhere; the first stage keeps p = 4 micro-batches in flight
    even = train(**base)
    assert even["weight_bytes"] + even["grad_bytes"] + even["optimizer_bytes"] == pytest.approx(
        8 * states + ends)
    assert even["activation_bytes"] == pytest.approx(8 * a * p)

    # first 4, last 12: the middle stages take (32 - 16) / 2 = 8 each; per device kind
    # (weights + gradients + optimizer) + activations (1F1B: p - r micro-batches at rank r)
    uneven = train(first_stage_layers=4, last_stage_layers=12, **base)
    first = 4 * states + ends + 4 * a * p
    middle = 8 * states + 8 * a * (p - 1)
    last = 12 * states + ends + 12 * a + logits
    assert last > max(first, middle)  # the 12-layer last stage is now the busiest
    assert uneven["memory_bytes"] == pytest.approx(last)
    assert uneven["activation_bytes"] == pytest.approx(12 * a + logits)
    assert uneven["weight_bytes"] == pytest.approx(2 / 16 * (12 * states + ends))
    assert uneven["valid"]

    # first 12, last 4: now the first stage (12 layers x p micro-batches) is the busiest
    flipped = train(first_stage_layers=12, last_stage_layers=4, **base)
    first = 12 * states + ends + 12 * a * p
    assert flipped["memory_bytes"] == pytest.approx(first)
    assert flipped["activation_bytes"] == pytest.approx(12 * a * p)


def test_uneven_stages_time_the_slowest_stage():
    # T(n layers + head) from two even splits (pp 4: 8 layers, pp 2: 16 layers, both with
    # the head on the last stage): T_layer = (T16 - T8)/8; a 12-layer last stage takes
    # T8 + 4 T_layer per micro-batch and sets the pipeline's pace (bubble (p-1) T).
    base = dict(model="llama-2-7b", hardware="h100-sxm", seq_len=4096, global_batch=8)
    t8 = train(pp=4, **base)["bubble_s"] / 3
    t16 = train(pp=2, **base)["bubble_s"] / 1
    t_layer = (t16 - t8) / 8
    uneven = train(pp=4, first_stage_layers=4, last_stage_layers=12, **base)
    assert uneven["bubble_s"] / 3 == pytest.approx(t8 + 4 * t_layer, rel=1e-9)
    assert uneven["compute_s"] == pytest.approx(8 * (t8 + 4 * t_layer), rel=1e-9)
    # first 9, last 7 (+ head, ~0.65 of a layer), middle 8: the first stage (9 layers +
    # the embedding lookup) is the slowest, faster than 9 layers + the head
    lighter = train(pp=4, first_stage_layers=9, last_stage_layers=7, **base)
    assert 9 * t_layer < lighter["bubble_s"] / 3 < t8 + t_layer


def test_llama_405b_interleaves_over_16_stages_with_uneven_ends():
    # Llama-3.1-405B: 126 layers. pp 16 x v 2 = 32 does not divide 126, so the even
    # interleaved schedule is schedule_indivisible and plain 1F1B keeps a (p - 1)/m =
    # 15/32 = 47% bubble at m = 2048 / (1 x 64) = 32 micro-batches. With Megatron-LM's
    # --decoder-first-pipeline-num-layers 8 --decoder-last-pipeline-num-layers 6 the 14
    # middle stages take (126 - 14)/14 = 8 layers, every stage's count divides by v = 2,
    # and the bubble halves to 15/(2 x 32) = 23%. (The Llama 3 paper's own split, one
    # layer fewer on each end, 7 + 14 x 8 + 7, is valid too, and interleaves with the
    # layout flag: end chunks of 3 and 4 layers.)
    base = dict(model="llama-3.1-405b", hardware="h100-sxm", tp=8, pp=16, num_devices=8192,
                global_batch=2048, seq_len=8192, recompute="full", sequence_parallel=True,
                zero_stage=1)
    plain = train(**base)
    assert plain["grad_accum_steps"] == 32 and plain["valid"]
    assert plain["bubble_fraction"] == pytest.approx(15 / 32)
    even = train(virtual_stages=2, **base)
    assert not even["valid"] and int(even["reason"]) & SCHEDULE
    split = train(virtual_stages=2, first_stage_layers=8, last_stage_layers=6, **base)
    assert split["valid"], split["reason"]
    assert split["bubble_fraction"] == pytest.approx(15 / 64)
    assert split["step_s"] < 0.9 * plain["step_s"]
    llama3 = train(first_stage_layers=7, last_stage_layers=7, **base)
    assert llama3["valid"]
    assert train(virtual_stages=2, first_stage_layers=7, last_stage_layers=7, **base)["valid"]


# --- what is valid ------------------------------------------------------------------------


@pytest.mark.parametrize("axes,valid", [
    # uneven stages, Megatron-LM's checks (Llama-2-7B: 32 layers; m = 8 micro-batches)
    (dict(pp=4, first_stage_layers=4, last_stage_layers=12), True),  # 16 over 2 middle
    (dict(pp=4, first_stage_layers=5), True),  # 27 over the other 3 stages: 9 each
    (dict(pp=4, first_stage_layers=6), False),  # 26 over 3 stages
    (dict(pp=4, first_stage_layers=4, last_stage_layers=11), False),  # 17 over 2
    (dict(pp=1, first_stage_layers=4), False),  # no pipeline to split
    (dict(pp=2, first_stage_layers=10, last_stage_layers=10), False),  # 12 layers left over
    (dict(pp=2, first_stage_layers=10, last_stage_layers=22), True),
    (dict(pp=4, first_stage_layers=20, last_stage_layers=20), False),  # more than L
    (dict(pp=4, virtual_stages=2, first_stage_layers=4, last_stage_layers=12), True),
    # an end's layers need not divide by v (--pipeline-model-parallel-layout), the
    # middle stages' do
    (dict(pp=4, virtual_stages=2, first_stage_layers=5, last_stage_layers=11), True),  # 8, 8
    (dict(pp=4, virtual_stages=4, first_stage_layers=4, last_stage_layers=12), True),
    (dict(pp=4, virtual_stages=4, first_stage_layers=6, last_stage_layers=10), True),  # 8, 8
    (dict(pp=4, virtual_stages=4, first_stage_layers=6, last_stage_layers=6), False),  # 10/4
    (dict(pp=4, virtual_stages=2, first_stage_layers=4, last_stage_layers=6), False),  # 11/2
    # schedules
    (dict(pp=4, pp_schedule="gpipe"), True),
    (dict(pp=4, pp_schedule="zb-h1"), True),
    (dict(pp=4, pp_schedule="dualpipe"), True),  # m = 8 = 2p
    (dict(pp=4, virtual_stages=2, pp_schedule="gpipe"), False),
    (dict(pp=4, virtual_stages=2, pp_schedule="zb-h1"), False),
    (dict(pp=4, virtual_stages=2, pp_schedule="dualpipe"), False),
    (dict(pp=8, pp_schedule="dualpipe", global_batch=16), True),  # m = 16 = 2p
    (dict(pp=8, pp_schedule="dualpipe", global_batch=8), False),  # m < 2p
    (dict(pp=2, pp_schedule="dualpipe", global_batch=5), False),  # odd m
    (dict(pp=1, pp_schedule="dualpipe"), False),  # odd pp
    (dict(pp=1, pp_schedule="gpipe"), True),
    (dict(pp=2, pp_schedule="zb-h1", first_stage_layers=12), True),
])
def test_which_layouts_and_schedules_are_valid(axes, valid):
    """The schedule_indivisible flag (other flags, e.g. oom, aside)."""
    axes.setdefault("global_batch", 8)
    out = train(model="llama-2-7b", hardware="h100-sxm", **axes)
    assert bool(int(out["reason"]) & SCHEDULE) is (not valid)


# --- the default program is unchanged ------------------------------------------------------


def test_the_general_program_at_the_defaults_is_the_plain_one():
    """A study that switches the schedules on (an axis with "1f1b" and "gpipe", or first
    and last stage layers of 0 and more) gives, at 1F1B with an even split, exactly the
    numbers of the plain study: the general program reduces to the old one."""
    axes = dict(model=["llama-2-7b", "mixtral-8x7b"], hardware="h100-sxm", pp=[1, 2, 4],
                virtual_stages=[1, 2], recompute=["none", "full"], zero_stage=[0, 3],
                tp=[1, 2], dp=2, global_batch=16, seq_len=4096)
    plain = sweep(study(**axes), progress=False)
    general = sweep(study(pp_schedule=["1f1b", "gpipe"], first_stage_layers=[0, 4], **axes),
                    progress=False)
    at = general.sel(pp_schedule="1f1b", first_stage_layers=0)
    assert set(plain.data_vars) == set(at.data_vars)
    for name in plain.data_vars:
        want = plain[name].broadcast_like(at[name]).transpose(*at[name].dims).values
        if want.dtype.kind == "f":  # another XLA program: the same sums, fused otherwise
            np.testing.assert_allclose(at[name].values, want, rtol=1e-13, err_msg=name)
        else:
            np.testing.assert_array_equal(at[name].values, want, err_msg=name)

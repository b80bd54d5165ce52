"""Mamba-2 hybrids (Nemotron-H, Nemotron-3): read from their Hugging Face configs as
dse's layers (dse.catalogue.model._hf_hybrid), their state-space layers keeping a state
per sequence that does not grow with the context (issue 40 item 3)."""

import json
from pathlib import Path

import pytest

from dse.catalogue.model import card_from_hf_config
from dse.errors import InputError
from dse.formulas.params import total_params

from ..helpers import evaluate_point, sweep_text

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def _config(name):
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_the_pattern_becomes_mixer_layers_with_and_without_an_mlp():
    """Nemotron-3 Nano's hybrid_override_pattern (52 blocks: 23 M, 23 E, 6 *) is 29 mixer
    layers, 23 of them Mamba-2 (linear) with the 23 MoE blocks, 6 attention layers with no
    MLP; Nemotron-H-56B's (118: 54 M, 54 -, 10 *) is 64 layers, 54 Mamba, 10 without an
    MLP. The Mamba-2 shapes by hand from the config: n_groups 8 x d_state 128 (B and C),
    heads 64 x head_dim 64 (x and z), float32 state (mamba_ssm_cache_dtype)."""
    nano = card_from_hf_config(_config("nemotron-3-nano-30b-a3b"), "x", "nano").fields
    assert (nano["n_layers"], nano["linear_layers"], nano["n_dense_layers"],
            nano["mlp_free_layers"]) == (29, 23, 6, 6)
    assert (nano["linear_key_heads"], nano["linear_key_head_dim"], nano["linear_value_heads"],
            nano["linear_value_head_dim"], nano["linear_state_bits"]) == (8, 128, 64, 64, 32)
    assert nano["mlp"] == "plain" and nano["n_shared_experts"] == 2  # relu2; 3712 = 2 x 1856
    h56 = card_from_hf_config(_config("nemotron-h-56b"), "x", "h56").fields
    assert (h56["n_layers"], h56["linear_layers"], h56["mlp_free_layers"]) == (64, 54, 10)


def test_parameters_are_the_sum_of_the_blocks():
    """Nemotron-H-56B by hand (HF NemotronH modules; D 8192, vocab 131072 untied):
    a Mamba-2 block: in_proj D x (2 x 16384 + 2 x 8 x 256 + 256), conv (16384 + 4096) x
    4 + bias, dt_bias/A_log/D 3 x 256, gated norm 16384, out_proj 16384 x D, norm D;
    an MLP block: up and down D x 32768, norm D; an attention block: q 64 x 128, k and v
    8 x 128 each, o, norm D: 56,324,350,464 (a helper's count from the same modules
    agrees). dse prices the Mamba mixer as its DeltaNet layer, which has D x heads more
    projection inputs (a second per-head input), no convolution bias, dt_bias and A_log
    but no D (heads fewer), its norm over one head (64, not 16384), and counts two norms
    per mixer layer (128 against the 118 blocks' one each): exactly that much more."""
    d, inner, groups, state, heads = 8192, 16384, 8, 256, 256
    mamba = (d * (2 * inner + 2 * groups * state + heads) + (inner + 2 * groups * state) * 5
             + 3 * heads + inner + inner * d + d)
    mlp = 2 * d * 32768 + d
    attention = d * 64 * 128 * 2 + 2 * d * 8 * 128 + d
    by_hand = 54 * mamba + 54 * mlp + 10 * attention + 2 * 131072 * d + d
    assert by_hand == 56_324_350_464
    deltanet = 54 * (d * heads - (inner + 2 * groups * state) - heads + 64 - inner)
    card = card_from_hf_config(_config("nemotron-h-56b"), "x", "h56")
    # (to float32's rounding: jnp sums the spec in float32 outside enable_x64)
    assert float(total_params(card.spec())) == pytest.approx(by_hand + deltanet
                                                             + (128 - 118) * d, rel=1e-7)


def test_decode_memory_of_the_state_space_layers_is_constant_in_the_context():
    """Nemotron-3 Nano on one H100 at batch 1, 16-bit KV. By hand: the 6 attention layers
    cache 6 x 2 x 2 KV heads x 128 x 2 B = 6,144 B per token; each of the 23 Mamba layers
    keeps 64 heads x 64 x 128 float32 = 2,097,152 B of state and the convolution's last 3
    inputs of 8 x 128 x 2 + 4,096 channels at 2 B = 36,864 B, 49,082,368 B in all,
    whatever the context. So the cache is 49,082,368 + 6,144 x (input + output) bytes."""
    def cache(input_len):
        return evaluate_point(model="nemotron-3-nano-30b-a3b", hardware="h100-sxm", batch=1,
                              input_len=input_len, output_len=1024, kv_bits=16
                              )["kv_cache_bytes"]

    short, long = cache(1024), cache(32768)
    assert long - short == pytest.approx(6144 * (32768 - 1024), rel=1e-9)
    assert short - 6144 * (1024 + 1024) == pytest.approx(49_082_368, rel=1e-9)


def test_unknown_blocks_are_refused():
    """A block type dse does not know, and Mamba layers without a hybrid pattern, are
    one-line errors naming the key, not a guess."""
    config = _config("nemotron-3-nano-30b-a3b")
    with pytest.raises(InputError, match=r"hybrid_override_pattern.*'X'"):
        card_from_hf_config(dict(config, hybrid_override_pattern="MEX*"), "x", "x")
    with pytest.raises(InputError, match="ssm_state_size"):
        card_from_hf_config({k: v for k, v in config.items()
                             if k != "hybrid_override_pattern"}, "x", "x")


def test_a_latent_moe_layer_by_hand():
    """Nemotron-3 Super's LatentMoE layer (HF NemotronHMoE; D 4096, latent 1024): 512
    routed relu2 experts of 2688 on latent-wide tokens, 2 x 1024 x 2688 each; the shared
    expert of 5376 at D, 2 x 4096 x 5376; the router 4096 x 512; fc1_latent_proj and
    fc2_latent_proj, 2 x 4096 x 1024: 2,873,098,240 parameters (at D-wide experts it
    would be 11.3e9). Its 40 such layers are 95% of the 120B."""
    from dse.formulas.params import moe_mlp_params, whole
    by_hand = (512 * 2 * 1024 * 2688 + 2 * 4096 * 5376 + 4096 * 512 + 2 * 4096 * 1024)
    assert by_hand == 2_873_098_240
    spec = card_from_hf_config(_config("nemotron-3-super-120b-a12b"), "x", "super").spec()
    assert spec.moe_latent_size == 1024
    assert float(moe_mlp_params(spec, whole(spec), spec.n_experts)) == by_hand


def test_a_latent_moe_decode_step_reads_latent_wide_experts():
    """Nemotron-3 Super, one decode token over tp 8 (16-bit weights and activations): per
    MoE layer and device the step reads the router (4096 x 512, whole), the two latent
    projections (4096 x 1024 each, whole, as vLLM and TensorRT-LLM replicate them), the
    shared expert (4096 x 5376 / 8 and back) and the 22 experts the token routes to, each
    2 x 1024 x 2688 / 8 on latent-wide rows, with their rows' activations in and out.
    40 MoE layers; the 'moe' breakdown component."""
    d, lat, e, k = 4096, 1024, 512, 22
    ff_s, ff_r = 5376 // 8, 2688 // 8
    router = 2 * (d * e + d + e)
    latent = 2 * 2 * (d * lat + d + lat)
    shared = 2 * (2 * d * ff_s + 2 * (d + ff_s) + 2 * ff_s)
    routed = 2 * (k * 2 * lat * ff_r + 2 * k * (lat + ff_r) + 2 * k * ff_r)
    ds = sweep_text("""
[study]
dtype = "float64"
[axes]
model = "nemotron-3-super-120b-a12b"
hardware = "h200"
tp = 8
batch = 1
input_len = 512
output_len = 128
[output]
breakdown = true
""")
    got = float(ds["component_bytes"].sel(phase="decode", component="moe"))
    assert got == pytest.approx(40 * (router + latent + shared + routed), rel=1e-9)

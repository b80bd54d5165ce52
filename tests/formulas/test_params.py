"""Parameter counts against hand derivations and published totals (formulas/params.py)."""

import math

import numpy as np
import pytest

from dse.catalogue import lookup as catalogue
from dse.formulas.params import active_params, total_params
from dse.catalogue.model import stack

from ..helpers import evaluate_point


def test_llama_2_70b_by_hand():
    # HF meta-llama/Llama-2-70b-hf config: D=8192, L=80, N=64, K=8, H=128, F=28672,
    # V=32000, untied. Per layer: q,o 2*D*D; k,v 2*D*K*H; SwiGLU 3*D*F; 2 RMSNorm D.
    d, layers, kv, f, v = 8192, 80, 8 * 128, 28672, 32000
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
    expected = layers * per_layer + 2 * v * d + d
    assert expected == 68_976_648_192  # "68.98B": HF safetensors total of Llama-2-70b-hf
    out = evaluate_point(model="llama-2-70b", hardware="h100-sxm", tp=8)
    assert out["n_params"] == expected


def test_llama_3_8b_by_hand():
    # HF meta-llama/Meta-Llama-3-8B config: D=4096, L=32, N=32, K=8, F=14336, V=128256.
    d, layers, kv, f, v = 4096, 32, 8 * 128, 14336, 128256
    expected = layers * (2 * d * d + 2 * d * kv + 3 * d * f + 2 * d) + 2 * v * d + d
    assert expected == 8_030_261_248  # Meta's model card: 8.03B
    out = evaluate_point(model="llama-3-8b", hardware="h100-sxm")
    assert out["n_params"] == expected


def _quoted_tolerance(published: int) -> float:
    """One unit of the last digit a published count quotes ("1.3B" -> 0.1B).

    Model cards do not always round to nearest (MPT-7B's 6.649B is quoted as "6.7B").
    Exact counts (Hugging Face safetensors totals) get 1e-4 relative: Llama-2
    checkpoints also store 64 rotary inv_freq buffers per layer, which are no weights.
    """
    digits = str(int(published))
    unit = 10 ** (len(digits) - len(digits.rstrip("0")))
    return max(unit, 1e-4 * published)


def test_catalogue_against_published_counts():
    """Every catalogue model with a published total matches it to the quoted precision.

    Published counts come from each model's card, paper or safetensors metadata, as
    recorded with their source in models/*.toml (``published_params_source``).
    DeepSeek-V3's 671B excludes its MTP module, which dse does not model either.
    """
    cards = [c for c in catalogue.all_models() if "published_params" in c.fields
             and "published_params_other" not in c.fields
             and c.name not in ("glm-4.5", "glm-4.6")]  # test_architectures.py (MTP, vision)
    assert len(cards) >= 25
    table = stack([c.spec() for c in cards])
    computed = np.asarray(total_params(table))
    bad = {}
    for card, n in zip(cards, computed):
        published = card.fields["published_params"]
        if abs(n - published) > _quoted_tolerance(published):
            bad[card.name] = (int(n), published)
    assert not bad


def test_moe_active_against_published_counts():
    cards = [c for c in catalogue.all_models() if "published_active_params" in c.fields
             and c.fields.get("published_active_convention", "all") == "all"]
    assert {"mixtral-8x7b", "deepseek-v3", "qwen3-235b-a22b"} <= {c.name for c in cards}
    table = stack([c.spec() for c in cards])
    active = np.asarray(active_params(table))
    for card, n in zip(cards, active):
        published = card.fields["published_active_params"]
        # active counts are quoted to 2-3 digits ("3.3B", "37B", "12.9B")
        assert abs(n - published) <= max(_quoted_tolerance(published), 0.02 * published), card.name


def test_mixtral_total_and_active():
    # Mistral AI: Mixtral 8x7B has 46.7B parameters, 12.9B used per token.
    card = catalogue.load_model("mixtral-8x7b")
    table = stack([card.spec()])
    assert float(total_params(table)[0]) == pytest.approx(46.7e9, rel=0.002)
    assert float(active_params(table)[0]) == pytest.approx(12.9e9, rel=0.005)


def test_float32_counts_do_not_overflow():
    """405B parameters and 1e20-scale FLOPs stay exact to float32 precision.

    JAX defaults to 32-bit: an int32 count would wrap at 2.1e9; dse keeps every count in
    floating point, whose float32 relative error is below 2^-24 ~ 6e-8.
    """
    exact = evaluate_point("float64", model="llama-3.1-405b", hardware="h100-sxm", tp=8, pp=4)
    single = evaluate_point("float32", model="llama-3.1-405b", hardware="h100-sxm", tp=8, pp=4,
                            batch=1024, input_len=100_000, output_len=28_000)
    assert exact["n_params"] > 2**31 * 100
    assert single["n_params"] == pytest.approx(exact["n_params"], rel=1e-7)
    assert math.isfinite(single["prefill_flops"]) and single["prefill_flops"] > 1e20

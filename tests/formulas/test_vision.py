"""Vision-language models: the encoder of a request's image priced before its prefill,
its tokens prefilled and cached as text (issue 40 item 3; dse.formulas.vision)."""

import json
from pathlib import Path

import jax
import pytest

from dse.catalogue import lookup as catalogue
from dse.catalogue.model import card_from_hf_config
from dse.errors import InputError
from dse.formulas.vision import vision_params
from dse.study import parse_study

from ..helpers import evaluate_point, study_text, sweep_text

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


@pytest.mark.parametrize("name, checkpoint", [
    # the visual.* tensors of each checkpoint, summed from their shapes (each card's notes)
    ("qwen3-vl-8b", 576_388_336), ("qwen3-vl-30b-a3b", 538_631_408),
    ("qwen3-vl-32b", 595_266_800), ("qwen3.5-35b-a3b", 446_571_248),
    ("qwen3.5-27b", 460_730_096), ("qwen3.5-122b-a10b", 451_290_864),
])
def test_the_encoder_has_its_checkpoints_parameters(name, checkpoint):
    read = card_from_hf_config(json.loads((CONFIGS / f"{name}.json").read_text()), "x", name)
    with jax.enable_x64(True):  # (float32 holds 5.8e8 to 32)
        assert float(vision_params(read.spec())) == checkpoint
    assert catalogue.load_model(name).spec() == read.spec()  # the card says the same


def test_ttft_grows_with_image_tokens_by_the_encoders_pass():
    """Qwen3-VL-8B on one H100, plain roofline, float64. 1,024 image tokens are 4,096
    patches (merge 2 x 2). By hand, the encoder's FLOPs: per block 2 P (3 d^2 + d^2 +
    2 d f) for the projections and MLP, their biases P (3 d + d + f + d), 2 x 2 P^2 d for
    scores and values, 8 P d for norms, activation and residuals; 27 blocks; 4 mergers
    of 2 (P/4)(4d)(4d) + 2 (P/4)(4d)(4096) + biases; the patch embedding 2 P 1536 d + P d.
    The TTFT with the image is the TTFT of a 512 + 1,024-token text prompt plus the
    encoder's time, which is at least its FLOPs at the H100's 989 TFLOP/s."""
    d, f, blocks, patches, tokens = 1152, 4304, 27, 4096, 1024
    block = (2 * patches * (4 * d * d + 2 * d * f) + patches * (5 * d + f)
             + 4 * patches * patches * d + 8 * patches * d)
    merger = 2 * tokens * (4 * d) ** 2 + 2 * tokens * 4 * d * 4096 + tokens * (4 * d + 4096)
    flops = blocks * block + 4 * merger + 2 * patches * 1536 * d + patches * d
    axes = dict(model="qwen3-vl-8b", hardware="h100-sxm", batch=1, output_len=128)
    text = sweep_text(_f64(study_text(input_len=1536, **axes)) + "[output]\nbreakdown = true\n")
    image = sweep_text(_f64(study_text(input_len=512, image_tokens=[1024], **axes))
                       + "[output]\nbreakdown = true\n")
    vision = _one(image["component_flops"].sel(phase="prefill", component="vision"))
    assert vision == pytest.approx(flops, rel=1e-9)
    encoder_s = _one(image["component_s"].sel(phase="prefill", component="vision"))
    assert encoder_s >= flops / 989.4e12
    assert _one(image["ttft_s"]) == pytest.approx(_one(text["ttft_s"]) + encoder_s, rel=1e-9)
    assert _one(image["tpot_s"]) == pytest.approx(_one(text["tpot_s"]), rel=1e-9)


def _f64(text: str) -> str:
    return text.replace('name = "t"', 'name = "t"\ndtype = "float64"')


def _one(array) -> float:
    return float(array.squeeze())


def test_under_load_a_requests_image_is_encoded_once():
    """One client (a closed loop of 1): each request's prefill carries its encoder pass,
    so its TTFT is the text prompt's plus the encoder at batch 1 (the static path's)."""
    axes = dict(model="qwen3-vl-8b", hardware="h100-sxm", output_len=64)
    load = dict(concurrency=1, max_num_seqs=8)
    text = evaluate_point(input_len=1536, **axes, **load)
    image = evaluate_point(input_len=512, image_tokens=1024, **axes, **load)
    static = sweep_text(study_text(input_len=512, image_tokens=[1024], batch=1, **axes)
                        + "[output]\nbreakdown = true\n")
    encoder_s = _one(static["component_s"].sel(phase="prefill", component="vision"))
    assert image["ttft_s"] - text["ttft_s"] == pytest.approx(encoder_s, rel=0.02)


def test_image_tokens_for_a_model_without_an_encoder_are_refused():
    with pytest.raises(InputError, match=r"axes.image_tokens: model 'llama-2-7b' has no "
                                         r"vision encoder"):
        parse_study(study_text(model="llama-2-7b", hardware="h100-sxm", image_tokens=256),
                    "<t>")

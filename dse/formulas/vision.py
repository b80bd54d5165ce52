"""The vision encoder of a vision-language model: a prefill cost of its image tokens.

A request's image becomes ``image_tokens`` tokens of the language model's prompt (as
the study states them: after the encoder's merger). The encoder (Qwen3-VL's and
Qwen3.5's ViT, HF ``Qwen3VLVisionModel``) first runs over the image's patches, ``merge``
of them per image token (``spatial_merge_size`` squared):

- a patch embedding (a convolution over ``patch_inputs`` = channels x temporal patch x
  patch^2 pixel values per patch, as a matmul) and a learned position table;
- ``layers`` pre-norm ViT blocks of width d: q, k, v and o projections with biases,
  full attention among the image's patches (2 P^2 d FLOPs per block for P patches), a
  non-gated MLP d -> f -> d with biases, two LayerNorms;
- ``mergers`` patch mergers (the final one and Qwen3-VL's DeepStack ones), each
  merge d -> merge d -> D (D the language model's width) over P / merge rows.

Every matmul is priced as the language model's are (roofline at its shape, the device's
rates and surfaces), sharded over the tensor-parallel ranks as vLLM shards the encoder;
the encoder keeps 16-bit weights whatever the language model's precision. One image per
request: its patches attend among themselves.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import operators as op, parts
from .types import ModelSpec, Part, Rates
from .roofline import shaped

VISION_BITS = 16.0  # engines keep the encoder in 16 bits (its quantization is rare)


def vision_params(m: ModelSpec):
    """Parameters of the whole encoder (0 without one): blocks, patch embedding (with
    bias), position table and mergers, each two matmuls with biases after a LayerNorm:
    over d in the final merger, over merge d in DeepStack's. Qwen3-VL-8B (d 1152, f 4304,
    27 blocks, merge 4, 4 mergers, 1536 patch inputs, 2304 positions, D 4096):
    576,388,336, its checkpoint's visual.* tensors to the parameter."""
    d, f = m.vision_width, m.vision_d_ff
    block = 4.0 * d * d + 4.0 * d + 2.0 * d * f + f + d + 4.0 * d
    wide = m.vision_merge * d
    merger = wide * wide + wide + wide * m.d_model + m.d_model
    norms = 2.0 * d + (m.vision_mergers - 1.0) * 2.0 * wide
    return (m.vision_layers * block + m.vision_patch_inputs * d + d + m.vision_positions * d
            + m.vision_mergers * merger + jnp.minimum(m.vision_mergers, 1.0) * norms)


def encoder(m: ModelSpec, images, image_tokens, act_bits, rates: Rates, tp) -> Part:
    """The encoder's pass over ``images`` images of ``image_tokens`` tokens each, on one
    of ``tp`` devices: one Part (time, FLOPs, bytes and roofline sides)."""
    d, f, layers = m.vision_width, m.vision_d_ff, m.vision_layers
    patches = image_tokens * m.vision_merge  # per image
    rows = images * patches
    w, a = VISION_BITS, act_bits

    def gemm(r, k, n, bias=1.0):
        return parts.of(op.matmul(r, k, n, w, a, bias), shaped(rates, r))

    block = parts.add(
        gemm(rows, d, 3.0 * d / tp), gemm(rows, d / tp, d),  # q, k, v; o (row-parallel)
        gemm(rows, d, f / tp), gemm(rows, f / tp, d),  # MLP up; down (row-parallel)
        # scores and values among each image's patches: heads split over the ranks
        parts.of(op.matmul(images * patches, d / tp, patches, a, a), shaped(rates, rows)),
        parts.of(op.matmul(images * patches, patches, d / tp, a, a), shaped(rates, rows)),
        # two LayerNorms, the activation and the residual adds: a few passes over the rows
        parts.of(op.elementwise(rows * d, 6.0, 4.0, a, 8.0), rates))
    merged = images * image_tokens
    wide = m.vision_merge * d
    merger = parts.add(gemm(merged, wide, wide / tp), gemm(merged, wide / tp, m.d_model))
    embed = gemm(rows, m.vision_patch_inputs, d / tp)
    return parts.add(parts.scale(block, layers), parts.scale(merger, m.vision_mergers), embed)

"""Model architecture: the catalogue card (Python side) and its numeric spec (a pytree).

A :class:`ModelSpec` holds only numbers, so a table of several models is the same
pytree with array leaves (one entry per model) and the evaluator gathers a model per
grid point inside ``jit``. Booleans are stored as 0/1 floats for the same reason.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import pytrees
from .. import checks
from ..errors import InputError
from ..formulas.types import ModelSpec


FIELDS = tuple(f.name for f in dataclasses.fields(ModelSpec))

_REQUIRED_INT = ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size", "max_seq_len")
_OPTIONAL_INT = ("n_kv_heads", "norms_per_layer", "head_dim", "learned_pos_rows", "n_experts", "top_k",
                 "d_ff_expert", "n_shared_experts", "n_dense_layers", "q_lora_rank",
                 "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                 "sliding_window", "published_params", "published_active_params",
                 "published_params_other",
                 "moe_layer_step", "linear_layers", "linear_key_heads", "linear_value_heads",
                 "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel",
                 "linear_state_bits", "index_topk", "index_n_heads", "index_head_dim",
                 "mlp_free_layers", "mlp_only_layers", "moe_latent_size", "global_head_dim",
                 "global_kv_heads",
                 "vision_layers", "vision_width", "vision_d_ff",
                 "vision_merge", "vision_mergers", "vision_patch_inputs", "vision_positions")
_BOOL = ("tied_embeddings", "qkv_bias", "linear_bias", "qk_norm", "norm_bias",
         "attention_sinks", "attention_output_gate", "expert_bias", "global_kv_equal")
_CHOICE = {"mlp": ("gated", "plain"), "norm": ("rmsnorm", "layernorm"),
           "position": ("rope", "learned", "alibi", "none"),
           # what a published active count includes: everything a token uses, or all but
           # the input embedding (gpt-oss, DeepSeek), or neither embedding nor LM head
           "published_active_convention": ("all", "no_input_embedding", "no_embeddings")}
_TEXT = ("name", "long_name", "family", "source", "notes", "activation",
         "published_params_source")
_FLOAT = ("sliding_window_layers", "index_layer_fraction")
KNOWN_KEYS = frozenset(_REQUIRED_INT + _OPTIONAL_INT + _BOOL + tuple(_CHOICE) + _TEXT + _FLOAT
                       + ("aliases", "checkpoints"))
# a quantized checkpoint's precision: the study's default for the keys it leaves out
CHECKPOINT_KEYS = ("weight_bits", "kv_bits")
_CHECKPOINT_BITS = (4, 8, 16)


@dataclasses.dataclass(frozen=True)
class ModelCard:
    """A catalogue entry: the validated fields of a model TOML (or HF config.json)."""

    name: str
    fields: Mapping[str, Any]
    file: str

    @property
    def long_name(self) -> str:
        return str(self.fields.get("long_name", self.name))

    @property
    def is_moe(self) -> bool:
        return int(self.fields.get("n_experts", 0)) > 0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], file: str, name: str | None = None
                     ) -> "ModelCard":
        """Validate a model mapping; raise :class:`InputError` naming the bad key."""
        data = dict(data)
        name = str(data.get("name", name or ""))
        if not name:
            raise InputError(file, "name", "missing", "a lowercase hyphenated name")
        checks.known_keys(data, KNOWN_KEYS, file, what="model key")
        checks.string_list(data, "aliases", [], file)
        for key in _REQUIRED_INT:
            if key not in data:
                raise InputError(file, key, "missing", "a positive integer")
        for key in _REQUIRED_INT + _OPTIONAL_INT:
            if key in data:
                value = data[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (
                        key in _REQUIRED_INT and value == 0):
                    raise InputError(file, key, f"value {value!r} is not valid",
                                     "a positive integer")
        for key in _BOOL:
            if key in data and not isinstance(data[key], bool):
                raise InputError(file, key, f"value {data[key]!r} is not valid", "true or false")
        for key, choices in _CHOICE.items():
            if key in data and data[key] not in choices:
                raise InputError(file, key, f"value {data[key]!r} is not valid", ", ".join(choices))
        checkpoints = data.get("checkpoints", {})
        if not isinstance(checkpoints, Mapping) or any(
                not isinstance(v, Mapping) or set(v) - set(CHECKPOINT_KEYS)
                or any(b not in _CHECKPOINT_BITS or isinstance(b, bool) for b in v.values())
                for v in checkpoints.values()):
            raise InputError(file, "checkpoints", f"value {checkpoints!r} is not valid",
                             "a table: checkpoint id (one of the aliases, or the source's own) "
                             "-> { weight_bits = 4 | 8 | 16, kv_bits = 8 | 16 }")
        for key in _FLOAT:
            frac = data.get(key, 1.0)
            if not isinstance(frac, (int, float)) or isinstance(frac, bool) or not 0 <= frac <= 1:
                raise InputError(file, key, f"value {frac!r} is not valid",
                                 "a fraction in [0, 1]")
        card = cls(name=name, fields=data, file=file)
        card._check_shapes()
        return card

    def _check_shapes(self) -> None:
        f = self.fields
        n_heads, n_kv = f["n_heads"], f.get("n_kv_heads", f["n_heads"])
        if n_heads % n_kv:
            raise InputError(self.file, "n_kv_heads",
                             f"{n_kv} does not divide n_heads = {n_heads}",
                             "a divisor of n_heads")
        if "head_dim" not in f and f["d_model"] % n_heads and not f.get("kv_lora_rank"):
            raise InputError(self.file, "head_dim",
                             f"missing and d_model = {f['d_model']} is not a multiple of "
                             f"n_heads = {n_heads}", "an explicit head_dim")
        for key in ("global_head_dim", "global_kv_heads", "global_kv_equal"):
            if f.get(key) and not f.get("sliding_window"):
                raise InputError(self.file, key, "full-attention layers of shapes of their own "
                                 "need sliding-window layers beside them (sliding_window)",
                                 "sliding_window > 0, or no global_* keys")
        g_kv = f.get("global_kv_heads")
        if g_kv and n_heads % g_kv:
            raise InputError(self.file, "global_kv_heads",
                             f"{g_kv} does not divide n_heads = {n_heads}", "a divisor of n_heads")
        if f.get("n_experts", 0):
            for key in ("top_k", "d_ff_expert"):
                if not f.get(key):
                    raise InputError(self.file, key, "missing for an MoE model (n_experts > 0)",
                                     "a positive integer")
            if f["top_k"] > f["n_experts"]:
                raise InputError(self.file, "top_k", f"{f['top_k']} exceeds n_experts",
                                 f"1..{f['n_experts']}")
        if f.get("linear_layers"):
            if f["linear_layers"] >= f["n_layers"]:
                raise InputError(self.file, "linear_layers", f"{f['linear_layers']} leaves no "
                                 f"full-attention layer of {f['n_layers']}",
                                 f"0..{f['n_layers'] - 1}")
            for key in ("linear_key_heads", "linear_value_heads", "linear_key_head_dim",
                        "linear_value_head_dim", "linear_conv_kernel"):
                if not f.get(key):
                    raise InputError(self.file, key, "missing for a model with linear-attention "
                                     "layers (linear_layers > 0)", "a positive integer")
        if f.get("mlp_free_layers", 0) > _dense_layers(f):
            raise InputError(self.file, "mlp_free_layers", f"{f['mlp_free_layers']} exceeds the "
                             f"{_dense_layers(f)} layers without experts",
                             f"0..{_dense_layers(f)}")
        if f.get("mlp_only_layers") and f.get("n_experts"):
            raise InputError(self.file, "mlp_only_layers", f"{f['mlp_only_layers']} MLP-only "
                             "layers in an MoE model, which dse does not model",
                             "0 or absent, or a dense model (n_experts 0)")
        if f.get("vision_layers"):
            for key in ("vision_width", "vision_d_ff", "vision_merge", "vision_mergers",
                        "vision_patch_inputs"):
                if not f.get(key):
                    raise InputError(self.file, key, "missing for a model with a vision "
                                     "encoder (vision_layers > 0)", "a positive integer")
        if f.get("kv_lora_rank"):
            for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if not f.get(key):
                    raise InputError(self.file, key, "missing for an MLA model (kv_lora_rank > 0)",
                                     "a positive integer")
        if f.get("index_topk"):
            # DeepSeek Sparse Attention: an indexer beside MLA (its query from the q latent)
            for key in ("kv_lora_rank", "q_lora_rank", "index_n_heads", "index_head_dim"):
                if not f.get(key):
                    raise InputError(self.file, key, "missing for a model with DeepSeek Sparse "
                                     "Attention (index_topk > 0)", "a positive integer")
            for key in ("sliding_window", "linear_layers"):
                if f.get(key):
                    raise InputError(self.file, key, f"{f[key]} with index_topk: sparse "
                                     "attention on windowed or linear-attention layers is not "
                                     "modelled", "0 or absent")

    def spec(self) -> ModelSpec:
        """The numeric spec (float64 numpy scalars)."""
        f = self.fields
        n_heads = f["n_heads"]
        mla = bool(f.get("kv_lora_rank"))
        head_dim = f.get("head_dim") or (
            f["qk_nope_head_dim"] + f["qk_rope_head_dim"] if mla else f["d_model"] // n_heads)
        norm = f.get("norm", "rmsnorm")
        norm_params = 1 if norm == "rmsnorm" else (2 if f.get("norm_bias", True) else 1)
        if f.get("position", "rope") == "learned":
            pos_rows = f.get("learned_pos_rows", f["max_seq_len"])
        else:
            pos_rows = 0
        values = dict(
            n_layers=f["n_layers"], d_model=f["d_model"], n_heads=n_heads,
            n_kv_heads=f.get("n_kv_heads", n_heads), head_dim=head_dim, d_ff=f["d_ff"],
            vocab_size=f["vocab_size"], max_seq_len=f["max_seq_len"],
            tied_embeddings=float(f.get("tied_embeddings", False)),
            mlp_matrices=3 if f.get("mlp", "gated") == "gated" else 2,
            norm_params=norm_params, norms_per_layer=f.get("norms_per_layer", 2),
            qkv_bias=float(f.get("qkv_bias", False)),
            linear_bias=float(f.get("linear_bias", False)), qk_norm=float(f.get("qk_norm", False)),
            learned_pos_rows=pos_rows,
            n_experts=f.get("n_experts", 0), top_k=f.get("top_k", 0),
            d_ff_expert=f.get("d_ff_expert", 0), n_shared_experts=f.get("n_shared_experts", 0),
            n_dense_layers=_dense_layers(f), mlp_free_layers=f.get("mlp_free_layers", 0),
            mlp_only_layers=f.get("mlp_only_layers", 0),
            q_lora_rank=f.get("q_lora_rank", 0), kv_lora_rank=f.get("kv_lora_rank", 0),
            qk_nope_head_dim=f.get("qk_nope_head_dim", 0),
            qk_rope_head_dim=f.get("qk_rope_head_dim", 0), v_head_dim=f.get("v_head_dim", 0),
            sliding_window=f.get("sliding_window", 0),
            sliding_window_layers=f.get("sliding_window_layers", 1.0) if f.get("sliding_window") else 0.0,
            attention_sinks=float(f.get("attention_sinks", False)),
            attention_output_gate=float(f.get("attention_output_gate", False)),
            expert_bias=float(f.get("expert_bias", False)),
            linear_layers=f.get("linear_layers", 0),
            linear_key_heads=f.get("linear_key_heads", 0),
            linear_value_heads=f.get("linear_value_heads", 0),
            linear_key_head_dim=f.get("linear_key_head_dim", 0),
            linear_value_head_dim=f.get("linear_value_head_dim", 0),
            linear_conv_kernel=f.get("linear_conv_kernel", 0),
            linear_state_bits=f.get("linear_state_bits", 16),
            index_topk=f.get("index_topk", 0), index_n_heads=f.get("index_n_heads", 0),
            index_head_dim=f.get("index_head_dim", 0),
            index_layer_fraction=f.get("index_layer_fraction", 1.0),
            moe_latent_size=f.get("moe_latent_size", 0),
            global_head_dim=f.get("global_head_dim", 0),
            global_kv_heads=f.get("global_kv_heads", 0),
            global_kv_equal=float(f.get("global_kv_equal", False)),
            vision_layers=f.get("vision_layers", 0), vision_width=f.get("vision_width", 0),
            vision_d_ff=f.get("vision_d_ff", 0), vision_merge=f.get("vision_merge", 1),
            vision_mergers=f.get("vision_mergers", 0),
            vision_patch_inputs=f.get("vision_patch_inputs", 0),
            vision_positions=f.get("vision_positions", 0),
        )
        return ModelSpec(**{k: np.float64(v) for k, v in values.items()})

    def divisors_ok(self, tp: int) -> bool:
        """Whether tensor parallelism of degree ``tp`` can shard this model's heads."""
        f = self.fields
        n_kv = f.get("n_kv_heads", f["n_heads"])
        g_kv = f.get("global_kv_heads") or n_kv
        return f["n_heads"] % tp == 0 and all(k % tp == 0 or tp % k == 0 for k in (n_kv, g_kv))


def model_features(cards) -> frozenset:
    """The evaluator's static switches these models need: "moe" (experts), "mla" (latent
    attention), "sparse" (DeepSeek Sparse Attention on it), "window" (sliding-window
    layers), "linear" (linear-attention layers)."""
    out = set()
    for card in cards:
        f = card.fields
        if f.get("n_experts"):
            out.add("moe")
        if f.get("kv_lora_rank"):
            out.add("mla")
        if f.get("index_topk"):
            out.add("sparse")
        if f.get("sliding_window"):
            out.add("window")
        if f.get("linear_layers"):
            out.add("linear")
    return frozenset(out)


def _dense_layers(f: Mapping[str, Any]) -> int:
    """Layers with a dense MLP: all of a dense model; in an MoE model the first
    n_dense_layers (DeepSeek's first_k_dense_replace), and of the rest all but every
    moe_layer_step-th (Llama 4's interleave_moe_layer_step, Qwen's decoder_sparse_step:
    layer i is MoE when (i + 1) % step == 0). Only the count enters the formulas."""
    if not f.get("n_experts"):
        return f["n_layers"]
    first = f.get("n_dense_layers", 0)
    step = f.get("moe_layer_step", 1) or 1
    moe = sum(1 for i in range(first, f["n_layers"]) if (i + 1) % step == 0)
    return f["n_layers"] - moe


def stack(specs: list[ModelSpec], dtype=np.float64) -> ModelSpec:
    """A table of models: one pytree whose leaves have a leading model axis."""
    return pytrees.stack(specs, dtype)


# Hugging Face config.json keys -> catalogue keys (first match wins).
_HF_KEYS = {
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "n_heads": ("num_attention_heads", "n_head"),
    "n_kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "head_dim": ("head_dim", "attention_head_dim"),
    "d_ff": ("intermediate_size", "ffn_dim", "n_inner"),
    "vocab_size": ("vocab_size",),
    "max_seq_len": ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"),
    "n_experts": ("num_local_experts", "n_routed_experts", "num_experts"),
    "top_k": ("num_experts_per_tok", "top_k_experts"),
    "d_ff_expert": ("moe_intermediate_size",),
    "n_shared_experts": ("n_shared_experts",),
    "n_dense_layers": ("first_k_dense_replace",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "moe_latent_size": ("moe_latent_size",),
}
_PLAIN_MLP_TYPES = {"gpt2", "opt", "gpt_neox", "gptj", "bloom", "falcon", "mpt", "gpt_bigcode",
                    "phi", "starcoder2"}
_LAYERNORM_TYPES = _PLAIN_MLP_TYPES | {"stablelm"}
_LEARNED_POS_TYPES = {"gpt2", "opt", "gpt_bigcode"}
_BIAS_TYPES = {"gpt2", "opt", "gpt_neox", "gptj", "bloom", "gpt_bigcode", "phi", "starcoder2"}


def _hf_layer_pattern(config: Mapping[str, Any], model_type: str, out: dict) -> dict:
    """What Hugging Face configs of 2025-2026 models say about their layers beyond the
    classic keys: MoE placement and widths, shared experts, linear-attention layers,
    attention sinks and output gates, expert biases."""
    extra: dict[str, Any] = {}
    freq = config.get("moe_layer_freq")
    if isinstance(freq, list) and out.get("n_experts"):
        # 0 dense, 1 MoE per layer (MiMo-V2-Flash): dense layers first, as dse models them
        dense = next((i for i, v in enumerate(freq) if v != 0), len(freq))
        if (len(freq) != out["n_layers"] or any(v not in (0, 1) for v in freq)
                or any(v != 1 for v in freq[dense:])):
            raise InputError(out["source"], "moe_layer_freq", f"value {freq!r} places MoE "
                             "layers as dse does not model them", f"{out['n_layers']} "
                             "entries of 0 (dense) then 1 (MoE)")
        first = out.get("n_dense_layers")
        if first is not None and first != dense:
            raise InputError(out["source"], "moe_layer_freq", f"{dense} leading dense layers "
                             f"against first_k_dense_replace {first}", "the same count")
        extra["n_dense_layers"] = dense
    if config.get("hybrid_layer_pattern") is not None:
        extra.update(_hf_swa_pattern(config, out))
    step = config.get("interleave_moe_layer_step", config.get("decoder_sparse_step"))
    if isinstance(step, int) and step > 1:
        extra["moe_layer_step"] = step
    shared = config.get("shared_expert_intermediate_size")
    if isinstance(shared, int) and shared > 0 and out.get("d_ff_expert"):
        extra["n_shared_experts"] = max(1, round(shared / out["d_ff_expert"]))
    if model_type.startswith("llama4"):
        # routed and shared experts of width intermediate_size; the dense layers of an
        # interleaved model use intermediate_size_mlp
        extra.update(d_ff_expert=config["intermediate_size"], n_shared_experts=1,
                     d_ff=config.get("intermediate_size_mlp", config["intermediate_size"]))
    if model_type == "gpt_oss":
        # a learned sink logit per head; biases on q, k, v, o, the experts and the router
        extra.update(attention_sinks=True, expert_bias=True, linear_bias=True, qkv_bias=True)
    if config.get("attn_output_gate", model_type in {"qwen3_next"}):
        extra["attention_output_gate"] = True
    layer_types = config.get("layer_types")
    interval = config.get("full_attention_interval")
    if isinstance(layer_types, list) and "linear_attention" in layer_types:
        extra["linear_layers"] = layer_types.count("linear_attention")
    elif isinstance(interval, int) and interval > 0 and "linear_num_value_heads" in config:
        n = out["n_layers"]
        extra["linear_layers"] = n - sum(1 for i in range(n) if (i + 1) % interval == 0)
    if extra.get("linear_layers"):
        extra.update(linear_key_heads=config["linear_num_key_heads"],
                     linear_value_heads=config["linear_num_value_heads"],
                     linear_key_head_dim=config["linear_key_head_dim"],
                     linear_value_head_dim=config["linear_value_head_dim"],
                     linear_conv_kernel=config.get("linear_conv_kernel_dim", 4))
        if str(config.get("mamba_ssm_dtype", "")) in {"float32", "fp32"}:
            extra["linear_state_bits"] = 32
    if config.get("use_qk_norm") and not model_type.startswith("llama4"):
        extra["qk_norm"] = True  # Llama 4's is a weightless L2 norm
    if model_type in {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text", "qwen3_5_moe",
                      "qwen3_5", "qwen3_5_text", "qwen3_vl_text", "qwen3_vl_moe_text"}:
        extra["qk_norm"] = True  # per-head RMSNorm on q and k (every Qwen3 decoder)
    if model_type in {"gemma2", "gemma3_text"}:
        extra.update(_hf_gemma(config, model_type, out))
    if model_type in {"gemma3_text", "gemma4_text"}:
        extra["qk_norm"] = True  # per-head RMSNorm on q and k
    if model_type == "gemma4_text":
        extra.update(_hf_gemma4(config, out))
    if model_type in {"olmoe", "olmo2"}:
        # RMSNorm on the whole q and k projections (HF OlmoeAttention q_norm, k_norm):
        # elementwise as dse's per-head norm; their d_model-wide weights are 2 (d_model -
        # head_dim) per layer more than dse counts (OLMoE-1B-7B: 61,440 of 6.9B)
        extra["qk_norm"] = True
    return extra


def _hf_swa_pattern(config: Mapping[str, Any], out: dict) -> dict:
    """MiMo-V2-Flash's hybrid_layer_pattern (0 full attention, 1 sliding window) with
    sliding-window layers of KV heads of their own (swa_num_key_value_heads): dse's
    windowed layers take the swa_* shapes and its full ones num_key_value_heads
    (global_kv_heads); query heads and head sizes must agree between the two kinds."""
    pattern, n, file = config["hybrid_layer_pattern"], out["n_layers"], out["source"]
    if (not isinstance(pattern, list) or len(pattern) != n
            or any(v not in (0, 1) for v in pattern)):
        raise InputError(file, "hybrid_layer_pattern", f"value {str(pattern)[:60]!r} is not "
                         "read", f"a list of {n} entries, 0 (full attention) or 1 (sliding "
                         "window)")
    for key, same in (("swa_num_attention_heads", "num_attention_heads"),
                      ("swa_head_dim", "head_dim"), ("swa_v_head_dim", "v_head_dim")):
        if config.get(key) is not None and config.get(key) != config.get(same):
            raise InputError(file, key, f"{config[key]} against {same} {config.get(same)}: "
                             "sliding-window layers with query heads or head sizes of their "
                             "own, which dse does not model", f"{same}'s value")
    extra: dict[str, Any] = {"sliding_window_layers": sum(pattern) / n}
    swa_kv = config.get("swa_num_key_value_heads")
    if isinstance(swa_kv, int) and swa_kv > 0 and swa_kv != out.get("n_kv_heads"):
        extra.update(n_kv_heads=swa_kv, global_kv_heads=out.get("n_kv_heads"))
    if config.get("add_swa_attention_sink_bias") or config.get("add_full_attention_sink_bias"):
        extra["attention_sinks"] = True  # a logit per head (its few weights on every layer)
    return extra


# transformers' Gemma3TextConfig defaults (models/gemma3/configuration_gemma3.py) for the
# keys Google's multimodal Gemma 3 configs leave out of their text_config
_GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262208, "num_attention_heads": 8,
                         "num_key_value_heads": 4, "head_dim": 256,
                         "max_position_embeddings": 131072, "sliding_window": 4096,
                         "sliding_window_pattern": 6}


def _gemma_block(config: Mapping[str, Any]) -> dict[str, Any]:
    """What every Gemma 2-4 layer has: GeGLU and sandwich norms (4 per layer)."""
    return {"activation": str(config.get("hidden_activation", "gelu_pytorch_tanh")),
            "norms_per_layer": 4}


def _hf_gemma(config: Mapping[str, Any], model_type: str, out: dict) -> dict:
    """Gemma 2 and 3 (HF Gemma2Model, Gemma3TextModel): sandwich norms (4 per layer),
    GeGLU, and sliding-window layers where the config has no layer_types list: Gemma 2's
    alternate with global ones (every other layer), Gemma 3's come five in six
    (sliding_window_pattern 6: every sixth layer global). Logit soft-capping and
    query_pre_attn_scalar are elementwise and not costed."""
    extra = _gemma_block(config)
    if not isinstance(config.get("layer_types"), list) and config.get("sliding_window"):
        if model_type == "gemma2":
            extra["sliding_window_layers"] = 0.5
        else:
            pattern = config.get("sliding_window_pattern", 6)
            n = out["n_layers"]
            extra["sliding_window_layers"] = sum(1 for i in range(n)
                                                 if (i + 1) % pattern) / n
    return extra


def _hf_gemma4(config: Mapping[str, Any], out: dict) -> dict:
    """Gemma 4 (HF Gemma4TextModel): sliding-window layers of head_dim and
    num_key_value_heads beside full-attention ones of global_head_dim and
    num_global_key_value_heads whose keys serve as values (attention_k_eq_v); sandwich
    norms (4 per layer); with enable_moe_block, every layer runs its dense MLP
    (intermediate_size) beside the routed experts and sums them, which dse reads as shared
    experts of the experts' width (26B-A4B: 2112 = 3 x 704), and 3 more norms."""
    extra = _gemma_block(config)
    for key, card_key in (("global_head_dim", "global_head_dim"),
                          ("num_global_key_value_heads", "global_kv_heads")):
        value = config.get(key)
        if value not in (None, 0):
            extra[card_key] = value
    if config.get("attention_k_eq_v"):
        extra["global_kv_equal"] = True
    if config.get("enable_moe_block"):
        ff, width = out.get("d_ff"), out.get("d_ff_expert")
        if not out.get("n_experts") or not width or ff % width:
            raise InputError(out["source"], "enable_moe_block", f"a dense MLP of {ff} beside "
                             f"experts of {width}, which dse cannot read as shared experts",
                             "intermediate_size a multiple of moe_intermediate_size")
        extra.update(n_shared_experts=ff // width, norms_per_layer=7)
    return extra


# Hugging Face model types with DeepSeek Sparse Attention as dse models it: MLA with one
# lightning indexer per layer, choosing index_topk keys for every query (DeepSeek-V3.2's
# DeepseekV32ForCausalLM, GLM-5's GlmMoeDsaForCausalLM).
_DSA_TYPES = ("deepseek_v32", "glm_moe_dsa")


def _hf_sparse_attention(config: Mapping[str, Any], model_type: str, out: dict,
                         file: str) -> dict:
    """The indexer of a DSA config (index_topk, index_n_heads, index_head_dim) and the
    share of the layers that run one (index_layer_fraction: GLM-5.2's IndexShare, whose
    "shared" layers reuse the top-k of the last "full" one; :func:`_indexer_schedule`).
    Keys that would change its cost and that dse does not model are refused, not
    skipped: an indexer on a model type dse does not know as DSA (DeepSeek-V4's
    compressed sparse attention), MoE layers other than after the first_k_dense_replace."""
    if model_type not in _DSA_TYPES and not any(
            k in config for k in ("index_topk", "index_n_heads", "index_head_dim")):
        return {}
    what = ("one DeepSeek Sparse Attention indexer on every layer of an MLA model "
            f"(model_type {', '.join(_DSA_TYPES)})")
    if model_type not in _DSA_TYPES or not out.get("kv_lora_rank"):
        raise InputError(file, "index_topk", f"an indexer on model_type {model_type!r}, "
                         "whose sparse attention dse does not model", what)
    extra = {}
    for key in ("index_topk", "index_n_heads", "index_head_dim"):
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InputError(file, key, "missing" if value is None else
                             f"value {value!r} is not valid",
                             "a positive whole number (a JSON integer)")
        extra[key] = value
    n_moe = out["n_layers"] - out.get("n_dense_layers", 0) if out.get("n_experts") else 0
    mlp_types = config.get("mlp_layer_types")
    schedule = _indexer_schedule(config, out["n_layers"], file)
    if not all(schedule):
        extra["index_layer_fraction"] = sum(schedule) / len(schedule)
    refused = {
        "moe_layer_freq": config.get("moe_layer_freq") not in (None, 1),
        "mlp_layer_types": mlp_types is not None and mlp_types != (
            ["dense"] * (out["n_layers"] - n_moe) + ["sparse"] * n_moe),
    }
    for key, bad in refused.items():
        if bad:
            raise InputError(file, key, f"value {config[key]!r} changes which layers run an "
                             "indexer or experts, which dse does not model", what + ", MoE "
                             "on every layer after first_k_dense_replace")
    return extra


def _indexer_schedule(config: Mapping[str, Any], n_layers: int, file: str) -> list[bool]:
    """Which layers run their own DSA indexer (True, "full") and which reuse the top-k of
    the last one before them (False, "shared"), as the HF GLM-5 config and vLLM's
    deepseek_v2.py read it: an explicit ``indexer_types`` list, else an
    ``index_topk_pattern`` of F and S, else ``index_topk_freq`` f with
    ``index_skip_topk_offset`` o: layer i is full when max(i - o + 1, 0) % f == 0 (GLM-5.2:
    f 4, o 3, 21 of 78 layers full). Without any of them every layer is full."""
    def bad(key, allowed):
        raise InputError(file, key, f"value {config.get(key)!r} is not valid", allowed)

    types, pattern = config.get("indexer_types"), config.get("index_topk_pattern")
    freq = config.get("index_topk_freq")
    if types is not None:
        if (not isinstance(types, list) or len(types) != n_layers
                or not set(types) <= {"full", "shared"}):
            bad("indexer_types", f'a list of {n_layers} entries, each "full" or "shared"')
        schedule = [t == "full" for t in types]
    elif pattern is not None:
        if (not isinstance(pattern, str) or len(pattern) != n_layers
                or not set(pattern) <= set("FS")):
            bad("index_topk_pattern", f"a string of {n_layers} letters F (full) or S (shared)")
        schedule = [c == "F" for c in pattern]
    elif freq in (None, 1):
        schedule = [True] * n_layers
    else:
        offset = config.get("index_skip_topk_offset")
        if not isinstance(freq, int) or isinstance(freq, bool) or freq < 1:
            bad("index_topk_freq", "a positive whole number")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            bad("index_skip_topk_offset", "a whole number >= 0 (the layers before the "
                "shared schedule starts), stated with index_topk_freq")
        schedule = [max(i - offset + 1, 0) % freq == 0 for i in range(n_layers)]
    if not schedule[0]:
        bad("indexer_types" if types is not None else "index_topk_pattern",
            "a schedule whose first layer runs its own indexer (full)")
    return schedule


# Hugging Face model types that are encoders or encoder-decoders (issue 36 row 12: a
# BertModel's config.json was costed as a decoder).
_ENCODER_TYPES = frozenset({
    "bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta",
    "deberta-v2", "camembert", "ernie", "mpnet", "modernbert", "nomic_bert", "xlm", "flaubert",
    "t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian", "m2m_100", "nllb",
    "whisper", "encoder-decoder", "vit", "clip", "siglip"})


# Config keys that change what a layer computes in ways dse does not model: read as a
# plain transformer, such a model's numbers would be wrong without a word (issue 40:
# an unknown field that changes cost is an error, not a guess).
_UNMODELLED_KEYS = {
    "attention_other_setting": "sliding-window layers with head counts of their own "
                               "(Step-3.7)",
    "hidden_size_per_layer_input": "per-layer input embeddings (Gemma 4 E2B/E4B's PLE)",
    "num_kv_shared_layers": "layers that reuse another layer's KV cache (Gemma 4 E2B/E4B)",
    "use_double_wide_mlp": "MLPs twice as wide on the KV-shared layers (Gemma 4 E2B)",
    "dense_intermediate_size": "dense layers wider than the experts' intermediate_size "
                               "(MiniMax-M3)",
    "sparse_attention_config": "a sparse attention (MiniMax-M3's) other than DeepSeek's DSA",
}
# Blocks of a Nemotron-H-style hybrid (hybrid_override_pattern characters, or the
# layers_block_type words of later configs): each block is one norm and one of these
_HYBRID_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _hf_hybrid(config: Mapping[str, Any], out: dict, file: str) -> dict:
    """A Mamba-2 hybrid (Nemotron-H, Nemotron-3; HF NemotronHForCausalLM) as dse's layers.

    Its blocks are a norm and one of: a Mamba-2 mixer (M), attention (*), a dense MLP (-)
    or an MoE layer (E). dse's layer is a mixer and an MLP, so the hybrid becomes
    M + * layers, of which the Mamba ones are linear-attention layers and the MLP blocks
    sit on as many of them; the mixers left without one are ``mlp_free_layers`` (dense
    layers without an MLP; in an MoE hybrid, the dense layers). Costs and parameters
    are sums over blocks, so the pairing is exact for them; per-layer host overheads
    count mixer layers, not blocks.

    A Mamba-2 mixer (Dao & Gu 2024, arXiv 2405.21060; HF NemotronHMamba2Mixer) is priced
    as the Gated DeltaNet layer dse has (dse.formulas.params.linear_attention_params),
    which has its shapes: z and x (heads x head_dim, as DeltaNet's z and v), B and C
    (n_groups x d_state, as k and q), a depthwise convolution over x, B and C, a gated
    RMSNorm and the output projection; its state per sequence is heads x head_dim x
    d_state (as v x k per head). DeltaNet's projection adds D x heads inputs Mamba's dt
    has not (a beta beside the decay) and Mamba adds a convolution bias: 0.01% of
    Nemotron-3 Nano's parameters.
    """
    pattern, blocks = config.get("hybrid_override_pattern"), config.get("layers_block_type")
    if pattern in (None, "") and blocks in (None, []):
        if config.get("ssm_state_size") or config.get("mamba_num_heads"):
            raise InputError(file, "ssm_state_size", "the model has state-space (Mamba) layers "
                             "but no hybrid_override_pattern or layers_block_type",
                             "a Nemotron-H-style hybrid of Mamba-2, attention, MLP and MoE "
                             "blocks")
        return {}
    key = "hybrid_override_pattern" if isinstance(pattern, str) and pattern else "layers_block_type"
    if key == "hybrid_override_pattern":
        kinds = [_HYBRID_BLOCKS.get(c, repr(c)) for c in pattern]
    elif isinstance(blocks, list):
        kinds = [str(b) for b in blocks]
    else:
        raise InputError(file, key, f"value {blocks!r} is not a list of block types",
                         ", ".join(_HYBRID_BLOCKS.values()))
    unknown = sorted(set(kinds) - set(_HYBRID_BLOCKS.values()))
    if unknown:
        raise InputError(file, key, f"blocks of type {', '.join(unknown)}, which dse does not "
                         "model", "M (mamba), * (attention), - (mlp), E (moe)")
    count = {k: kinds.count(k) for k in _HYBRID_BLOCKS.values()}
    mixers, ffn = count["mamba"] + count["attention"], count["mlp"] + count["moe"]
    if count["mlp"] and count["moe"]:
        raise InputError(file, key, "dense MLP and MoE blocks in one model, which dse does not "
                         "model", "MLP blocks or MoE blocks")
    if ffn > mixers or not count["attention"]:
        raise InputError(file, key, f"{count['mamba']} Mamba, {count['attention']} attention "
                         f"and {ffn} MLP blocks", "at least one attention block and no more "
                         "MLP blocks than mixers")
    extra: dict[str, Any] = dict(n_layers=mixers, mlp="plain")  # relu2: up and down only
    if str(config.get("mlp_hidden_act", "relu2")) not in ("relu2", "relu", "gelu", "silu"):
        raise InputError(file, "mlp_hidden_act", f"{config.get('mlp_hidden_act')!r}",
                         "relu2, relu, gelu or silu (one up and one down projection)")
    need = ("n_groups", "ssm_state_size", "mamba_num_heads", "mamba_head_dim", "conv_kernel")
    for k in need:
        value = config.get(k)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InputError(file, k, "missing" if value is None else
                             f"value {value!r} is not valid",
                             "a positive whole number (a JSON integer)")
    if count["mamba"]:
        extra.update(linear_layers=count["mamba"], linear_key_heads=config["n_groups"],
                     linear_key_head_dim=config["ssm_state_size"],
                     linear_value_heads=config["mamba_num_heads"],
                     linear_value_head_dim=config["mamba_head_dim"],
                     linear_conv_kernel=config["conv_kernel"])
        if str(config.get("mamba_ssm_cache_dtype", "")) in {"float32", "fp32"}:
            extra["linear_state_bits"] = 32
    if count["moe"]:
        extra["n_dense_layers"] = mixers - count["moe"]
        shared = config.get("moe_shared_expert_intermediate_size")
        if isinstance(shared, int) and shared > 0 and out.get("d_ff_expert"):
            extra["n_shared_experts"] = max(1, round(shared / out["d_ff_expert"]))
    extra["mlp_free_layers"] = mixers - ffn
    return extra


# The keys of a DeciLM block (HF configuration_decilm.py AttentionConfig / FFNConfig,
# vLLM nemotron_nas.py) the reader reads; any other key, set (not null, false or 0),
# changes what the block computes: replace_with_linear, sparsify, window_length,
# num_sink_tokens, unshifted_sink, use_prefill_window_in_sink_attention, a Mamba mixer
_BLOCK_KEYS = {"attention": ("no_op", "n_heads_in_group"),
               "ffn": ("no_op", "ffn_mult", "intermediate_size")}
_BLOCK_ALLOWED = ("blocks of an attention (no_op, or n_heads_in_group dividing "
                  "num_attention_heads, the same on every attention block) and an ffn (no_op, "
                  "or ffn_mult or intermediate_size); every other key null or false")


def _hf_block_configs(config: Mapping[str, Any], out: dict, file: str) -> dict:
    """A Llama-Nemotron NAS model (DeciLMForCausalLM, model_type nemotron-nas: Llama-3.3-
    Nemotron-Super-49B) as dse's layers, from its ``block_configs``: one entry a block,
    each a GQA attention of num_attention_heads / n_heads_in_group KV heads or none
    (no_op), and a gated MLP of its own width or none. The width is ``intermediate_size``
    or, from ``ffn_mult``, int(2 ffn_mult d_model / 3) rounded up to a multiple of 256
    (HF modeling_decilm.py and vLLM nemotron_nas.py, _ffn_mult_to_intermediate_size).

    As for :func:`_hf_hybrid`, the mixers become dse's layers and the MLPs sit on them:
    the attention blocks are the ``n_layers`` (their KV cache, attention FLOPs and
    weights), the MLP blocks beyond them ``mlp_only_layers`` (each an MLP and its norm:
    the mean layer carries MLPs / layers of them, and as many tensor-parallel
    all-reduces), those short of them ``mlp_free_layers``. Costs and parameters are sums
    over blocks, so the pairing is exact for them but in the width: dse's layer has one,
    the MLPs' mean, rounded to a multiple of num_attention_heads so that every
    tensor-parallel degree the heads allow divides it, as it divides each block's multiple
    of 256 (Super: 1,642,496 / 80 = 20,531.2 -> 20,544, +1,024 of the width summed,
    +25,165,824 parameters, +0.05%). The widest MLP (Super: 28,672) is not what the
    activation peak takes; per-layer host overheads count attention layers, not blocks.
    A key of a block that changes its cost otherwise is refused (:data:`_BLOCK_KEYS`)."""
    blocks = config.get("block_configs")
    if blocks in (None, []):
        return {}
    if not isinstance(blocks, list) or len(blocks) != out.get("n_layers"):
        raise InputError(file, "block_configs", f"value {str(blocks)[:60]!r} is not "
                         f"{out.get('n_layers')} blocks (num_hidden_layers)", _BLOCK_ALLOWED)
    if "n_heads" not in out or "d_model" not in out:
        return {}  # refused as missing by card_from_hf_config
    heads, d = out["n_heads"], out["d_model"]
    groups: dict[int, int] = {}  # n_heads_in_group -> its first block
    widths: list[int] = []
    for i, block in enumerate(blocks):
        if not isinstance(block, Mapping):
            raise InputError(file, f"block_configs[{i}]", f"value {block!r} is not a block",
                             _BLOCK_ALLOWED)
        for part in block:
            if part not in _BLOCK_KEYS and block[part] not in (None, False, 0, "", {}, []):
                raise InputError(file, f"block_configs[{i}].{part}", "a part of a block "
                                 "dse does not model", _BLOCK_ALLOWED)
        attn, ffn = block.get("attention", {}), block.get("ffn", {})
        for part, sub in (("attention", attn), ("ffn", ffn)):
            if not isinstance(sub, Mapping):
                raise InputError(file, f"block_configs[{i}].{part}", f"value {sub!r} is not "
                                 "a table", _BLOCK_ALLOWED)
            for key, value in sub.items():
                if key not in _BLOCK_KEYS[part] and value not in (None, False, 0, ""):
                    raise InputError(file, f"block_configs[{i}].{part}.{key}", f"value "
                                     f"{value!r} changes what the block computes, which dse "
                                     "does not model", _BLOCK_ALLOWED)
        if not attn.get("no_op"):
            g = attn.get("n_heads_in_group")
            if not isinstance(g, int) or isinstance(g, bool) or g <= 0 or heads % g:
                raise InputError(file, f"block_configs[{i}].attention.n_heads_in_group",
                                 "missing" if g is None else f"value {g!r} is not valid",
                                 f"a divisor of num_attention_heads {heads}, or no_op true")
            groups.setdefault(g, i)
        if not ffn.get("no_op"):
            width, mult = ffn.get("intermediate_size"), ffn.get("ffn_mult")
            if isinstance(width, int) and not isinstance(width, bool) and width > 0:
                widths.append(width)
            elif isinstance(mult, (int, float)) and not isinstance(mult, bool) and mult > 0:
                n = int(2 * mult * d / 3)
                widths.append(-(-n // 256) * 256)
            else:
                raise InputError(file, f"block_configs[{i}].ffn.ffn_mult", "missing" if mult
                                 is None else f"value {mult!r} is not valid", "a positive "
                                 "number (or a positive intermediate_size), or no_op true")
    if not groups or not widths:
        raise InputError(file, "block_configs", "no block with "
                         + ("attention" if not groups else "an ffn"), _BLOCK_ALLOWED)
    if len(groups) > 1:
        (g0, i0), (g1, i1) = sorted(groups.items(), key=lambda kv: kv[1])[:2]
        raise InputError(file, f"block_configs[{i1}].attention.n_heads_in_group",
                         f"{g1} against {g0} of block {i0}: KV heads of another count per "
                         "layer, which dse does not model", _BLOCK_ALLOWED)
    attention = sum(1 for b in blocks if not b.get("attention", {}).get("no_op"))
    mean = round(sum(widths) / len(widths) / heads) * heads or heads
    extra = dict(n_layers=attention, n_kv_heads=heads // next(iter(groups)), d_ff=mean)
    if len(widths) != attention:
        extra["mlp_only_layers" if len(widths) > attention else "mlp_free_layers"] = abs(
            len(widths) - attention)
    return extra


# layer_types values the reader models: full, sliding-window, linear and DSA attention
_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "linear_attention",
                          "deepseek_sparse_attention"})


def card_from_hf_config(config: Mapping[str, Any], file: str, name: str,
                        quant: Mapping[str, Any] | None = None) -> ModelCard:
    """Translate a Hugging Face ``config.json`` into a catalogue card.

    Architecture details the config leaves implicit (gated vs plain MLP, norm kind,
    biases) follow the ``model_type``: Llama/Mistral/Qwen/Mixtral/DeepSeek are gated
    RMSNorm models; GPT-2/OPT/NeoX/BLOOM/Falcon/MPT are plain LayerNorm models.
    """
    vision = _hf_vision(config, file)
    outer_config = config
    if isinstance(config.get("text_config"), Mapping):  # multimodal: the language model
        outer = config
        config = dict(config["text_config"])
        if str(config.get("model_type", "")).lower() == "gemma3_text":
            # google/gemma-3-*-it leave these to transformers' Gemma3TextConfig defaults
            for key, value in _GEMMA3_TEXT_DEFAULTS.items():
                config.setdefault(key, value)
            config.setdefault("tie_word_embeddings", outer.get("tie_word_embeddings", True))
        config.setdefault("tie_word_embeddings", outer.get("tie_word_embeddings", False))
        config.setdefault("_name_or_path", outer.get("_name_or_path"))
    out: dict[str, Any] = {"name": name, "long_name": config.get("_name_or_path") or name,
                           "source": file}
    model_type = str(config.get("model_type", "")).lower()
    if config.get("is_encoder_decoder") is True or model_type in _ENCODER_TYPES:
        # costed as a decoder, an encoder's numbers would be wrong without a word
        raise InputError(file, "model_type", f"{model_type or 'an encoder-decoder'!r} is an "
                         "encoder or encoder-decoder model, which dse does not cost",
                         "a config.json of a decoder-only transformer")
    for key, what in _UNMODELLED_KEYS.items():
        if config.get(key) not in (None, "", [], 0):
            raise InputError(file, key, f"the model has {what}, which dse does not model",
                             "a decoder-only transformer of full, sliding-window, linear or "
                             "sparse attention layers")
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and not set(map(str, layer_types)) <= _LAYER_TYPES:
        unknown = sorted(set(map(str, layer_types)) - _LAYER_TYPES)
        raise InputError(file, "layer_types", f"layers of type {', '.join(unknown)}, which "
                         "dse does not model", ", ".join(sorted(_LAYER_TYPES)))
    for key, candidates in _HF_KEYS.items():
        for candidate in candidates:
            value = config.get(candidate)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or not (
                    0 <= value <= 2 ** 53 - 1):  # 1e12 (a JSON float) was called "missing"
                raise InputError(file, candidate, f"value {value!r} is not valid",
                                 "a non-negative whole number (a JSON integer)")
            out[key] = value
            break
    if "d_ff" not in out and "d_model" in out:
        out["d_ff"] = 4 * out["d_model"]
    if out.get("n_experts") and "d_ff_expert" not in out:
        out["d_ff_expert"] = out.get("d_ff")
    if not out.get("n_experts"):
        for key in ("n_experts", "top_k", "d_ff_expert", "n_shared_experts", "n_dense_layers",
                    "moe_latent_size"):
            out.pop(key, None)
    out["tied_embeddings"] = bool(config.get("tie_word_embeddings",
                                             model_type in _LEARNED_POS_TYPES
                                             or model_type.startswith("gemma")))
    out["mlp"] = "plain" if model_type in _PLAIN_MLP_TYPES else "gated"
    out["norm"] = "layernorm" if model_type in _LAYERNORM_TYPES else "rmsnorm"
    if model_type in _LEARNED_POS_TYPES:
        out["position"] = "learned"
        out["learned_pos_rows"] = out.get("max_seq_len", 0) + (2 if model_type == "opt" else 0)
    elif model_type in {"mpt", "bloom"}:
        out["position"] = "alibi"
    out["linear_bias"] = model_type in _BIAS_TYPES
    out["qkv_bias"] = bool(config.get("attention_bias", model_type in {"qwen2", "qwen2_moe"}))
    out.update(_hf_layer_pattern(config, model_type, out))
    out.update(_hf_hybrid(config, out, file))
    out.update(_hf_block_configs(config, out, file))
    if out.get("kv_lora_rank"):
        # MLA's head dims are its nope, rope and v dims; GLM-5's head_dim 64 is its rope dim
        out.pop("head_dim", None)
    out.update(_hf_sparse_attention(config, model_type, out, file))
    window = config.get("sliding_window")
    if isinstance(window, int) and window > 0 and config.get("use_sliding_window", True):
        out["sliding_window"] = window
        layer_types = config.get("layer_types")
        if isinstance(layer_types, list) and layer_types:
            out["sliding_window_layers"] = (layer_types.count("sliding_attention")
                                            / len(layer_types))
    chunk = config.get("attention_chunk_size")
    if model_type.startswith("llama4") and isinstance(chunk, int) and chunk > 0:
        # iRoPE: three of four layers attend within chunks of `chunk` tokens (bounded like a
        # window of that size), every fourth (no RoPE) over the whole context
        out["sliding_window"] = chunk
        out["sliding_window_layers"] = 0.75
    for key in ("n_layers", "d_model", "n_heads", "vocab_size", "max_seq_len"):
        if key not in out:
            raise InputError(file, _HF_KEYS[key][0], "missing from the Hugging Face config",
                             "a config.json of a decoder-only transformer")
    if "q_lora_rank" in out and out["q_lora_rank"] is None:
        out.pop("q_lora_rank")
    out.update(vision)
    _check_quantized_modules(outer_config, quant, out["n_layers"], file)
    bits = checkpoint_precision(outer_config, quant)
    if bits:
        out["checkpoints"] = {name: bits}
    return ModelCard.from_mapping(out, file)


# The words module names are made of in the quantization configs of the catalogue's
# checkpoints (their exclusion lists: ModelOpt's exclude_modules, HF FP8's
# modules_to_not_convert, compressed-tensors' ignore): a name made of other words names a
# module dse does not know, whose precision it could not place.
_MODULE_WORDS = frozenset("""
    model language_model backbone transformer layers layer h blocks decoder
    self_attn attn attention mixer linear_attn q_proj k_proj v_proj o_proj qkv_proj c_attn
    c_proj wq wk wv wo query_key_value dense q_a_proj q_b_proj kv_a_proj_with_mqa kv_b_proj
    q_a_layernorm kv_a_layernorm q_norm k_norm v_norm indexer indexers_proj weights_proj
    wq_b in_proj out_proj conv1d dt_bias a_log norm mlp ffn feed_forward block_sparse_moe
    moe experts expert shared_experts shared_expert shared_expert_gate gate router
    e_score_correction_bias gate_proj up_proj down_proj gate_up_proj w1 w2 w3 fc1 fc2 c_fc
    fc1_latent_proj fc2_latent_proj switch_mlp input_layernorm post_attention_layernorm
    pre_feedforward_layernorm post_feedforward_layernorm layernorm ln_1 ln_2 ln_f
    embed_tokens embeddings embedding wte wpe lm_head head output eh_proj enorm hnorm
    shared_head mtp vision_tower visual vision_model embed_vision mm_projector
    multi_modal_projector patch_merge_mlp merger audio_tower weight bias scale re
    up down proj gate_up
""".split())  # (regular expressions spell gate|up|down _proj)


def _check_quantized_modules(config: Mapping[str, Any], quant: Mapping[str, Any] | None,
                             n_layers: int, file: str) -> None:
    """The modules a quantized checkpoint's config names (what it leaves unquantized) must
    be modules dse knows, of layers the model has (its MTP layers after the last): a
    name of other words, or of layer 99 of a 61-layer model, is a one-line error, not a
    precision guessed for something dse cannot place."""
    lists = []
    q = (quant or {}).get("quantization") if quant else None
    if isinstance(q, Mapping) and q.get("exclude_modules") is not None:
        lists.append((str(Path(file).with_name("hf_quant_config.json")),
                      "quantization.exclude_modules", q["exclude_modules"]))
    for c in (config, config.get("text_config")):
        qc = c.get("quantization_config") if isinstance(c, Mapping) else None
        if isinstance(qc, Mapping):
            for key in ("modules_to_not_convert", "ignore", "exclude_modules"):
                if qc.get(key) is not None:
                    lists.append((file, f"quantization_config.{key}", qc[key]))
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    # a hybrid's modules count its blocks (Nemotron-H: 52 blocks, 29 dse layers)
    n_layers = max(n_layers, int(text.get("num_hidden_layers") or 0))
    mtp = max(int(text.get("num_nextn_predict_layers") or 0), len(text.get("mtp_layers_block_type")
                                                                  or []))
    allowed = ("names of the model's attention, MLP, expert, norm, embedding, head, vision "
               f"and MTP modules, of layers 0..{n_layers - 1 + mtp}")
    for where, key, names in lists:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InputError(where, key, f"value {str(names)[:60]!r} is not valid",
                             "a list of module names")
        for name in names:
            words = [w.strip("_") for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", name)]
            unknown = [w for w in words if w.lower() not in _MODULE_WORDS]
            layers = [int(n) for n in re.findall(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)", name)]
            if unknown:
                raise InputError(where, key, f"module {name!r} ({unknown[0]!r}) is not a "
                                 "module dse knows", allowed)
            if any(i >= n_layers + mtp for i in layers):
                raise InputError(where, key, f"module {name!r} names a layer the "
                                 f"{n_layers}-layer model does not have", allowed)


def checkpoint_precision(config: Mapping[str, Any], quant: Mapping[str, Any] | None = None
                         ) -> dict:
    """The precision a quantized checkpoint's config states for its linear layers:
    ``quantization_config`` (HF FP8 and its block-scaled form, ModelOpt, compressed-tensors,
    AWQ/GPTQ) or ModelOpt's ``hf_quant_config.json`` (``quant``): weight_bits and
    kv_bits. gpt-oss's MXFP4 quantizes the experts alone, which one weight_bits cannot
    say: left out (a study states its precision)."""
    out: dict[str, int] = {}
    q = (quant or {}).get("quantization") if quant else None
    if isinstance(q, Mapping):
        algo = str(q.get("quant_algo", "")).upper()
        out.update({"FP8": {"weight_bits": 8}, "FP8_PB_WO": {"weight_bits": 8},
                    "NVFP4": {"weight_bits": 4}, "W4A8_AWQ": {"weight_bits": 4},
                    "W4A16_AWQ": {"weight_bits": 4}}.get(algo, {}))
        if str(q.get("kv_cache_quant_algo", "")).upper() in ("FP8", "NVFP4"):
            out["kv_bits"] = 8
        return out
    c = config.get("quantization_config")
    if not isinstance(c, Mapping):
        return out
    method = str(c.get("quant_method", "")).lower()
    if method == "fp8":
        out["weight_bits"] = 8
    elif method == "modelopt":
        algo = str(c.get("quant_algo", "")).upper()
        out.update({"FP8": {"weight_bits": 8}, "NVFP4": {"weight_bits": 4}}.get(algo, {}))
        if str(c.get("kv_cache_quant_algo", "")).upper() == "FP8":
            out["kv_bits"] = 8
    elif method in ("awq", "gptq"):
        if c.get("bits") in (4, 8):
            out["weight_bits"] = c["bits"]
    elif method == "compressed-tensors":
        groups = c.get("config_groups")
        bits = {g.get("weights", {}).get("num_bits") for g in groups.values()
                if isinstance(g, Mapping)} if isinstance(groups, Mapping) else set()
        if len(bits) == 1 and next(iter(bits)) in (4, 8):
            out["weight_bits"] = next(iter(bits))
        kv = c.get("kv_cache_scheme")
        if isinstance(kv, Mapping) and kv.get("num_bits") == 8:
            out["kv_bits"] = 8
    return out


# vision_config model types whose encoder dse prices (dse.formulas.vision): the ViT of
# Qwen3-VL and Qwen3.5 (HF Qwen3VLVisionModel); other encoders are left out (a study
# giving such a model image_tokens is refused)
_VISION_TYPES = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen3_5_vision",
                 "qwen3_5_moe_vision")


def _hf_vision(config: Mapping[str, Any], file: str) -> dict:
    """The vision encoder of a Qwen3-VL / Qwen3.5 config (vision_config), as card keys."""
    v = config.get("vision_config")
    if not isinstance(v, Mapping) or str(v.get("model_type", "")) not in _VISION_TYPES:
        return {}
    keys = ("depth", "hidden_size", "intermediate_size", "spatial_merge_size", "patch_size",
            "temporal_patch_size", "in_channels", "num_position_embeddings")
    for key in keys:
        value = v.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InputError(file, f"vision_config.{key}", "missing" if value is None else
                             f"value {value!r} is not valid", "a positive whole number")
    deepstack = v.get("deepstack_visual_indexes") or []
    return dict(vision_layers=v["depth"], vision_width=v["hidden_size"],
                vision_d_ff=v["intermediate_size"], vision_merge=v["spatial_merge_size"] ** 2,
                vision_mergers=1 + len(deepstack),
                vision_patch_inputs=v["in_channels"] * v["temporal_patch_size"]
                * v["patch_size"] ** 2,
                vision_positions=v["num_position_embeddings"])

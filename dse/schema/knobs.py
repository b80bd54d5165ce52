"""The study keys ("knobs") of each mode: one dataclass field each, with help text.

Each field is both a study key (its name, default, allowed values and units come
from the field metadata) and a leaf of the pytree the evaluator receives: in a sweep
every leaf is an array broadcast over the grid, in a search a vector of trials.
Categorical knobs (model, hardware) arrive as integer indices into the study's
model and hardware tables.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import pytrees


def knob(default, kind: str, help: str, units: str = "1", long_name: str | None = None):
    """A dataclass field carrying the study-key metadata."""
    return dataclasses.field(default=default, metadata=dict(
        kind=kind, help=help, units=units, long_name=long_name or help.split(";")[0]))


# kind -> (python type accepted, human description of what is allowed)
KINDS = {
    "model": "a model name from `dse models`, a model .toml or a Hugging Face config.json path",
    "hardware": "a hardware name from `dse hardware` or a hardware .toml path",
    "int": "a positive integer up to 2^53 - 1",
    "int0": "a non-negative integer up to 2^53 - 1",
    "usecase": "a use-case preset name (see `dse usecases`)",
    "reserve": "a fraction in [0, 1)",
    "unit": "a number in [0, 1]",
    "bits": "a number of bits in [1, 32] (2, 4, 8, 16, 32; fractional for mixed GGUF types)",
    "compute_bits": "one of 4, 8, 16, 32",
    "fraction": "a number in (0, 1]",
    "scale": "a positive number",
    "ratio1": "a number >= 1",
    "flag": "true or false",
    "zero": "a ZeRO stage: 0, 1, 2 or 3",
    "seconds0": "a number of seconds >= 0 (0: none)",
    "recompute": "one of \"none\", \"selective\", \"full\"",
    "pp_schedule": "one of \"1f1b\", \"gpipe\", \"zb-h1\", \"dualpipe\"",
    "optimizer": "an optimizer name (adamw, adam, adam_8bit, lion, sgd_momentum, sgd, "
                 "adafactor) or its state bytes per parameter (a number >= 0)",
    "rate": "a number of requests per second >= 0 (0: none)",
    "cv": "a coefficient of variation >= 0 (0: fixed)",
    "accepted": "a mean number of tokens per step >= 1, or 0 (from acceptance_rate)",
    "cv_positive": "a coefficient of variation > 0 (1: Poisson)",
    "framework": "a serving framework: vllm, sglang, trtllm, llama.cpp, generic",
    "serving": "one of \"agg\" (prefill and decode on the same workers), \"disagg\" "
               "(separate prefill and decode pools)",
    "routing": "one of \"random\", \"session-affinity\", \"prefix-aware\"",
    "kv_offload": "one of \"none\", \"prompt\", \"all\"",
    "bytes0": "a number of bytes >= 0 (0: none)",
    "bandwidth0": "a number of bytes per second >= 0 (0: none)",
    "price0": "a price in USD >= 0 (0: free)",
}

# Aggregated or disaggregated serving, encoded as indices.
SERVING = ("agg", "disagg")

# Session routers and KV-tier write policies (dse.formulas.sessions), encoded as indices.
ROUTING = ("random", "session-affinity", "prefix-aware")
KV_OFFLOAD = ("none", "prompt", "all")

# Activation recomputation strategies (Korthikanti et al. 2022), encoded as indices.
RECOMPUTE = ("none", "selective", "full")

# Pipeline schedules, encoded as indices (the codes of dse.formulas.training): 1F1B
# (Narayanan et al. 2021; interleaved when virtual_stages > 1), GPipe (Huang et al. 2019),
# ZB-H1 (Qi et al. 2023), DualPipe (DeepSeek-V3, arXiv 2412.19437).
PP_SCHEDULES = ("1f1b", "gpipe", "zb-h1", "dualpipe")

# Optimizer state bytes per parameter, master weights excluded (those follow
# master_weight_bits): Adam/AdamW keep two fp32 moments (Kingma & Ba 2015); 8-bit Adam
# two 1-byte moments (Dettmers et al. 2022, block scales ignored); Lion and SGD with
# momentum one fp32 moment; Adafactor's factored second moment is O(rows + cols)
# (Shazeer & Stern 2018), counted as 0 per parameter.
OPTIMIZERS = {"adamw": 8.0, "adam": 8.0, "adam_8bit": 2.0, "lion": 4.0,
              "sgd_momentum": 4.0, "sgd": 0.0, "adafactor": 0.0}


@pytrees.register
@dataclasses.dataclass(frozen=True)
class InferencePoint:
    """One inference deployment (or a broadcast grid / batch of them)."""

    model: Any = knob(None, "model", "model architecture")
    hardware: Any = knob(None, "hardware", "device type")
    batch: Any = knob(1, "int", "concurrent sequences per replica", "sequences")
    input_len: Any = knob(512, "int", "prompt tokens per sequence", "tokens", "input length")
    output_len: Any = knob(128, "int", "generated tokens per sequence", "tokens", "output length")
    tp: Any = knob(1, "int", "tensor-parallel degree", "devices")
    pp: Any = knob(1, "int", "pipeline-parallel degree (stages)", "devices")
    dp: Any = knob(1, "int", "data-parallel replicas (derived when num_devices > 0)", "replicas")
    ep: Any = knob(1, "int", "expert-parallel degree (MoE; devices from tp x dp; a dense model "
                   "ignores it)", "devices")
    num_devices: Any = knob(0, "int0", "devices of the deployment; dp = num_devices / (tp pp) "
                            "(0: use dp)", "devices")
    weight_bits: Any = knob(16, "bits", "bits per stored weight", "bit")
    kv_bits: Any = knob(16, "bits", "bits per stored KV-cache element", "bit")
    act_bits: Any = knob(16, "compute_bits", "bits per activation (sets the compute dtype)", "bit")
    flops_efficiency: Any = knob(1.0, "fraction", "achieved fraction of peak FLOP/s; under a "
                                "calibration, a factor on its fitted efficiency")
    hbm_efficiency: Any = knob(1.0, "fraction", "achieved fraction of peak memory bandwidth")
    link_efficiency: Any = knob(1.0, "fraction", "achieved fraction of link bandwidth")
    hbm_bw_scale: Any = knob(1.0, "scale", "what-if multiplier on memory bandwidth")
    tflops_scale: Any = knob(1.0, "scale", "what-if multiplier on every peak FLOP/s")
    link_bw_scale: Any = knob(1.0, "scale", "what-if multiplier on link bandwidths")
    memory_scale: Any = knob(1.0, "scale", "what-if multiplier on memory capacity")
    cost_share_compute: Any = knob(0.0, "unit", "share of the device price that scales with "
                                   "tflops_scale (co-design cost model)")
    cost_share_bandwidth: Any = knob(0.0, "unit", "share of the device price that scales "
                                     "with hbm_bw_scale")
    cost_share_memory: Any = knob(0.0, "unit", "share of the device price that scales with "
                                  "memory_scale")
    memory_reserve: Any = knob(0.1, "reserve", "memory fraction kept for the framework and "
                               "fragmentation; default 0.1 = vLLM's gpu_memory_utilization 0.9")
    ep_redundant_experts: Any = knob(0, "int0", "redundant expert copies per MoE layer over "
                                     "the expert-parallel ranks (EPLB: SGLang "
                                     "--ep-num-redundant-experts, vLLM --num-redundant-experts)"
                                     "; ep divides the experts plus these", "experts")
    moe_imbalance: Any = knob(1.0, "ratio1", "max over mean tokens per expert (MoE; 1: "
                              "balanced); under expert parallelism the busiest expert's device "
                              "sets the step")
    quant_group_size: Any = knob(128, "int0", "weights per 16-bit scale in sub-8-bit formats "
                                 "(0: no scales)", "elements")
    flash_attention: Any = knob(True, "flag", "fused attention (no score matrix in memory)")
    prefill_chunk: Any = knob(0, "int0", "tokens per prefill chunk (0: whole prompt)", "tokens")
    image_tokens: Any = knob(0, "int0", "image tokens per request as the language model sees "
                             "them (after the vision encoder's merger; one image, which the "
                             "encoder runs over first: vision-language models)", "tokens")
    usecase: Any = knob(None, "usecase", "use-case preset (sets input_len and output_len)")
    # Serving under load (docs/serving.md): a closed loop of clients or open-loop arrivals
    concurrency: Any = knob(0, "int0", "closed-loop clients of the deployment, each sending "
                            "its next request when its last completes (0: no load)",
                            "requests")
    request_rate: Any = knob(0.0, "rate", "open-loop requests per second to the deployment "
                             "(0: no load)", "requests/s", "request rate")
    arrival_cv: Any = knob(1.0, "cv_positive", "coefficient of variation of the gaps between "
                           "arrivals (1: Poisson, more: burstier)")
    framework: Any = knob(None, "framework", "serving framework: its scheduling, defaults and "
                          "calibration")
    max_num_seqs: Any = knob(0, "int0", "running-batch cap per replica (0: the framework's "
                             "default)", "sequences")
    max_num_tokens: Any = knob(0, "int0", "tokens per engine step (chunked prefill budget; 0: "
                               "the framework's default)", "tokens")
    prefix_cache_hit: Any = knob(0.0, "reserve", "share of prompt tokens whose KV comes from "
                                 "the prefix cache")
    input_len_cv: Any = knob(0.0, "cv", "coefficient of variation of prompt lengths "
                             "(lognormal; 0: all input_len)")
    output_len_cv: Any = knob(0.0, "cv", "coefficient of variation of output lengths "
                              "(lognormal; 0: all output_len)")
    ttft_slo_s: Any = knob(0.0, "seconds0", "TTFT objective a request must meet to count in "
                           "goodput (0: none)", "s")
    tpot_slo_s: Any = knob(0.0, "seconds0", "TPOT objective a request must meet to count in "
                           "goodput (0: none)", "s")
    num_prompts: Any = knob(0, "int0", "requests of a closed-loop benchmark run, its clients "
                            "starting together on an idle engine (vllm bench serve "
                            "--num-prompts; InferenceX: 10 x concurrency): its first wave "
                            "counts in the means and percentiles (0: the steady state)",
                            "requests", "requests of the benchmark run")
    scheduler_recv_interval: Any = knob(1, "int", "decode steps between the scheduler's "
                                        "looks for new requests (SGLang "
                                        "--scheduler-recv-interval; a prompt step is followed "
                                        "by a look at once; 1: every step)", "steps",
                                        "scheduler receive interval")
    # Agentic sessions and KV-cache tiers (docs/serving.md#agentic-sessions): multi-turn
    # sessions whose context grows, kept between turns in HBM, host DRAM or SSD
    sessions: Any = knob(0, "int0", "concurrent agentic sessions of the deployment, each "
                         "starting its next turn think_time_s after its last and a new "
                         "session when it ends (closed; 0: none)", "sessions")
    session_rate: Any = knob(0.0, "rate", "agentic sessions starting per second (open; 0: "
                             "none)", "sessions/s", "session rate")
    turns: Any = knob(1, "int", "turns (requests) per session, their mean with turns_cv",
                      "turns")
    turns_cv: Any = knob(0.0, "cv", "coefficient of variation of the turns per session "
                         "(lognormal; 0: all turns)")
    turn_input_len: Any = knob(0, "int0", "new prompt tokens per turn (tool results, the "
                               "user's message); a turn's prompt is the shared prefix, the "
                               "earlier turns' inputs and outputs and these (0: input_len)",
                               "tokens", "turn input length")
    shared_prefix_len: Any = knob(0, "int0", "system-prompt tokens every session shares "
                                  "(kept in HBM)", "tokens", "shared prefix length")
    think_time_s: Any = knob(0.0, "seconds0", "mean time between a turn's last token and "
                             "the session's next turn (tool calls, the user; exponential; "
                             "0: at once)", "s", "think time")
    kv_offload: Any = knob("all", "kv_offload", "what the KV tiers keep of a turn: \"all\" "
                           "its blocks, \"prompt\" the prompt's (LMCache's default, no "
                           "decode cache), \"none\" (HBM only)")
    kv_dram_bytes: Any = knob(0.0, "bytes0", "host DRAM for KV copies per replica (LMCache, "
                              "HiCache, KVBM; 0: none)", "bytes", "KV DRAM tier")
    kv_dram_bw_bytes_per_s: Any = knob(0.0, "bandwidth0", "each device's link to the host "
                                       "DRAM tier (PCIe 5.0 x16 ~ 55e9 effective; C2C)",
                                       "bytes/s", "KV DRAM bandwidth")
    kv_ssd_bytes: Any = knob(0.0, "bytes0", "SSD or remote store for KV copies per replica "
                             "(0: none)", "bytes", "KV SSD tier")
    kv_ssd_bw_bytes_per_s: Any = knob(0.0, "bandwidth0", "read bandwidth of the replica's "
                                      "SSD tier", "bytes/s", "KV SSD bandwidth")
    kv_ssd_latency_s: Any = knob(0.0, "seconds0", "latency of a read from the SSD tier", "s",
                                 "KV SSD latency")
    kv_dram_usd_per_gb_h: Any = knob(0.0, "price0", "price of the DRAM tier per GB-hour "
                                     "(in cost_per_session_usd)", "USD/(GB h)")
    kv_ssd_usd_per_gb_h: Any = knob(0.0, "price0", "price of the SSD tier per GB-hour",
                                    "USD/(GB h)")
    routing: Any = knob("random", "routing", "how turns reach replicas: \"random\" (a plain "
                        "load balancer), \"session-affinity\" (a session's turns to one "
                        "replica by hash), \"prefix-aware\" (to the replica holding the "
                        "prefix, balancing load)")
    replicas: Any = knob(0, "int0", "replicas the router spreads sessions over (0: dp; "
                         "sessions only)", "replicas")
    # Disaggregated serving (docs/serving.md#disaggregated-serving): a pool of prefill
    # workers and a pool of decode workers, each with its own layout and device; a pool
    # key at 0 (or a pool device not given) takes the deployment's own
    serving: Any = knob("agg", "serving", "aggregated or disaggregated (prefill and decode "
                        "pools) serving")
    prefill_workers: Any = knob(1, "int", "prefill workers (disagg)", "workers")
    prefill_tp: Any = knob(0, "int0", "tensor-parallel degree of a prefill worker (0: tp)",
                           "devices")
    prefill_pp: Any = knob(0, "int0", "pipeline stages of a prefill worker (0: pp)", "devices")
    prefill_dp: Any = knob(0, "int0", "attention data-parallel ranks of a prefill worker "
                           "(0: 1)", "replicas")
    prefill_ep: Any = knob(0, "int0", "expert-parallel degree of a prefill worker (0: ep)",
                           "devices")
    prefill_moe_tp: Any = knob(0, "int0", "expert tensor-parallel degree of a prefill worker; "
                               "tp x dp = moe_tp x ep (0: derived)", "devices")
    prefill_batch: Any = knob(0, "int0", "running-batch cap per attention-DP rank of a "
                              "prefill worker (0: max_num_seqs)", "sequences")
    prefill_hardware: Any = knob(None, "hardware", "device of the prefill pool (default: "
                                 "hardware)")
    decode_workers: Any = knob(1, "int", "decode workers (disagg)", "workers")
    decode_tp: Any = knob(0, "int0", "tensor-parallel degree of a decode worker (0: tp)",
                          "devices")
    decode_pp: Any = knob(0, "int0", "pipeline stages of a decode worker (0: pp)", "devices")
    decode_dp: Any = knob(0, "int0", "attention data-parallel ranks of a decode worker "
                          "(0: 1)", "replicas")
    decode_ep: Any = knob(0, "int0", "expert-parallel degree of a decode worker (0: ep)",
                          "devices")
    decode_moe_tp: Any = knob(0, "int0", "expert tensor-parallel degree of a decode worker; "
                              "tp x dp = moe_tp x ep (0: derived)", "devices")
    decode_batch: Any = knob(0, "int0", "running-batch cap per attention-DP rank of a decode "
                             "worker (0: max_num_seqs)", "sequences")
    decode_hardware: Any = knob(None, "hardware", "device of the decode pool (default: "
                                "hardware)")
    kv_transfer_overlap: Any = knob(0.0, "unit", "share of a request's prefill time its KV "
                                    "transfer hides behind (layer-wise streaming; 0: the "
                                    "transfer starts when the prefill ends)")
    draft_model: Any = knob(None, "model", "speculative-decoding draft model")
    draft_len: Any = knob(0, "int0", "tokens the draft proposes per step (0: no speculation)",
                          "tokens")
    acceptance_rate: Any = knob(0.7, "unit", "probability the target accepts a draft token")
    # Speculative decoding under a load (docs/serving.md#speculative-decoding-under-load):
    # a draft layer of the model proposes spec_tokens tokens per decode step (MTP; EAGLE)
    spec_tokens: Any = knob(0, "int0", "draft tokens proposed per decode step under a load "
                            "(MTP / EAGLE: one draft layer of the model, run once per "
                            "draft token; 0: none)", "tokens")
    spec_acceptance: Any = knob(0.0, "accepted", "mean tokens a speculative decode step "
                                "yields per sequence, the verified one included (1 .. "
                                "spec_tokens + 1; 0: from acceptance_rate)", "tokens")
    lora_rank: Any = knob(0, "int0", "LoRA adapter rank (0: no adapters)")
    lora_adapters: Any = knob(1, "int", "LoRA adapters served at once", "adapters")
    # Device power split as GenZ models it (GenZ/power.py): static, and compute, memory
    # and network shares drawn in proportion to each one's utilization.
    power_static: Any = knob(0.3, "unit", "static share of TDP (drawn all the time)")
    power_compute: Any = knob(0.4, "unit", "share of TDP drawn at full compute utilization")
    power_memory: Any = knob(0.2, "unit", "share of TDP drawn at full memory utilization")
    power_network: Any = knob(0.1, "unit", "share of TDP drawn while communicating")


@pytrees.register
@dataclasses.dataclass(frozen=True)
class TrainingPoint:
    """One training job (or a broadcast grid / batch of them)."""

    model: Any = knob(None, "model", "model architecture")
    hardware: Any = knob(None, "hardware", "device type")
    global_batch: Any = knob(0, "int0", "sequences per optimizer step (0: micro_batch x dp, "
                             "no gradient accumulation)", "sequences", "global batch")
    micro_batch: Any = knob(1, "int", "sequences per micro-batch per replica", "sequences")
    seq_len: Any = knob(2048, "int", "tokens per training sequence", "tokens",
                        "sequence length")
    tp: Any = knob(1, "int", "tensor-parallel degree", "devices")
    pp: Any = knob(1, "int", "pipeline-parallel degree (stages)", "devices")
    dp: Any = knob(1, "int", "data-parallel replicas (derived when num_devices > 0)", "replicas")
    ep: Any = knob(1, "int", "expert-parallel degree (MoE; devices from tp x dp; a dense model "
                   "ignores it)", "devices")
    cp: Any = knob(1, "int", "context-parallel degree (ring attention over the sequence)",
                   "devices")
    moe_imbalance: Any = knob(1.0, "ratio1", "max over mean tokens per expert (MoE; 1: "
                              "balanced); under expert parallelism the busiest expert's device "
                              "sets the step")
    num_devices: Any = knob(0, "int0", "devices in the job; dp = num_devices / (tp pp cp) "
                            "(0: use dp)", "devices")
    sequence_parallel: Any = knob(False, "flag", "sequence parallelism (Korthikanti et al. "
                                  "2022): norms and dropout sharded over tp")
    zero_stage: Any = knob(0, "zero", "ZeRO stage: 1 shards optimizer states, 2 also "
                           "gradients, 3 also parameters, over data parallelism")
    recompute: Any = knob("none", "recompute", "activation recomputation")
    virtual_stages: Any = knob(1, "int", "model chunks per pipeline device (interleaved "
                               "1F1B when > 1)", "1")
    first_stage_layers: Any = knob(0, "int0", "transformer layers on the first pipeline "
                                   "stage (0: even split; Megatron-LM's "
                                   "--decoder-first-pipeline-num-layers)", "layers")
    last_stage_layers: Any = knob(0, "int0", "transformer layers on the last pipeline stage "
                                  "(0: even split; Megatron-LM's "
                                  "--decoder-last-pipeline-num-layers)", "layers")
    pp_schedule: Any = knob("1f1b", "pp_schedule", "pipeline schedule (1f1b, gpipe, zb-h1, "
                            "dualpipe)")
    optimizer: Any = knob("adamw", "optimizer", "optimizer (state bytes per parameter)",
                          "bytes")
    weight_bits: Any = knob(16, "bits", "bits per stored (working) weight", "bit")
    grad_bits: Any = knob(16, "bits", "bits per stored gradient", "bit")
    master_weight_bits: Any = knob(32, "bits", "bits per master weight kept by the "
                                   "optimizer (no copy when <= weight_bits)", "bit")
    act_bits: Any = knob(16, "compute_bits", "bits per activation (sets the compute dtype)",
                         "bit")
    flash_attention: Any = knob(True, "flag", "fused attention (no score matrix in memory)")
    dropout: Any = knob(False, "flag", "dropout layers (their masks are stored)")
    tp_overlap: Any = knob(0.0, "unit", "share of tensor-parallel communication hidden "
                           "behind compute")
    dp_overlap: Any = knob(0.0, "unit", "share of data-parallel (gradient, ZeRO) "
                           "communication hidden behind compute")
    pp_overlap: Any = knob(0.0, "unit", "share of pipeline send/receive time hidden behind "
                           "compute")
    flops_efficiency: Any = knob(1.0, "fraction", "achieved fraction of peak FLOP/s")
    hbm_efficiency: Any = knob(1.0, "fraction", "achieved fraction of peak memory bandwidth")
    link_efficiency: Any = knob(1.0, "fraction", "achieved fraction of link bandwidth")
    hbm_bw_scale: Any = knob(1.0, "scale", "what-if multiplier on memory bandwidth")
    tflops_scale: Any = knob(1.0, "scale", "what-if multiplier on every peak FLOP/s")
    link_bw_scale: Any = knob(1.0, "scale", "what-if multiplier on link bandwidths")
    memory_scale: Any = knob(1.0, "scale", "what-if multiplier on memory capacity")
    memory_reserve: Any = knob(0.1, "reserve", "memory fraction kept for the framework, CUDA "
                               "context, NCCL buffers and fragmentation; default 0.1, as in "
                               "inference")
    total_tokens: Any = knob(0, "int0", "tokens to train on (0: no time-to-train outputs)",
                             "tokens")


@pytrees.register
@dataclasses.dataclass(frozen=True)
class PipelinePoint:
    """One inference deployment over the study's heterogeneous pipeline ([pipeline])."""

    model: Any = knob(None, "model", "model architecture")
    batch: Any = knob(1, "int", "concurrent sequences", "sequences")
    input_len: Any = knob(512, "int", "prompt tokens per sequence", "tokens", "input length")
    output_len: Any = knob(128, "int", "generated tokens per sequence", "tokens", "output length")
    weight_bits: Any = knob(16, "bits", "bits per stored weight", "bit")
    kv_bits: Any = knob(16, "bits", "bits per stored KV-cache element", "bit")
    act_bits: Any = knob(16, "compute_bits", "bits per activation and hidden state sent "
                         "between stages", "bit")
    flops_efficiency: Any = knob(1.0, "fraction", "achieved fraction of peak FLOP/s")
    hbm_efficiency: Any = knob(1.0, "fraction", "achieved fraction of peak memory bandwidth")
    link_efficiency: Any = knob(1.0, "fraction", "achieved fraction of device link bandwidth")
    hbm_bw_scale: Any = knob(1.0, "scale", "what-if multiplier on memory bandwidth")
    tflops_scale: Any = knob(1.0, "scale", "what-if multiplier on every peak FLOP/s")
    link_bw_scale: Any = knob(1.0, "scale", "what-if multiplier on the pipeline's link "
                              "bandwidths")
    memory_scale: Any = knob(1.0, "scale", "what-if multiplier on memory capacity")
    memory_reserve: Any = knob(0.1, "reserve", "memory fraction kept for the OS, framework "
                               "and fragmentation")
    quant_group_size: Any = knob(128, "int0", "weights per 16-bit scale in sub-8-bit formats "
                                 "(0: no scales)", "elements")
    flash_attention: Any = knob(True, "flag", "fused attention (no score matrix in memory)")
    target_tpot_s: Any = knob(0.0, "seconds0", "TPOT target for the network requirement", "s")
    target_ttft_s: Any = knob(0.0, "seconds0", "TTFT target for the network requirement", "s")
    comm_share: Any = knob(0.0, "reserve", "share of the target spent communicating (1:4 "
                           "communication:compute = 0.2); 0: what the target leaves after "
                           "the engine's compute time")


POINT_TYPES = {"inference": InferencePoint, "training": TrainingPoint, "pipeline": PipelinePoint}
MODES = tuple(POINT_TYPES)


def fields(point_type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(point_type)}


def meta(point_type, name: str) -> dict[str, Any]:
    return dict(fields(point_type)[name].metadata)

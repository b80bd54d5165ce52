"""Output variables: name -> units, long name, kind (and the infeasibility reason flags).

Every Dataset variable dse writes is declared here, so units live in one place and
``attrs["units"]``/``attrs["long_name"]`` are attached uniformly (xarray's plotting
reads them). Optional outputs cost extra evaluation and are computed only on request.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

from ..formulas.inference import COMPONENTS, PHASES
from ..formulas.parts import REGIMES
from ..formulas.training import COMM_KINDS


class Output(NamedTuple):
    units: str
    long_name: str
    kind: str = "float"  # float | bool | flags | codes | pool
    optional: bool = False  # computed only when listed in [output] variables
    dims: tuple[str, ...] = ()  # leading dims beyond the study's axes
    feature: str = ""  # present only when the study uses this feature
    direction: str = ""  # of a number: "maximize" if more is better, else "minimize"
    alias_of: str = ""  # an output's old name, kept for one release (same values)


def more(units: str, long_name: str, *args, **kw) -> Output:
    """A number of which more is better (throughput, capacity, utilization)."""
    return Output(units, long_name, *args, direction="maximize", **kw)


def less(units: str, long_name: str, *args, **kw) -> Output:
    """A number of which less is better (time, memory, cost, energy, devices)."""
    return Output(units, long_name, *args, direction="minimize", **kw)


class Registry(dict):
    def defaults(self, features=frozenset()) -> tuple[str, ...]:
        """Outputs written when a study does not list ``[output] variables``."""
        return tuple(k for k, v in self.items()
                     if not v.optional and (not v.feature or v.feature in features))


BREAKDOWN_DIMS = ("phase", "component")
EXTRA_COORDS = {"phase": PHASES, "component": COMPONENTS, "comm_kind": COMM_KINDS,
                "training_pass": ("step",),
                "stage": (), "link": ()}  # stage and link labels come from the study

INFERENCE = Registry({
    "n_params": less("1", "total parameters"),
    "n_params_active": less("1", "parameters active per token"),
    "n_devices": less("devices", "devices in the deployment (tp x pp x dp)"),
    "dp_size": less("replicas", "data-parallel replicas (derived when num_devices is given)"),
    "weight_bytes": less("bytes", "weight memory per device"),
    "kv_cache_bytes": less("bytes", "KV-cache memory per device"),
    "activation_bytes": less("bytes", "peak activation memory per device"),
    "memory_bytes": less("bytes", "total memory per device"),
    "fits": Output("1", "memory fits on the device", "bool"),
    "max_batch": more("sequences", "largest batch that fits at these lengths"),
    "max_batch_prefill": more("sequences", "largest prefill batch that fits (prompt KV only)"),
    "max_batch_decode": more("sequences", "largest decode batch that fits (full KV)"),
    "max_batch_total_tokens": more("tokens", "KV-cache tokens that fit beside the weights"),
    "prefill_flops": less("FLOP", "prefill FLOPs of the whole batch"),
    "decode_flops": less("FLOP", "FLOPs of one decode step of the whole batch"),
    "ttft_s": less("s", "time to first token"),
    "tpot_s": less("s", "mean time per output token"),
    "e2e_s": less("s", "end-to-end request latency"),
    "throughput_tok_s": more("tokens/s", "output tokens per second of the deployment"),
    "throughput_per_device_tok_s": more("tokens/s", "output tokens per second per device"),
    "tokens_per_s_per_user": more("tokens/s", "output tokens per second each request sees "
                                  "(1 / TPOT)"),
    "target_steps_per_token": less("1", "target-model passes per output token",
                                     feature="speculative"),
    "cost_per_mtok": less("USD", "cost per million output tokens"),
    "energy_per_tok_j": less("J", "energy per output token"),
    # serving under a request load (feature "load": concurrency or request_rate > 0)
    "ttft_p50_s": less("s", "median time to first token under load", feature="load"),
    "ttft_p90_s": less("s", "90th percentile time to first token under load", feature="load"),
    "ttft_p99_s": less("s", "99th percentile time to first token under load", feature="load"),
    "tpot_p50_s": less("s", "median time per output token under load", feature="load"),
    "tpot_p90_s": less("s", "90th percentile time per output token under load",
                       feature="load"),
    "tpot_p99_s": less("s", "99th percentile time per output token under load",
                       feature="load"),
    "e2e_p50_s": less("s", "median request latency under load", feature="load"),
    "e2e_p90_s": less("s", "90th percentile request latency under load", feature="load"),
    "e2e_p99_s": less("s", "99th percentile request latency under load", feature="load"),
    "itl_p50_s": less("s", "median inter-token latency under load (every gap between two "
                      "tokens of a request, pooled over tokens)", feature="load"),
    "itl_p90_s": less("s", "90th percentile inter-token latency under load (gaps between "
                      "tokens, pooled over tokens)", feature="load"),
    "itl_p99_s": less("s", "99th percentile inter-token latency under load (gaps between "
                      "tokens, pooled over tokens)", feature="load"),
    "queue_s": less("s", "mean wait before a request's first prefill step", feature="load"),
    "frontend_s": less("s", "host time per request outside the engine steps (HTTP server, "
                       "tokenizer, detokenizer, client), in TTFT and E2E", feature="load"),
    "running_batch": more("sequences", "mean sequences decoding per step, per replica",
                          feature="load"),
    "request_throughput_req_s": more("requests/s", "requests completed per second",
                                     feature="load"),
    "goodput_req_s": more("requests/s", "requests per second that meet ttft_slo_s and "
                          "tpot_slo_s", feature="load"),
    "goodput_req_per_usd": more("requests/USD", "requests meeting the objectives per dollar "
                                "of devices (nan without a price)", feature="load"),
    "utilization": less("1", "request rate over the deployment's capacity", feature="load"),
    "capacity_req_s": more("requests/s", "largest request rate the deployment sustains",
                           feature="load"),
    # agentic sessions (feature "sessions": sessions or session_rate > 0); the latencies
    # above are per turn
    "prefix_hit_rate": more("1", "share of prompt tokens served from a KV cache (HBM, DRAM "
                            "or SSD)", feature="sessions"),
    "hbm_hit_rate": more("1", "share of prompt tokens found in HBM (the shared prefix "
                         "included)", feature="sessions"),
    "dram_hit_rate": more("1", "share of prompt tokens reloaded from the host DRAM tier",
                          feature="sessions"),
    "ssd_hit_rate": more("1", "share of prompt tokens reloaded from the SSD tier",
                         feature="sessions"),
    "kv_reload_s": less("s", "mean time a turn waits for its prefix from DRAM and SSD (in "
                        "TTFT)", feature="sessions"),
    "session_s": less("s", "wall time of a session: its turns and the think times between "
                      "them", feature="sessions"),
    "sessions_per_s": more("sessions/s", "sessions completed per second", feature="sessions"),
    "kv_dram_used_bytes": less("bytes", "DRAM tier per replica holding copies a later turn "
                               "finds (the rest holds finished sessions LRU keeps)",
                               feature="sessions"),
    "kv_ssd_used_bytes": less("bytes", "SSD tier per replica holding copies a later turn "
                              "finds", feature="sessions"),
    "cost_per_session_usd": less("USD", "devices and KV tiers per session", feature="sessions"),
    # disaggregated serving (feature "disagg": serving = "disagg"; nan at "agg" points)
    "kv_transfer_s": less("s", "KV-cache transfer of one request's prompt, prefill to "
                          "decode worker", feature="disagg"),
    "prefill_capacity_req_s": more("requests/s", "largest request rate the prefill pool "
                                   "sustains", feature="disagg"),
    "decode_capacity_req_s": more("requests/s", "largest request rate the decode pool "
                                  "sustains", feature="disagg"),
    "bottleneck": Output("1", "the pool that sets the capacity (0: prefill, 1: decode)", "pool",
                         feature="disagg"),
    "prefill_utilization": less("1", "request rate over the prefill pool's capacity",
                                feature="disagg"),
    "decode_utilization": less("1", "request rate over the decode pool's capacity",
                               feature="disagg"),
    "prefill_devices": less("devices", "devices of the prefill pool (workers x tp x pp x dp)",
                            feature="disagg"),
    "decode_devices": less("devices", "devices of the decode pool (workers x tp x pp x dp)",
                           feature="disagg"),
    "serving_throughput_tok_s": more(
        "tokens/s", "continuous-batching output tokens per second at max_batch", optional=True),
    "component_s": less("s", "time per component and phase", dims=BREAKDOWN_DIMS,
                          feature="breakdown"),
    "component_flops": less("FLOP", "FLOPs per component and phase (per device)",
                              dims=BREAKDOWN_DIMS, feature="breakdown"),
    "component_bytes": less("bytes", "memory traffic per component and phase (per device)",
                              dims=BREAKDOWN_DIMS, feature="breakdown"),
    "component_bound": Output("1", "binding roof per component and phase", "codes",
                              dims=BREAKDOWN_DIMS, feature="breakdown"),
    "bound_signature": Output("1", "binding roof of every component, base-4 digits "
                              "(component_bound codes)", "codes", optional=True, dims=("phase",)),
    "dominant_phase": Output("1", "the phase that takes most of a request's time (prefill: "
                             "TTFT; decode: the other steps)", "pool"),
    "regime": Output("1", "the roof with the most seconds in the dominant phase (compute, "
                     "memory, communication or host overheads)", "regime"),
    "valid": Output("1", "feasible configuration", "bool"),
    "reason": Output("1", "why the configuration is infeasible", "flags"),
})

TRAINING = Registry({
    "n_params": less("1", "total parameters"),
    "n_params_active": less("1", "parameters active per token"),
    "n_devices": less("devices", "devices in the job (tp x pp x dp x cp)"),
    "dp_size": less("replicas", "data-parallel replicas (derived when num_devices is given)"),
    "grad_accum_steps": less("1", "micro-batches per replica per step (gradient accumulation)"),
    "weight_bytes": less("bytes", "parameter memory per device (ZeRO-3: shard + gathered layers)"),
    "grad_bytes": less("bytes", "gradient memory per device"),
    "optimizer_bytes": less("bytes", "optimizer state (and fp32 master weights) per device"),
    "activation_bytes": less("bytes", "activation memory per device (in-flight micro-batches)"),
    "memory_bytes": less("bytes", "total memory per device (busiest pipeline stage)"),
    "fits": Output("1", "memory fits on the device", "bool"),
    "max_micro_batch": more("sequences", "largest micro-batch that fits (same schedule)"),
    "step_s": less("s", "time per optimizer step"),
    "compute_s": less("s", "per step: operator time of the micro-batches on one device"),
    "bubble_s": less("s", "per step: pipeline fill and drain"),
    "bubble_fraction": less("1", "pipeline bubble over ideal compute time (1F1B: (p-1)/(v m))"),
    "comm_s": less("s", "per step: exposed (not overlapped) communication by kind",
                     dims=("comm_kind",)),
    "throughput_tok_s": more("tokens/s", "training tokens per second of the job"),
    "throughput_per_device_tok_s": more("tokens/s", "training tokens per second per device"),
    "model_flops_per_step": more("FLOP", "model FLOPs per step (6N + causal attention, "
                                   "the MFU convention)"),
    "hardware_flops_per_step": less("FLOP", "FLOPs executed per step (recompute and "
                                      "masked attention included)"),
    "mfu": more("1", "model FLOPs utilization"),
    "hfu": more("1", "hardware FLOPs utilization"),
    "train_days": less("days", "days to train on total_tokens (0: total_tokens not given)"),
    "device_hours": less("h", "device-hours to train on total_tokens"),
    "train_cost_usd": less("USD", "cost to train on total_tokens at the catalogue price"),
    "bound_signature": Output("1", "binding roof of every part of the step, base-4 digits "
                              "(component_bound codes)", "codes", optional=True,
                              dims=("training_pass",)),
    "regime": Output("1", "the roof with the most seconds in the step (compute, memory, "
                     "communication or host overheads)", "regime"),
    # old names (training said tokens_per_s where inference says throughput_tok_s)
    "tokens_per_s": more("tokens/s", "training tokens per second of the job (old name of "
                         "throughput_tok_s, until the next release)", optional=True,
                         alias_of="throughput_tok_s"),
    "tokens_per_s_per_device": more("tokens/s", "training tokens per second per device (old "
                                    "name of throughput_per_device_tok_s, until the next "
                                    "release)", optional=True,
                                    alias_of="throughput_per_device_tok_s"),
    "valid": Output("1", "feasible configuration", "bool"),
    "reason": Output("1", "why the configuration is infeasible", "flags"),
})

PIPELINE = Registry({
    "n_params": less("1", "total parameters"),
    "split_layers": less("layers", "recommended layers per stage", dims=("stage",)),
    "stage_decode_s": less("s", "decode step time per stage", dims=("stage",)),
    "stage_prefill_s": less("s", "prefill time per stage (one micro-batch)", dims=("stage",)),
    "stage_memory_bytes": less("bytes", "memory per stage", dims=("stage",)),
    "stage_capacity_bytes": more("bytes", "usable memory per stage", dims=("stage",)),
    "link_decode_s": less("s", "time for one decode step's hidden states per link",
                            dims=("link",)),
    "link_prefill_s": less("s", "time for one prefill's hidden states per link",
                             dims=("link",)),
    "ttft_s": less("s", "time to first token"),
    "tpot_s": less("s", "mean time per output token"),
    "e2e_s": less("s", "end-to-end request latency"),
    "throughput_tok_s": more("tokens/s", "output tokens per second"),
    "comm_share_decode": less("1", "share of a decode traversal spent on links"),
    "comm_share_prefill": less("1", "share of a prefill traversal spent on links"),
    "bottleneck_stage": less("1", "index of the slowest stage in decode"),
    "link_bound": Output("1", "a link is slower than every stage in decode", "bool"),
    "feasible_splits": more("1", "candidate splits that fit every stage's memory"),
    "required_link_bw_decode_bytes_per_s": less(
        "bytes/s", "link bandwidth needed for target_tpot_s"),
    "required_link_bw_decode_bit_per_s": less("bit/s", "link bandwidth needed for target_tpot_s"),
    "required_link_bw_prefill_bytes_per_s": less(
        "bytes/s", "link bandwidth needed for target_ttft_s"),
    "required_link_bw_prefill_bit_per_s": less("bit/s",
                                                 "link bandwidth needed for target_ttft_s"),
    "max_link_latency_decode_s": more("s", "largest one-way link latency for target_tpot_s"),
    "max_link_latency_prefill_s": more("s", "largest one-way link latency for target_ttft_s"),
    "fits": Output("1", "some split fits every stage's memory", "bool"),
    "valid": Output("1", "feasible configuration", "bool"),
    "reason": Output("1", "why the configuration is infeasible", "flags"),
})

OUTPUTS = {"inference": INFERENCE, "training": TRAINING, "pipeline": PIPELINE}
PRIMARY_METRIC = {"inference": "throughput_tok_s", "training": "throughput_tok_s",
                  "pipeline": "throughput_tok_s"}

BOUND_CODES = {"compute": 0, "memory": 1, "communication": 2, "none": 3}
REGIME_CODES = {name: code for code, name in enumerate(REGIMES)}

# Bit flags of the ``reason`` variable (CF conventions: flag_masks / flag_meanings).
REASONS = {
    "tp_indivisible": "tp does not divide the heads, kv heads or MLP width",
    "pp_exceeds_layers": "more pipeline stages than layers",
    "oom": "memory per device exceeds its capacity",
    "context_too_long": "input_len + output_len (training: seq_len) exceeds the model's "
                        "context",
    "ep_indivisible": "ep does not divide the experts or tp x dp (or the model has no experts)",
    "batch_indivisible": "global_batch is not a multiple of micro_batch x dp (training)",
    "devices_indivisible": "num_devices is not a multiple of tp x pp (x cp in training)",
    "schedule_indivisible": "pipeline layout or schedule not valid: layers not divisible "
                            "by pp x virtual_stages (with first/last_stage_layers: the "
                            "rest not by the middle stages, or a stage's layers not by "
                            "virtual_stages), micro-batches not by pp when interleaved, "
                            "virtual stages with gpipe, zb-h1 or dualpipe, dualpipe with "
                            "an odd pp or fewer than 2 pp (or an odd number of) "
                            "micro-batches, or seq_len not divisible by 2 cp (training)",
    "overloaded": "the request rate is at or past what the deployment can serve (latencies "
                  "unbounded: NaN)",
}
REASON_BITS = {name: 1 << i for i, name in enumerate(REASONS)}


def renamed(outputs: Registry, name: str, file, key: str) -> None:
    """Warn (FutureWarning) when a study names an output by its old name."""
    alias = outputs.get(name)
    if alias is not None and alias.alias_of:
        warnings.warn(f"{file}: {key}: output {name!r} is called {alias.alias_of!r} now; the "
                      "old name works until the next release", FutureWarning, stacklevel=3)


def reason_names(code: int) -> list[str]:
    """Decode a ``reason`` value into its flag names."""
    return [name for name, bit in REASON_BITS.items() if int(code) & bit]

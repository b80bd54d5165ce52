"""Output variables: name -> units, long name, kind (and the infeasibility reason flags).

Every Dataset variable dse writes is declared here, so units live in one place and
``attrs["units"]``/``attrs["long_name"]`` are attached uniformly (xarray's plotting
reads them). Optional outputs cost extra evaluation and are computed only on request.
"""

from __future__ import annotations

from typing import NamedTuple

from .formulas.inference import COMPONENTS, PHASES


class Output(NamedTuple):
    units: str
    long_name: str
    kind: str = "float"  # float | bool | flags | codes
    optional: bool = False  # computed only when listed in [output] variables
    dims: tuple[str, ...] = ()  # leading dims beyond the study's axes
    feature: str = ""  # present only when the study uses this feature


class Registry(dict):
    def defaults(self, features=frozenset()) -> tuple[str, ...]:
        """Outputs written when a study does not list ``[output] variables``."""
        return tuple(k for k, v in self.items()
                     if not v.optional and (not v.feature or v.feature in features))


BREAKDOWN_DIMS = ("phase", "component")
EXTRA_COORDS = {"phase": PHASES, "component": COMPONENTS}

INFERENCE = Registry({
    "n_params": Output("1", "total parameters"),
    "n_params_active": Output("1", "parameters active per token"),
    "n_devices": Output("devices", "devices in the deployment"),
    "weight_bytes": Output("bytes", "weight memory per device"),
    "kv_cache_bytes": Output("bytes", "KV-cache memory per device"),
    "activation_bytes": Output("bytes", "peak activation memory per device"),
    "memory_bytes": Output("bytes", "total memory per device"),
    "fits": Output("1", "memory fits on the device", "bool"),
    "max_batch": Output("sequences", "largest batch that fits at these lengths"),
    "max_batch_prefill": Output("sequences", "largest prefill batch that fits (prompt KV only)"),
    "max_batch_decode": Output("sequences", "largest decode batch that fits (full KV)"),
    "max_batch_total_tokens": Output("tokens", "KV-cache tokens that fit beside the weights"),
    "prefill_flops": Output("FLOP", "prefill FLOPs of the whole batch"),
    "decode_flops": Output("FLOP", "FLOPs of one decode step of the whole batch"),
    "ttft_s": Output("s", "time to first token"),
    "tpot_s": Output("s", "mean time per output token"),
    "e2e_s": Output("s", "end-to-end request latency"),
    "throughput_tok_s": Output("tokens/s", "output tokens per second of the deployment"),
    "throughput_per_device_tok_s": Output("tokens/s", "output tokens per second per device"),
    "target_steps_per_token": Output("1", "target-model passes per output token",
                                     feature="speculative"),
    "cost_per_mtok": Output("USD", "cost per million output tokens"),
    "energy_per_tok_j": Output("J", "energy per output token"),
    "serving_throughput_tok_s": Output(
        "tokens/s", "continuous-batching output tokens per second at max_batch", optional=True),
    "component_s": Output("s", "time per component and phase", dims=BREAKDOWN_DIMS,
                          feature="breakdown"),
    "component_flops": Output("FLOP", "FLOPs per component and phase (per device)",
                              dims=BREAKDOWN_DIMS, feature="breakdown"),
    "component_bytes": Output("bytes", "memory traffic per component and phase (per device)",
                              dims=BREAKDOWN_DIMS, feature="breakdown"),
    "component_bound": Output("1", "binding roof per component and phase", "codes",
                              dims=BREAKDOWN_DIMS, feature="breakdown"),
    "bound_signature": Output("1", "binding roof of every component, base-4 digits "
                              "(component_bound codes)", "codes", optional=True, dims=("phase",)),
    "valid": Output("1", "feasible configuration", "bool"),
    "reason": Output("1", "why the configuration is infeasible", "flags"),
})

OUTPUTS = {"inference": INFERENCE}

BOUND_CODES = {"compute": 0, "memory": 1, "communication": 2, "none": 3}

# Bit flags of the ``reason`` variable (CF conventions: flag_masks / flag_meanings).
REASONS = {
    "tp_indivisible": "tp does not divide the heads, kv heads or MLP width",
    "pp_exceeds_layers": "more pipeline stages than layers",
    "oom": "memory per device exceeds its capacity",
    "context_too_long": "input_len + output_len exceeds the model's context",
    "ep_indivisible": "ep does not divide the experts or tp x dp (or the model has no experts)",
}
REASON_BITS = {name: 1 << i for i, name in enumerate(REASONS)}


def reason_names(code: int) -> list[str]:
    """Decode a ``reason`` value into its flag names."""
    return [name for name, bit in REASON_BITS.items() if int(code) & bit]

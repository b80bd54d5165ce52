"""The ``[sensitivity]`` section: which metrics, which hardware parameters, what to ask.

```toml
[sensitivity]
metrics = ["ttft_s", "tpot_s", "throughput_tok_s"]   # default: latency and throughput
params = ["hbm_bw", "peak_flops_16", "intra_bw"]      # default: all (see PARAMS)
delta = 0.1                                           # the what-if step, +-10%
inverse = [{ param = "hbm_bw", goal = "tpot_s <= 0.03" }]
mix = { usecase = { chat = 0.7, summarization = 0.3 } }   # weights over study axes
```

Parsed when the study is loaded, so a malformed section fails ``dse sweep`` too; a study
without the section gets the defaults when ``dse sensitivity`` runs.
"""

from __future__ import annotations

import dataclasses

from .. import checks
from ..errors import InputError, suggest
from ..schema.outputs import OUTPUTS, renamed
from .constraints import Constraint, parse_constraint
from .reduce import numeric_outputs

KEYS = ("metrics", "params", "delta", "inverse", "mix")
DEFAULT_METRICS = {"inference": ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s"),
                   "training": ("step_s", "throughput_tok_s", "mfu"),
                   "pipeline": ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s")}
# outputs whose change between -delta and +delta marks a kink (the binding roof of every
# component; in a pipeline, the slowest stage and whether a link binds)
KINK_SIGNATURE = {"inference": ("bound_signature",), "training": ("bound_signature",),
                  "pipeline": ("bottleneck_stage", "link_bound")}


@dataclasses.dataclass(frozen=True)
class Param:
    """A hardware parameter: where it lives and what it is."""

    name: str
    source: str  # "hardware" (a HardwareSpec field: every device, every pipeline stage),
    #              "point" (a knob) or "links" (a pipeline's links between stages)
    field: str
    units: str
    long_name: str
    knob: str | None = None  # the what-if knob that scales it (for inverse questions)
    modes: tuple[str, ...] = ("inference", "training", "pipeline")


PARAMS = {p.name: p for p in [
    Param("hbm_bw", "hardware", "hbm_bw_bytes_per_s", "bytes/s", "memory bandwidth",
          "hbm_bw_scale"),
    Param("peak_flops_32", "hardware", "flops_per_s_32", "FLOP/s", "32-bit (vector) peak"),
    Param("peak_flops_16", "hardware", "flops_per_s_16", "FLOP/s", "16-bit matrix peak"),
    Param("peak_flops_8", "hardware", "flops_per_s_8", "FLOP/s", "8-bit matrix peak"),
    Param("peak_flops_4", "hardware", "flops_per_s_4", "FLOP/s", "4-bit matrix peak"),
    Param("intra_bw", "hardware", "intra_bw_bytes_per_s", "bytes/s", "intra-node link bandwidth",
          modes=("inference", "training")),
    Param("intra_latency", "hardware", "intra_latency_s", "s", "intra-node link latency",
          modes=("inference", "training")),
    Param("inter_bw", "hardware", "inter_bw_bytes_per_s", "bytes/s", "inter-node bandwidth",
          modes=("inference", "training")),
    Param("inter_latency", "hardware", "inter_latency_s", "s", "inter-node latency",
          modes=("inference", "training")),
    Param("memory", "hardware", "memory_bytes", "bytes", "memory capacity", "memory_scale"),
    Param("flops_efficiency", "point", "flops_efficiency", "1", "achieved fraction of peak FLOP/s"),
    Param("hbm_efficiency", "point", "hbm_efficiency", "1", "achieved fraction of bandwidth"),
    Param("link_efficiency", "point", "link_efficiency", "1", "achieved fraction of link bandwidth",
          modes=("inference", "training")),
    Param("pipeline_link_bw", "links", "bw_bytes_per_s", "bytes/s",
          "bandwidth of the links between pipeline stages", modes=("pipeline",)),
    Param("pipeline_link_latency", "links", "latency_s", "s",
          "latency of the links between pipeline stages", modes=("pipeline",)),
]}
# whole-device what-ifs for inverse questions (several fields at once)
INVERSE = {"hbm_bw": "hbm_bw_scale", "tflops": "tflops_scale", "link_bw": "link_bw_scale",
           "memory": "memory_scale"}


@dataclasses.dataclass(frozen=True)
class Inverse:
    param: str  # a key of INVERSE
    goal: Constraint

    @property
    def label(self) -> str:
        return f"{self.goal} by {self.param}"


@dataclasses.dataclass(frozen=True)
class SensitivityConfig:
    metrics: tuple[str, ...]
    params: tuple[str, ...]
    delta: float
    inverse: tuple[Inverse, ...]
    mix: dict[str, dict]


def parse_sensitivity(raw, file: str, mode: str, axes: dict) -> SensitivityConfig:
    """Validate a ``[sensitivity]`` section (``{}``: the defaults) for a study of ``mode``
    whose axes are ``axes`` (name -> values)."""
    if mode not in DEFAULT_METRICS:
        raise InputError(file, "study.mode", f"dse sensitivity does not support mode "
                         f"{mode!r} yet", ", ".join(DEFAULT_METRICS))
    raw = checks.table(raw, file, "[sensitivity]", "a [sensitivity] section")
    checks.known_keys(raw, KEYS, file, "sensitivity")
    outputs = OUTPUTS[mode]
    numeric = numeric_outputs(mode)
    metrics = raw.get("metrics", list(DEFAULT_METRICS[mode]))
    if not isinstance(metrics, list) or not metrics:
        raise checks.invalid(file, "sensitivity.metrics", metrics,
                             "a non-empty list of numeric outputs")
    for m in metrics:
        if m not in numeric:
            raise InputError(file, "sensitivity.metrics", f"{m!r} is not a numeric output"
                             + suggest(str(m), numeric), ", ".join(numeric))
        renamed(outputs, m, file, "sensitivity.metrics")
    available = [name for name, p in PARAMS.items() if mode in p.modes]
    params = raw.get("params", available)
    if not isinstance(params, list) or not params:
        raise checks.invalid(file, "sensitivity.params", params,
                             "a non-empty list of hardware parameters")
    for p in params:
        if p not in available:
            raise InputError(file, "sensitivity.params", f"unknown parameter {p!r} for mode "
                             f"{mode!r}" + suggest(str(p), available), ", ".join(available))
    delta = raw.get("delta", 0.1)
    if not checks.is_number(delta) or not 0 < delta < 1:
        raise checks.invalid(file, "sensitivity.delta", delta,
                             "a fraction in (0, 1), e.g. 0.1 for +-10%")
    inverse = []
    queries = raw.get("inverse", [])
    if not isinstance(queries, list):
        raise checks.invalid(file, "sensitivity.inverse", queries,
                             'a list of { param = "hbm_bw", goal = "tpot_s <= 0.03" }')
    if queries and mode == "pipeline":
        raise InputError(file, "sensitivity.inverse", "inverse questions need one device type "
                         "(a pipeline's stages differ)", "inference or training studies")
    for i, q in enumerate(queries):
        key = f"sensitivity.inverse[{i}]"
        if not isinstance(q, dict) or set(q) != {"param", "goal"}:
            raise checks.invalid(file, key, q, '{ param = "hbm_bw", goal = "tpot_s <= 0.03" }')
        checks.choice(q, "param", None, INVERSE, file, key)
        goal = parse_constraint(q["goal"], file, outputs, f"{key}.goal")
        if goal.bound is None and goal.variable != "fits":
            raise InputError(file, f"{key}.goal", f"{q['goal']!r} cannot be met by a resource",
                             "'METRIC <= NUMBER', 'METRIC >= NUMBER' or 'fits'")
        inverse.append(Inverse(q["param"], goal))
    mix = raw.get("mix", {})
    if not isinstance(mix, dict):
        raise checks.invalid(file, "sensitivity.mix", mix,
                             "a table of axis = { value = weight, ... }")
    for axis, weights in mix.items():
        if axis not in axes:
            raise InputError(file, f"sensitivity.mix.{axis}", "not an axis of the study",
                             ", ".join(axes))
        if not isinstance(weights, dict) or not weights:
            raise checks.invalid(file, f"sensitivity.mix.{axis}", weights,
                                 "a table of axis value = weight")
        labels = {str(v): v for v in axes[axis]}
        for label, w in weights.items():
            if label not in labels:
                raise InputError(file, f"sensitivity.mix.{axis}.{label}",
                                 "not a value of the axis", ", ".join(labels))
            if not checks.is_number(w) or w < 0:
                raise InputError(file, f"sensitivity.mix.{axis}.{label}",
                                 f"weight {w!r} is not valid", "a non-negative number")
    return SensitivityConfig(tuple(metrics), tuple(params), float(delta), tuple(inverse), mix)

"""Hardware: the catalogue card (human units) and its numeric spec in SI units (a pytree)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import pytrees
from .. import units
from .. import checks
from ..errors import InputError


@pytrees.register
@dataclasses.dataclass(frozen=True)
class HardwareSpec:
    """One device (or a table of devices), SI units throughout.

    ``flops_per_s_<bits>`` is the dense peak of the compute dtype of that width, already
    filled by fallback: a device without an 8-bit path carries its 16-bit peak there,
    since 8-bit operands are then upcast (see :func:`fill_peaks`).
    """

    memory_bytes: Any
    hbm_bw_bytes_per_s: Any
    flops_per_s_32: Any
    flops_per_s_16: Any
    flops_per_s_8: Any
    flops_per_s_4: Any
    intra_bw_bytes_per_s: Any  # per device, per direction
    intra_latency_s: Any  # per hop
    inter_bw_bytes_per_s: Any  # per device share of the node's network, per direction
    inter_latency_s: Any
    devices_per_node: Any
    price_usd_per_s: Any  # nan when the catalogue has no price
    tdp_w: Any  # nan when unknown
    # How well the serving/training software reaches the peaks on this device: filled
    # from a calibration file (dse.catalogue.calibration) per (framework, hardware family). The
    # defaults are the plain roofline.
    gemm_efficiency: Any = dataclasses.field(default=1.0, metadata=dict(calibration=True))
    gemm_half_rows: Any = dataclasses.field(default=0.0, metadata=dict(calibration=True))
    attention_efficiency: Any = dataclasses.field(default=1.0, metadata=dict(calibration=True))
    hbm_efficiency: Any = dataclasses.field(default=1.0, metadata=dict(calibration=True))
    link_efficiency: Any = dataclasses.field(default=1.0, metadata=dict(calibration=True))
    layer_overhead_s: Any = dataclasses.field(default=0.0, metadata=dict(calibration=True))
    step_overhead_s: Any = dataclasses.field(default=0.0, metadata=dict(calibration=True))
    seq_overhead_s: Any = dataclasses.field(default=0.0, metadata=dict(calibration=True))
    request_overhead_s: Any = dataclasses.field(default=0.0, metadata=dict(calibration=True))
    # How the serving framework schedules on this device (dse.catalogue.frameworks): 1 runs
    # prefill steps apart from decode steps; its running-batch cap and token budget per
    # step when a study leaves max_num_seqs / max_num_tokens at 0
    prefill_separate: Any = dataclasses.field(default=0.0, metadata=dict(framework=True))
    default_max_num_seqs: Any = dataclasses.field(default=256.0, metadata=dict(framework=True))
    default_max_num_tokens: Any = dataclasses.field(default=8192.0,
                                                    metadata=dict(framework=True))
    # attention-DP context balancing (dse.catalogue.frameworks: steps a rank's prompts
    # may wait for every rank to have one; 0: none)
    adp_balance_iters: Any = dataclasses.field(default=0.0, metadata=dict(framework=True))
    # Measured GEMM efficiency surfaces (dse.catalogue.kernels): this device's table in
    # ``gemm_surface`` (-1: none, matmuls at the calibrated rates), and the efficiency
    # tables [table, slot, M, N, K] of the whole spec table, shared by its entries (not
    # indexed per device; None where no entry has one)
    kernel_table: Any = dataclasses.field(default=-1.0, metadata=dict(kernel=True))
    gemm_surface: Any = dataclasses.field(default=None, metadata=dict(kernel=True, shared=True))
    # the measured MoE surfaces of the same tables (dse.formulas.types.MOE_SURFACE_AXES)
    moe_surface: Any = dataclasses.field(default=None, metadata=dict(kernel=True, shared=True))


# Parameters a chip architect can vary (the ``hw_param`` dimension of sensitivities).
FIELDS = tuple(f.name for f in dataclasses.fields(HardwareSpec)
               if not any(f.metadata.get(k) for k in ("calibration", "framework", "kernel")))
# Parameters a calibration sets (software efficiency on this device).
CALIBRATION_FIELDS = tuple(f.name for f in dataclasses.fields(HardwareSpec)
                           if f.metadata.get("calibration"))

_REQUIRED = ("memory_gib", "hbm_bw_gb_per_s", "devices_per_node")
_POSITIVE = ("memory_gib", "hbm_bw_gb_per_s", "fp32_tflops", "bf16_tflops", "fp16_tflops",
             "fp8_tflops", "int8_tops", "fp4_tflops", "intra_node_bw_gb_per_s",
             "intra_node_latency_us", "inter_node_bw_gb_per_s", "inter_node_latency_us",
             "devices_per_node", "tdp_w", "price_per_hour_usd")
_TEXT = ("name", "long_name", "vendor", "kind", "source", "notes",
         "kernel_tables")  # the measured device whose GEMM surfaces stand for this one
KNOWN_KEYS = frozenset(_POSITIVE + _TEXT + ("aliases",))
KINDS = ("gpu", "tpu", "npu", "apple", "cpu")


def fill_peaks(fp32, bf16, fp8, int8, fp4) -> tuple[float, float, float, float]:
    """Dense peaks for 32/16/8/4-bit compute, each falling back to the next wider width.

    The 8-bit path takes FP8 where the device has it, else INT8. A width the device
    lacks runs at the next wider width it has (operands are upcast), so the 4-bit peak
    of an H100 is its FP8 peak and the 8-bit peak of a V100-class part its 16-bit peak.
    A device with no 16-bit matrix path (a CPU quoted in FP32 only) uses FP32.
    """
    nan = float("nan")

    def have(x):
        return x is not None and not math.isnan(x) and x > 0

    p32 = fp32 if have(fp32) else nan
    p16 = bf16 if have(bf16) else p32
    p8 = fp8 if have(fp8) else (int8 if have(int8) else p16)
    p4 = fp4 if have(fp4) else p8
    if not have(p32):
        p32 = p16  # TPUs quote no separate FP32 matrix rate: vector work runs on the MXU path
    return p32, p16, p8, p4


@dataclasses.dataclass(frozen=True)
class HardwareCard:
    """A catalogue entry: validated fields of a hardware TOML, in human units."""

    name: str
    fields: Mapping[str, Any]
    file: str

    @property
    def long_name(self) -> str:
        return str(self.fields.get("long_name", self.name))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], file: str, name: str | None = None
                     ) -> "HardwareCard":
        data = dict(data)
        name = str(data.get("name", name or ""))
        if not name:
            raise InputError(file, "name", "missing", "a lowercase hyphenated name")
        checks.known_keys(data, KNOWN_KEYS, file, what="hardware key")
        checks.string_list(data, "aliases", [], file)
        for key in _REQUIRED:
            if key not in data:
                raise InputError(file, key, "missing", "a positive number")
        for key in _POSITIVE:
            if key in data:
                value = data[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                        value > 0 and math.isfinite(value)):
                    raise InputError(file, key, f"value {value!r} is not valid",
                                     "a positive finite number")
        if not any(k in data for k in ("fp32_tflops", "bf16_tflops", "fp16_tflops")):
            raise InputError(file, "bf16_tflops", "missing (no 16- or 32-bit peak given)",
                             "a positive number of dense TFLOPS")
        if data.get("kind", "gpu") not in KINDS:
            raise InputError(file, "kind", f"value {data['kind']!r} is not valid", ", ".join(KINDS))
        if int(data["devices_per_node"]) != data["devices_per_node"]:
            raise InputError(file, "devices_per_node", f"value {data['devices_per_node']!r} "
                             "is not valid", "a positive integer")
        if data["devices_per_node"] > 1 and "intra_node_bw_gb_per_s" not in data:
            raise InputError(file, "intra_node_bw_gb_per_s",
                             "missing for a node of several devices", "a positive number of GB/s")
        if "inter_node_bw_gb_per_s" not in data:
            raise InputError(file, "inter_node_bw_gb_per_s", "missing",
                             "a positive number of GB/s (the device's share of the node's network)")
        return cls(name=name, fields=data, file=file)

    def spec(self) -> HardwareSpec:
        """The numeric spec in SI units (float64 numpy scalars)."""
        f = self.fields
        nan = float("nan")
        p32, p16, p8, p4 = fill_peaks(
            f.get("fp32_tflops"), f.get("bf16_tflops", f.get("fp16_tflops")),
            f.get("fp8_tflops"), f.get("int8_tops"), f.get("fp4_tflops"))
        single = f["devices_per_node"] == 1 and "intra_node_bw_gb_per_s" not in f
        values = dict(
            memory_bytes=f["memory_gib"] * units.GIB,
            hbm_bw_bytes_per_s=f["hbm_bw_gb_per_s"] * units.GB,
            flops_per_s_32=p32 * units.TERA, flops_per_s_16=p16 * units.TERA,
            flops_per_s_8=p8 * units.TERA, flops_per_s_4=p4 * units.TERA,
            # A one-device node never uses its intra-node link: infinite bandwidth and
            # zero latency keep every intra-node term exactly zero (and NaN-free).
            intra_bw_bytes_per_s=math.inf if single else f["intra_node_bw_gb_per_s"] * units.GB,
            intra_latency_s=0.0 if single else f.get("intra_node_latency_us", 0.0) * units.US,
            inter_bw_bytes_per_s=f["inter_node_bw_gb_per_s"] * units.GB,
            inter_latency_s=f.get("inter_node_latency_us", 0.0) * units.US,
            devices_per_node=f["devices_per_node"],
            price_usd_per_s=f.get("price_per_hour_usd", nan) / units.HOUR,
            tdp_w=f.get("tdp_w", nan),
        )
        return HardwareSpec(**{k: np.float64(v) for k, v in values.items()})


def stack(specs: list[HardwareSpec], dtype=np.float64) -> HardwareSpec:
    """A table of devices: one pytree whose leaves have a leading hardware axis (the
    measured GEMM surfaces of entries that name one: :func:`dse.catalogue.kernels.stack`)."""
    return pytrees.stack(specs, dtype)

"""Measured GEMM efficiency surfaces: which share of the roofline a matmul reaches, by shape.

NVIDIA's ``aiconfigurator-core`` (Apache-2.0) ships per-system, per-backend tables of
measured GEMM latencies (``systems/data/<system>/gemm/<backend>/<version>/gemm_perf.parquet``:
M, N, K, dtype, milliseconds). :mod:`dse.catalogue.kernel_build` turns them into
*efficiency surfaces*: at each node of a fixed log-spaced (M, N, K) grid, the roofline
time of the GEMM at the device's catalogue peaks (dse's own count,
:func:`dse.formulas.operators.matmul`, at the device's dense peak of that width and its
HBM bandwidth) divided by the measured time. The evaluator prices a matmul as its
roofline at the point's peaks (what-if scales included) divided by the surface at its
shape (:func:`dse.formulas.roofline.surface_efficiency`: linear between the nodes
around the shape), so a what-if on bandwidth or
FLOP/s, and ``dse sensitivity``, move exactly the side the shape is bound by.

Files (``kernels/`` beside ``hardware/``; wheels carry them in the package):

- ``gemm.npz``: ``efficiency`` [table, slot, M, N, K] (float16), the grid's log2 axes;
- ``manifest.json``: the tables (system, dse hardware name, backend, version, the slots
  measured and which were filled from another), the slots, the axes, the source package
  and its licence, the held-out accuracy of the build, and the npz's SHA-256.

A device is served by its own system's table or, failing that, by the nearest measured
device of its family (:data:`NEAREST_SYSTEM`); a framework by its backend's table
(:data:`BACKEND`), TensorRT-LLM's otherwise (cuBLAS through PyTorch: Megatron's and
llm-foundry's GEMMs too). Devices of no measured family (Apple, CPUs) and llama.cpp's own
kernels have none and keep the calibration's fitted GEMM rate.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..formulas.types import MOE_SURFACE_AXES, SURFACE_AXES, SURFACE_SLOTS

SLOTS = SURFACE_SLOTS  # the GEMM kind a matmul runs as (dse.formulas.roofline.surface_slot)
AXES = {name: (lo, hi, step) for name, lo, hi, step in SURFACE_AXES}  # log2 of the nodes
MOE_AXES = {name: (lo, hi, step) for name, lo, hi, step in MOE_SURFACE_AXES}

# aiconfigurator-core's system names (systems/*.yaml) -> the catalogue's devices: for its
# kernel tables here and its measured serving runs (dse.validate.silicon)
AIC_SYSTEMS = {"h100_sxm": "h100-sxm", "h100_pcie": "h100-pcie", "h200_sxm": "h200",
               "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200", "gb300": "gb300",
               "a100_sxm": "a100-80gb", "a100_pcie": "a100-pcie-80gb", "l40s": "l40s",
               "l4": "l4", "rtx_pro_6000_server": "rtx-pro-6000-blackwell-server",
               "b60": "arc-pro-b60"}

# dse framework (study key) -> the upstream backend whose kernels it runs.
BACKEND = {"trtllm": "trtllm", "tensorrt-llm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
DEFAULT_BACKEND = "trtllm"
# Frameworks with kernels of their own that no table measured (llama.cpp's quantized
# matmul kernels): their matmuls keep the calibration's fitted rate.
OWN_KERNELS = frozenset({"llama.cpp"})

# A catalogue device without its own table -> the measured device nearest to it (same
# generation and memory class first; datacenter accelerators of other vendors -> H100's,
# as the calibration's family fallback does).
NEAREST_SYSTEM = {
    "h100-pcie": "h100-sxm", "h100-nvl": "h100-sxm", "h20": "h100-sxm", "gh200": "h200",
    "h200-nvl": "h200", "a100-40gb": "a100-80gb", "a100-pcie-80gb": "a100-80gb",
    "a10g": "l40s", "a40": "l40s", "rtx-a6000": "l40s", "l4": "l40s",
    "rtx-4000-ada": "l40s", "rtx-5000-ada": "l40s", "rtx-6000-ada": "l40s",
    "rtx-3070": "l40s", "rtx-3080": "l40s", "rtx-3080-ti": "l40s", "rtx-3090": "l40s",
    "rtx-4070-ti": "l40s", "rtx-4080": "l40s", "rtx-4090": "l40s",
    "rtx-5090": "rtx-pro-6000-blackwell-server", "rtx-5080": "rtx-pro-6000-blackwell-server",
    "rtx-3060": "l40s",
    # DGX Spark's GB10: a Blackwell GPU of the RTX PRO 6000's generation (sm_12x); Jetson
    # Orin's integrated Ampere GPU has no measured stand-in (the calibrated rate)
    "dgx-spark": "rtx-pro-6000-blackwell-server",
    "mi250x": "a100-80gb", "mi300x": "h100-sxm", "mi325x": "h200", "mi355x": "b200",
    "gaudi2": "a100-80gb", "gaudi3": "h100-sxm", "tpu-v4": "a100-80gb",
    "tpu-v5e": "a100-80gb", "tpu-v5p": "h100-sxm", "tpu-v6e": "h100-sxm",
    "trainium1": "a100-80gb", "trainium2": "h100-sxm", "inferentia2": "a100-80gb",
    "ascend-910b": "a100-80gb",
}


def axis(name: str, axes: dict | None = None) -> np.ndarray:
    lo, hi, step = (AXES if axes is None else axes)[name]
    return np.arange(lo, hi + step / 2, step)


def roots_folder() -> list[Path]:
    from .lookup import roots
    return [r / "kernels" for r in roots() if (r / "kernels" / "manifest.json").is_file()]


class Surfaces:
    """The shipped surfaces: the efficiency array, its tables and where each device and
    framework finds its own."""

    def __init__(self, folder: Path):
        self.folder = folder
        manifest_path = folder / "manifest.json"
        try:
            self.manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise InputError(str(manifest_path), "manifest", f"unreadable ({e})",
                             "the JSON written by python -m dse.catalogue.kernel_build") from None
        npz = folder / self.manifest.get("file", "gemm.npz")
        try:
            blob = npz.read_bytes()
        except OSError as e:
            raise InputError(str(npz), "file", f"unreadable ({e.strerror})",
                             "the arrays named by manifest.json") from None
        digest = hashlib.sha256(blob).hexdigest()
        if digest != self.manifest.get("sha256"):
            raise InputError(str(npz), "sha256", f"{digest[:12]}... does not match the "
                             f"manifest's {str(self.manifest.get('sha256'))[:12]}...",
                             "the file the manifest was written with (rebuild with python -m "
                             "dse.catalogue.kernel_build)")
        with np.load(npz) as arrays:
            self.efficiency = arrays["efficiency"].astype(np.float32)
            moe = arrays["moe_efficiency"] if "moe_efficiency" in arrays.files else None
            self.moe_efficiency = None if moe is None else moe.astype(np.float32)
        tables = self.manifest["tables"]
        moe_manifest = self.manifest.get("moe")
        for name, array, grid, key in (("efficiency", self.efficiency, AXES, "axes"),
                                       ("moe_efficiency", self.moe_efficiency, MOE_AXES,
                                        "moe")):
            if array is None and moe_manifest is None and name == "moe_efficiency":
                continue  # surfaces built before the MoE tables: experts read the GEMM's
            shape = (len(tables), len(SLOTS)) + tuple(len(axis(a, grid)) for a in "mnk")
            if (array is None or array.shape != shape
                    or self.manifest.get("slots") != list(SLOTS)):
                raise InputError(str(npz), name, f"shape {None if array is None else array.shape}"
                                 f" or slots {self.manifest.get('slots')} do not match the "
                                 "manifest", f"shape {shape}, slots {list(SLOTS)}")
            section = self.manifest.get("axes", {}) if key == "axes" else moe_manifest["axes"]
            axes = {a: (v["log2_first"], v["log2_last"], v["log2_step"])
                    for a, v in section.items()}
            if axes != grid:
                raise InputError(str(manifest_path), key, f"{axes} are not the evaluator's "
                                 "grid", str(grid))
        self.index = {(t["hardware"], t["backend"]): i for i, t in enumerate(tables)}

    def measured(self) -> list[str]:
        return sorted({h for h, _ in self.index})

    def table_of(self, hardware: str, framework: str, stand_in: str | None = None,
                 file: str = "<hardware>") -> tuple[int, str] | None:
        """(table index, the system it measured) for ``hardware`` under ``framework``, or
        None where no measured device stands for it. ``stand_in`` (a card's
        ``kernel_tables``) names the measured device explicitly; one without tables is an
        error naming the card's ``file``."""
        if stand_in is not None and stand_in not in self.measured():
            raise InputError(file, "kernel_tables", f"{stand_in!r} has no measured GEMM table",
                             ", ".join(self.measured()))
        system = stand_in or (hardware if hardware in self.measured()
                              else NEAREST_SYSTEM.get(hardware))
        if system is None or framework in OWN_KERNELS:
            return None
        backend = BACKEND.get(framework, DEFAULT_BACKEND)
        for b in (backend, DEFAULT_BACKEND, "vllm", "sglang"):
            if (system, b) in self.index:
                return self.index[(system, b)], f"{system}/{b}"
        return None

    def describe(self, i: int) -> str:
        t = self.manifest["tables"][i]
        return f"{t['system']} {t['backend']} {t['version']}"


@functools.lru_cache(maxsize=4)
def _load(folder: str, stamp: int) -> Surfaces:
    return Surfaces(Path(folder))


def surfaces() -> Surfaces | None:
    """The highest-priority catalogue root's surfaces (None where none is shipped)."""
    found = roots_folder()
    if not found:
        return None
    return _load(str(found[0]), (found[0] / "manifest.json").stat().st_mtime_ns)


def uses_kernels(cal) -> bool:
    """A calibration fitted with the measured GEMM surfaces (its header's ``kernels``
    names them) prices matmuls by them; one fitted without keeps its fitted GEMM rates."""
    return bool(cal is not None and cal.info.get("kernels"))


MOE_WORDS = "GEMM and MoE surfaces"


def uses_moe(cal) -> bool:
    """A calibration fitted with the MoE surfaces too (``dse calibrate --moe-surfaces``:
    its ``kernels`` says "GEMM and MoE surfaces") prices a device's routed experts by
    them; any other reads the experts off the GEMM surface (one grouped kernel's shape)."""
    return bool(cal is not None and MOE_WORDS in str(cal.info.get("kernels", "")))


def source(moe: bool = False) -> str | None:
    """What a calibration fitted with the shipped surfaces (``moe``: the MoE ones too)
    records in its ``kernels``."""
    surf = surfaces()
    if surf is None:
        return None
    if moe and surf.moe_efficiency is None:
        raise InputError(str(surf.folder / "manifest.json"), "moe", "no MoE surfaces",
                         "surfaces built by python -m dse.catalogue.kernel_build from "
                         "aiconfigurator-core's moe_perf tables")
    words = MOE_WORDS if moe else "GEMM surfaces"
    return f"{surf.manifest['source']} {words}, sha256 {surf.manifest['sha256'][:12]}"


def table_index(hardware: str, framework: str, card=None) -> float:
    """The shipped table that prices ``hardware``'s matmuls under ``framework`` (-1: none);
    a hardware ``card`` with a ``kernel_tables`` key names the measured device itself."""
    surf = surfaces()
    if surf is None:
        return -1.0
    stand_in = card.fields.get("kernel_tables") if card is not None else None
    found = surf.table_of(hardware, framework, stand_in,
                          card.file if card is not None else "<hardware>")
    return -1.0 if found is None else float(found[0])


def stack(specs: list, dtype=np.float64, moe: bool = False):
    """A hardware table (:func:`dse.catalogue.hardware.stack`) with the measured GEMM
    surfaces its entries share: the tables they name (``kernel_table``, an index into the
    shipped surfaces) gathered into ``gemm_surface``, each entry's index renumbered into
    it (-1 where an entry names none); ``moe``: their MoE surfaces too (``moe_surface``)."""
    import dataclasses

    from .hardware import stack as stack_plain
    wanted = sorted({int(s.kernel_table) for s in specs if float(s.kernel_table) >= 0.0})
    renumber = {t: float(i) for i, t in enumerate(wanted)}
    specs = [dataclasses.replace(s, gemm_surface=None, moe_surface=None, kernel_table=renumber.get(
        int(s.kernel_table), -1.0) if float(s.kernel_table) >= 0.0 else -1.0) for s in specs]
    table = stack_plain(specs, dtype)
    if not wanted:
        return table
    surf = surfaces()
    moe = (surf.moe_efficiency[wanted].astype(dtype)
           if moe and surf.moe_efficiency is not None else None)
    return dataclasses.replace(table, gemm_surface=efficiency(wanted, dtype), moe_surface=moe)


def efficiency(tables: list[int], dtype=np.float64) -> np.ndarray:
    """The efficiency of the shipped ``tables`` [table, slot, M, N, K]."""
    return surfaces().efficiency[tables].astype(dtype)


"""Display units for figures: SI values in, a factor and a readable unit out.

Names and units come from each variable's ``long_name``/``units`` attrs; only the
prefix changes (s -> ms, bytes -> GiB, FLOP/s -> TFLOP/s), chosen by the data's
typical magnitude.
"""

from __future__ import annotations

import numpy as np

from ..units import GB, GIB

_PREFIXED = {
    "s": [(1.0, "s"), (1e-3, "ms"), (1e-6, "us")],
    "bytes": [(2.0**40, "TiB"), (GIB, "GiB"), (2.0**20, "MiB"), (1.0, "bytes")],
    "bytes/s": [(1e12, "TB/s"), (GB, "GB/s"), (1e6, "MB/s"), (1.0, "bytes/s")],
    "bit/s": [(1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s"), (1.0, "bit/s")],
    "FLOP": [(1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1.0, "FLOP")],
    "FLOP/s": [(1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1.0, "FLOP/s")],
}

# Short cell labels for the infeasibility flags (README: valid, reason).
REASON_ABBREV = {"tp_indivisible": "TP", "pp_exceeds_layers": "PP", "oom": "OOM",
                 "context_too_long": "CTX", "ep_indivisible": "EP",
                 "batch_indivisible": "GB", "devices_indivisible": "DEV",
                 "schedule_indivisible": "SCH", "constraints": "SLO"}


def scale(units: str, values) -> tuple[float, str]:
    """(factor, unit): display ``values / factor`` in ``unit``."""
    steps = _PREFIXED.get(units)
    if not steps:
        return 1.0, units
    v = np.abs(np.asarray(values, float))
    v = v[np.isfinite(v) & (v > 0)]
    typical = float(np.median(v)) if v.size else steps[-1][0]
    for factor, unit in steps:
        if typical >= factor:
            return factor, unit
    return steps[-1]


def label(var, unit: str | None = None) -> str:
    """'long name [unit]' from a variable's attrs (``unit``: the display unit)."""
    name = var.attrs.get("long_name", var.name)
    unit = unit if unit is not None else var.attrs.get("units", "")
    return f"{name} [{unit}]" if unit and unit != "1" else str(name)


def reasons(code: int, bits: dict[str, int]) -> list[str]:
    return [name for name, bit in bits.items() if int(code) & bit]


def reason_label(names: list[str]) -> str:
    short = [REASON_ABBREV.get(n, n) for n in names]
    return "+".join(short[:2]) + ("+" if len(short) > 2 else "")


def legend(names) -> str:
    """'OOM = oom, TP = tp_indivisible' for the flags that appear in a figure."""
    return ", ".join(f"{REASON_ABBREV.get(n, n)} = {n.replace('_', ' ')}" for n in names)


def fmt(value) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    return str(value)

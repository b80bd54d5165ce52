"""The KV-tier figure of agentic sessions: per-turn TTFT and cost per session against the
size of a KV tier (host DRAM, else SSD), a line per router and the other axes' values,
a column per device (docs/serving.md#agentic-sessions)."""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..units import human_bytes  # noqa: E402
from .display import scale  # noqa: E402
from .figures import NotApplicable  # noqa: E402
from .result import Result  # noqa: E402

TIER_AXES = ("kv_dram_bytes", "kv_ssd_bytes")
MAX_LINES = 6
MAX_COLUMNS = 4


def _show(axis: str, value) -> str:
    return human_bytes(float(value)) if axis.endswith("_bytes") else str(value)


def tiers(res: Result):
    """TTFT (top) and cost per session (bottom) against the tier's size."""
    if res.kind != "sweep":
        raise NotApplicable(f"a {res.kind} result has no tier axis")
    axis = next((a for a in TIER_AXES if a in res.axes and res.ds.sizes[a] >= 2), None)
    if axis is None or "cost_per_session_usd" not in res.ds:
        raise NotApplicable("no kv_dram_bytes or kv_ssd_bytes axis of two or more sizes in a "
                            "session study")
    facet = next((a for a in ("hardware", "model") if a in res.axes), None)
    columns = list(res.ds[facet].values)[:MAX_COLUMNS] if facet else [res.name]
    others = [a for a in res.axes if a not in (axis, facet)]
    # the router first: its lines are what a deployment chooses between
    others.sort(key=lambda a: a != "routing")
    fig, axs = plt.subplots(2, len(columns), figsize=(4.4 * len(columns), 6.2), squeeze=False,
                            layout="constrained")
    x = res.ds[axis].values.astype(float) / 1e9
    feasible = res.feasible
    drawn = 0
    ttft = res.full("ttft_s").where(feasible)
    f, shown = scale("s", ttft.values[np.isfinite(ttft.values)]) if np.isfinite(
        ttft.values).any() else (1.0, "s")
    for col, name in enumerate(columns):
        sel = {facet: col} if facet else {}
        lines = 0
        for combo in itertools.product(*(range(res.ds.sizes[a]) for a in others)):
            if lines == MAX_LINES:
                break
            pick = dict(sel, **dict(zip(others, combo)))
            ok = feasible.isel(pick).transpose(axis).values
            if ok.sum() < 2:
                continue
            text = ", ".join(f"{a} {_show(a, res.ds[a].values[i])}"
                             for a, i in zip(others, combo))
            for row, (metric, factor, unit) in enumerate(
                    (("ttft_s", f, f"mean TTFT per turn ({shown})"),
                     ("cost_per_session_usd", 1.0, "cost per session (USD)"))):
                ax = axs[row][col]
                v = res.full(metric).isel(pick).transpose(axis).values.astype(float)
                ax.plot(x[ok], v[ok] / factor, "o-", ms=3, color=f"C{lines}",
                        label=text or res.name)
                ax.set_ylabel(unit, fontsize=8)
            lines += 1
            drawn += 1
        for row in range(2):
            ax = axs[row][col]
            ax.set_xlabel(f"{axis} (GB per replica)", fontsize=8)
            ax.grid(alpha=0.3)
            ax.set_title(str(name), fontsize=9)
        axs[0][col].legend(fontsize=6)
    if not drawn:
        plt.close(fig)
        raise NotApplicable("no configuration feasible at two or more tier sizes")
    return fig, (f"Agentic sessions: the mean time to first token of a turn (top) and the "
                 f"cost of a session (bottom) against {axis.replace('_', ' ')}, a line per "
                 f"router and configuration (the first {MAX_LINES}); more tier keeps more "
                 "sessions' prefixes (prefix_hit_rate), which turns come back for instead "
                 "of prefilling them again.")

"""Roofline plot: arithmetic intensity against achieved FLOP/s of every component in
prefill and decode, under the device's roofs (scaling-book, "All About Rooflines":
attainable = min(peak FLOP/s, intensity x memory bandwidth)).

The roofs are the catalogue's (from the Dataset's ``hardware_specs``) times the point's
what-if scales; dashed roofs are derated by the point's efficiencies, which is what the
component times were computed against.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..formulas.roofline import compute_width
from ..catalogue.hardware import HardwareCard
from .display import scale
from .figures import NotApplicable, grid, pick_metric
from .facets import FACETS, at_best, at_point, best_points
from .result import Result

MAX_PANELS = 8
MARKERS = {"prefill": "o", "decode": "^"}


def roofs(res: Result, point: dict) -> dict:
    """Peak FLOP/s per compute width in use, memory bandwidth and efficiencies at ``point``."""
    name = res.value(point, "hardware")
    fields = res.hardware(name)
    if not fields:
        raise NotApplicable(f"no hardware spec for {name!r} in the result's attrs")
    spec = HardwareCard.from_mapping(fields, res.file, name).spec()
    bits = {k: float(res.value(point, k) or 16) for k in ("weight_bits", "kv_bits", "act_bits")}
    widths = {"GEMMs": float(compute_width(max(bits["weight_bits"], bits["act_bits"]))),
              "attention": float(compute_width(max(bits["act_bits"], bits["kv_bits"])))}
    peaks = {}
    for what, width in widths.items():
        peak = getattr(spec, f"flops_per_s_{int(width)}") * float(
            res.value(point, "tflops_scale") or 1.0)
        peaks.setdefault(peak, []).append(f"{what} ({int(width)}-bit)")
    return {"name": name, "peaks": peaks,
            "bw": spec.hbm_bw_bytes_per_s * float(res.value(point, "hbm_bw_scale") or 1.0),
            "flops_eff": float(res.value(point, "flops_efficiency") or 1.0),
            "hbm_eff": float(res.value(point, "hbm_efficiency") or 1.0)}


def roofline(res: Result, metric: str | None = None):
    needed = ("component_flops", "component_bytes", "component_s")
    if res.kind != "sweep" or any(v not in res.ds for v in needed):
        raise NotApplicable("no per-component FLOPs and bytes (sweep with [output] "
                            "breakdown = true)")
    metric = pick_metric(res, metric)
    groups = best_points(res, metric, list(FACETS))[:MAX_PANELS]
    fig, axs = grid(len(groups), width=5.0, height=4.0, cols=2)
    components = [str(c) for c in res.ds["component"].values]
    colours = plt.get_cmap("tab20").colors
    drawn = set()
    for ax, (labels, point, feasible) in zip(axs, groups):
        one = at_point(res, point)
        r = roofs(res, point)
        flops, moved, time = (one[v].transpose("phase", "component").values.astype(float)
                              for v in needed)
        ok = (flops > 0) & (moved > 0) & (time > 0)
        if not ok.any():
            ax.set_visible(False)
            continue
        intensity = np.where(ok, flops / np.where(moved > 0, moved, 1), np.nan)
        achieved = np.where(ok, flops / np.where(time > 0, time, 1), np.nan)
        top = max(r["peaks"])
        ridge = top / r["bw"]
        lo = min(np.nanmin(intensity), ridge) / 4
        hi = max(np.nanmax(intensity), ridge) * 4
        x = np.geomspace(lo, hi, 200)
        factor, unit = scale("FLOP/s", [top])
        for peak, what in sorted(r["peaks"].items()):
            ax.plot(x, np.minimum(peak, r["bw"] * x) / factor, c="k", lw=1.2)
            ax.text(hi, peak / factor, " " + ", ".join(what), fontsize=6, va="bottom",
                    ha="right")
            if r["flops_eff"] < 1 or r["hbm_eff"] < 1:
                ax.plot(x, np.minimum(peak * r["flops_eff"], r["bw"] * r["hbm_eff"] * x)
                        / factor, c="k", lw=0.8, ls="--")
        for p, phase in enumerate(one["phase"].values):
            for c in np.flatnonzero(ok[p]):
                key = components[c]
                ax.scatter(intensity[p, c], achieved[p, c] / factor, s=30,
                           marker=MARKERS.get(str(phase), "s"), color=colours[c % 20],
                           edgecolors="k", linewidths=0.4, zorder=3,
                           label=key if key not in drawn else None)
                drawn.add(key)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity [FLOP/byte]", fontsize=8)
        ax.set_ylabel(f"achieved [{unit}]", fontsize=8)
        head = " / ".join(str(v) for v in labels.values()) or str(r["name"])
        ax.set_title(f"{head}: HBM {r['bw'] / 1e9:.0f} GB/s, ridge {ridge:.0f} FLOP/byte",
                     fontsize=8)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], marker=m, ls="", color="grey", label=p)
               for p, m in MARKERS.items()]
    seen = {}
    for ax in axs:
        for h, name in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(name, h)
    fig.legend(handles=handles + list(seen.values()),
               fontsize=7, loc="outside right upper")
    return fig, ("Roofline per device: arithmetic intensity (FLOPs / bytes moved) against "
                 "achieved FLOP/s of each component, circles prefill, triangles decode; solid "
                 "roofs: catalogue peak at the compute width in use and HBM bandwidth (times "
                 "the what-if scales), dashed: derated by the efficiencies. Communication and "
                 "components without FLOPs are not shown; " + at_best(res, metric) + ".")

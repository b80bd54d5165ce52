"""Search figures: optimization history (one objective) or Pareto front (several).

Drawn from the trials Dataset alone (objectives, directions and feasibility are in it),
so ``dse search`` and ``dse report`` on a trials file draw the same figure.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from ..schema.outputs import OUTPUTS  # noqa: E402
from ..results.select import pareto_mask  # noqa: E402


def _label(mode: str, name: str) -> str:
    info = OUTPUTS[mode].get(name)
    return f"{info.long_name} [{info.units}]" if info else name


def draw_history(ax, trials: xr.Dataset, mode: str, name: str,
                 optimum: float | None = None) -> str:
    """Draw the history (or the Pareto front of the first two objectives) on ``ax``;
    returns which of the two it drew."""
    objectives = str(trials.attrs["objectives"]).split()
    directions = str(trials.attrs["directions"]).split()
    feasible = trials["feasible"].values.astype(bool)
    if len(objectives) == 1:
        obj = objectives[0]
        y = trials[obj].values
        x = trials["number"].values
        ax.scatter(x[~feasible], y[~feasible], s=10, c="lightgray", label="infeasible")
        ax.scatter(x[feasible], y[feasible], s=12, c="tab:blue", label="feasible")
        if feasible.any():
            order = np.argsort(x)
            sign = 1.0 if directions[0] == "maximize" else -1.0
            running = np.where(feasible[order], sign * y[order], -np.inf)
            best = sign * np.maximum.accumulate(running)
            ok = np.isfinite(best)
            ax.step(x[order][ok], best[ok], where="post", c="tab:red", label="best feasible")
        if optimum is not None:
            ax.axhline(optimum, ls="--", c="k", lw=1, label="exhaustive optimum")
        ax.set_xlabel("trial")
        ax.set_ylabel(_label(mode, obj))
        ax.set_title(f"search {name!r}: optimization history")
        kind = "history"
    else:
        a, b = objectives[:2]
        va, vb = trials[a].values, trials[b].values
        ax.scatter(va[~feasible], vb[~feasible], s=10, c="lightgray", label="infeasible")
        ax.scatter(va[feasible], vb[feasible], s=12, c="tab:blue", label="feasible")
        signs = np.asarray([-1.0 if d == "maximize" else 1.0 for d in directions])
        values = np.stack([trials[o].values for o in objectives], axis=1)[feasible] * signs
        if len(values):
            front = np.stack([va[feasible], vb[feasible]], axis=1)[pareto_mask(values)]
            front = front[np.argsort(front[:, 0])]
            ax.plot(front[:, 0], front[:, 1], "o-", c="tab:red", label="Pareto front")
        ax.set_xlabel(_label(mode, a))
        ax.set_ylabel(_label(mode, b))
        ax.set_title(f"search {name!r}: Pareto front")
        kind = "pareto"
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return kind


def history_figure(result, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    optimum = (result.exhaustive or {}).get("optimum")
    draw_history(ax, result.trials, result.study.mode, result.config.study_name, optimum)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

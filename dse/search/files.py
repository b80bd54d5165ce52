"""Files a search leaves for the user: trials (netCDF + CSV), best config, figure, summary."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..results.io import write_dataset
from ..schema.knobs import fields
from ..results.summary import SHOWN, table
from .plots import history_figure
from .results import SearchResult


def default_output(study) -> Path:
    base = study.output.path or Path("results") / f"{study.name}.nc"
    return base.with_name(f"{base.stem}-search.nc")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value)


def best_toml(result: SearchResult, entry: dict) -> str:
    """A study file pinned to one best configuration: ``dse sweep`` reproduces it."""
    cfg, study = result.config, result.study
    lines = [f"# best of dse search {cfg.study_name!r} (trial {entry['trial']}): "
             + ", ".join(f"{k} = {v:.6g}" for k, v in entry["objectives"].items()),
             "# constraints: " + (", ".join(str(c) for c in cfg.constraints) or "none"),
             "[study]", f"name = {json.dumps(study.name + '-best')}", f"mode = {json.dumps(study.mode)}",
             "[axes]"]
    defaults = {k: f.default for k, f in fields(study.point_type).items()}
    values = {k: v for k, v in study.fixed.items() if v is not None and v != defaults[k]}
    values.update(entry["axes"])
    for key, value in values.items():
        lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def csv_table(trials):
    """One row per trial: its number, axes, objectives, each constraint's value (a column
    per constraint, ``<= 0``: satisfied) and feasibility."""
    table = trials.drop_vars("constraint").drop_dims("constraint_name").to_dataframe()
    for i, name in enumerate(trials["constraint_name"].values):
        table[f"constraint: {name}"] = trials["constraint"].values[:, i]
    table["feasible"] = table.pop("feasible")
    return table


def write_files(result: SearchResult, out: Path) -> dict[str, Path]:
    out = Path(out)
    trials = result.trials
    if result.exhaustive:  # for reports drawn from the file alone (dse report)
        trials = trials.assign_attrs(exhaustive=json.dumps(result.exhaustive, default=float))
    paths = {"trials": write_dataset(trials, out)}
    csv = out.with_suffix(".csv")
    tmp = csv.with_name(f".{csv.name}.tmp-{os.getpid()}")
    csv_table(result.trials).to_csv(tmp, index=False)
    os.replace(tmp, csv)
    paths["csv"] = csv
    if result.best:
        best = out.with_name(f"{out.stem}-best.toml")
        best.write_text(best_toml(result, result.best[0]))
        paths["best"] = best
    if result.n_trials:
        paths["figure"] = history_figure(result, out.with_name(f"{out.stem}-history.png"))
    return paths


def summary(result: SearchResult) -> str:
    cfg = result.config
    lines = [f"search {cfg.study_name!r}: {result.told} trials this run, {result.n_trials} in "
             f"the study, {result.n_feasible} feasible ({cfg.sampler}, {cfg.mode}, "
             f"storage {cfg.storage})"]
    if cfg.source == "slo":
        lines.append("constraints: " + ", ".join(str(c) for c in cfg.constraints)
                     + " (the study's SLOs, as P99s: [search] states none)")
    if result.best:
        label = "Pareto front" if cfg.multi else "best feasible configuration"
        lines.append(f"{label}:")
        rows = []
        for b in result.best:
            row = dict(b["axes"], **b["objectives"])
            for name in SHOWN:  # the point's latency, memory and devices beside the objective
                if name in b["outputs"] and name not in row and b["outputs"][name] is not None:
                    row[name] = b["outputs"][name]
            rows.append(row)
        lines.append(table(rows[:20]))
    ex = result.exhaustive
    if ex:
        if "regret" in ex:
            lines.append(f"exhaustive optimum over {ex['points']:,} points: {ex['optimum']:.6g} "
                         f"(regret {100 * ex['regret']:.2f}%)")
        elif "hypervolume_ratio" in ex:
            lines.append(f"hypervolume: {100 * ex['hypervolume_ratio']:.1f}% of the exhaustive "
                         f"front's ({ex['front_size']} points over {ex['points']:,})")
        elif ex.get("feasible_points") == 0:
            lines.append(f"exhaustive: none of the {ex['points']:,} points is feasible")
    return "\n".join(lines)

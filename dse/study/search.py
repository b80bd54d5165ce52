"""The ``[search]`` section of a study: objectives, constraints, sampler, storage.

```toml
[search]
objective = "throughput_tok_s"          # or a list for several objectives
direction = "maximize"                  # or a list, one per objective
constraints = ["fits", "ttft_s <= 1.5", "tpot_s <= 0.04"]
n_trials = 300                          # trials this run adds to the study
seed = 7
sampler = "tpe"                         # tpe | nsga2 | random | cmaes
storage = "sqlite:///results/x.db"      # any database URL, a journal file *.log, ":memory:"
study_name = "..."                      # default: the study's name
batch_size = 16                         # trials asked and evaluated together
mode = "batched"                        # batched | hybrid
inner = ["tp", "pp", "batch"]           # hybrid: axes swept exhaustively in each trial
exhaustive = "auto"                     # compare with the exhaustive optimum: auto | true | false
```

Parsed when the study is loaded (:mod:`dse.study.study`), so a malformed section fails
``dse sweep`` too; the default storage, which depends on where the results go, is
resolved when the search runs (:func:`storage_url`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .. import checks
from ..errors import InputError, suggest
from ..schema.outputs import OUTPUTS, renamed
from .constraints import Constraint, parse_constraints
from .reduce import DIRECTIONS, numeric_outputs

STORAGE_ALLOWED = ("a database URL (sqlite:///file.db, postgresql://...) in a writable "
                   "place, or a *.log journal")
KEYS = ("objective", "direction", "constraints", "n_trials", "seed", "sampler", "storage",
        "study_name", "batch_size", "mode", "inner", "exhaustive")
SAMPLERS = ("tpe", "nsga2", "random", "cmaes")
MODES = ("batched", "hybrid")
INNER_DEFAULT = ("tp", "pp", "dp", "ep", "batch")


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    objectives: tuple[str, ...]
    directions: tuple[str, ...]
    constraints: tuple[Constraint, ...]
    n_trials: int
    seed: int | None
    sampler: str
    storage: str | None  # None: beside the results (storage_url)
    study_name: str
    batch_size: int
    mode: str
    inner: tuple[str, ...]
    exhaustive: str | bool
    source: str = "search"  # where the constraints come from: "search" or "slo"

    @property
    def multi(self) -> bool:
        return len(self.objectives) > 1


def _as_list(value):
    return value if isinstance(value, list) else [value]


def parse_search(raw, file: str, mode: str, name: str, axes: tuple[str, ...]) -> SearchConfig:
    """Validate a ``[search]`` section for a study of ``mode`` named ``name`` with ``axes``."""
    raw = checks.table(raw, file, "[search]", "a [search] section with an objective")
    checks.known_keys(raw, KEYS, file, "search")
    outputs = OUTPUTS[mode]
    if "objective" not in raw:
        raise InputError(file, "search.objective", "missing", "an output name, or a list")
    numeric = numeric_outputs(mode)
    objectives = _as_list(raw["objective"])
    for objective in objectives:
        if not isinstance(objective, str) or objective not in numeric:
            raise InputError(file, "search.objective", f"{objective!r} is not a numeric output"
                             + suggest(str(objective), outputs), ", ".join(numeric))
        renamed(outputs, objective, file, "search.objective")
    # default: the registry's word for each objective (throughput up, latency down)
    directions = _as_list(raw.get("direction", [outputs[o].direction for o in objectives]))
    if len(directions) == 1 and len(objectives) > 1:
        directions = directions * len(objectives)
    if len(directions) != len(objectives) or any(d not in DIRECTIONS for d in directions):
        raise checks.invalid(file, "search.direction", raw.get("direction"),
                             "maximize or minimize, one per objective")
    constraints = parse_constraints(raw.get("constraints", []), file, outputs,
                                    "search.constraints")
    n_trials = checks.integer(raw, "n_trials", 100, file, "search", low=1)
    seed = checks.integer(raw, "seed", None, file, "search", low=0)
    batch_size = checks.integer(raw, "batch_size", 16, file, "search", low=1)
    sampler = checks.choice(raw, "sampler", "nsga2" if len(objectives) > 1 else "tpe",
                            SAMPLERS, file, "search")
    if sampler == "cmaes" and len(objectives) > 1:
        raise InputError(file, "search.sampler", "cmaes optimizes a single objective",
                         "tpe, nsga2 or random for several objectives")
    search_mode = checks.choice(raw, "mode", "batched", MODES, file, "search")
    inner = raw.get("inner", [a for a in INNER_DEFAULT if a in axes])
    if not isinstance(inner, list) or any(a not in axes for a in inner):
        raise checks.invalid(file, "search.inner", inner,
                             f"a list of the study's axes: {', '.join(axes)}")
    if search_mode == "hybrid" and not inner:
        raise InputError(file, "search.inner", "hybrid mode needs inner axes",
                         f"some of {', '.join(axes)}")
    if search_mode == "hybrid" and len(objectives) > 1:
        raise InputError(file, "search.mode", "hybrid mode ranks inner points by one objective",
                         "batched mode for several objectives")
    if search_mode == "hybrid" and len(inner) == len(axes):
        raise InputError(file, "search.inner", "every axis is inner: nothing left to search",
                         "leave some axes to optuna, or use dse sweep")
    exhaustive = checks.choice(raw, "exhaustive", "auto", ("auto", True, False), file, "search",
                               '"auto", true or false')
    storage = checks.string(raw, "storage", None, file, "search", STORAGE_ALLOWED)
    study_name = checks.string(raw, "study_name", name, file, "search")
    return SearchConfig(tuple(objectives), tuple(directions), constraints, n_trials, seed,
                        sampler, storage, study_name, batch_size, search_mode,
                        tuple(inner) if search_mode == "hybrid" else (), exhaustive)


SLO_METRICS = (("ttft_slo_s", "ttft_p99_s"), ("tpot_slo_s", "tpot_p99_s"))


def slo_constraints(values) -> list[str]:
    """A study's service-level objectives as constraints (``ttft_slo_s`` -> ``ttft_p99_s
    <= slo``, ``tpot_slo_s`` -> ``tpot_p99_s <= slo``: MLPerf Inference's server scenario
    bounds both P99s), each where the study fixes one value above 0. ``values(key)``
    gives a key's values (:meth:`dse.study.study.Study.values`)."""
    out = []
    for key, metric in SLO_METRICS:
        try:
            given = sorted({float(v) for v in values(key)})
        except KeyError:  # a study of another mode
            continue
        if len(given) == 1 and given[0] > 0.0:
            out.append(f"{metric} <= {given[0]:g}")
    return out


def with_slo_constraints(cfg: SearchConfig, values, file: str, mode: str) -> SearchConfig:
    """``cfg`` with the study's SLOs as its constraints where ``[search]`` states none
    (a search's best then meets them, as dse plan's and the summary's do)."""
    if cfg.constraints:
        return cfg
    said = slo_constraints(values)
    if not said:
        return cfg
    parsed = parse_constraints(said, file, OUTPUTS[mode], "axes.ttft_slo_s/tpot_slo_s")
    return dataclasses.replace(cfg, constraints=tuple(parsed), source="slo")


def storage_url(cfg: SearchConfig, results: Path) -> str:
    """The study's storage: its own, else an SQLite file beside ``results``."""
    return cfg.storage or f"sqlite:///{Path(results).with_suffix('.optuna.db')}"

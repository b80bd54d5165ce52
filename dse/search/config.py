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
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..errors import InputError, suggest
from ..schema.outputs import OUTPUTS
from ..study import Study

STORAGE_ALLOWED = ("a database URL (sqlite:///file.db, postgresql://...) in a writable "
                   "place, or a *.log journal")
KEYS = {"objective", "direction", "constraints", "n_trials", "seed", "sampler", "storage",
        "study_name", "batch_size", "mode", "inner", "exhaustive"}
SAMPLERS = ("tpe", "nsga2", "random", "cmaes")
MODES = ("batched", "hybrid")
INNER_DEFAULT = ("tp", "pp", "dp", "ep", "batch")
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|<|>)\s*([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*$")


@dataclasses.dataclass(frozen=True)
class Constraint:
    """``variable op bound``, or a boolean output that must be true (``bound`` None)."""

    variable: str
    op: str = "true"
    bound: float | None = None

    def __str__(self) -> str:
        return self.variable if self.bound is None else f"{self.variable} {self.op} {self.bound:g}"


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    objectives: tuple[str, ...]
    directions: tuple[str, ...]
    constraints: tuple[Constraint, ...]
    n_trials: int
    seed: int | None
    sampler: str
    storage: str
    study_name: str
    batch_size: int
    mode: str
    inner: tuple[str, ...]
    exhaustive: str | bool

    @property
    def multi(self) -> bool:
        return len(self.objectives) > 1


def _as_list(value):
    return value if isinstance(value, list) else [value]


def parse_constraint(text, file, outputs, key: str = "search.constraints") -> Constraint:
    allowed = "'NAME' for a boolean output (fits, valid) or 'NAME <= NUMBER' (also >=, <, >)"
    if not isinstance(text, str):
        raise InputError(file, key, f"value {text!r} is not valid", allowed)
    match = _CONSTRAINT.match(text)
    name = match.group(1) if match else text.strip()
    if name not in outputs:
        raise InputError(file, key, f"{text!r}: unknown output {name!r}" + suggest(name, outputs),
                         ", ".join(outputs))
    if match is None:
        if outputs[name].kind != "bool":
            raise InputError(file, key, f"{text!r} is not a boolean output", allowed)
        return Constraint(name)
    if outputs[name].kind != "float" or outputs[name].dims:
        raise InputError(file, key, f"{text!r}: {name} is not a number per configuration", allowed)
    return Constraint(name, match.group(2), float(match.group(3)))


def default_storage(study: Study, out: Path | None) -> str:
    base = out or study.output.path or Path("results") / f"{study.name}.nc"
    return f"sqlite:///{Path(base).with_suffix('.optuna.db')}"


def parse_search(study: Study, out: Path | None = None) -> SearchConfig:
    """Validate ``study``'s ``[search]`` section (``out``: where results go)."""
    file = study.file
    raw = study.sections.get("search")
    if not isinstance(raw, dict):
        raise InputError(file, "[search]", "missing", "a [search] section with an objective")
    for key in raw:
        if key not in KEYS:
            raise InputError(file, f"search.{key}", "unknown key" + suggest(key, KEYS),
                             ", ".join(sorted(KEYS)))
    outputs = OUTPUTS[study.mode]
    if "objective" not in raw:
        raise InputError(file, "search.objective", "missing", "an output name, or a list")
    objectives = _as_list(raw["objective"])
    for name in objectives:
        if not isinstance(name, str) or name not in outputs or outputs[name].kind != "float" \
                or outputs[name].dims:
            raise InputError(file, "search.objective", f"{name!r} is not a numeric output"
                             + suggest(str(name), outputs), ", ".join(
                                 k for k, v in outputs.items() if v.kind == "float" and not v.dims))
    directions = _as_list(raw.get("direction", "maximize"))
    if len(directions) == 1 and len(objectives) > 1:
        directions = directions * len(objectives)
    if len(directions) != len(objectives) or any(d not in ("maximize", "minimize")
                                                   for d in directions):
        raise InputError(file, "search.direction", f"value {raw.get('direction')!r} is not valid",
                         "maximize or minimize, one per objective")
    constraints = raw.get("constraints", [])
    if not isinstance(constraints, list):
        raise InputError(file, "search.constraints", f"value {constraints!r} is not valid",
                         "a list of constraint strings")
    constraints = tuple(parse_constraint(c, file, outputs) for c in constraints)

    def integer(key, default, low):
        value = raw.get(key, default)
        if value is None and key == "seed":
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(file, f"search.{key}", f"value {value!r} is not valid",
                             f"an integer >= {low}")
        return value

    n_trials = integer("n_trials", 100, 1)
    seed = integer("seed", None, 0)
    batch_size = integer("batch_size", 16, 1)
    sampler = raw.get("sampler", "nsga2" if len(objectives) > 1 else "tpe")
    if sampler not in SAMPLERS:
        raise InputError(file, "search.sampler", f"value {sampler!r} is not valid",
                         ", ".join(SAMPLERS))
    if sampler == "cmaes" and len(objectives) > 1:
        raise InputError(file, "search.sampler", "cmaes optimizes a single objective",
                         "tpe, nsga2 or random for several objectives")
    mode = raw.get("mode", "batched")
    if mode not in MODES:
        raise InputError(file, "search.mode", f"value {mode!r} is not valid", ", ".join(MODES))
    axes = [a.name for a in study.dims]
    inner = raw.get("inner", [a for a in INNER_DEFAULT if a in axes])
    if not isinstance(inner, list) or any(a not in axes for a in inner):
        raise InputError(file, "search.inner", f"value {inner!r} is not valid",
                         f"a list of the study's axes: {', '.join(axes)}")
    if mode == "hybrid" and not inner:
        raise InputError(file, "search.inner", "hybrid mode needs inner axes",
                         f"some of {', '.join(axes)}")
    if mode == "hybrid" and len(objectives) > 1:
        raise InputError(file, "search.mode", "hybrid mode ranks inner points by one objective",
                         "batched mode for several objectives")
    if mode == "hybrid" and len(inner) == len(axes):
        raise InputError(file, "search.inner", "every axis is inner: nothing left to search",
                         "leave some axes to optuna, or use dse sweep")
    exhaustive = raw.get("exhaustive", "auto")
    if exhaustive not in ("auto", True, False):
        raise InputError(file, "search.exhaustive", f"value {exhaustive!r} is not valid",
                         '"auto", true or false')
    storage = raw.get("storage", default_storage(study, out))
    if not isinstance(storage, str) or not storage:
        raise InputError(file, "search.storage", f"value {storage!r} is not valid",
                         STORAGE_ALLOWED)
    study_name = raw.get("study_name", study.name)
    if not isinstance(study_name, str) or not study_name:
        raise InputError(file, "search.study_name", f"value {study_name!r} is not valid",
                         "a non-empty string")
    return SearchConfig(tuple(objectives), tuple(directions), constraints, n_trials, seed,
                        sampler, storage, study_name, batch_size, mode,
                        tuple(inner) if mode == "hybrid" else (), exhaustive)

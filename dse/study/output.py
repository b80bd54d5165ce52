"""The ``[output]`` section: where the result goes and what it holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .. import checks
from ..errors import InputError, suggest
from ..schema.outputs import OUTPUTS, renamed
from .reduce import parse_reduce

KEYS = ("path", "variables", "chunk_points", "compress", "breakdown", "reduce", "workers")
FORMATS = {".nc": "netcdf", ".zarr": "zarr"}
DEFAULT_CHUNK_POINTS = 1 << 22


@dataclasses.dataclass(frozen=True)
class Output:
    path: Path | None
    format: str
    variables: tuple[str, ...] | None  # None: the mode's defaults for the study's features
    chunk_points: int | None  # None: the default (dse.run.chunks.chunk_budget)
    compress: bool
    breakdown: bool = False
    reduce: Any = None  # ReduceSpec: stream the grid into a reduction over these groups
    workers: int | str = "auto"  # local worker processes for streamed sweeps ("auto": this one)


def parse_output(raw: dict, file: str, mode: str, axes: tuple[str, ...] = ()) -> Output:
    """Validate ``[output]`` for a study of ``mode`` with grid ``axes``."""
    out = checks.table(raw.get("output", {}), file, "output", "a [output] section")
    checks.known_keys(out, KEYS, file, "output")
    path = out.get("path")
    fmt = "netcdf"
    if path is not None:
        if not isinstance(path, str) or not path:
            raise checks.invalid(file, "output.path", path, "a file name ending in .nc or .zarr")
        suffix = Path(path).suffix
        if suffix not in FORMATS:
            raise InputError(file, "output.path", f"extension {suffix or '(none)'!r} is not "
                             "supported", "a file name ending in .nc (netCDF) or .zarr (zarr)")
        fmt = FORMATS[suffix]
        path = Path(path)
    available = OUTPUTS[mode]
    breakdown = checks.boolean(out, "breakdown", False, file, "output")
    variables = out.get("variables")
    if variables == "all":
        variables = tuple(k for k, v in available.items()
                          if not v.feature or v.feature != "breakdown" or breakdown)
    elif variables is not None:
        if not isinstance(variables, list) or not variables:
            raise checks.invalid(file, "output.variables", variables,
                                 'a non-empty list of output names, or "all"')
        for v in variables:
            if v not in available:
                raise InputError(file, "output.variables", f"unknown output {v!r}"
                                 + suggest(v, available), ", ".join(available))
            renamed(available, v, file, "output.variables")
            if available[v].feature == "breakdown" and not breakdown:
                raise InputError(file, "output.variables", f"{v!r} needs the breakdown",
                                 "output.breakdown = true")
        variables = tuple(dict.fromkeys(variables))
    chunk = checks.integer(out, "chunk_points", None, file, "output", low=1,
                           allowed="a positive integer")
    compress = checks.boolean(out, "compress", False, file, "output")
    workers = out.get("workers", "auto")
    if workers != "auto":
        workers = checks.integer(out, "workers", None, file, "output", low=1, allowed=(
            '"auto" (this process, one XLA host device per core) or an integer >= 1'))
    reduce = None
    if "reduce" in out:
        if mode == "pipeline":
            raise InputError(file, "output.reduce", "applies to inference and training "
                             "studies", "no [output.reduce] in pipeline mode")
        reduce = parse_reduce(out["reduce"], file, mode, axes)
    return Output(path, fmt, variables, chunk, compress, breakdown, reduce, workers)

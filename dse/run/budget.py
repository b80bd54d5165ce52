"""What a sweep will need, known before it starts: points, bytes of results, and whether the
memory or the disk it goes to has room for them.

The results' size is exact: each output is stored over the axes it depends on
(:func:`dse.core.trace.layout`), at its dtype. A sweep into memory needs its results
plus one chunk of outputs in flight; a sweep into a file needs the results' bytes free on
the file's disk (uncompressed: with ``[output] compress = true`` the file is smaller and
the disk check is skipped); a streamed reduction keeps only its partial sums. When the
need exceeds what is free, the sweep stops before it starts, with one line naming the
estimate, the limit and the ways to reduce a study, unless forced.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

from ..core.evaluator import Evaluator
from ..core.trace import layout
from ..errors import InputError
from ..schema.outputs import EXTRA_COORDS, OUTPUTS
from ..units import human_bytes
from .chunks import chunk_budget

HOW_TO_REDUCE = ("fewer or shorter axes, [output] variables, or [output.reduce] to keep the "
                 "best point per group")
MEMORY_SHARE = 0.8  # of the memory free now that a sweep may plan to fill


@dataclasses.dataclass(frozen=True)
class Estimate:
    points: int
    result_bytes: int  # every output over the axes it depends on
    chunk_bytes: int  # the outputs of the largest chunk in flight

    def describe(self) -> str:
        return f"{self.points:,} points, {human_bytes(self.result_bytes)} of results"


def estimate(study, names=None) -> Estimate:
    """Points and bytes of ``study``'s results (``names``: its outputs by default)."""
    evaluator = Evaluator.of(study, names)
    outputs = layout(study, evaluator)
    result = sum(o.size(study) * o.dtype.itemsize for o in outputs.values())
    share = min(1.0, chunk_budget(study, in_memory=True) / max(study.size, 1))
    return Estimate(study.size, int(result), int(result * share))


def available_memory() -> int:
    """Bytes of memory free for new allocations now."""
    import psutil

    return int(psutil.virtual_memory().available)


def free_disk(path: Path) -> int:
    """Bytes free on the disk that holds ``path`` (or its nearest existing ancestor)."""
    path = Path(path).absolute()
    while not path.exists() and path.parent != path:
        path = path.parent
    return int(shutil.disk_usage(path).free)


def bound(study, names=None) -> Estimate | None:
    """An upper bound of :func:`estimate` without tracing the evaluator: every output
    over the whole grid at 8 bytes a value. None where an output leads with axes whose
    length the study sets (pipeline stages, links)."""
    evaluator = Evaluator.of(study, names)
    per_point = 0
    for name in evaluator.names:
        dims = OUTPUTS[study.mode][name].dims
        if any(not EXTRA_COORDS.get(d) for d in dims):
            return None
        per_point += 8 * math.prod(len(EXTRA_COORDS[d]) for d in dims)
    result = per_point * study.size
    share = min(1.0, chunk_budget(study, in_memory=True) / max(study.size, 1))
    return Estimate(study.size, int(result), int(result * share))


def check(study, how: str, path: Path | None = None, force: bool = False) -> Estimate | None:
    """Stop a sweep of ``study`` taking path ``how`` (:data:`dse.run.sweep.PATHS`) that
    would not fit in memory or on ``path``'s disk: an :class:`InputError` naming the
    study, the estimate and the limit. ``force`` skips the check.

    Returns the estimate, or None where even :func:`bound` fits (the exact layout is then
    not needed before the sweep: a small study is not traced twice)."""
    if force or how == "reduce":
        return None
    upper = bound(study)
    if upper is not None and _problem(study, how, path, upper) is None:
        return None
    need = estimate(study)
    problem = _problem(study, how, path, need)
    if problem is not None:
        raise problem
    return need


def _problem(study, how: str, path: Path | None, need: Estimate) -> InputError | None:
    if how in ("memory", "store") and path is None:
        limit = int(available_memory() * MEMORY_SHARE)
        if need.result_bytes + need.chunk_bytes > limit:
            return InputError(study.file, "axes", f"{need.describe()} do not fit in memory "
                              f"({human_bytes(limit)} usable of what is free now)",
                              f"{HOW_TO_REDUCE}; or write to a file (dse.sweep_to_file, "
                              "dse sweep), or force it")
    if path is not None and not study.output.compress:
        free = free_disk(path)
        if need.result_bytes > free:
            return InputError(study.file, "axes", f"{need.describe()} do not fit on the disk "
                              f"of {path} ({human_bytes(free)} free)",
                              f"{HOW_TO_REDUCE}; or another disk, or [output] compress = "
                              "true, or --force")
    return None

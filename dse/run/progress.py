"""Progress bars (tqdm) for work on a terminal: grid points of a sweep or a sensitivity,
trials of a search.

Every runner takes ``progress``: a bar factory ``make(total) -> bar`` (a bar has
``update(n)`` and ``close()``), or None. :func:`bar` gives the factory: ``enabled`` True
shows a bar, False none, None one when stderr is a terminal. A bar appears only once the
work has run :data:`DELAY_S` seconds (``$DSE_PROGRESS_DELAY`` overrides it), so quick
runs print nothing, and it is cleared when the work ends.
"""

from __future__ import annotations

import os
import sys

import numpy as np

DELAY_S = 1.0


def bar(enabled: bool | None, unit: str = "pt", desc: str | None = None):
    """A factory of bars counting ``unit`` (``make(total)``), or None."""
    if enabled is False or (enabled is None and not sys.stderr.isatty()):
        return None
    from tqdm.auto import tqdm

    delay = float(os.environ.get("DSE_PROGRESS_DELAY", DELAY_S))
    return lambda total: tqdm(total=total, unit=unit, unit_scale=unit == "pt", leave=False,
                              smoothing=0.1, delay=delay, desc=desc, dynamic_ncols=True)


class PointsProgress:
    """A points bar (``make(total)``, or None) advanced per finished chunk, starting from
    the chunks a resumed run already has."""

    def __init__(self, make, study, chunks, done=()):
        self.bar = make(study.size) if make is not None else None
        inner = [int(np.prod(study.shape[c.axis + 1:])) for c in chunks]
        self.points = [(c.stop - c.start) * n for c, n in zip(chunks, inner)]
        if self.bar is not None and done:
            self.bar.update(sum(self.points[i] for i in done))

    def update(self, index: int) -> None:
        if self.bar is not None:
            self.bar.update(self.points[index])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

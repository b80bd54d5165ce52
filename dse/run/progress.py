"""Progress bars (tqdm) for runs on a terminal: chunks of an in-memory sweep, points of a
streamed one. ``enabled`` None shows a bar when stderr is a terminal."""

from __future__ import annotations

import sys

import numpy as np


def _wanted(enabled: bool | None) -> bool:
    return enabled is True or (enabled is None and sys.stderr.isatty())


def chunk_bar(enabled: bool | None):
    """``wrap(iterator, total)`` showing chunks as they are evaluated, or None."""
    if not _wanted(enabled):
        return None
    from tqdm.auto import tqdm

    def wrap(iterator, total):
        return tqdm(iterator, total=total, unit="chunk", disable=total <= 1, leave=False)

    return wrap


def points_bar(enabled: bool | None):
    """A factory of point-counting bars ``make(total)`` (streamed sweeps), or None."""
    if not _wanted(enabled):
        return None
    from tqdm.auto import tqdm

    return lambda total: tqdm(total=total, unit="pt", unit_scale=True, leave=False,
                              smoothing=0.1)


def points_callback(enabled: bool | None, total: int):
    """``advance(points)`` for a points bar, or None; the bar closes at ``total``."""
    make = points_bar(enabled)
    if make is None:
        return None
    bar = make(total)

    def advance(points: int) -> None:
        bar.update(points)
        if bar.n >= total:
            bar.close()

    return advance


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

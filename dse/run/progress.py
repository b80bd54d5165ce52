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
import threading

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


PREPARING = "preparing the evaluator"
"""The bar's note until the first chunk is done: tracing and compiling the program on a
first run of a layout (seconds to a minute for the load models), loading it on a later one."""


class PointsProgress:
    """A points bar (``make(total)``, or None) advanced per finished chunk, starting from
    the chunks a resumed run already has. Until the first chunk ends, the bar says
    :data:`PREPARING` and its clock runs (refreshed by a thread: nothing else moves it)."""

    def __init__(self, make, study, chunks, done=()):
        self.bar = make(study.size) if make is not None else None
        inner = [int(np.prod(study.shape[c.axis + 1:])) for c in chunks]
        self.points = [(c.stop - c.start) * n for c, n in zip(chunks, inner)]
        self._started, self._lock = threading.Event(), threading.Lock()
        if self.bar is not None and done:
            self.bar.update(sum(self.points[i] for i in done))
        # a bar is only asked for update(n) and close(); tqdm's can also take a note
        self._note = getattr(self.bar, "set_postfix_str", None)
        if self._note is not None:
            threading.Thread(target=self._preparing, daemon=True).start()

    def _preparing(self) -> None:
        delay = float(getattr(self.bar, "delay", 0.0) or 0.0)
        if self._started.wait(delay):
            return
        while True:
            with self._lock:
                if self._started.is_set():
                    return
                self._note(PREPARING, refresh=True)
            if self._started.wait(0.5):
                return

    def _first_done(self) -> None:
        with self._lock:
            if not self._started.is_set():
                self._started.set()
                if self._note is not None:
                    self._note("", refresh=False)

    def update(self, index: int) -> None:
        if self.bar is not None:
            self._first_done()
            self.bar.update(self.points[index])

    def close(self) -> None:
        if self.bar is not None:
            self._first_done()
            self.bar.close()

"""``dse report`` and ``dse plot``: figures chosen by what a result Dataset holds.

    >>> import dse
    >>> dse.report("results/llama-serving.nc")               # doctest: +SKIP
    PosixPath('results/llama-serving-report/index.html')
    >>> dse.plot("results/llama-serving.nc", "heatmap", "tp-batch.svg", x="batch", y="tp")  # doctest: +SKIP

Kinds (:data:`KINDS`): heatmap (a metric over two axes, infeasible cells marked by
reason), pareto (throughput against latency, non-dominated set per hardware), roofline
(per component and phase, under the device's roofs), memory and latency breakdowns,
tornado (sensitivity) and history (search). Large grids are reduced first (best
feasible value over the axes a figure does not show), and the caption says so.

The entry points below only defer the import of matplotlib and xarray (importing dse
stays light); the work is in :mod:`dse.report.build`.
"""

from __future__ import annotations


def report(result, out_dir=None):
    """HTML report of a result into ``out_dir``; see :func:`dse.report.build.report`."""
    from .build import report as run

    return run(result, out_dir)


def plot(result, kind, out=None, **options):
    """One figure of ``kind`` as PNG or SVG; see :func:`dse.report.build.plot`."""
    from .build import plot as run

    return run(result, kind, out, **options)


def figure(result, kind, **options):
    """(matplotlib Figure, caption) of ``kind``; see :func:`dse.report.build.figure`."""
    from .build import figure as run

    return run(result, kind, **options)

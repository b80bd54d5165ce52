"""``dse.report`` (an HTML page with every figure that applies) and ``dse.plot`` (one
figure as PNG or SVG), both atomic: the output appears complete or not at all."""

from __future__ import annotations

import os
import textwrap
import uuid
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import xarray as xr  # noqa: E402

from ..errors import InputError, suggest  # noqa: E402
from ..atomic import remove_path, replace_path  # noqa: E402
from .figures import DPI, NotApplicable  # noqa: E402
from .html import GENERATOR, page  # noqa: E402
from .kinds import KINDS, report_figures  # noqa: E402
from .result import Result, open_result  # noqa: E402

FORMATS = (".png", ".svg")


def figure(result: str | Path | xr.Dataset | Result, kind: str, **options):
    """Draw one figure of ``kind`` (:data:`KINDS`); returns (matplotlib Figure, caption).

    Options (None: chosen from the Dataset): ``metric`` (a variable), ``x``/``y`` (axes
    of a heatmap; ``x`` of a Pareto plot is its latency variable), ``workload`` (tornado).
    Raises InputError for an unknown kind or option, or a figure the result cannot have.
    """
    res = result if isinstance(result, Result) else open_result(result)
    if kind not in KINDS:
        raise InputError(res.file, "KIND", f"unknown figure kind {kind!r}{suggest(kind, KINDS)}",
                         ", ".join(KINDS))
    draw, allowed = KINDS[kind]
    options = {k: v for k, v in options.items() if v is not None}
    for key in options:
        if key not in allowed:
            raise InputError(res.file, f"--{key}", f"not an option of {kind}",
                             ", ".join(f"--{a}" for a in allowed) or "none")
    before = set(plt.get_fignums())
    try:
        return draw(res, **options)
    except NotApplicable as why:
        for number in set(plt.get_fignums()) - before:
            plt.close(number)
        raise InputError(res.file, kind, f"does not apply to this {res.kind} result: {why}",
                         ", ".join(applicable(res)) or "none") from None


def applicable(res: Result) -> list[str]:
    """The kinds a report of ``res`` would draw (without drawing them to files)."""
    out = []
    for kind in KINDS:
        try:
            fig, _ = KINDS[kind][0](res)
        except (NotApplicable, InputError):
            continue
        plt.close(fig)
        out.append(kind)
    return out


def plot(result: str | Path | xr.Dataset, kind: str, out: str | Path | None = None,
         **options) -> Path:
    """Write one figure of ``kind`` to ``out`` (.png or .svg; default: beside the result,
    ``<stem>-<kind>.png``), its caption printed under it. Returns the path."""
    res = open_result(result)
    if out is None:
        stem = Path(res.file).with_suffix("") if res.file != "<dataset>" else Path(res.name)
        out = stem.with_name(f"{stem.name}-{kind}.png")
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise InputError(str(out), "-o", f"unsupported figure extension {out.suffix!r}",
                         " or ".join(FORMATS))
    fig, caption = figure(res, kind, **options)
    width = int(fig.get_figwidth() * 15)
    fig.text(0.0, 0.0, textwrap.fill(caption, width), fontsize=8, va="top", ha="left",
             color="#333")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{out.suffix}")
    try:
        fig.savefig(tmp, dpi=DPI, bbox_inches="tight", pad_inches=0.2)
        os.replace(tmp, out)
    finally:
        plt.close(fig)
        remove_path(tmp)
    return out


def _check_out_dir(out: Path) -> None:
    """Refuse to replace a directory that is not a report (``-o results`` must not
    delete the results)."""
    if not out.exists():
        return
    index = out / "index.html"
    if not out.is_dir() or (any(out.iterdir()) and not (
            index.is_file() and GENERATOR in index.read_text(errors="replace")[:2000])):
        raise InputError(str(out), "-o", "exists and is not a dse report directory",
                         "a new directory, or one a previous dse report wrote")


def report(result: str | Path | xr.Dataset, out_dir: str | Path | None = None) -> Path:
    """Write the HTML report of ``result`` (a sweep, reduction, search or sensitivity
    result: a file or a Dataset) into ``out_dir`` (default: beside the result,
    ``<stem>-report/``): ``index.html`` and one PNG per figure that applies. Replaces a
    previous report atomically. Returns the path of ``index.html``."""
    res = open_result(result)
    if out_dir is None:
        stem = Path(res.file).with_suffix("") if res.file != "<dataset>" else Path(res.name)
        out_dir = stem.with_name(f"{stem.name}-report")
    out = Path(out_dir)
    _check_out_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        figures, omitted = [], []
        for stem, kind, options in report_figures(res):
            draw = KINDS[kind][0]
            before = set(plt.get_fignums())
            try:
                fig, caption = draw(res, **options)
            except NotApplicable as why:
                for number in set(plt.get_fignums()) - before:
                    plt.close(number)
                omitted.append((kind, str(why)))
                continue
            try:
                fig.savefig(tmp / f"{stem}.png", dpi=DPI)
            finally:
                plt.close(fig)
            figures.append((f"{stem}.png", kind, caption))
        omitted = [(k, w) for k, w in omitted if not any(k == f[1] for f in figures)]
        (tmp / "index.html").write_text(page(res, figures, _relevant(res, omitted)))
        replace_path(tmp, out)
    finally:
        remove_path(tmp)
    return out / "index.html"


def _relevant(res: Result, omitted: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Omissions worth telling: not the kinds that belong to other result types."""
    other = {"sweep": ("tornado", "history"), "reduced": ("tornado", "history"),
             "search": ("heatmap", "pareto", "roofline", "memory", "latency", "tornado", "tiers"),
             "sensitivity": ("heatmap", "pareto", "roofline", "memory", "latency", "history",
                             "tiers")}
    return [(k, w) for k, w in omitted if k not in other[res.kind]]

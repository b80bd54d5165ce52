"""Where a calibrated study's answer parts from the plain roofline's (``dse sweep``'s
summary, ``dse report``, ``dse sensitivity``).

A calibrated number is the roofline's divided by fitted efficiencies plus fitted host
overheads (docs/validation.md). Where the two answers of the same point differ by more
than :data:`FACTOR` in a reported metric, the fitted parts decide the answer rather
than the hardware's roofs, and a user should know: a +10% HBM bandwidth that the
roofline says is worth 9% of TPOT may be worth nothing under a fitted host overhead, or
the reverse. :func:`disagreement` evaluates the plain roofline at the points a summary
shows (a few trials, through a kept program) and says so in one line.

    >>> ds = dse.sweep("studies/llama-serving.toml")              # doctest: +SKIP
    >>> dse.run.regime.disagreement(study, ds)                    # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses

import numpy as np
import xarray as xr

FACTOR = 2.0
# the metrics a summary reports, compared between the two answers
COMPARED = {"inference": ("throughput_per_device_tok_s", "ttft_s", "tpot_s"),
            "training": ("throughput_per_device_tok_s", "step_s")}


def roofline_twin(study):
    """``study`` under the plain roofline (``calibration = "none"``: every efficiency 1,
    no fitted overhead)."""
    return dataclasses.replace(study, calibration=None, framework=None)


@dataclasses.dataclass(frozen=True)
class Disagreement:
    """The largest calibrated / roofline ratio of a metric at the points compared."""

    metric: str
    ratio: float  # calibrated / roofline (>= FACTOR or <= 1 / FACTOR)
    point: dict  # the axis values of the point where it is largest
    calibrated: str  # the regime labels there (summary.regime_label)
    roofline: str

    def line(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.point.items())
        return (f"calibrated vs plain roofline: {self.metric} is {_times(self.ratio)} the "
                f"roofline's at {where} (bound: {self.calibrated} calibrated, "
                f"{self.roofline} on the roofline): fitted efficiencies and host overheads, "
                "not the roofs alone, set this answer (docs/validation.md#the-calibration)")


def _times(ratio: float) -> str:
    return f"{ratio:.3g}x" if ratio >= 1.0 else f"1/{1.0 / ratio:.3g}x"


# grids small enough to evaluate again under the roofline's tables rather than compile a
# program for the shown points: a serving-load point costs ~1 ms to evaluate and its
# program 10-30 s to compile, a static point ~1e-7 s and its program a few seconds
REEVALUATED_POINTS = {"load": 4096, "static": 1 << 20}


def _on_the_grid(study, twin, names, columns, ds) -> dict | None:
    """The plain roofline's ``names`` at the shown points (``columns``) through the
    program that evaluated the study's grid (kept by dse.core.programs: no compile): the
    whole grid again, under the roofline's tables with the study's measured surfaces in
    them (each device's ``kernel_table`` is -1, so no matmul reads them: the values are
    the roofline's). None where that is not the same program (more than one chunk, a
    search's trials, tables of another layout) or the grid is too large to evaluate again.
    """
    import jax

    from ..core.evaluator import Evaluator
    from ..core.tables import tables
    from .chunks import chunk_budget, chunk_point, plan

    limit = REEVALUATED_POINTS["load" if "load" in study.features else "static"]
    dims = [a.name for a in study.dims]
    chunks = plan(study.shape, chunk_budget(study))
    if (study.size > limit or len(chunks) != 1 or study.pipeline is not None
            or not set(names) <= set(twin.variables)  # a study that writes fewer outputs
            or any(size > 1 and d not in ds.dims for d, size in zip(dims, study.shape))):
        return None
    try:
        index = [[list(study.values(d)).index(v) for v in columns[d]] for d in dims]
    except ValueError:  # a value the study's axis does not hold (an edited Dataset)
        return None
    models, hardware = tables(study)
    twin_models, twin_hardware = tables(twin)
    if hasattr(hardware, "gemm_surface"):
        twin_hardware = dataclasses.replace(twin_hardware, gemm_surface=hardware.gemm_surface,
                                            moe_surface=hardware.moe_surface)
    layout = [(np.shape(x), np.asarray(x).dtype) for x in jax.tree_util.tree_leaves(
        (models, hardware))]
    if (jax.tree_util.tree_structure((models, hardware))
            != jax.tree_util.tree_structure((twin_models, twin_hardware))
            or layout != [(np.shape(x), np.asarray(x).dtype) for x in jax.tree_util.tree_leaves(
                (twin_models, twin_hardware))]):
        return None
    evaluator = Evaluator(twin.mode, twin_models, twin_hardware, features=twin.features,
                          names=twin.variables, dtype=twin.dtype)  # the sweep's program
    full = evaluator(chunk_point(twin, chunks[0]))
    out = {}
    for name in names:
        array = np.asarray(full[name])
        array = array.reshape((1,) * (len(dims) - array.ndim) + array.shape)
        at = tuple(np.minimum(np.asarray(i), size - 1) for i, size in zip(index, array.shape))
        out[name] = array[at]
    return out


def compare(study, ds: xr.Dataset, k: int = 5) -> list[dict]:
    """For each of the first ``k`` points a summary of ``ds`` shows: its axis values,
    every :data:`COMPARED` metric calibrated and on the roofline, and both regimes.
    Empty for a study on the plain roofline or of a mode without comparison."""
    from ..core.encoding import trial_point
    from ..core.evaluator import Evaluator
    from ..results.summary import ranked, regime_label

    mode = study.mode
    if study.calibration is None or mode not in COMPARED or "valid" not in ds:
        return []
    metrics = [m for m in COMPARED[mode] if m in ds]
    rows = ranked(ds, k=k)
    if not metrics or not rows:
        return []
    dims = [a.name for a in study.dims]
    columns = {d: [ds[d].values[index[d]].item() if d in index else study.values(d)[0]
                   for index, _ in rows] for d in dims}
    twin = roofline_twin(study)
    names = tuple(metrics) + ("valid", "regime") + (
        ("dominant_phase",) if mode == "inference" else ())
    out = _on_the_grid(study, twin, names, columns, ds)
    if out is None:
        out = {n: np.asarray(v) for n, v in Evaluator.of(twin, names=names)(
            trial_point(twin, columns)).items()}
    n = len(rows)
    compared = []
    for i, (index, row) in enumerate(rows):
        roof = xr.Dataset({name: ((), np.broadcast_to(out[name], (n,))[i]) for name in names})
        point = ds.isel(index)
        compared.append(dict(
            point={d: columns[d][i] for d in dims if ds.sizes.get(d, 1) > 1},
            calibrated={m: float(point[m]) for m in metrics},
            roofline={m: float(roof[m]) for m in metrics},
            valid=bool(roof["valid"]), regime_calibrated=row.get("bound", ""),
            regime_roofline=regime_label(roof)))
    return compared


def disagreement(study, ds: xr.Dataset, k: int = 5) -> Disagreement | None:
    """The largest calibrated / roofline ratio over the summary's first ``k`` points and
    the :data:`COMPARED` metrics, where it exceeds :data:`FACTOR` either way; else None."""
    worst = None
    for c in compare(study, ds, k):
        if not c["valid"]:
            continue
        for m, value in c["calibrated"].items():
            roof = c["roofline"][m]
            if not (np.isfinite(value) and np.isfinite(roof) and value > 0 and roof > 0):
                continue
            ratio = value / roof
            if worst is None or abs(np.log(ratio)) > abs(np.log(worst.ratio)):
                worst = Disagreement(m, ratio, c["point"], c["regime_calibrated"],
                                     c["regime_roofline"])
    if worst is None or abs(np.log(worst.ratio)) <= np.log(FACTOR):
        return None
    return worst

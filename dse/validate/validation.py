"""Predictions checked against measured runs: ``dse validate``.

    >>> from dse.validate import validate
    >>> result = validate("measured_public.csv")               # doctest: +SKIP
    >>> print(result.table())                                  # doctest: +SKIP

:func:`validate` predicts every row with a calibration (the shipped
``calibrations/public.toml`` by default) and with the plain roofline, side by side;
with ``holdout=True`` it also refits without each device (leave-one-hardware-out) and
without each model (leave-one-model-out) and predicts the held-out rows, all folds in
one vmapped, jit-compiled fit.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np

from ..catalogue import calibration as C
from ..atomic import atomic_path
from ..catalogue.lookup import load_hardware, roots
from ..errors import InputError
from ..schema.outputs import REASON_BITS
from . import fit as F
from .predict import Problem, predict_with_reasons, problem
from .rows import STATUSES, Case, Skip, pooled, read

# Columns of ``dse validate --rows OUT.csv``.
ROW_COLUMNS = ("id", "kind", "metric", "measured", "predicted", "ape", "status", "note")

METHODS = ("calibrated", "roofline", "leave_one_hardware_out", "leave_one_model_out")


def default_calibration() -> Path:
    """The shipped calibration fitted on the public measurements."""
    for root in roots():
        path = root / "calibrations" / "public.toml"
        if path.is_file():
            return path
    raise InputError("calibrations/public.toml", "calibration", "not found",
                     "a calibration file (dse calibrate DATA.csv -o FILE)")


def build_problem(cases: list[Case], cal: C.Calibration | None) -> Problem:
    frameworks = tuple(dict.fromkeys(c.framework for c in cases))
    families = tuple(dict.fromkeys(C.FAMILY_OF[c.hardware] for c in cases
                                   if c.hardware in C.FAMILY_OF))
    family_of = dict(C.FAMILY_OF, **(cal.family_of if cal else {}))
    return problem(cases, frameworks, families, family_of)


def fitting(cases: list[Case]) -> tuple[list[Case], list[Skip]]:
    """(rows whose configuration fits in memory, the others as ``does_not_fit`` misses).

    A configuration that ran for real but that dse says does not fit is a miss of the
    memory model: it is reported, never predicted at a smaller batch. Memory does not
    depend on the calibration, so this is decided once, before any fit."""
    if not cases:
        return cases, []
    cases = _choose_layouts(cases)
    oom = _oom(cases)
    keep = [c for c, o in zip(cases, oom) if not o]
    misses = [Skip(c.id, c.kind, "dse says this configuration does not fit in memory; it "
                   "ran", "does_not_fit", c.metric, c.measured)
              for c, o in zip(cases, oom) if o]
    return keep, misses


def _oom(cases: list[Case]) -> np.ndarray:
    prob = build_problem(cases, None)
    with jax.enable_x64(True):
        _, reasons = predict_with_reasons(F.start(prob).theta, prob, calibrated=False)
    return (np.asarray(reasons) & REASON_BITS["oom"]) != 0


# Tensor-parallel degrees tried for a multi-device row that does not state its layout.
_TP_CHOICES = (1, 2, 4, 8)


def _choose_layouts(cases: list[Case]) -> list[Case]:
    """A multi-device inference row without its layout runs at the smallest tensor
    parallelism (of 1, 2, 4, 8, within a node, dividing the devices) at which the model
    fits, the rest data-parallel: what a throughput run picks. Said in ``assumed``."""
    free = [i for i, c in enumerate(cases) if not c.layout_stated]
    if not free:
        return cases
    options = []
    for i in free:
        c = cases[i]
        node = int(load_hardware(c.hardware).fields["devices_per_node"])
        tps = [t for t in _TP_CHOICES if c.n_devices % t == 0 and t <= node] or [1]
        options += [(i, dataclasses.replace(c, knobs=dict(c.knobs, tp=t, pp=1,
                                                          dp=c.n_devices // t)), t)
                    for t in tps]
    oom = _oom([o[1] for o in options])
    out = list(cases)
    for i in free:
        mine = [(o[2], o[1]) for o, bad in zip(options, oom) if o[0] == i and not bad]
        t, chosen = mine[0] if mine else [(o[2], o[1]) for o in options if o[0] == i][-1]
        out[i] = dataclasses.replace(chosen, assumed="; ".join(filter(None, (
            chosen.assumed, f"tp {t} x dp {chosen.n_devices // t} (layout not stated: the "
            "smallest tp that fits)"))))
    return out


def calibration_vector(prob: Problem, cal: C.Calibration | None) -> np.ndarray:
    """The problem's parameter vector from a calibration (frameworks or families it does
    not know start at the fit's starting point)."""
    start = F.start(prob)
    if cal is None:
        return start.theta
    base, offset = start.base.copy(), start.offset.copy()
    for i, fw in enumerate(prob.frameworks):
        if fw in cal.frameworks:
            base[i] = cal.base[cal.frameworks.index(fw)]
    for g, fam in enumerate(prob.families):
        near = C.nearest_family(fam, cal.families)
        if near is not None:
            offset[g] = cal.offset[cal.families.index(near)]
    return np.concatenate([base.ravel(), offset.ravel()])


def _ape(pred, measured):
    return np.abs(np.asarray(pred) / measured - 1.0) * 100.0


@dataclasses.dataclass
class Validation:
    """Predicted vs measured for every expressible row, by method."""

    cases: list[Case]
    skips: list[Skip]
    predictions: dict[str, np.ndarray]  # method -> [row]
    reasons: np.ndarray  # infeasibility flags of each row's point (0: feasible)
    calibration: str
    data: str

    @property
    def measured(self) -> np.ndarray:
        return np.asarray([c.measured for c in self.cases])

    @property
    def flagged(self) -> np.ndarray:
        return np.asarray([bool(c.flag) for c in self.cases])

    def stats(self) -> dict:
        """{kind: {method: {n, median_ape, p90_ape, within_10, within_25}}}, flagged
        anomalies excluded (they are listed, not scored)."""
        kinds = np.asarray([c.kind for c in self.cases])
        out = {}
        for kind in dict.fromkeys(kinds):
            sel = (kinds == kind) & ~self.flagged
            out[kind] = {}
            for method, pred in self.predictions.items():
                e = _ape(pred[sel], self.measured[sel])
                out[kind][method] = dict(n=int(sel.sum()), median_ape=float(np.median(e)),
                                         p90_ape=float(np.percentile(e, 90)),
                                         within_10=float(np.mean(e <= 10.0)),
                                         within_25=float(np.mean(e <= 25.0)))
        return out

    def worst(self, n: int = 10, method: str = "calibrated") -> list[dict]:
        e = _ape(self.predictions[method], self.measured)
        order = [i for i in np.argsort(-e) if not self.cases[i].flag][:n]
        return [self._row(i, method) for i in order]

    def _row(self, i: int, method: str) -> dict:
        c = self.cases[i]
        pred = float(self.predictions[method][i])
        return dict(id=c.id, kind=c.kind, model=c.model.long_name, hardware=c.hardware,
                    framework=c.framework, measured=c.measured, predicted=pred,
                    ape=abs(pred / c.measured - 1.0) * 100.0, flag=c.flag,
                    infeasible=int(self.reasons[i]))

    def statuses(self) -> dict[str, int]:
        """Rows per status (dse.validate.rows.STATUSES), every input row counted once."""
        counts = dict.fromkeys(STATUSES, 0)
        counts["scored"] = int((~self.flagged).sum())
        counts["flagged"] = int(self.flagged.sum())
        for s in self.skips:
            counts[s.status] += 1
        return counts

    def rows(self) -> list[dict]:
        """One record per input row: id, kind, metric, measured, predicted (calibrated),
        ape (%), status, and what was assumed or why it is not scored."""
        out = []
        for i, c in enumerate(self.cases):
            pred = float(self.predictions["calibrated"][i])
            out.append(dict(id=c.id, kind=c.kind, metric=c.metric, measured=c.measured,
                            predicted=pred, ape=abs(pred / c.measured - 1.0) * 100.0,
                            status="flagged" if c.flag else "scored",
                            note=c.flag or c.assumed))
        for s in self.skips:
            out.append(dict(id=s.id, kind=s.kind, metric=s.metric, measured=s.measured,
                            predicted=float("nan"), ape=float("nan"), status=s.status,
                            note=s.reason))
        return out

    def write_rows(self, path) -> Path:
        """``--rows OUT.csv``: :meth:`rows` as CSV, written atomically."""
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=ROW_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in self.rows():
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v)
                             for k, v in r.items()})
        with atomic_path(path) as tmp:
            Path(tmp).write_text(buffer.getvalue())
        return Path(path)

    def to_json(self) -> dict:
        return dict(data=self.data, calibration=self.calibration, rows=len(self.cases),
                    statuses=self.statuses(), stats=self.stats(), worst=self.worst(),
                    flagged=[self._row(i, "calibrated") for i in np.flatnonzero(self.flagged)],
                    assumed={c.id: c.assumed for c in self.cases if c.assumed},
                    skipped=[dataclasses.asdict(s) for s in self.skips])

    def table(self, n_worst: int = 10) -> str:
        counts = self.statuses()
        total = sum(counts.values())
        lines = [f"{self.data}: {total} rows: "
                 + ", ".join(f"{n} {k}" for k, n in counts.items() if n)
                 + f" ({100.0 * counts['scored'] / max(total, 1):.1f}% scored)",
                 f"calibration: {self.calibration}", "",
                 f"{'kind':<20} {'method':<24} {'n':>4} {'median APE':>11} {'p90 APE':>9} "
                 f"{'<=10%':>6} {'<=25%':>6}"]
        for kind, methods in self.stats().items():
            for method, s in methods.items():
                lines.append(f"{kind:<20} {method:<24} {s['n']:>4} {s['median_ape']:>10.1f}% "
                             f"{s['p90_ape']:>8.1f}% {s['within_10']:>6.0%} "
                             f"{s['within_25']:>6.0%}")
        lines += ["", f"worst {n_worst} rows (calibrated):"]
        for r in self.worst(n_worst):
            lines.append(f"  {r['id']:<52} {r['hardware']:<14} measured {r['measured']:>10.4g} "
                         f"predicted {r['predicted']:>10.4g} ({r['ape']:.0f}%)")
        if self.flagged.any():
            lines += ["", "flagged (known source anomalies, not scored):"]
            for i in np.flatnonzero(self.flagged):
                r = self._row(i, "calibrated")
                lines.append(f"  {r['id']:<52} measured {r['measured']:>10.4g} predicted "
                             f"{r['predicted']:>10.4g}: {r['flag']}")
        if self.skips:
            lines += ["", "not expressible:"]
            lines += [f"  {s.id}: {s.reason}" for s in self.skips]
        return "\n".join(lines)

    def plot(self, path) -> Path:
        """Predicted vs measured, log-log, one panel per kind, every method."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        kinds = list(dict.fromkeys(c.kind for c in self.cases))
        fig, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 4.2), squeeze=False)
        kind_of = np.asarray([c.kind for c in self.cases])
        markers = {"calibrated": "o", "roofline": "x", "leave_one_hardware_out": "^",
                   "leave_one_model_out": "v"}
        for ax, kind in zip(axes[0], kinds):
            sel = kind_of == kind
            m = self.measured[sel]
            for method, pred in self.predictions.items():
                ax.scatter(m, pred[sel], s=14, marker=markers.get(method, "."), alpha=0.7,
                           label=method.replace("_", " "))
            lo, hi = m.min() / 2.0, m.max() * 2.0
            ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
            ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25],
                            color="0.85", zorder=0, label="within 25%")
            ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=kind,
                   xlabel=f"measured ({self.cases[np.flatnonzero(sel)[0]].metric})",
                   ylabel="predicted")
            flagged = sel & self.flagged
            if flagged.any():
                ax.scatter(self.measured[flagged], self.predictions["calibrated"][flagged],
                           s=60, facecolors="none", edgecolors="r", label="flagged anomaly")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def _folds(prob: Problem, key) -> tuple[list[str], np.ndarray]:
    values = [key(c) for c in prob.cases]
    names = list(dict.fromkeys(values))
    return names, np.asarray([[v != name for v in values] for name in names])


def holdout_predictions(prob: Problem, steps: int = F.STEPS) -> dict[str, np.ndarray]:
    """Leave-one-hardware-out, leave-one-model-out and leave-one-source-out predictions
    of every row: for each device (model, publication), fit on the other rows and predict
    its rows. One vmapped fit."""
    groups = (("leave_one_hardware_out", lambda c: c.hardware),
              ("leave_one_model_out", lambda c: c.model_name),
              ("leave_one_source_out", lambda c: c.source))
    folds = [(method, *_folds(prob, key)) for method, key in groups]
    includes = np.concatenate([inc for _, _, inc in folds])
    theta, _ = F.fit_folds(prob, includes, steps)
    out = {}
    offsets = np.cumsum([0] + [len(names) for _, names, _ in folds])
    with jax.enable_x64(True):
        for (method, names, inc), offset in zip(folds, offsets):
            pred = np.empty(prob.size)
            for k in range(len(names)):
                held = ~inc[k]
                pred[held] = np.asarray(predict_with_reasons(theta[offset + k], prob)[0])[held]
            out[method] = pred
    return out


def validate(data, calibration=None, holdout: bool = False, steps: int = F.STEPS,
             framework: str | None = None) -> Validation:
    """Predict every row of ``data`` (a CSV in the measured_public schema).

    ``calibration``: a path, a :class:`dse.catalogue.calibration.Calibration`, or None for the
    shipped ``calibrations/public.toml``. ``holdout``: also refit per held-out device
    and model (``steps`` Adam steps each). ``framework``: every row as measured with that
    one framework (``generic``: the calibration studies get by default).
    """
    cases, skips = read(data)
    cases, misses = fitting(pooled(cases, framework))
    skips = skips + misses
    if not cases:
        raise InputError(str(data), "rows", "no row is expressible",
                         "rows of the kinds " + ", ".join(("train", "infer_decode",
                                                           "infer_prefill", "serving_throughput")))
    if calibration is None:
        calibration = default_calibration()
    cal = calibration if isinstance(calibration, C.Calibration) else C.load(calibration)
    prob = build_problem(cases, cal)
    with jax.enable_x64(True):
        calibrated, reasons = predict_with_reasons(calibration_vector(prob, cal), prob)
        roofline, _ = predict_with_reasons(calibration_vector(prob, cal), prob, calibrated=False)
    predictions = {"calibrated": np.asarray(calibrated), "roofline": np.asarray(roofline)}
    if holdout:
        predictions.update(holdout_predictions(prob, steps))
    return Validation(list(prob.cases), skips, predictions, np.asarray(reasons), cal.file,
                      str(data))


def dumps_json(v: Validation) -> str:
    return json.dumps(v.to_json(), indent=1)

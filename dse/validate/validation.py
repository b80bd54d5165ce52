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
from statistics import NormalDist

import jax
import numpy as np

from ..catalogue import calibration as C, kernels
from ..catalogue.frameworks import fit_of
from ..atomic import atomic_path
from ..catalogue.lookup import load_hardware, roots
from ..errors import InputError
from ..schema.knobs import RECOMPUTE
from ..schema.outputs import REASON_BITS
from . import fit as F
from . import frontend
from .predict import Problem, predict_with_reasons, problem
from .rows import KINDS, STATUSES, UNFITTED, Case, Skip, pooled, read

# Columns of ``dse validate --rows OUT.csv``.
ROW_COLUMNS = ("id", "kind", "metric", "measured", "predicted", "ape", "status", "note",
               "model_card", "hardware_card")  # the catalogue cards the row resolved to

METHODS = ("calibrated", "roofline", "leave_one_hardware_out", "leave_one_model_out")


def default_calibration() -> Path:
    """The shipped calibration fitted on the public measurements."""
    for root in roots():
        path = root / "calibrations" / "public.toml"
        if path.is_file():
            return path
    raise InputError("calibrations/public.toml", "calibration", "not found",
                     "a calibration file (dse calibrate DATA.csv -o FILE)")


def build_problem(cases: list[Case], cal: C.Calibration | None, moe: bool = False) -> Problem:
    """The rows as evaluator inputs under ``cal``: its matmuls by the measured GEMM
    surfaces if it was fitted with them (its routed experts by the MoE surfaces if it was
    fitted with those); with no calibration (a fit to come), by the shipped surfaces
    where there are any, the MoE ones if ``moe``."""
    frameworks = tuple(dict.fromkeys(c.framework for c in cases))
    families = tuple(dict.fromkeys(C.FAMILY_OF[c.hardware] for c in cases
                                   if c.hardware in C.FAMILY_OF))
    family_of = dict(C.FAMILY_OF, **(cal.family_of if cal else {}))
    with_kernels = kernels.uses_kernels(cal) if cal is not None else kernels.source() is not None
    with_moe = kernels.uses_moe(cal) if cal is not None else moe
    return problem(cases, frameworks, families, family_of, with_kernels, with_moe)


def fitting(cases: list[Case]) -> tuple[list[Case], list[Skip]]:
    """(rows whose configuration dse can evaluate, the others as misses).

    A configuration that ran for real but that dse says does not fit is a miss of the
    memory model (``does_not_fit``): it is reported, never predicted at a smaller batch.
    Unless the row explains it: a source anomaly its notes record (``flagged``), or no
    device count or layout at all, so that one device was assumed (``unstated_devices``).
    One that dse calls infeasible for another reason (an indivisible layout, a context
    beyond the model's) or cannot time is ``infeasible``. Neither depends on the
    calibration, so this is decided once, before any fit."""
    if not cases:
        return cases, []
    cases, reasons, finite = _choose_layouts(cases)
    keep, misses = [], []
    for c, r, ok in zip(cases, reasons, finite):
        if c.kind == "serving_latency" and "_ms" not in c.metric:
            # a throughput measured past the capacity is the capacity (the client offered
            # more than the deployment carried): the rate completed is still a prediction
            r = r & ~REASON_BITS["overloaded"]
        if r & REASON_BITS["oom"]:
            if c.flag:  # the anomaly the source's notes record explains it
                why, status = (f"{c.flag}; as stated, the configuration does not fit in "
                               "memory", "flagged")
            elif not c.devices_stated:
                why, status = ("the row does not say how many devices ran it, and the "
                               "model does not fit on one", "unstated_devices")
            else:
                why, status = ("dse says this configuration does not fit in memory; it "
                               "ran", "does_not_fit")
            misses.append(Skip(c.id, c.kind, why, status, c.metric, c.measured))
        elif r or not ok:
            why = ", ".join(n for n, bit in REASON_BITS.items() if r & bit) or (
                "no finite prediction")
            misses.append(Skip(c.id, c.kind, f"dse says this configuration is infeasible "
                               f"({why}); it ran", "infeasible", c.metric, c.measured))
        else:
            keep.append(c)
    return keep, misses


def _feasibility(cases: list[Case]) -> tuple[np.ndarray, np.ndarray]:
    """(infeasibility flags, prediction is finite and positive) of each row's point."""
    prob = build_problem(cases, None)
    with jax.enable_x64(True):
        pred, reasons = predict_with_reasons(F.start(prob).theta, prob, calibrated=False)
    pred = np.asarray(pred)
    return np.asarray(reasons).astype(int), np.isfinite(pred) & (pred > 0)


# Tensor- and (training) pipeline-parallel degrees tried for a multi-device row that does
# not state its layout.
_TP_CHOICES = (1, 2, 4, 8)
_PP_CHOICES = (1, 2, 4, 8)


def _options(c: Case) -> list[tuple[Case, str]]:
    """The configurations a row that leaves its layout or recomputation unstated may have
    run, in order of preference, each with what it assumes."""
    layouts = [(c.knobs, "")]
    if not c.layout_stated:
        node = int(load_hardware(c.hardware).fields["devices_per_node"])
        cp = int(c.knobs.get("cp", 1))
        # inference: tensor parallelism within a node; training also pipelines
        pps = _PP_CHOICES if c.mode == "training" else (1,)
        shapes = sorted(((t, p) for t in _TP_CHOICES for p in pps
                         if c.n_devices % (t * p * cp) == 0 and t <= node),
                        key=lambda tp: (tp[0] * tp[1], tp[1])) or [(1, 1)]
        layouts = []
        for t, p in shapes:
            dp = c.n_devices // (t * p * cp)
            k = dict(c.knobs, tp=t, pp=p, dp=dp)
            if c.mode == "training":
                k["sequence_parallel"] = t > 1
            layouts.append((k, f"tp {t} x " + (f"pp {p} x " if p > 1 else "") + f"dp {dp}"))
    out = []
    for k, said in layouts:
        levels = [(k.get("recompute", 0), "")] if c.recompute_stated else [
            (float(i), f"{name} recomputation") for i, name in enumerate(RECOMPUTE)]
        for level, more in levels:
            what = ", ".join(filter(None, (said, more)))
            knobs = dict(k, recompute=level) if c.mode == "training" else k
            out.append((dataclasses.replace(c, knobs=knobs), what))
    return out


def _choose_layouts(cases: list[Case]) -> tuple[list[Case], np.ndarray, np.ndarray]:
    """(the rows as they ran, their infeasibility flags, prediction finite and positive).

    A row that does not state its layout (multi-device) or its recomputation
    (training) runs at the first of its options that dse finds feasible: the smallest
    model parallelism (tensor parallelism of 1, 2, 4, 8 within a node; for training
    also pipeline parallelism of 1, 2, 4, 8, tp first), the rest data-parallel, and at
    it the least recomputation (none, selective, full); what a throughput run (or a
    framework's performance recipe) picks. Said in ``assumed``. Every option of every
    row is evaluated in one call."""
    options = [(i, case, what) for i, c in enumerate(cases) for case, what in _options(c)]
    reasons, finite = _feasibility([o[1] for o in options])
    good = (reasons == 0) & finite
    out, picked = [], []
    for i in range(len(cases)):
        mine = [j for j, o in enumerate(options) if o[0] == i]
        j = next((j for j in mine if good[j]), mine[-1])
        chosen, what = options[j][1], options[j][2]
        out.append(dataclasses.replace(chosen, assumed="; ".join(filter(None, (
            chosen.assumed, f"{what} (not stated: the first that fits)" if what else "")))))
        picked.append(j)
    return out, reasons[picked], finite[picked]


def calibration_vector(prob: Problem, cal: C.Calibration | None) -> np.ndarray:
    """The problem's parameter vector from a calibration: a framework it has no fit of runs
    under the fit a study would give it (SGLang: vLLM's, then generic's;
    dse.catalogue.frameworks), else the fit's starting point; a family it does not know
    takes the nearest it has."""
    start = F.start(prob)
    if cal is None:
        return start.theta
    base, offset = start.base.copy(), start.offset.copy()
    for i, fw in enumerate(prob.frameworks):
        fit = fit_of(fw, cal.frameworks)
        if fit is not None:
            base[i] = cal.base[cal.frameworks.index(fit)]
    for g, fam in enumerate(prob.families):
        near = C.nearest_family(fam, cal.families)
        if near is not None:
            offset[g] = cal.offset[cal.families.index(near)]
    return np.concatenate([base.ravel(), offset.ravel()])


def _ape(pred, measured):
    """Absolute percentage errors; a row predicted as no number (a load the deployment
    cannot carry under this calibration) misses by an unbounded amount."""
    e = np.abs(np.asarray(pred, np.float64) / measured - 1.0) * 100.0
    return np.where(np.isfinite(e), e, np.inf)


def shown(predicted: float, ape: float, reasons: int) -> str:
    """A worst row's prediction as the table prints it: the value and its error, or why
    there is none (the point's infeasibility reasons: a load past the capacity the
    calibration gives is ``overloaded``)."""
    if np.isfinite(predicted):
        return f"{predicted:>10.4g} ({ape:.0f}%)"
    why = ", ".join(n for n, bit in REASON_BITS.items() if reasons & bit)
    return f"no number ({why or 'not finite'})"


def _json_safe(v):
    """``v`` with every non-finite float as None (JSON has no NaN or Infinity)."""
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, (float, np.floating)):
        return float(v) if np.isfinite(v) else None
    return v


def group(c: Case) -> str:
    """The row's group in the error tables: its kind, serving latency split into means,
    percentiles (tails) and throughputs, which answer different questions."""
    if c.kind != "serving_latency":
        return c.kind
    if c.metric.endswith("_ms"):
        return "serving_latency"
    return "serving_latency_tail" if "_ms_p" in c.metric else "serving_latency_tput"


@dataclasses.dataclass
class Validation:
    """Predicted vs measured for every expressible row, by method."""

    cases: list[Case]
    skips: list[Skip]
    predictions: dict[str, np.ndarray]  # method -> [row]
    reasons: np.ndarray  # infeasibility flags of each row's point (0: feasible)
    calibration: str
    data: str
    residual_log_sd: float = float("nan")  # the calibration's (what --bands widens by)
    ttft_log_sd: float = float("nan")  # its TTFT scale (nan: residual_log_sd)

    @property
    def measured(self) -> np.ndarray:
        return np.asarray([c.measured for c in self.cases])

    @property
    def flagged(self) -> np.ndarray:
        return np.asarray([bool(c.flag) for c in self.cases])

    def stats(self) -> dict:
        """{group: {method: {n, median_ape, p90_ape, within_10, within_25}}} by the rows'
        :func:`group` (their kind, serving latency split), flagged anomalies excluded
        (they are listed, not scored). A method with no prediction for a group (a
        leave-one-out refit of kinds no fit uses) is left out of it."""
        kinds = np.asarray([group(c) for c in self.cases])
        out = {}
        for kind in dict.fromkeys(kinds):
            sel = (kinds == kind) & ~self.flagged
            if not sel.any():
                continue
            out[kind] = {}
            for method, pred in self.predictions.items():
                if np.all(np.isnan(pred[sel])) and method not in ("calibrated", "roofline"):
                    continue
                e = _ape(pred[sel], self.measured[sel])
                # an unbounded miss interpolates as the largest float (inf would give nan)
                big = np.percentile(np.where(np.isfinite(e), e, np.finfo(np.float64).max), 90)
                out[kind][method] = dict(n=int(sel.sum()), median_ape=float(np.median(e)),
                                         p90_ape=float(big if big < 1e300 else np.inf),
                                         within_10=float(np.mean(e <= 10.0)),
                                         within_25=float(np.mean(e <= 25.0)))
        return out

    def coverage(self, level: float = 0.9) -> dict:
        """How often held-out rows fall inside a ``level`` prediction interval, by the
        rows' :func:`group` (mean serving latencies by metric) and leave-one-out method: {group: {method: {n, fixed,
        nested}}}, flagged rows excluded.

        - ``fixed``: the interval pred x exp(+-z sigma), sigma the calibration's residual
          log-SD, its TTFT scale for mean TTFTs (the model error ``dse sweep --bands``
          adds to the parameter draws);
        - ``nested``: for each held-out group (a model, a device, a source, a framework),
          the interval between the (1 - level) / 2 and (1 + level) / 2 quantiles of the
          other groups' held-out log errors (split conformal over groups): an interval
          built without the group it is judged on.

        A method without held-out predictions (no ``--holdout``) is left out."""
        # serving latency: TTFT and TPOT apart (the fitted frontend reaches TTFT only)
        kinds = np.asarray([group(c) + (f" {c.metric}" if group(c) == "serving_latency"
                                        else "") for c in self.cases])
        z = NormalDist().inv_cdf(0.5 + level / 2.0)
        out = {}
        for method, pred in self.predictions.items():
            key = FOLD_KEYS.get(method)
            if key is None:
                continue
            folds = np.asarray([key(c) for c in self.cases])
            with np.errstate(divide="ignore", invalid="ignore"):
                err = np.log(self.measured / pred)
            for kind in dict.fromkeys(kinds):
                sel = (kinds == kind) & ~self.flagged & np.isfinite(err)
                if sel.sum() < 2:
                    continue
                e, f = err[sel], folds[sel]
                sd = (self.ttft_log_sd if kind.endswith("ttft_ms")
                      and np.isfinite(self.ttft_log_sd) else self.residual_log_sd)
                fixed = float(np.mean(np.abs(e) <= z * sd))
                inside = np.zeros(e.size, bool)
                for name in np.unique(f):
                    held, rest = f == name, e[f != name]
                    if rest.size < 2:
                        continue
                    lo, hi = np.quantile(rest, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
                    inside[held] = (e[held] >= lo) & (e[held] <= hi)
                out.setdefault(kind, {})[method] = dict(n=int(sel.sum()), fixed=fixed,
                                                        nested=float(inside.mean()))
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
        ape (%), status, what was assumed or why it is not scored, and the catalogue
        cards its model and device strings resolved to (empty where it is not scored)."""
        out = []
        for i, c in enumerate(self.cases):
            pred = float(self.predictions["calibrated"][i])
            out.append(dict(id=c.id, kind=c.kind, metric=c.metric, measured=c.measured,
                            predicted=pred, ape=abs(pred / c.measured - 1.0) * 100.0,
                            status="flagged" if c.flag else "scored",
                            note=c.flag or c.assumed, model_card=c.model.name,
                            hardware_card=c.hardware))
        for s in self.skips:
            out.append(dict(id=s.id, kind=s.kind, metric=s.metric, measured=s.measured,
                            predicted=float("nan"), ape=float("nan"), status=s.status,
                            note=s.reason, model_card="", hardware_card=""))
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
        """The summary as JSON values (a row with no prediction, a scale the calibration
        does not have: null, not NaN)."""
        return _json_safe(dict(
            data=self.data, calibration=self.calibration, rows=len(self.cases),
            statuses=self.statuses(), stats=self.stats(), worst=self.worst(),
            residual_log_sd=self.residual_log_sd, ttft_log_sd=self.ttft_log_sd,
            coverage_90=self.coverage(),
            flagged=[self._row(i, "calibrated") for i in np.flatnonzero(self.flagged)],
            assumed={c.id: c.assumed for c in self.cases if c.assumed},
            skipped=[dataclasses.asdict(s) for s in self.skips]))

    def table(self, n_worst: int = 10) -> str:
        counts = self.statuses()
        total = sum(counts.values())
        lines = [f"{self.data}: {total} rows: "
                 + ", ".join(f"{n} {k}" for k, n in counts.items() if n)
                 + f" ({100.0 * counts['scored'] / max(total, 1):.1f}% scored)",
                 f"calibration: {self.calibration}", "",
                 f"{'kind':<22} {'method':<24} {'n':>4} {'median APE':>11} {'p90 APE':>9} "
                 f"{'<=10%':>6} {'<=25%':>6}"]
        for kind, methods in self.stats().items():
            for method, s in methods.items():
                lines.append(f"{kind:<22} {method:<24} {s['n']:>4} {s['median_ape']:>10.1f}% "
                             f"{s['p90_ape']:>8.1f}% {s['within_10']:>6.0%} "
                             f"{s['within_25']:>6.0%}")
        cover = self.coverage()
        if cover:
            ttft = (f"; TTFT {self.ttft_log_sd:.3f}" if np.isfinite(self.ttft_log_sd) else "")
            lines += ["", f"coverage of the 90% prediction interval by held-out rows (fixed: "
                      f"x exp(+-1.645 x {self.residual_log_sd:.3f}{ttft}), the calibration's "
                      "residual log-SD; nested: the other groups' held-out errors)"]
            for kind, methods in cover.items():
                for method, c in methods.items():
                    lines.append(f"{kind:<30} {method:<24} {c['n']:>4} fixed {c['fixed']:>4.0%} "
                                 f"nested {c['nested']:>4.0%}")
        lines += ["", f"worst {n_worst} rows (calibrated):"]
        for r in self.worst(n_worst):
            lines.append(f"  {r['id']:<52} {r['hardware']:<14} measured {r['measured']:>10.4g} "
                         f"predicted {shown(r['predicted'], r['ape'], r['infeasible'])}")
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

        kinds = list(dict.fromkeys(group(c) for c in self.cases))
        fig, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 4.2), squeeze=False)
        kind_of = np.asarray([group(c) for c in self.cases])
        markers = {"calibrated": "o", "roofline": "x", "leave_one_hardware_out": "^",
                   "leave_one_model_out": "v"}
        for ax, kind in zip(axes[0], kinds):
            sel = kind_of == kind
            m = self.measured[sel]
            for method, pred in self.predictions.items():
                if np.all(np.isnan(pred[sel])):
                    continue
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
        # fixed margins: tight_layout measured every log axis's ticks (0.85 s of 3)
        fig.subplots_adjust(left=0.7 / fig.get_figwidth(), right=0.99, bottom=0.14, top=0.92,
                            wspace=0.32)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def _folds(prob: Problem, key) -> tuple[list[str], np.ndarray]:
    values = [key(c) for c in prob.cases]
    names = list(dict.fromkeys(values))
    return names, np.asarray([[v != name for v in values] for name in names])


# Leave-one-out folds: name -> (method, the rows' group key).
HOLDOUTS = {"hardware": ("leave_one_hardware_out", lambda c: c.hardware),
            "model": ("leave_one_model_out", lambda c: c.model_name),
            "source": ("leave_one_source_out", lambda c: c.source)}


def holdout_predictions(prob: Problem, steps: int = F.STEPS,
                        by=tuple(HOLDOUTS)) -> dict[str, np.ndarray]:
    """Leave-one-hardware-out, leave-one-model-out and leave-one-source-out predictions
    of every row (``by``: which of them): for each device (model, publication), fit on
    the other rows and predict its rows. One vmapped fit."""
    folds = [(HOLDOUTS[b][0], *_folds(prob, HOLDOUTS[b][1])) for b in by]
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


# Serving rows' folds: their frontend is refitted without the held-out group.
SERVING_FOLDS = dict({k: v for k, v in HOLDOUTS.items() if k != "source"},
                     framework=("leave_one_framework_out", lambda c: c.framework))
# each leave-one-out method's group key
FOLD_KEYS = {method: key for method, key in (*HOLDOUTS.values(), *SERVING_FOLDS.values())}


def frontend_holdout(prob: Problem, calibrated: np.ndarray, cal: C.Calibration,
                     by) -> dict[str, np.ndarray]:
    """Out-of-sample predictions of the serving-latency rows (dse.validate.frontend): a
    mean-TTFT row's frontend refitted for its framework's fit on the rows outside its
    group (leave one framework out: on every other framework's rows), added to its
    engine TTFT; the other serving rows keep their calibrated prediction (TPOT depends
    on no parameter fitted on serving rows; a closed loop's completed throughput moves a
    little with the frontend, and is not refitted). Folds of ``by`` that serving rows
    have (hardware, model, framework; not source: a serving file is one source)."""
    serving = np.asarray([c.kind in UNFITTED for c in prob.cases])
    ttft = np.asarray([frontend.fits_on(c) for c in prob.cases])
    fits = np.asarray([fit_of(c.framework, cal.frameworks) or "" for c in prob.cases])
    used = np.asarray([cal.values(f, c.hardware)[frontend.NAME] if f else 0.0
                       for f, c in zip(fits, prob.cases)])
    engine = calibrated * 1e-3 - used
    measured = prob.measured * 1e-3
    ok = ttft & np.isfinite(engine) & (engine > 0.0)
    out = {}
    for b in by:
        if b not in SERVING_FOLDS:
            continue
        method, key = SERVING_FOLDS[b]
        groups = np.asarray([key(c) for c in prob.cases])
        pred = np.where(serving, calibrated, np.nan)
        for g in dict.fromkeys(groups[ok]):
            held = ok & (groups == g)
            for fw in dict.fromkeys(fits[held]):
                train = ok & (groups != g) & ((fits == fw) if b != "framework" else True)
                rows = held & (fits == fw)
                if train.any():
                    f = frontend.fit_offset(engine[train], measured[train])
                    pred[rows] = (engine[rows] + f) * 1e3
                else:  # no other rows to fit on: no prediction
                    pred[rows] = np.nan
        out[method] = pred
    return out


def validate(data, calibration=None, holdout: bool = False, steps: int = F.STEPS,
             framework: str | None = None, holdout_by=tuple(HOLDOUTS)) -> Validation:
    """Predict every row of ``data`` (a CSV in the measured_public schema).

    ``calibration``: a path, a :class:`dse.catalogue.calibration.Calibration`, or None for the
    shipped ``calibrations/public.toml``. ``holdout``: also refit per held-out device,
    model and source (``holdout_by``: which; ``steps`` Adam steps each).
    ``framework``: every row as measured with that
    one framework (``generic``: the calibration studies get by default).
    """
    cases, skips = read(data)
    cases, misses = fitting(pooled(cases, framework))
    skips = skips + misses
    if not cases:
        raise InputError(str(data), "rows", "no row is expressible",
                         "rows of the kinds " + ", ".join(KINDS))
    if calibration is None:
        calibration = default_calibration()
    cal = calibration if isinstance(calibration, C.Calibration) else C.load(calibration)
    prob = build_problem(cases, cal)
    with jax.enable_x64(True):
        calibrated, reasons = predict_with_reasons(calibration_vector(prob, cal), prob)
        roofline, _ = predict_with_reasons(calibration_vector(prob, cal), prob, calibrated=False)
    predictions = {"calibrated": np.asarray(calibrated), "roofline": np.asarray(roofline)}
    if holdout:
        # refits use the kinds a calibration is fitted on; the others (UNFITTED) are held
        # out of every static fit already: their calibrated prediction is out of sample,
        # but for the frontend, fitted on serving TTFT rows, refitted per fold
        fitted = np.asarray([c.kind not in UNFITTED for c in prob.cases])
        by = tuple(holdout_by)
        if fitted.any():
            sub = build_problem([c for c, f in zip(prob.cases, fitted) if f], cal)
            for method, pred in holdout_predictions(sub, steps, by).items():
                full = np.full(prob.size, np.nan)
                full[fitted] = pred
                predictions[method] = full
        if (~fitted).any():
            for method, pred in frontend_holdout(prob, predictions["calibrated"], cal,
                                                 (*by, "framework")).items():
                full = predictions.setdefault(method, np.full(prob.size, np.nan))
                full[~fitted] = pred[~fitted]
    return Validation(list(prob.cases), skips, predictions, np.asarray(reasons), cal.file,
                      str(data), float(cal.info.get("residual_log_sd", float("nan"))),
                      float(cal.info.get("ttft_residual_log_sd", float("nan"))))


def dumps_json(v: Validation) -> str:
    return json.dumps(v.to_json(), indent=1)

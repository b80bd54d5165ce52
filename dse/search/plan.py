"""Capacity planning: how many devices, in which layout, serve a request rate at the
service-level objectives, at least cost (``dse plan``).

A deployment of the study (every combination of its axes but ``request_rate``: model,
device, framework, tp/pp/ep/dp, caps and budgets, precisions) sustains at most its
capacity (requests/s with every slot taken); under the objectives it sustains less. Its
rate at the objectives is found by bisection on the share of its capacity (latencies
rise with the load), every deployment at once in one evaluation per step; then
replicas = ceil(rate / rate at the objectives), devices = replicas x devices per
deployment, cost per hour = devices x the catalogue price. Deployments are ranked by
cost (devices where a price is missing), and each is shown at its operating point: the
requested rate spread over its replicas.

The objectives are the ones given, else the study's ``[search]`` constraints, else its
service-level objectives as percentiles: ``ttft_slo_s`` as ``ttft_p99_s <= slo`` and
``tpot_slo_s`` as ``tpot_p99_s <= slo`` (MLPerf Inference's server scenario bounds the
P99 of both). Without any, the plan says so: every deployment then runs up to its
capacity, where latencies are unbounded.

    >>> plan = dse.plan("studies/serving-load.toml", rate=50.0)   # doctest: +SKIP
    >>> plan.table.head()                                           # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np

from ..errors import InputError

BISECTIONS = 14  # share of the capacity to about 1e-4
MAX_DEPLOYMENTS = 1_000_000
SHOWN = ("ttft_s", "ttft_p99_s", "tpot_s", "tpot_p90_s", "tpot_p99_s", "e2e_p99_s",
         "throughput_per_device_tok_s", "tokens_per_s_per_user")
NEEDED = ("capacity_req_s", "valid", "n_devices", "cost_per_mtok", "throughput_tok_s")


@dataclasses.dataclass(frozen=True)
class Plan:
    """The deployments that serve ``rate`` at the ``constraints``, cheapest first."""

    rate: float
    constraints: tuple[str, ...]
    table: object  # pandas.DataFrame, one row per deployment that can serve the rate
    considered: int  # deployments evaluated
    study: object

    source: str = "given"  # where the objectives come from

    def summary(self, rows: int = 10) -> str:
        t = self.table
        said = {"search": " (the study's [search] constraints)",
                "slo": " (the study's SLOs, as P99s)"}.get(self.source, "")
        objectives = (", ".join(self.constraints) + said if self.constraints else
                      "no objectives (each deployment up to its capacity, latencies "
                      "unbounded: give --constraint or the study's ttft_slo_s/tpot_slo_s)")
        head = (f"{self.study.name}: {_number(self.rate)} requests/s at {objectives}: {len(t):,} of "
                f"{self.considered:,} deployments can serve it")
        if not len(t):
            return head
        return head + "\n" + t.head(rows).to_string(index=False, float_format=_number)


def _number(v: float) -> str:
    """A float for people: thousands grouped, four significant digits below 1,000."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def slo_constraints(study) -> list[str]:
    """The study's service-level objectives as plan objectives (``ttft_slo_s`` ->
    ``ttft_p99_s <= slo``, ``tpot_slo_s`` -> ``tpot_p99_s <= slo``), each where the study
    fixes one value above 0."""
    out = []
    for key, metric in (("ttft_slo_s", "ttft_p99_s"), ("tpot_slo_s", "tpot_p99_s")):
        try:
            values = sorted({float(v) for v in study.values(key)})
        except KeyError:  # a study of another mode
            continue
        if len(values) == 1 and values[0] > 0.0:
            out.append(f"{metric} <= {values[0]:g}")
    return out


def plan(study, rate: float, constraints=None) -> Plan:
    """Deployments of ``study`` that serve ``rate`` requests/s meeting ``constraints``
    (strings such as ``"ttft_p99_s <= 2"``; default: the study's ``[search]``
    constraints), ranked by cost per hour. ``study`` is a path or a
    :class:`~dse.study.study.Study`."""
    import pandas as pd

    from ..core.encoding import trial_point
    from ..core.evaluator import Evaluator
    from ..schema.outputs import OUTPUTS
    from ..study.constraints import feasible, parse_constraints, variables
    from ..study.study import POOL_KEYS, Study, load_study

    if not isinstance(study, Study):
        study = load_study(study)
    file = study.file
    if study.mode != "inference":
        raise InputError(file, "study.mode", "capacity planning is for inference studies",
                         '"inference"')
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise InputError("--rate", str(rate), "not a request rate", "a number > 0 (requests/s)")
    if any(v > 0 for v in study.values("concurrency")):
        raise InputError(file, "axes.concurrency", "capacity planning sizes an open loop",
                         "request_rate (any value: dse plan sets it), no concurrency")
    source = "given"
    if constraints is None:
        constraints = [str(c) for c in study.search.constraints] if study.search else []
        source = "search"
        if not constraints:
            constraints, source = slo_constraints(study), "slo"
    parsed = parse_constraints(list(constraints), "--constraint", OUTPUTS["inference"],
                               "constraints")
    study = study.at(**{a.name: list(a.values) for a in study.dims
                        if a.name != "request_rate"}, request_rate=[float(rate)])
    axes = [a for a in study.dims if a.name != "request_rate"]
    combos = math.prod(len(a.values) for a in axes)
    if combos > MAX_DEPLOYMENTS:
        raise InputError(file, "[axes]", f"{combos:,} deployments to size",
                         f"at most {MAX_DEPLOYMENTS:,}: fix some axes")
    columns = {a.name: [] for a in axes}
    for values in itertools.product(*(a.values for a in axes)):
        for a, v in zip(axes, values):
            columns[a.name].append(v)
    n = combos
    names = tuple(dict.fromkeys(NEEDED + SHOWN + variables(parsed)))
    ev = Evaluator.of(study, names=names)

    def run(rates):
        cols = dict(columns, request_rate=list(rates))
        return {k: np.asarray(v) for k, v in ev(trial_point(study, cols)).items()}

    probe = run(np.full(n, 1e-6))
    capacity = probe["capacity_req_s"]
    usable = probe["valid"] & np.isfinite(capacity) & (capacity > 0.0)
    lo, hi = np.zeros(n), np.ones(n)
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        out = run(np.where(usable, mid * capacity, 1e-6))
        ok = out["valid"] & feasible(out, parsed)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    best = lo * capacity
    serves = usable & (best > 0.0)
    replicas = np.where(serves, np.ceil(rate / np.where(serves, best, 1.0)), np.nan)
    # the operating point: the rate spread over the replicas (<= the rate at the objectives)
    at = run(np.where(serves, rate / np.where(serves, replicas, 1.0), 1e-6))
    devices = replicas * probe["n_devices"]
    # a replica's price per hour at its operating point: every device of it, each pool's
    # at its own price (nan without one)
    hourly = at["cost_per_mtok"] * at["throughput_tok_s"] / 1e6 * 3600.0
    table = pd.DataFrame({k: v for k, v in columns.items() if len(set(v)) > 1
                          and k != "request_rate"})
    table["rate_per_replica_req_s"] = rate / replicas
    table["max_rate_per_replica_req_s"] = best
    table["replicas"] = replicas
    table["devices"] = devices
    table["usd_per_hour"] = replicas * hourly
    for k in SHOWN:
        table[k] = at[k]
    keep = serves & at["valid"] & feasible(at, parsed)
    table = table[keep]
    if "serving" in table:  # an aggregated deployment is the same whatever its pool keys
        pools = [k for k in POOL_KEYS if k in table]
        agg = table["serving"] == "agg"
        table = table.astype({k: object for k in pools})
        table.loc[agg, pools] = None
        table = table[~(agg & table.duplicated(subset=[c for c in table.columns]))]
    table = table.sort_values(["usd_per_hour", "devices"], na_position="last")
    table["replicas"] = table["replicas"].astype(int)
    table["devices"] = table["devices"].astype(int)
    return Plan(rate, tuple(str(c) for c in parsed), table.reset_index(drop=True), n, study,
                source)


def write_plan(result: Plan, path: str | Path) -> Path:
    """The plan's table as CSV (one row per deployment that serves the rate), written
    atomically."""
    from ..atomic import atomic_path

    path = Path(path)
    with atomic_path(path) as tmp:
        result.table.to_csv(tmp, index=False)
    return path

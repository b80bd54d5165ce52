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

**Mixed fleets.** A study over several devices may serve the rate with replicas of
different deployments: given the devices on hand (``fleet``: device -> count; a device of the study it
does not name has none) and,
optionally, prices (``prices``: device -> USD per device-hour, else the catalogue's),
the plan also finds the cheapest mix of replicas, per workload (model, lengths: a rate
is of one workload), that serves the rate at the objectives within the fleet: an integer
program (SciPy's MILP, HiGHS) over the deployments that serve at least part of the rate,
replicas n_j >= 0 at their rate at the objectives r_j: minimize sum n_j x price_j
subject to sum n_j r_j >= rate and, per device d, sum n_j x devices_jd <= fleet_d. A
disaggregated deployment's pools count against their own devices. Requests are routed
to the replicas in proportion to r_j, so each runs at or under its rate at the
objectives. Without a fleet, the mix is only sought over the deployments' own replicas
(it is the cheapest single deployment unless rounding favours a mix).

    >>> plan = dse.plan("studies/serving-load.toml", rate=50.0)   # doctest: +SKIP
    >>> plan.table.head()                                           # doctest: +SKIP
    >>> dse.plan("studies/serving-load.toml", 50.0,
    ...          fleet={"h100-sxm": 64, "h200": 16}).mix         # doctest: +SKIP
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
    fleet: dict | None = None  # device -> devices on hand (None: no limit)
    prices: dict | None = None  # device -> USD per device-hour given (else the catalogue's)
    mix: object = None  # pandas.DataFrame: the cheapest mix per workload (a row per part)
    unit: str = "requests/s"  # of the rate: "sessions/s" for a study of agentic sessions

    def objectives(self) -> str:
        said = {"search": " (the study's [search] constraints)",
                "slo": " (the study's SLOs, as P99s)"}.get(self.source, "")
        return (", ".join(self.constraints) + said if self.constraints else
                "no objectives (each deployment up to its capacity, latencies "
                "unbounded: give --constraint or the study's ttft_slo_s/tpot_slo_s)")

    def summary(self, rows: int = 10) -> str:
        t = self.table
        head = (f"{self.study.name}: {_number(self.rate)} {self.unit} at {self.objectives()}: "
                f"{len(t):,} of {self.considered:,} deployments can serve it"
                + (" within the fleet" if self.fleet else ""))
        if self.prices:
            head += " (prices given: " + ", ".join(f"{k} {_number(v)} USD/h"
                                                   for k, v in self.prices.items()) + ")"
        if len(t):
            head += "\n" + t.head(rows).to_string(index=False, float_format=_number)
        return head + self._mix_summary()

    def _mix_summary(self) -> str:
        mix = self.mix
        if mix is None or (self.fleet is None and not _mixed(mix)):
            return ""  # without a fleet a single deployment is the answer, shown above
        within = (" within the fleet (" + ", ".join(f"{k}: {v:,}" for k, v in self.fleet.items())
                  + ")") if self.fleet else ""
        if not len(mix):
            return f"\nno mix of deployments serves {_number(self.rate)} {self.unit}{within}"
        lines = [f"\ncheapest mix of replicas{within}:"]
        shown = mix.drop(columns=[c for c in ("mix",) if c in mix])
        lines.append(shown.to_string(index=False, float_format=_number))
        for _, total in mix.groupby("mix", sort=False):
            usd = total["usd_per_hour"].to_numpy()
            lines.append(f"  mix {int(total['mix'].iloc[0])}: {int(total['replicas'].sum()):,} "
                         f"replicas, {int(total['devices'].sum()):,} devices"
                         + (f", {_number(usd.sum())} USD/h" if np.all(np.isfinite(usd)) else "")
                         + f", serves up to {_number(total['max_rate_req_s'].sum())} "
                         f"{self.unit}")
        unpriced = [c.name for c in self.study.hardware
                    if not math.isfinite(float(c.fields.get("price_per_hour_usd", math.nan)))]
        if unpriced:
            lines.append(f"  (no price for {', '.join(unpriced)}: mixes with it are the fewest "
                         "devices, not the cheapest; --price DEVICE=USD_PER_HOUR sets one)")
        return "\n".join(lines)


def _number(v: float) -> str:
    """A float for people: thousands grouped, four significant digits below 1,000."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def slo_constraints(study) -> list[str]:
    """The study's service-level objectives as plan objectives (``ttft_slo_s`` ->
    ``ttft_p99_s <= slo``, ``tpot_slo_s`` -> ``tpot_p99_s <= slo``), each where the study
    fixes one value above 0 (:func:`dse.study.search.slo_constraints`)."""
    from ..study.search import slo_constraints as of_values

    return of_values(study.values)


def _mixed(mix) -> bool:
    """Whether some mix has parts of more than one deployment."""
    return bool(len(mix)) and bool((mix.groupby("mix").size() > 1).any())


def plan(study, rate: float, constraints=None, fleet: dict | None = None,
         prices: dict | None = None) -> Plan:
    """Deployments of ``study`` that serve ``rate`` requests/s (a study of agentic
    sessions: sessions/s, its session_rate) meeting ``constraints``
    (strings such as ``"ttft_p99_s <= 2"``; default: the study's ``[search]``
    constraints), ranked by cost per hour, and the cheapest mix of their replicas per
    workload within ``fleet`` (device -> devices on hand; None: no limit) at ``prices``
    (device -> USD per device-hour; default: the catalogue's). ``study`` is a path or a
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
    for closed, opened in (("concurrency", "request_rate"), ("sessions", "session_rate")):
        if any(v > 0 for v in study.values(closed)):
            raise InputError(file, f"axes.{closed}", "capacity planning sizes an open loop",
                             f"{opened} (any value: dse plan sets it), no {closed}")
    # a study of agentic sessions is planned in sessions/s (its rate, capacity per
    # session: the turns' capacity over the turns of a session)
    key = "session_rate" if study.has_sessions else "request_rate"
    unit = "sessions/s" if key == "session_rate" else "requests/s"
    fleet = _fleet(study, fleet)
    source = "given"
    if constraints is None:
        constraints = [str(c) for c in study.search.constraints] if study.search else []
        source = study.search.source if study.search else "search"
        if not constraints:
            constraints, source = slo_constraints(study), "slo"
    parsed = parse_constraints(list(constraints), "--constraint", OUTPUTS["inference"],
                               "constraints")
    study = study.at(**{a.name: list(a.values) for a in study.dims
                        if a.name != key}, **{key: [float(rate)]})
    study = _priced(study, prices)
    axes = [a for a in study.dims if a.name != key]
    combos = math.prod(len(a.values) for a in axes)
    if combos > MAX_DEPLOYMENTS:
        raise InputError(file, "[axes]", f"{combos:,} deployments to size",
                         f"at most {MAX_DEPLOYMENTS:,}: fix some axes")
    columns = {a.name: [] for a in axes}
    for values in itertools.product(*(a.values for a in axes)):
        for a, v in zip(axes, values):
            columns[a.name].append(v)
    n = combos
    pools = ("prefill_devices", "decode_devices") if "disagg" in study.features else ()
    tiers = ("cost_per_session_usd", "sessions_per_s") if key == "session_rate" else ()
    names = tuple(dict.fromkeys(NEEDED + SHOWN + pools + tiers + variables(parsed)))
    ev = Evaluator.of(study, names=names)

    def run(rates):
        cols = dict(columns, **{key: list(rates)})
        return {k: np.asarray(v) for k, v in ev(trial_point(study, cols)).items()}

    probe = run(np.full(n, 1e-6))
    capacity = probe["capacity_req_s"]
    if key == "session_rate":  # turns/s over the turns of a session
        turns = np.asarray(columns["turns"], float) if "turns" in columns else float(
            study.values("turns")[0])
        capacity = capacity / turns
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
    if tiers:  # a session deployment's KV tiers are priced too
        hourly = at["cost_per_session_usd"] * at["sessions_per_s"] * 3600.0
    table = pd.DataFrame({k: v for k, v in columns.items() if len(set(v)) > 1
                          and k != key})
    table["rate_per_replica_req_s"] = rate / replicas
    table["max_rate_per_replica_req_s"] = best
    table["replicas"] = replicas
    table["devices"] = devices
    table["usd_per_hour"] = replicas * hourly
    for k in SHOWN:
        table[k] = at[k]
    keep = serves & at["valid"] & feasible(at, parsed)
    per_device = _devices_by_hardware(study, columns, at, n)
    for name, count in per_device.items():  # hidden: the mix's device budget per row
        table["_devices_" + name] = count
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
    table = table.reset_index(drop=True)
    hidden = [c for c in table.columns if c.startswith("_devices_")]
    mix = cheapest_mix(table, rate, fleet, [c for c in WORKLOAD if c in table])
    fits = np.ones(len(table), bool)
    for name, cap in (fleet or {}).items():  # replicas the fleet cannot hold are no plan
        fits &= table["replicas"].to_numpy() * table["_devices_" + name].to_numpy() <= cap
    table = table[fits].drop(columns=hidden).reset_index(drop=True)
    return Plan(rate, tuple(str(c) for c in parsed), table, n, study, source, fleet,
                dict(prices) if prices else None, mix, unit)


# the keys that say what the rate is of (a mix serves one workload): the rest of a
# study's axes are choices of the deployment
WORKLOAD = ("model", "usecase", "input_len", "output_len", "input_len_cv", "output_len_cv",
            "prefix_cache_hit", "prefix_len", "ttft_slo_s", "tpot_slo_s", "turns", "turns_cv",
            "turn_input_len", "shared_prefix_len", "think_time_s")
CANDIDATES = 48  # deployments per device signature the mix considers (by cost per req/s)


def _priced(study, prices):
    """``study`` with the given prices (device -> USD per device-hour) on its cards."""
    if not prices:
        return study
    cards = {c.name: c for c in study.hardware}
    for name, price in prices.items():
        if name not in cards:
            raise InputError("--price", str(name), "not a device of the study",
                             ", ".join(cards))
        if not (isinstance(price, (int, float)) and math.isfinite(price) and price >= 0):
            raise InputError("--price", f"{name}={price}", "not a price",
                             "a number >= 0 (USD per device-hour)")
    hardware = tuple(dataclasses.replace(c, fields={**c.fields, "price_per_hour_usd":
                                                    float(prices[c.name])})
                     if c.name in prices else c for c in study.hardware)
    return dataclasses.replace(study, hardware=hardware)


def _fleet(study, fleet):
    """The devices on hand, checked: each a device of the study, a count >= 0; a device
    of the study not named has none."""
    if fleet is None:
        return None
    names = [c.name for c in study.hardware]
    out = {name: 0 for name in names}
    for name, count in fleet.items():
        if name not in names:
            raise InputError("--fleet", str(name), "not a device of the study", ", ".join(names))
        if isinstance(count, bool) or not (isinstance(count, (int, float)) and count >= 0
                                           and float(count).is_integer()):
            raise InputError("--fleet", f"{name}={count}", "not a device count",
                             "an integer >= 0")
        out[name] = int(count)
    return out


def _devices_by_hardware(study, columns, at, n) -> dict[str, np.ndarray]:
    """Devices per replica on each device of the study (a disaggregated deployment's
    pools on their own devices)."""
    def column(key, default):
        if key in columns:
            return list(columns[key])
        try:
            value = study.values(key)[0]
        except KeyError:
            value = default
        return [value] * n

    hardware = column("hardware", None)
    serving = column("serving", "agg")
    pre, dec = column("prefill_hardware", None), column("decode_hardware", None)
    names = [c.name for c in study.hardware]
    out = {name: np.zeros(n) for name in names}
    total = np.asarray(at["n_devices"], np.float64) * np.ones(n)
    pre_n = np.asarray(at.get("prefill_devices", np.zeros(n)), np.float64) * np.ones(n)
    dec_n = np.asarray(at.get("decode_devices", np.zeros(n)), np.float64) * np.ones(n)
    for i in range(n):
        if serving[i] == "disagg":
            out[pre[i] or hardware[i]][i] += pre_n[i]
            out[dec[i] or hardware[i]][i] += dec_n[i]
        else:
            out[hardware[i]][i] += total[i]
    return out


def cheapest_mix(table, rate: float, fleet: dict | None, workload: list[str]):
    """The cheapest mix of replicas per workload that serves ``rate`` within ``fleet``
    (a DataFrame: the deployment's columns, its replicas, devices, USD/h and the rate
    they serve at the objectives; ``mix`` numbers the workload). Cost is USD per hour
    where every candidate has a price, else devices; ties go to fewer devices."""
    import pandas as pd
    from scipy.optimize import Bounds, LinearConstraint, milp

    hidden = [c for c in table.columns if c.startswith("_devices_")]
    devices_of = [c.removeprefix("_devices_") for c in hidden]
    shown = [c for c in table.columns if c not in hidden and c not in (
        "rate_per_replica_req_s", "replicas", "devices", "usd_per_hour") + SHOWN]
    parts = []
    groups = table.groupby(workload, sort=False, dropna=False) if workload else [((), table)]
    for number, (_, group) in enumerate(groups):
        best = group["max_rate_per_replica_req_s"].to_numpy()
        per = group[hidden].to_numpy(np.float64) if hidden else np.zeros((len(group), 0))
        usd = (group["usd_per_hour"] / group["replicas"]).to_numpy()
        size = per.sum(1)
        cost = usd if np.all(np.isfinite(usd)) else size
        # candidates: per signature of the devices used, the cheapest per request/s
        signature = [tuple(row > 0) for row in per]
        order = np.argsort(cost / best, kind="stable")
        kept, count = [], {}
        for j in order:
            if count.get(signature[j], 0) < CANDIDATES:
                kept.append(j)
                count[signature[j]] = count.get(signature[j], 0) + 1
        kept = np.asarray(kept, int)
        if not len(kept):
            continue
        upper = np.ceil(rate / best[kept])
        rows = [best[kept][None, :]]
        lo, hi = [rate], [np.inf]
        for k, name in enumerate(devices_of):
            if fleet and name in fleet:
                rows.append(per[kept, k][None, :])
                lo.append(-np.inf)
                hi.append(fleet[name])
        scale = max(float(np.max(cost[kept])), 1e-12)
        objective = cost[kept] / scale + 1e-6 * size[kept] / max(float(size[kept].max()), 1.0)
        res = milp(objective, integrality=np.ones(len(kept)), bounds=Bounds(0, upper),
                   constraints=LinearConstraint(np.vstack(rows), lo, hi))
        if res.status != 0 or res.x is None:
            continue  # infeasible within the fleet (or the solver gave up): no mix
        replicas = np.round(res.x).astype(int)
        for j, r in zip(kept, replicas):
            if r <= 0:
                continue
            row = group.iloc[j]
            parts.append({**{c: row[c] for c in shown if c != "max_rate_per_replica_req_s"},
                          "mix": number + 1, "replicas": int(r),
                          "devices": int(round(r * size[j])),
                          "usd_per_hour": r * usd[j],
                          "max_rate_req_s": r * best[j]})
    columns = [c for c in shown if c != "max_rate_per_replica_req_s"] + [
        "mix", "replicas", "devices", "usd_per_hour", "max_rate_req_s"]
    return pd.DataFrame(parts, columns=columns)


def write_plan(result: Plan, path: str | Path) -> list[Path]:
    """The plan's table as CSV (one row per deployment that serves the rate) and, where
    the plan has one, its mix beside it (``<stem>-mix.csv``), written atomically."""
    from ..atomic import atomic_path

    path = Path(path)
    with atomic_path(path) as tmp:
        result.table.to_csv(tmp, index=False)
    written = [path]
    if result.mix is not None and (result.fleet or _mixed(result.mix)):
        mix = path.with_name(f"{path.stem}-mix.csv")
        with atomic_path(mix) as tmp:
            result.mix.to_csv(tmp, index=False)
        written.append(mix)
    return written

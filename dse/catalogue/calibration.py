"""Calibration as data: how well software reaches a device's peaks, fitted to measurements.

A calibration file (TOML) holds, per serving/training framework, six physically
meaningful parameters, plus an offset per hardware family (Ampere, Ada, Hopper, ...)
shared by every framework:

====================  =========================================================
gemm_efficiency       achieved fraction of the dense matmul peak for large GEMMs; on a
                      device with measured GEMM surfaces (dse.catalogue.kernels), the
                      fraction of the measured kernel's efficiency a whole run keeps
gemm_half_rows        GEMM rows (M) at which a matmul reaches half of that rate (not
                      used where a measured surface prices the matmul)
attention_efficiency  achieved fraction of peak in the attention kernels
hbm_efficiency        achieved fraction of the memory bandwidth
link_efficiency       achieved fraction of the link bandwidth in collectives
layer_overhead_s      fixed seconds per layer per forward pass (launches, sync)
step_overhead_s       host seconds per serving-engine step (scheduling, sampling,
                      input preparation), whatever the batch (inference only)
seq_overhead_s        host seconds per running sequence per engine step (block
                      tables, sampling, detokenization: grows with the batch)
request_overhead_s    host seconds per request outside the engine steps (HTTP
                      server, tokenizer, admission, detokenizer, the client):
                      in TTFT and E2E under a request load (``frontend_s``);
                      fitted on serving-latency rows (:mod:`dse.validate.frontend`)
====================  =========================================================

Parameters live in an unconstrained space (logits for fractions, logs for the
rest): the value for (framework, family) is transform(base[framework] +
offset[family]), so a device of a family the fit never saw gets its framework's base,
and a family offset is learned from every framework that ran on that family. A study
names the file (``[study] calibration = "..."``) and its ``framework``; the values
land in the hardware spec table (:class:`dse.catalogue.hardware.HardwareSpec`), so sweeps,
searches and sensitivities all use them.

The file also keeps the fit's parameter covariance (Laplace approximation), so a
study can be evaluated under the calibration's uncertainty (:func:`sample_specs`).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from .. import checks
from ..atomic import atomic_path
from ..errors import InputError

# name -> (transform, uncalibrated value, units, meaning). "logit" maps R -> (0, 1),
# "log" maps R -> (0, inf).
PARAMS = {
    "gemm_efficiency": ("logit", 1.0, "1", "achieved fraction of the matmul peak (large GEMMs)"),
    "gemm_half_rows": ("log", 0.0, "rows", "GEMM rows at which a matmul reaches half that rate"),
    "attention_efficiency": ("logit", 1.0, "1", "achieved fraction of peak in attention"),
    "hbm_efficiency": ("logit", 1.0, "1", "achieved fraction of memory bandwidth"),
    "link_efficiency": ("logit", 1.0, "1", "achieved fraction of link bandwidth"),
    "layer_overhead_s": ("log", 0.0, "s", "fixed seconds per layer per forward pass"),
    "step_overhead_s": ("log", 0.0, "s", "host seconds per serving-engine step"),
    "seq_overhead_s": ("log", 0.0, "s", "host seconds per running sequence per engine step"),
    "request_overhead_s": ("log", 0.0, "s", "host seconds per request outside the engine "
                           "steps (frontend: HTTP, tokenizer, detokenizer, client)"),
}
NAMES = tuple(PARAMS)
# Where a fit starts (and what its weak prior pulls toward): typical values for
# tuned kernels on GPUs (cuBLAS reaches ~70-80% of peak on large GEMMs; streaming
# kernels ~80% of HBM bandwidth; NCCL bus bandwidth ~80% of link; a few kernel
# launches of ~5 us per layer; a serving engine's host step of a few hundred us, with a
# few us per running sequence).
START = {"gemm_efficiency": 0.7, "gemm_half_rows": 64.0, "attention_efficiency": 0.5,
         "hbm_efficiency": 0.8, "link_efficiency": 0.8, "layer_overhead_s": 20e-6,
         "step_overhead_s": 200e-6, "seq_overhead_s": 2e-6,
         # no static row sees it: a fit without serving-latency rows keeps this floor
         "request_overhead_s": 1e-3}


# Floors of fractions, physical bounds a fit cannot cross: a fraction f with floor lo is
# lo + (1 - lo) sigmoid(z). Memory-bound kernels stream at 0.6-0.9 of the HBM peak on
# every GPU generation (STREAM-like copies ~0.9; decode GEMV and paged attention lower),
# never below half of it. Unbounded, the public fit explained the MoE serving rows' misfit
# by an Ampere bandwidth of 0.24 and a Hopper one of 0.34, and the held-out Megatron-LM
# training runs (Narayanan et al. 2021, Table 1, A100) came out 35% slow where they are
# +-11% with Ampere's offset at 0: a parameter that only helped the fitted column. A file
# records its floors (``floors`` in its header); one written with others is refused.
FLOORS = {"hbm_efficiency": 0.5}


# Hardware families (architecture generation; GeForce parts apart, since their tensor
# cores run FP32-accumulate matmuls at half the FP16-accumulate rate while the catalogue
# quotes the FP32-accumulate peak, and engines that accumulate in FP16 see twice it).
# A family offset is shared by every framework that ran on the family; a device outside
# these gets its framework's base.
FAMILIES = {
    "nvidia-ampere": ("a100-40gb", "a100-80gb", "a100-pcie-80gb", "a10g", "a40", "rtx-a6000"),
    "nvidia-ampere-geforce": ("rtx-3060", "rtx-3070", "rtx-3080", "rtx-3080-ti", "rtx-3090"),
    "nvidia-ada": ("l4", "l40s", "rtx-4000-ada", "rtx-5000-ada", "rtx-6000-ada"),
    "nvidia-ada-geforce": ("rtx-4070-ti", "rtx-4080", "rtx-4090"),
    "nvidia-hopper": ("h100-sxm", "h100-pcie", "h100-nvl", "h200", "h200-nvl", "h20", "gh200"),
    "nvidia-blackwell": ("b200", "b300", "gb200", "gb300"),
    "nvidia-blackwell-pro": ("rtx-pro-6000-blackwell-server",),
    "nvidia-blackwell-geforce": ("rtx-5080", "rtx-5090"),
    "amd-cdna": ("mi250x", "mi300x", "mi325x", "mi355x"),
    "other-accelerator": ("gaudi2", "gaudi3", "inferentia2", "trainium1", "trainium2",
                          "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "ascend-910b",
                          "arc-pro-b60"),
    "apple": ("m1", "m1-pro", "m1-max", "m1-ultra", "m2", "m2-pro", "m2-max", "m2-ultra",
              "m3", "m3-pro", "m3-max", "m3-ultra", "m4", "m4-pro", "m4-max"),
    "cpu": ("epyc-9654", "xeon-8480"),
}
FAMILY_OF = {hw: fam for fam, members in FAMILIES.items() for hw in members}

# A family a calibration has no data for takes the offset of the nearest family it has:
# the generation before (Blackwell -> Hopper -> Ampere), the same class of device
# (datacenter HBM accelerators -> Hopper; workstation and consumer cards -> Ada), never
# the framework's base alone. Chains are tried in order; docs/validation.md explains.
NEAREST = {
    "nvidia-blackwell": ("nvidia-hopper", "nvidia-ampere"),
    "nvidia-blackwell-pro": ("nvidia-ada", "nvidia-blackwell", "nvidia-hopper"),
    "nvidia-blackwell-geforce": ("nvidia-ada-geforce", "nvidia-ampere-geforce"),
    "nvidia-hopper": ("nvidia-blackwell", "nvidia-ampere"),
    "nvidia-ada": ("nvidia-ampere", "nvidia-hopper"),
    "nvidia-ada-geforce": ("nvidia-ampere-geforce", "nvidia-ada"),
    "nvidia-ampere": ("nvidia-hopper", "nvidia-ada"),
    "nvidia-ampere-geforce": ("nvidia-ada-geforce", "nvidia-ampere"),
    "amd-cdna": ("nvidia-hopper", "nvidia-ampere"),
    "other-accelerator": ("nvidia-hopper", "nvidia-ampere"),
    "apple": ("nvidia-ada-geforce", "nvidia-ampere-geforce"),
    "cpu": ("nvidia-ada-geforce", "nvidia-ampere-geforce"),
}


def nearest_family(family: str | None, fitted) -> str | None:
    """``family`` if a calibration fitted it, else the nearest one it fitted, else None."""
    if family is None or family in fitted:
        return family
    return next((f for f in NEAREST.get(family, ()) if f in fitted), None)


def to_unconstrained(name: str, value):
    kind, lo = PARAMS[name][0], FLOORS.get(name, 0.0)
    value = np.asarray(value, np.float64)
    if kind == "logit":
        value = np.clip((value - lo) / (1.0 - lo), 1e-6, 1 - 1e-6)
        return np.log(value / (1.0 - value))
    return np.log(value)


def from_unconstrained(name: str, z, xp=np):
    if PARAMS[name][0] == "logit":
        lo = FLOORS.get(name, 0.0)
        return lo + (1.0 - lo) / (1.0 + xp.exp(-z))
    return xp.exp(z)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Fitted parameters (unconstrained), their covariance and where they came from."""

    frameworks: tuple[str, ...]
    families: tuple[str, ...]
    base: np.ndarray  # [framework, param], unconstrained
    offset: np.ndarray  # [family, param], unconstrained
    family_of: dict[str, str]  # hardware name -> family
    covariance: np.ndarray | None = None  # over base.ravel() ++ offset.ravel()
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    file: str = "<calibration>"

    @property
    def theta(self) -> np.ndarray:
        return np.concatenate([self.base.ravel(), self.offset.ravel()])

    def with_theta(self, theta) -> "Calibration":
        theta = np.asarray(theta, np.float64)
        n = self.base.size
        return dataclasses.replace(self, base=theta[:n].reshape(self.base.shape),
                                   offset=theta[n:].reshape(self.offset.shape))

    def values(self, framework: str, hardware: str) -> dict[str, float]:
        """The six parameters for ``hardware`` (a catalogue name) under ``framework``."""
        return {k: float(v) for k, v in zip(NAMES, from_unconstrained_all(
            self.unconstrained(framework, hardware)))}

    def unconstrained(self, framework: str, hardware: str) -> np.ndarray:
        if framework not in self.frameworks:
            raise InputError(self.file, "framework", f"{framework!r} has no calibration",
                             ", ".join(self.frameworks))
        z = self.base[self.frameworks.index(framework)].copy()
        family = self.family_used(hardware)
        if family is not None:
            z = z + self.offset[self.families.index(family)]
        return z

    def family_of_hardware(self, hardware: str) -> str | None:
        return self.family_of.get(hardware, FAMILY_OF.get(hardware))

    def family_used(self, hardware: str) -> str | None:
        """The fitted family whose offset ``hardware`` gets (its own or the nearest)."""
        return nearest_family(self.family_of_hardware(hardware), self.families)

    def fallback(self, hardware: str) -> str | None:
        """A line when ``hardware`` runs on another family's fit (None when on its own)."""
        own, used = self.family_of_hardware(hardware), self.family_used(hardware)
        if own == used:
            return None
        if used is None:
            return f"{hardware}: no calibrated family near {own or 'its family'}; framework base"
        return f"{hardware}: {own} has no calibration data; uses the nearest, {used}"


def from_unconstrained_all(z, xp=np):
    """All six parameters from an unconstrained vector (last axis = parameter)."""
    return [from_unconstrained(name, z[..., i], xp) for i, name in enumerate(NAMES)]


def initial(frameworks, families, family_of) -> Calibration:
    base = np.array([[to_unconstrained(n, START[n]) for n in NAMES]] * len(frameworks))
    return Calibration(tuple(frameworks), tuple(families), base.reshape(len(frameworks), len(NAMES)),
                       np.zeros((len(families), len(NAMES))), dict(family_of))


# --- the file ------------------------------------------------------------------------


def dumps(cal: Calibration) -> str:
    """TOML text: readable values per framework and family, and the exact unconstrained
    vector and covariance for sampling."""
    def num(x):
        return repr(float(x))

    lines = ["# dse calibration: software efficiency per framework and hardware family.",
             "# Generated by `dse calibrate`; values are transform(base + family offset).",
             "[calibration]",
             f"frameworks = {list(cal.frameworks)!r}".replace("'", '"'),
             f"families = {list(cal.families)!r}".replace("'", '"'),
             f"parameters = {list(NAMES)!r}".replace("'", '"'),
             "floors = {" + ", ".join(f"{k} = {v!r}" for k, v in FLOORS.items()) + "}"]
    for key, value in cal.info.items():
        if isinstance(value, str):
            lines.append(f"{key} = {value!r}".replace("'", '"') if '"' not in value
                         else f"{key} = '''{value}'''")
        elif isinstance(value, (int, float)):
            lines.append(f"{key} = {num(value)}")
    lines.append("")
    for i, fw in enumerate(cal.frameworks):
        lines.append(f'[framework."{fw}"]  # values for a device of no listed family')
        for j, name in enumerate(NAMES):
            lines.append(f"{name} = {num(from_unconstrained(name, cal.base[i, j]))}")
        lines.append("")
    for g, fam in enumerate(cal.families):
        lines.append(f'[family."{fam}"]  # offsets in the unconstrained (logit/log) space')
        for j, name in enumerate(NAMES):
            lines.append(f"{name} = {num(cal.offset[g, j])}")
        members = sorted(h for h, f in cal.family_of.items() if f == fam)
        lines.append(f"hardware = {members!r}".replace("'", '"'))
        lines.append("")
    if cal.covariance is not None:
        lines.append("[uncertainty]  # covariance of (base, offset) in the unconstrained space")
        lines.append("covariance = [")
        for row in cal.covariance:
            lines.append("  [" + ", ".join(num(x) for x in row) + "],")
        lines.append("]")
    return "\n".join(lines) + "\n"


def loads(text: str, file: str = "<calibration>") -> Calibration:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(file, "toml", f"not valid TOML ({e})", "a file written by dse calibrate")
    head = data.get("calibration")
    if not isinstance(head, dict):
        raise InputError(file, "calibration", "missing table", "a file written by dse calibrate")
    if list(head.get("parameters", [])) != list(NAMES):
        raise InputError(file, "calibration.parameters", "unexpected parameter list",
                         ", ".join(NAMES))
    floors = head.get("floors", {})
    if floors != FLOORS:
        written = ", ".join(f"{k} >= {v}" for k, v in floors.items()) or "none"
        raise InputError(file, "calibration.floors", f"written with floors {written} (another "
                         "dse's transforms)", "a file refitted by this dse's `dse calibrate`: "
                         + ", ".join(f"{k} >= {v}" for k, v in FLOORS.items()))
    frameworks = tuple(head.get("frameworks", ()))
    families = tuple(head.get("families", ()))
    base = np.zeros((len(frameworks), len(NAMES)))
    offset = np.zeros((len(families), len(NAMES)))
    family_of = {}
    for i, fw in enumerate(frameworks):
        table = data.get("framework", {}).get(fw)
        if not isinstance(table, dict):
            raise InputError(file, f"framework.{fw}", "missing table", "one per framework")
        for j, name in enumerate(NAMES):
            value = table.get(name)
            lo = FLOORS.get(name, 0.0)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not (
                    value > lo and math.isfinite(value)) or (
                    PARAMS[name][0] == "logit" and value >= 1.0):
                raise InputError(file, f"framework.{fw}.{name}", f"value {value!r} is not valid",
                                 f"a number in ({lo:g}, 1)" if PARAMS[name][0] == "logit"
                                 else "a positive number")
            base[i, j] = to_unconstrained(name, value)
    for g, fam in enumerate(families):
        table = data.get("family", {}).get(fam)
        if not isinstance(table, dict):
            raise InputError(file, f"family.{fam}", "missing table", "one per family")
        for j, name in enumerate(NAMES):
            value = table.get(name, 0.0)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(file, f"family.{fam}.{name}", f"value {value!r} is not valid",
                                 "a finite number (an unconstrained offset)")
            offset[g, j] = value
        for hw in table.get("hardware", []):
            family_of[str(hw)] = fam
    cov = data.get("uncertainty", {}).get("covariance")
    covariance = None
    if cov is not None:
        covariance = np.asarray(cov, np.float64)
        n = base.size + offset.size
        if covariance.shape != (n, n):
            raise InputError(file, "uncertainty.covariance", f"shape {covariance.shape}",
                             f"a {n} x {n} matrix")
    info = {k: v for k, v in head.items()
            if k not in ("frameworks", "families", "parameters", "floors")}
    return Calibration(frameworks, families, base, offset, family_of, covariance, info, file)


def load(path, referrer: str | None = None, key: str = "calibration") -> Calibration:
    path = Path(path)
    if not path.is_file():
        raise InputError(referrer or str(path), key, f"file {str(path)!r} not found",
                         "a calibration .toml (e.g. calibrations/public.toml)")
    return loads(checks.read_text(path, kind="a calibration TOML"), str(path))


def save(cal: Calibration, path) -> Path:
    """Write ``cal`` to ``path`` atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(dumps(cal))
    return path


# --- applying it -----------------------------------------------------------------------


def calibrated_spec(spec, cal: Calibration, framework: str, hardware: str):
    """``spec`` (a :class:`HardwareSpec`) with the calibration's efficiencies for this
    device under ``framework``."""
    values = cal.values(framework, hardware)
    return dataclasses.replace(spec, **{k: np.float64(v) for k, v in values.items()})


def sample_specs(specs: list, names: list[str], cal: Calibration, framework: str, n: int,
                 seed: int = 0):
    """``n`` draws of the calibrated hardware table from the fit's covariance.

    Returns a spec table whose calibration leaves have a leading sample axis
    ([sample, hardware]); the other leaves are [hardware]. Without a covariance the
    draws are all the fitted value.
    """
    from .hardware import CALIBRATION_FIELDS
    from .kernels import stack

    rng = np.random.default_rng(seed)
    theta = cal.theta
    if cal.covariance is not None:
        cov = (cal.covariance + cal.covariance.T) / 2.0
        draws = rng.multivariate_normal(theta, cov, size=n, method="eigh")
    else:
        draws = np.tile(theta, (n, 1))
    table = stack(specs)
    columns = {f: np.empty((n, len(names))) for f in CALIBRATION_FIELDS}
    for s, theta_s in enumerate(draws):
        c = cal.with_theta(theta_s)
        for h, name in enumerate(names):
            for f, v in c.values(framework, name).items():
                columns[f][s, h] = v
    return dataclasses.replace(table, **columns)

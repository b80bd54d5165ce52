"""The ``[pipeline]`` section of a ``mode = "pipeline"`` study: stages, links, candidate splits.

    [pipeline]
    objective = "tpot"                   # the recommended split minimizes: tpot | ttft | e2e
    loop = false                         # true: the last stage sends back to the first
    stages = [ { hardware = "m3-pro" },
               { hardware = "m2", layers = 8 } ]          # layers: fixed count (optional)
    link = { bandwidth = "1 Gbit/s", latency_ms = 0.3, overhead_ms = 1.0,
             direction = "round_trip" }  # one link for every hop, or links = [ ... ]
    compression = { ratio = 2.0, throughput = "400 MB/s" }   # optional

Bandwidths and throughputs are strings with a unit (bit/s, kbit/s, Mbit/s, Gbit/s, Mbps,
Gbps, B/s, kB/s, MB/s, GB/s; decimal prefixes), converted here to bytes/s. The candidate
splits are every composition of each model's layers over the stages (at least one layer
per stage) that respects the fixed counts; they are evaluated at once.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

import numpy as np

from .. import checks
from ..catalogue.hardware import HardwareCard
from ..catalogue.lookup import load_hardware
from ..errors import InputError

KEYS = ("objective", "loop", "stages", "link", "links", "compression")
STAGE_KEYS = ("hardware", "layers")
LINK_KEYS = ("bandwidth", "latency_ms", "overhead_ms", "direction")
OBJECTIVES = ("tpot", "ttft", "e2e")
DIRECTIONS = {"one_way": 1.0, "round_trip": 2.0}
MAX_CANDIDATES = 2_000_000
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}
RATE_FORM = 'a string "<number> <unit>", unit one of bit/s, kbit/s, Mbit/s, Gbit/s, ' \
            "Mbps, Gbps, B/s, kB/s, MB/s, GB/s"


def parse_rate(value, file, key) -> float:
    """'100 Mbit/s' -> 12.5e6 bytes/s. Bits: bit/s, bps or a lower-case b/s; bytes: B/s."""
    match = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgG]?)(bit/s|bps|b/s|B/s)\s*",
                         value) if isinstance(value, str) else None
    if not match:
        raise InputError(file, key, f"value {value!r} is not valid", RATE_FORM)
    number, prefix, unit = match.groups()
    x = float(number) * _PREFIX[prefix.lower()] * (1.0 if unit == "B/s" else 1 / 8)
    if not math.isfinite(x) or x <= 0:
        raise InputError(file, key, f"value {value!r} is not valid", RATE_FORM)
    return x


@dataclasses.dataclass(frozen=True)
class Link:
    bw: float  # bytes/s
    latency_s: float
    overhead_s: float
    direction: float


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    stages: tuple[HardwareCard, ...]
    layers: tuple[int | None, ...]
    links: tuple[Link, ...]
    loop: bool
    objective: str
    ratio: float = 1.0
    compress_bytes_per_s: float = 0.0

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    def coords(self) -> dict[str, list[str]]:
        """Labels of the stage and link dimensions."""
        stages = [f"{i}:{c.name}" for i, c in enumerate(self.stages)]
        n = self.n_stages
        links = [f"{j}->{(j + 1) % n}" for j in range(len(self.links))]
        return {"stage": stages, "link": links}

    def candidates(self, layer_counts) -> tuple[np.ndarray, np.ndarray]:
        """(layers per stage [C, S], model layer count [C]) over every distinct count."""
        rows, totals = [], []
        for total in sorted(set(layer_counts)):
            for split in compositions(total, self.layers):
                rows.append(split)
                totals.append(total)
        return np.asarray(rows, float).reshape(-1, self.n_stages), np.asarray(totals, float)

    def count(self, total: int) -> int:
        free = [i for i, n in enumerate(self.layers) if n is None]
        rest = total - sum(n for n in self.layers if n is not None)
        if not free:
            return int(rest == 0)
        return math.comb(rest - 1, len(free) - 1) if rest >= len(free) else 0


def compositions(total: int, fixed: tuple[int | None, ...]):
    """Every split of ``total`` layers over the stages, >= 1 each, fixed counts kept."""
    free = [i for i, n in enumerate(fixed) if n is None]
    rest = total - sum(n for n in fixed if n is not None)
    if not free:
        if rest == 0:
            yield tuple(fixed)
        return
    if rest < len(free):
        return
    for cuts in itertools.combinations(range(1, rest), len(free) - 1):
        sizes = [b - a for a, b in zip((0,) + cuts, cuts + (rest,))]
        split = list(fixed)
        for i, n in zip(free, sizes):
            split[i] = n
        yield tuple(split)


def _link(raw, file, key) -> Link:
    checks.table(raw, file, key, "{ bandwidth = \"1 Gbit/s\", ... }")
    checks.known_keys(raw, LINK_KEYS, file, key)
    if "bandwidth" not in raw:
        raise InputError(file, f"{key}.bandwidth", "missing", RATE_FORM)
    direction = checks.choice(raw, "direction", "one_way", DIRECTIONS, file, key)
    return Link(parse_rate(raw["bandwidth"], file, f"{key}.bandwidth"),
                checks.number(raw.get("latency_ms", 0.0), file, f"{key}.latency_ms", 0.0) * 1e-3,
                checks.number(raw.get("overhead_ms", 0.0), file, f"{key}.overhead_ms", 0.0) * 1e-3,
                DIRECTIONS[direction])


def parse_pipeline(raw, file: str, base_dir, model_layers: dict[str, int]) -> PipelineConfig:
    """Validate the ``[pipeline]`` section (``model_layers``: the study's models)."""
    if not isinstance(raw, dict):
        raise InputError(file, "[pipeline]", "missing", "a [pipeline] section with stages")
    checks.known_keys(raw, KEYS, file, "pipeline")
    stages_raw = raw.get("stages")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise InputError(file, "pipeline.stages", "missing or empty",
                         '[ { hardware = "m3-pro" }, { hardware = "m2", layers = 8 } ]')
    stages, layers = [], []
    for i, st in enumerate(stages_raw):
        key = f"pipeline.stages[{i}]"
        if not isinstance(st, dict) or "hardware" not in st:
            raise InputError(file, key, "a stage needs a hardware entry",
                             '{ hardware = "m2", layers = 8 }')
        checks.known_keys(st, STAGE_KEYS, file, key)
        stages.append(load_hardware(st["hardware"], referrer=file, key=f"{key}.hardware",
                                    base_dir=base_dir))
        n = st.get("layers")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise InputError(file, f"{key}.layers", f"value {n!r} is not valid",
                             "a positive integer")
        layers.append(n)
    loop = checks.boolean(raw, "loop", False, file, "pipeline")
    n_links = len(stages) - 1 + int(loop)
    if "link" in raw and "links" in raw:
        raise InputError(file, "pipeline.links", "give either link (every hop) or links",
                         "one of link, links")
    if "links" in raw:
        links_raw = raw["links"]
        if not isinstance(links_raw, list) or len(links_raw) != n_links:
            raise InputError(file, "pipeline.links", f"needs {n_links} links for "
                             f"{len(stages)} stages" + (" in a loop" if loop else ""),
                             f"a list of {n_links} link tables, or one link table")
        links = tuple(_link(l, file, f"pipeline.links[{j}]") for j, l in enumerate(links_raw))
    elif n_links:
        if "link" not in raw:
            raise InputError(file, "pipeline.link", "missing",
                             '{ bandwidth = "1 Gbit/s", latency_ms = 0.5 }')
        links = (_link(raw["link"], file, "pipeline.link"),) * n_links
    else:
        links = ()
    objective = checks.choice(raw, "objective", "tpot", OBJECTIVES, file, "pipeline")
    ratio, throughput = 1.0, 0.0
    if "compression" in raw:
        comp = raw["compression"]
        if not isinstance(comp, dict) or set(comp) - {"ratio", "throughput"} or "ratio" not in comp:
            raise InputError(file, "pipeline.compression", f"value {comp!r} is not valid",
                             '{ ratio = 2.0, throughput = "400 MB/s" }')
        ratio = checks.number(comp["ratio"], file, "pipeline.compression.ratio", 1.0)
        if "throughput" in comp:
            throughput = parse_rate(comp["throughput"], file, "pipeline.compression.throughput")
    cfg = PipelineConfig(tuple(stages), tuple(layers), links, loop, objective, ratio, throughput)
    total = 0
    for name, n_layers in model_layers.items():
        count = cfg.count(n_layers)
        if count == 0:
            raise InputError(file, "pipeline.stages", f"no split of {name}'s {n_layers} layers "
                             f"fits {len(stages)} stages with the fixed layer counts "
                             f"{[n for n in layers if n is not None]}",
                             "at most as many stages as layers; fixed counts that leave "
                             ">= 1 layer per other stage")
        total += count
    if total > MAX_CANDIDATES:
        raise InputError(file, "pipeline.stages", f"{total:,} candidate splits is too many "
                         "to evaluate at once", f"<= {MAX_CANDIDATES:,}: fix some stages' "
                         "layer counts or use fewer stages")
    return cfg

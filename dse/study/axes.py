"""Parse and check the value of one study key: a scalar (fixed), a list or a range (an axis).

Ranges are TOML inline tables, inclusive of both ends:

- ``{ start = 1, stop = 64, step = 1 }``: arithmetic, 1, 2, ..., 64
- ``{ start = 0.5, stop = 1.0, num = 6 }``: ``num`` evenly spaced values
- ``{ start = 1, stop = 256, num = 9, log = true }``: ``num`` geometrically spaced values
- ``{ start = 1, stop = 256, factor = 2 }``: geometric, 1, 2, 4, ..., 256

Integer keys round geometric and ``num`` ranges to integers and drop duplicates.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import checks
from ..errors import InputError, suggest
from ..schema.knobs import (KINDS, KV_OFFLOAD, OPTIMIZERS, PP_SCHEDULES, RECOMPUTE, ROUTING,
                             SERVING)

_RANGE_KEYS = ("start", "stop", "step", "num", "log", "factor")
_MAX_RANGE = 10_000_000
MAX_INT = 2 ** 53 - 1  # the largest whole number every float64 below it holds exactly


CHOICES = {"recompute": RECOMPUTE, "pp_schedule": PP_SCHEDULES, "serving": SERVING,
           "routing": ROUTING, "kv_offload": KV_OFFLOAD}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_scalar(value: Any, kind: str, file, key: str) -> Any:
    """Check one value of a knob of ``kind``; returns it normalised (int or float)."""
    allowed = KINDS[kind]
    if kind in ("model", "hardware"):
        if not isinstance(value, str) or not value:
            raise InputError(file, key, f"value {value!r} is not valid", allowed)
        return value
    if kind == "usecase":
        from ..catalogue.usecases import USECASES

        if value not in USECASES:
            raise InputError(file, key, f"unknown use case {value!r}" + suggest(value, USECASES),
                             ", ".join(USECASES))
        return value
    if kind in CHOICES:
        choices = CHOICES[kind]
        if value not in choices:
            raise InputError(file, key, f"value {value!r} is not valid"
                             + suggest(str(value), choices), allowed)
        return value
    if kind == "optimizer":
        if isinstance(value, str):
            if value not in OPTIMIZERS:
                raise InputError(file, key, f"unknown optimizer {value!r}"
                                 + suggest(value, OPTIMIZERS), allowed)
            return value
        if not _number(value) or not math.isfinite(value) or value < 0:
            raise InputError(file, key, f"value {value!r} is not valid", allowed)
        return value
    if kind == "zero":
        if not _number(value) or value not in (0, 1, 2, 3):
            raise InputError(file, key, f"value {value!r} is not valid", allowed)
        return int(value)
    if kind == "flag":
        if not isinstance(value, bool):
            raise InputError(file, key, f"value {value!r} is not valid", allowed)
        return value
    if kind == "framework":
        from ..catalogue.frameworks import resolve

        return resolve(value, file, key).name
    if not _number(value) or not math.isfinite(value):
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind in ("int", "int0"):
        # past 2^53 a float holds no whole number exactly (1e300 became a 301-digit int
        # that no array dtype holds)
        if not float(value).is_integer() or value < (1 if kind == "int" else 0) or (
                value > MAX_INT):
            raise InputError(file, key, f"value {value!r} is not valid", allowed)
        return int(value)
    if kind == "reserve" and not 0 <= value < 1:
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind == "unit" and not 0 <= value <= 1:
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind == "bits" and not 1 <= value <= 32:
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind == "compute_bits" and value not in (4, 8, 16, 32):
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind == "seconds0" and not value >= 0:
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind == "fraction" and not 0 < value <= 1:
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind == "ratio1" and not value >= 1:
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind == "scale" and not value > 0:
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind in ("rate", "cv", "bytes0", "bandwidth0", "price0") and not value >= 0:
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind == "accepted" and not (value == 0 or value >= 1):
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    if kind == "cv_positive" and not value > 0:
        raise InputError(file, key, f"value {value!r} is not valid", allowed)
    return value


def expand_range(spec: dict, kind: str, file, key: str) -> list:
    """The values of a range table (see the module docstring)."""
    form = "a range {start, stop, step | num [, log] | factor}"
    checks.known_keys(spec, _RANGE_KEYS, file, key, "range key")
    if "start" not in spec or "stop" not in spec:
        raise InputError(file, key, "a range needs start and stop", form)
    start, stop = spec["start"], spec["stop"]
    for name in ("start", "stop", "step", "num", "factor"):
        if name in spec and not (_number(spec[name]) and math.isfinite(spec[name])):
            raise InputError(file, f"{key}.{name}", f"value {spec[name]!r} is not a number", form)
    modes = [k for k in ("step", "num", "factor") if k in spec]
    if len(modes) != 1:
        raise InputError(file, key, "give exactly one of step, num or factor", form)
    if stop < start:
        raise InputError(file, key, f"stop {stop} is below start {start}", form)
    if "step" in spec:
        step = spec["step"]
        if step <= 0:
            raise InputError(file, f"{key}.step", f"value {step!r} is not valid", "a positive step")
        n = int(math.floor((stop - start) / step + 1e-9)) + 1
        values = [start + i * step for i in range(min(n, _MAX_RANGE + 1))]
    elif "num" in spec:
        num = spec["num"]
        if not float(num).is_integer() or num < 1:
            raise InputError(file, f"{key}.num", f"value {num!r} is not valid", "a positive integer")
        if spec.get("log", False):
            if start <= 0:
                raise InputError(file, f"{key}.start", "a log range needs start > 0", form)
            values = list(np.geomspace(start, stop, int(num)))
        else:
            values = list(np.linspace(start, stop, int(num)))
    else:
        factor = spec["factor"]
        if factor <= 1 or start <= 0:
            raise InputError(file, f"{key}.factor", f"factor {factor!r} from start {start!r} "
                             "is not valid", "factor > 1 and start > 0")
        values, v = [], float(start)
        while v <= stop * (1 + 1e-12) and len(values) <= _MAX_RANGE:
            values.append(v)
            v *= factor
    if len(values) > _MAX_RANGE:
        raise InputError(file, key, f"range has more than {_MAX_RANGE} values", form)
    values = [float(v) for v in values]
    if kind in ("int", "int0"):
        if values and max(values) > MAX_INT:
            raise InputError(file, f"{key}.stop", f"value {max(values):g} is not valid",
                             KINDS[kind])
        values = list(dict.fromkeys(int(round(v)) for v in values))
    return values


def parse_axis(raw: Any, kind: str, file, key: str) -> tuple[bool, list]:
    """(is_axis, values): a list or range is an axis; a scalar is a fixed value."""
    if isinstance(raw, dict):
        if kind in ("model", "hardware", "flag", "usecase", "optimizer", "framework",
                    *CHOICES):
            raise InputError(file, key, "ranges apply to numeric keys only", KINDS[kind])
        values = expand_range(raw, kind, file, key)
        return True, [check_scalar(v, kind, file, key) for v in values]
    if isinstance(raw, list):
        if not raw:
            raise InputError(file, key, "empty list", f"one or more of: {KINDS[kind]}")
        values = [check_scalar(v, kind, file, f"{key}[{i}]") for i, v in enumerate(raw)]
        seen = set()
        for v in values:
            if v in seen:
                raise InputError(file, key, f"value {v!r} appears twice", "distinct values")
            seen.add(v)
        return True, values
    return False, [check_scalar(raw, kind, file, key)]

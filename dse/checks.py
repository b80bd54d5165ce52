"""The checks every input file goes through: tables, known keys, values of a type or a choice.

One helper per kind of check, so a study section, a catalogue card and a calibration file
refuse bad input in the same words: an :class:`~dse.errors.InputError` naming the file,
the key (dotted, ``search.n_trials``), the value and what is allowed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import InputError, suggest

_MISSING = object()

# The most an input file may hold: a study, hardware or model card, model config.json or
# calibration (the largest shipped, calibrations/public.toml, is 0.25 MB), and a CSV of
# measurements (data/measured_silicon.csv: 5.8 MB). A symlink to /dev/zero was read
# until the kernel's OOM killer stopped it.
MAX_TEXT_BYTES = 16 * 2 ** 20
MAX_CSV_BYTES = 256 * 2 ** 20
NAME_MAX = 255  # bytes in one name of a path (Linux, macOS): past it every stat fails


def long_name(path) -> int:
    """The byte length of ``path``'s longest name where it is past :data:`NAME_MAX`
    (0 where none is): such a path raises ENAMETOOLONG wherever it is first used."""
    longest = max((len(os.fsencode(p)) for p in Path(path).parts), default=0)
    return longest if longest > NAME_MAX else 0


def read_text(path, limit: int = MAX_TEXT_BYTES, kind: str = "a UTF-8 text file") -> str:
    """The text of input file ``path``: UTF-8 (a leading byte-order mark, as spreadsheets
    and some editors write, dropped), read at most ``limit`` bytes. Larger files, endless
    ones (/dev/zero) and other encodings are refused by name, with the line of the first
    byte that is not UTF-8. OSErrors (not found, a directory) are the caller's."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(path, None, f"larger than {limit // 2 ** 20} MiB (reading stopped there)",
                         f"{kind} of at most {limit // 2 ** 20} MiB")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise InputError(path, "encoding", f"byte 0x{data[e.start]:02x} on line {line} is not "
                         "UTF-8", kind + " in UTF-8 (Latin-1 converted with iconv -f latin1 "
                         "-t utf-8)") from None


def dotted(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def table(value, file, key: str, allowed: str) -> dict:
    """``value`` if it is a TOML table, else the error naming ``key``."""
    if not isinstance(value, dict):
        raise InputError(file, key, "must be a table", allowed)
    return value


def known_keys(raw: Mapping, allowed: Iterable[str], file, prefix: str = "",
               what: str = "key") -> None:
    """The one unknown-key check: every key of ``raw`` is in ``allowed``."""
    allowed = list(allowed)
    for key in raw:
        if key not in allowed:
            raise InputError(file, dotted(prefix, key), f"unknown {what}" + suggest(key, allowed),
                             ", ".join(sorted(allowed)))


def invalid(file, key: str, value, allowed: str) -> InputError:
    """The error for a value that is not allowed."""
    return InputError(file, key, f"value {value!r} is not valid", allowed)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def boolean(raw: Mapping, key: str, default: bool, file, prefix: str = "") -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise invalid(file, dotted(prefix, key), value, "true or false")
    return value


def integer(raw: Mapping, key: str, default, file, prefix: str = "", low: int = 0,
            high: int | None = None, allowed: str | None = None):
    """An integer in [low, high]; ``default`` None may stay None."""
    value = raw.get(key, default)
    if value is None and default is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int) or value < low
            or (high is not None and value > high)):
        raise invalid(file, dotted(prefix, key), value, allowed or (
            f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"))
    return value


def number(value, file, key: str, low: float = -math.inf, allowed: str | None = None) -> float:
    """A finite number >= ``low``."""
    if not is_number(value) or not math.isfinite(value) or value < low:
        raise invalid(file, key, value, allowed or f"a number >= {low:g}")
    return float(value)


def choice(raw: Mapping, key: str, default, choices: Iterable, file, prefix: str = "",
           allowed: str | None = None):
    """One of ``choices``."""
    choices = list(choices)
    value = raw.get(key, default)
    if not any(c is value if isinstance(c, bool) or isinstance(value, bool) else c == value
               for c in choices):
        raise invalid(file, dotted(prefix, key), value,
                      allowed or ", ".join(str(c) for c in choices))
    return value


def string(raw: Mapping, key: str, default: Any, file, prefix: str = "",
           allowed: str = "a non-empty string") -> Any:
    """A non-empty string (or the default, which may be None)."""
    value = raw.get(key, default)
    if value is None and default is None:
        return None
    if not isinstance(value, str) or not value:
        raise invalid(file, dotted(prefix, key), value, allowed)
    return value


def string_list(raw: Mapping, key: str, default, file, prefix: str = "",
                allowed: str = "a list of strings") -> list:
    """A list (a single string is a list of one)."""
    value = raw.get(key, default)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise invalid(file, dotted(prefix, key), value, allowed)
    return value

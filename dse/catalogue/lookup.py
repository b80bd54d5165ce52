"""Find and load catalogue entries: ``hardware/*.toml`` and ``models/*.toml``.

A name is looked up in, in order: the directories listed in ``$DSE_CATALOGUE``
(``os.pathsep``-separated; each may hold ``hardware/`` and ``models/``), the
repository checkout this package runs from, and the copy bundled in a wheel.
A value that names a file (``.toml``, or a Hugging Face ``config.json``) is loaded from
that path: a relative path is relative to the working directory, as every path in a study
is (its output path too), and is looked up beside the study file when it is not there
(:func:`input_path`).
"""

from __future__ import annotations

import functools
import json
import os
import tomllib
from pathlib import Path

from ..errors import InputError, suggest
from .hardware import HardwareCard
from .model import ModelCard, card_from_hf_config

_PACKAGE = Path(__file__).resolve().parents[1]  # the dse package


def roots() -> list[Path]:
    """Catalogue roots, highest priority first."""
    out = [Path(p) for p in os.environ.get("DSE_CATALOGUE", "").split(os.pathsep) if p]
    out += [_PACKAGE.parent, _PACKAGE / "_catalogue"]
    return [p for p in out if p.is_dir()]


def _entries(kind: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in reversed(roots()):
        folder = root / kind
        if folder.is_dir():
            found.update({p.stem: p for p in sorted(folder.glob("*.toml"))})
    return found


def hardware_names() -> list[str]:
    return sorted(_entries("hardware"))


def model_names() -> list[str]:
    return sorted(_entries("models"))


def _read_toml(path: Path, referrer: str | None, key: str | None) -> dict:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise InputError(referrer or path, key, f"file {str(path)!r} not found") from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(path, None, f"not valid TOML: {err}") from None


@functools.lru_cache(maxsize=None)
def _load_hardware_file(path: Path) -> HardwareCard:
    data = _read_toml(path, None, None)
    card = HardwareCard.from_mapping(data, str(path), name=path.stem)
    if card.name != path.stem:
        raise InputError(path, "name", f"{card.name!r} differs from the file name {path.stem!r}",
                         "the file stem")
    return card


@functools.lru_cache(maxsize=None)
def _load_model_file(path: Path) -> ModelCard:
    if path.suffix == ".json":
        try:
            config = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise InputError(path, None, f"not valid JSON: {err}") from None
        stem = path.parent.name if path.name == "config.json" else path.stem
        return card_from_hf_config(config, str(path), name=stem.lower())
    data = _read_toml(path, None, None)
    card = ModelCard.from_mapping(data, str(path), name=path.stem)
    if card.name != path.stem:
        raise InputError(path, "name", f"{card.name!r} differs from the file name {path.stem!r}",
                         "the file stem")
    return card


def _is_path(value: str) -> bool:
    return value.endswith((".toml", ".json")) or os.sep in value or "/" in value


def input_path(value: str, base_dir: Path | None, also=()) -> Path:
    """Where an input file a study names is: the path as given (relative to the working
    directory), else beside the study file (``base_dir``), else under the folders
    ``also`` (the catalogue roots, for a calibration); the first that exists, or the
    path as given."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    for folder in ([Path.cwd()] + ([base_dir] if base_dir is not None else []) + list(also)):
        if (folder / path).exists():
            return folder / path
    return path


def _resolve_path(value: str, base_dir: Path | None) -> Path:
    path = input_path(value, base_dir)
    if path.is_dir():
        path = path / "config.json"
    return path.resolve()


def load_hardware(value: str, *, referrer: str | None = None, key: str = "hardware",
                  base_dir: Path | None = None) -> HardwareCard:
    """A hardware card by catalogue name or by path to a TOML file."""
    if _is_path(value):
        path = _resolve_path(value, base_dir)
        if not path.is_file():
            raise InputError(referrer, key, f"hardware file {value!r} not found")
        return _load_hardware_file(path)
    entries = _entries("hardware")
    if value not in entries:
        raise InputError(referrer, key, f"unknown hardware {value!r}" + suggest(value, entries),
                         "a name listed by `dse hardware` or a path to a .toml file")
    return _load_hardware_file(entries[value])


def load_model(value: str, *, referrer: str | None = None, key: str = "model",
               base_dir: Path | None = None) -> ModelCard:
    """A model card by catalogue name, by path to a TOML, or to a HF ``config.json``."""
    if _is_path(value):
        path = _resolve_path(value, base_dir)
        if not path.is_file():
            raise InputError(referrer, key, f"model file {value!r} not found")
        return _load_model_file(path)
    entries = _entries("models")
    if value not in entries:
        raise InputError(referrer, key, f"unknown model {value!r}" + suggest(value, entries),
                         "a name listed by `dse models`, a .toml file or a Hugging Face "
                         "config.json path")
    return _load_model_file(entries[value])


def all_hardware() -> list[HardwareCard]:
    return [_load_hardware_file(p) for _, p in sorted(_entries("hardware").items())]


def all_models() -> list[ModelCard]:
    return [_load_model_file(p) for _, p in sorted(_entries("models").items())]

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

import difflib
import functools
import json
import os
import re
import tomllib
from pathlib import Path

from .. import checks
from ..errors import InputError
from .hardware import HardwareCard
from .model import ModelCard, card_from_hf_config

_PACKAGE = Path(__file__).resolve().parents[1]  # the dse package


def roots() -> list[Path]:
    """Catalogue roots, highest priority first."""
    out = [Path(p) for p in os.environ.get("DSE_CATALOGUE", "").split(os.pathsep) if p]
    out += [_PACKAGE.parent, _PACKAGE / "_catalogue"]
    return [p for p in out if p.is_dir()]


def _entries(kind: str) -> dict[str, Path]:
    """name -> card file of ``kind`` over the roots (read-only: it is shared)."""
    return _listing(_stamp(kind))


def _stamp(kind: str) -> tuple:
    """The folders of ``kind`` in priority order, lowest first, each with its modification
    time (a card added or removed changes it): the key of the folder listing, so that a
    lookup costs a few ``stat`` calls rather than a listing (``dse validate`` looks names
    up tens of thousands of times)."""
    stamp = []
    for root in reversed(roots()):
        folder = root / kind
        try:
            stamp.append((folder, folder.stat().st_mtime_ns))
        except OSError:
            continue
    return tuple(stamp)


@functools.lru_cache(maxsize=64)
def _listing(stamp: tuple) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, _ in stamp:
        if folder.is_dir():
            found.update({p.stem: p for p in sorted(folder.glob("*.toml"))})
    return found


@functools.lru_cache(maxsize=64)
def _signature(stamp: tuple) -> tuple:
    return tuple(sorted(_listing(stamp).items()))


def normalized(name: str) -> str:
    """A name as people write it, reduced to compare: lowercase, letters, digits and dots
    only ('H100-SXM5-80GB', 'h100_sxm5 80gb' and 'H100 SXM5 80GB' are the same)."""
    return re.sub(r"[^a-z0-9.]", "", str(name).lower())


@functools.lru_cache(maxsize=None)
def _aliases(kind: str, signature: tuple) -> dict[str, str]:
    """normalized name or alias -> catalogue name (``signature``: the entries, so that a
    changed catalogue root gives a fresh index)."""
    load = _load_hardware_file if kind == "hardware" else _load_model_file
    index: dict[str, str] = {}
    tails: dict[str, set[str]] = {}
    for name, path in signature:
        for alias in [name] + list(load(path).fields.get("aliases", [])):
            key = normalized(alias)
            if index.get(key, name) != name:
                raise InputError(path, "aliases", f"{alias!r} also names {index[key]!r}",
                                 "aliases that name one card")
            index[key] = name
            if "/" in alias:  # a Hugging Face id without its organization
                tails.setdefault(normalized(alias.rsplit("/", 1)[1]), set()).add(name)
    for key, names in tails.items():
        if key not in index and len(names) == 1:
            index[key] = names.pop()
    return index


def resolve_name(kind: str, value: str) -> str | None:
    """The catalogue name ``value`` stands for (itself, an alias, or either spelled with
    other case, spaces, dashes or underscores), or None."""
    stamp = _stamp(kind)
    if value in _listing(stamp):
        return value
    return _aliases(kind, _signature(stamp)).get(normalized(value))


@functools.lru_cache(maxsize=None)
def _ambiguous(roots_: tuple) -> dict[str, list[str]]:
    """Spellings that name several hardware cards (``hardware/ambiguous.json``: "H100"
    is an SXM, a PCIe or an NVL card), normalized."""
    out: dict[str, list[str]] = {}
    for root in reversed(roots_):
        path = root / "hardware" / "ambiguous.json"
        if path.is_file():
            out.update({normalized(k): v for k, v in json.loads(path.read_text()).items()})
    return out


def _unknown(kind: str, value: str) -> str:
    if kind == "hardware":
        several = _ambiguous(tuple(roots())).get(normalized(value))
        if several:
            return f" (ambiguous: it may be {', '.join(repr(n) for n in several[:-1])} or " \
                   f"{several[-1]!r}; name one)"
    spelled = _aliases(kind, _signature(_stamp(kind)))
    close = [c for word in dict.fromkeys((value, value.rsplit("/", 1)[-1]))
             for c in difflib.get_close_matches(normalized(word), list(spelled), n=3, cutoff=0.6)]
    names = list(dict.fromkeys(spelled[c] for c in close))[:3]
    if not names:
        return ""
    return ", did you mean " + " or ".join(repr(n) for n in names) + "?"


def hardware_names() -> list[str]:
    return sorted(_entries("hardware"))


def model_names() -> list[str]:
    return sorted(_entries("models"))


def _read_toml(path: Path, referrer: str | None, key: str | None) -> dict:
    try:
        return tomllib.loads(checks.read_text(path, kind="a TOML card"))
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
def _load_model_file(path: Path, name: str | None = None) -> ModelCard:
    if path.suffix == ".json":
        try:
            config = json.loads(checks.read_text(path, kind="a model config.json"))
        except json.JSONDecodeError as err:
            raise InputError(path, None, f"not valid JSON: {err}") from None
        stem = path.parent.name if path.name == "config.json" else path.stem
        beside = path.with_name("hf_quant_config.json")  # ModelOpt's, beside the config
        quant = None
        if path.name == "config.json" and beside.is_file():
            try:
                quant = json.loads(checks.read_text(beside, kind="an hf_quant_config.json"))
            except json.JSONDecodeError as err:
                raise InputError(beside, None, f"not valid JSON: {err}") from None
        return card_from_hf_config(config, str(path), name=name or stem.lower(), quant=quant)
    data = _read_toml(path, None, None)
    card = ModelCard.from_mapping(data, str(path), name=path.stem)
    if card.name != path.stem:
        raise InputError(path, "name", f"{card.name!r} differs from the file name {path.stem!r}",
                         "the file stem")
    return card


def _is_file_name(value: str) -> bool:
    return value.endswith((".toml", ".json"))


def _is_path(value: str) -> bool:
    return _is_file_name(value) or os.sep in value or "/" in value


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
    name = None if _is_file_name(value) else resolve_name("hardware", value)
    if name is None and _is_path(value):
        path = _resolve_path(value, base_dir)
        if not path.is_file():
            raise InputError(referrer, key, f"hardware file {value!r} not found")
        return _load_hardware_file(path)
    if name is None:
        raise InputError(referrer, key, f"unknown hardware {value!r}" + _unknown("hardware", value),
                         "a name listed by `dse hardware` (or one of its aliases) or a path to "
                         "a .toml file")
    return _load_hardware_file(_entries("hardware")[name])


def load_model(value: str, *, referrer: str | None = None, key: str = "model",
               base_dir: Path | None = None) -> ModelCard:
    """A model card by catalogue name, by path to a TOML, or to a HF ``config.json``."""
    # A Hugging Face id ("deepseek-ai/DeepSeek-V3") names a catalogue card by its aliases,
    # unless a file or folder of that name exists
    name = None if _is_file_name(value) else resolve_name("models", value)
    if _is_path(value) and (name is None or input_path(value, base_dir).exists()):
        path = _resolve_path(value, base_dir)
        if not path.is_file() and is_hub_id(value):  # a Hub id: its cache, then the Hub
            return _load_model_file(hub_config(value, referrer, key,
                                               _unknown("models", value)), name=value)
        if not path.is_file():
            raise InputError(referrer, key, f"model file {value!r} not found"
                             + ("" if _is_file_name(value) else _unknown("models", value)),
                             "a name listed by `dse models` (or a Hugging Face id among its "
                             "aliases), a .toml file or a Hugging Face config.json path")
        return _load_model_file(path)
    if name is None:
        raise InputError(referrer, key, f"unknown model {value!r}" + _unknown("models", value),
                         "a name listed by `dse models` (or a Hugging Face id among its "
                         "aliases), a .toml file or a Hugging Face config.json path")
    return _load_model_file(_entries("models")[name])


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def is_hub_id(value: str) -> bool:
    """Whether ``value`` reads as a Hugging Face repository id ("org/name")."""
    return bool(_HUB_ID.match(value)) and not _is_file_name(value)


def hub_cache() -> Path:
    """The local Hugging Face cache (huggingface_hub's order: ``HF_HUB_CACHE``, else
    ``HF_HOME``/hub, else ``XDG_CACHE_HOME``/huggingface/hub, else
    ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def cached_config(repo: str, cache: Path | None = None) -> Path | None:
    """A model's ``config.json`` in the local Hugging Face cache, or None. The cache's
    documented layout: ``models--ORG--NAME/refs/main`` holds the commit whose files are
    under ``snapshots/COMMIT/``; without that ref, the newest snapshot that has one."""
    root = (cache or hub_cache()) / ("models--" + repo.replace("/", "--"))
    ref = root / "refs" / "main"
    if ref.is_file():
        path = root / "snapshots" / ref.read_text().strip() / "config.json"
        if path.is_file():
            return path
    snapshots = sorted((root / "snapshots").glob("*/config.json"),
                       key=lambda p: p.stat().st_mtime, reverse=True)
    return snapshots[0] if snapshots else None


def hub_config(repo: str, referrer=None, key: str = "model", hint: str = "") -> Path:
    """``config.json`` of Hub model ``repo``: from the local cache, else fetched with
    ``huggingface_hub`` (an optional dependency: ``pip install dse[hub]``; the config
    only, never weights) unless ``HF_HUB_OFFLINE`` is set; else a one-line error that
    says how to provide it."""
    found = cached_config(repo)
    if found is not None:
        return found
    how = (f"a name listed by `dse models`, a config.json path, or the config in the local "
           f"Hugging Face cache ({hub_cache()}; `huggingface-cli download {repo} "
           "config.json` puts it there)")
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    if offline:
        raise InputError(referrer, key, f"unknown model {repo!r}: not in the catalogue nor in "
                         "the local Hugging Face cache, and HF_HUB_OFFLINE is set" + hint, how)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise InputError(referrer, key, f"unknown model {repo!r}: not in the catalogue nor in "
                         "the local Hugging Face cache, and huggingface_hub is not installed "
                         "to fetch it (pip install 'dse[hub]')" + hint, how) from None
    try:
        return Path(hf_hub_download(repo, "config.json"))
    except Exception as err:  # network, gated or missing repository: said in one line
        said = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(referrer, key, f"unknown model {repo!r}: not in the catalogue nor in "
                         f"the local Hugging Face cache, and the Hub gave no config ({said})"
                         + hint, how) from None


def all_hardware() -> list[HardwareCard]:
    return [_load_hardware_file(p) for _, p in sorted(_entries("hardware").items())]


def all_models() -> list[ModelCard]:
    return [_load_model_file(p) for _, p in sorted(_entries("models").items())]

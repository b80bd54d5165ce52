"""Partial results on disk: what a streamed sweep has finished, so it can resume.

A streamed sweep works in a hidden directory beside its target, never under the
target's own name::

    .NAME.partial/
        manifest.json   what is being computed (study fingerprint, chunk plan, target)
        data.zarr/      full-grid outputs, written chunk by chunk (zarr regions)
        done/           one marker per finished chunk (a reduction's partial, .pkl)

Markers are written (atomically) only after a chunk's data is in place, so a killed
worker or an interrupted client leaves at worst a chunk that is recomputed. The
target appears, by an atomic rename or an atomic netCDF write, only when every chunk
is done; the partial directory is then removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import uuid
from pathlib import Path

import numpy as np
import xarray as xr

from .._version import __version__
from ..atomic import replace_path
from ..errors import InputError
from ..results.dataset import to_dataset
from ..results.io import write_dataset
from .chunks import block_shape, output_shape


def fingerprint(study, kind: str, n_chunks: int, extra: str = "") -> str:
    """What makes two runs produce the same chunks: the study and its resolved specs."""
    h = hashlib.sha256()
    for part in (__version__, kind, str(n_chunks), extra, study.text, study.mode, study.dtype,
                 json.dumps(study.sections, sort_keys=True, default=str),
                 json.dumps([[c.name, dict(c.fields)] for c in study.models], default=str),
                 json.dumps([[c.name, dict(c.fields)] for c in study.hardware], default=str)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class Partial:
    """The hidden working directory of one streamed sweep."""

    def __init__(self, target: Path):
        self.target = Path(target)
        self.root = self.target.with_name(f".{self.target.name}.partial")

    @property
    def data(self) -> Path:
        return self.root / "data.zarr"

    @property
    def done_dir(self) -> Path:
        return self.root / "done"

    def open(self, fp: str, resume: bool) -> set[int]:
        """Start (or, with ``resume``, continue) the run ``fp``; the chunks already done."""
        manifest = self.root / "manifest.json"
        if resume and manifest.exists():
            found = json.loads(manifest.read_text()).get("fingerprint")
            if found != fp:
                raise InputError(self.root, "--resume", "the partial result was made by a "
                                 "different study, dse version or chunk plan",
                                 f"the same study, or remove {self.root} to start over")
            return self.done()
        if self.root.exists():
            shutil.rmtree(self.root)
        self.done_dir.mkdir(parents=True)
        _atomic_write(manifest, json.dumps({"fingerprint": fp, "target": str(self.target),
                                            "dse_version": __version__}).encode())
        return set()

    def done(self) -> set[int]:
        out = set()
        for p in self.done_dir.iterdir():
            if not p.name.startswith("."):
                out.add(int(p.name.split(".")[0]))
        return out

    @staticmethod
    def mark_in(done_dir: Path, index: int) -> None:
        """Mark chunk ``index`` done in ``done_dir`` (from a worker process)."""
        _atomic_write(Path(done_dir) / f"{index:08d}", b"")

    def mark(self, index: int, payload: dict | None = None) -> None:
        """Record chunk ``index`` as done (with a reduction's partial arrays)."""
        path = self.done_dir / (f"{index:08d}.pkl" if payload is not None else f"{index:08d}")
        # a few small arrays per chunk: pickle is ~10x quicker than a .npz archive
        _atomic_write(path, b"" if payload is None else pickle.dumps(
            {k: np.asarray(v) for k, v in payload.items()}, protocol=pickle.HIGHEST_PROTOCOL))

    def load(self, index: int) -> dict:
        """A finished chunk's partial (written by this dse version: the manifest's
        fingerprint includes the version, so ``--resume`` never reads another's)."""
        return pickle.loads((self.done_dir / f"{index:08d}.pkl").read_bytes())

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def create_store(study, evaluator, path: Path, deps, chunks) -> None:
    """An empty zarr store (format 2) with every output's layout, chunked like the grid."""
    import dask.array as da

    from ..core.trace import layout

    shapes = layout(study, evaluator)  # each output's own leading axes and dtype
    arrays, encoding = {}, {}
    for name in evaluator.names:
        own = shapes[name].lead
        shape = output_shape(study, deps[name], own)
        zchunks = block_shape(study, deps[name], own, chunks[0])
        arrays[name] = da.empty(shape, dtype=shapes[name].dtype, chunks=zchunks)
        encoding[name] = {"chunks": zchunks}
        if not study.output.compress:
            encoding[name]["compressors"] = None
    ds = to_dataset(study, arrays, deps)
    ds.to_zarr(path, mode="w", compute=False, zarr_format=2, consolidated=False,
               encoding=encoding)


def finish_store(partial: Partial, target: Path, compress: bool) -> xr.Dataset:
    """Move a complete store to ``target`` (.zarr: rename; .nc: convert) and open it."""
    import zarr

    zarr.consolidate_metadata(str(partial.data), zarr_format=2)
    if target.suffix == ".zarr":
        replace_path(partial.data, target)
        partial.remove()
        return xr.open_zarr(target)
    with xr.open_zarr(partial.data) as ds:
        write_dataset(ds, target, compress=compress)
    partial.remove()
    return xr.open_dataset(target, engine="h5netcdf")

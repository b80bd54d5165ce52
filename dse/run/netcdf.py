"""A study's grid as a Dataset of dask arrays: one task per chunk, evaluated ahead.

Writing a netCDF file is three costs in a row when done plainly: evaluate the whole
grid into fresh memory, lay out the file's metadata (h5netcdf: ~0.3 s for a study's
few dozen variables and coordinates), copy the arrays into the page cache. Here the
grid stays in chunks and the costs overlap: JAX dispatch is asynchronous, so the
evaluator computes the next ``ahead`` chunks on its own threads while this thread
writes the metadata and then each finished chunk. Memory stays bounded by the chunks
in flight, so a ``.nc`` output may be larger than memory.

Each output is a dask array whose blocks are the regions the grid's chunks own
(:func:`dse.run.chunks.chunk_pieces`); every block of one chunk comes from one evaluation.
The write runs on dask's synchronous scheduler: the overlap comes from XLA's threads,
and the dispatcher below is not thread-safe.
"""

from __future__ import annotations

import operator
from pathlib import Path

import numpy as np
import xarray as xr

from ..atomic import atomic_path
from ..core.evaluator import Evaluator
from ..core.trace import dependencies, layout
from ..results.dataset import to_dataset
from ..results.io import netcdf_encoding
from . import xla
from .chunks import block_shape, chunk_budget, chunk_pieces, chunk_point, output_shape, owns, plan
from .devices import local_devices
from .progress import PointsProgress

AHEAD = 2  # chunks dispatched beyond the one being written


class Dispatcher:
    """Chunk evaluations dispatched ahead of their consumer; ``get(i)`` returns chunk
    ``i``'s pieces ``{name: array}`` (the regions it owns) and keeps ``ahead`` more
    chunks computing. ``progress`` (a bar factory, or None) counts the chunks' points as
    they are handed over."""

    def __init__(self, study, evaluator: Evaluator, deps, chunks, ahead: int = AHEAD,
                 progress=None):
        self.study, self.evaluator, self.deps, self.chunks = study, evaluator, deps, chunks
        self.bar = PointsProgress(progress, study, chunks)
        # big grids: chunks round-robin over the host devices (dse.run.devices)
        self.devices = local_devices(study) or [None]
        self.ahead = max(ahead, len(self.devices))
        self.lead = evaluator.lead_dims()
        self.futures: dict[int, dict] = {}
        self.next = 0

    def _dispatch(self, i: int) -> None:
        placed = self.evaluator.on(chunk_point(self.study, self.chunks[i]),
                                   self.devices[i % len(self.devices)])
        self.futures[i] = self.evaluator(*placed)

    def _fill(self, stop: int) -> None:
        """Dispatch every chunk before ``stop`` not dispatched yet."""
        while self.next < min(len(self.chunks), stop):
            if self.next not in self.futures:
                self._dispatch(self.next)
            self.next += 1

    def start(self) -> "Dispatcher":
        """Dispatch the first chunks (call before slow work such as file metadata)."""
        self._fill(self.ahead + 1)
        return self

    def get(self, i: int) -> dict[str, np.ndarray]:
        self._fill(i + 1 + self.ahead)
        if i not in self.futures:  # asked out of order, or again
            self._dispatch(i)
        out = self.futures.pop(i)
        pieces = {name: array for name, _, array, first in
                  chunk_pieces(self.study, self.chunks[i], out, self.lead, self.deps) if first}
        self.bar.update(i)
        return pieces


def lazy_arrays(study, names=None, ahead: int = AHEAD, progress=None):
    """The study's grid as dask arrays: ``(arrays, deps, dispatcher, owned)``.

    ``arrays[name]`` spans the output's own axes and its dependency dims, one block per
    region a chunk owns; ``owned[i]`` lists chunk ``i``'s ``(name, block index)``.
    Every block of one chunk is computed by one evaluation (``dispatcher.get(i)``).
    """
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    evaluator = Evaluator.of(study, names)
    names = evaluator.names
    chunks = plan(study.shape, chunk_budget(study))
    deps = dependencies(study, evaluator)
    dispatcher = Dispatcher(study, evaluator, deps, chunks, ahead, progress)
    shapes = layout(study, evaluator)  # each output's own leading axes and dtype
    dims = [a.name for a in study.dims]
    token = tokenize(study.text, study.file, names, study.output.chunk_points)
    chunk_layer = f"dse-chunk-{token}"
    layers = {chunk_layer: {(chunk_layer, i): (dispatcher.get, i) for i in range(len(chunks))}}
    owned: list[list[tuple[str, tuple[int, ...]]]] = [[] for _ in chunks]
    arrays = {}
    for name in names:
        n_extra = dispatcher.lead[name]
        lead = shapes[name].lead
        kept = [dims.index(d) for d in deps[name]]
        layer_name = f"dse-{name}-{token}"
        layer = {}
        for i, c in enumerate(chunks):
            if not owns(c, kept):
                continue  # an earlier chunk owns this output's region
            index = (0,) * n_extra + tuple(c.outer[g] if g < c.axis else c.start // c.length
                                           if g == c.axis else 0 for g in kept)
            layer[(layer_name, *index)] = (operator.getitem, (chunk_layer, i), name)
            owned[i].append((name, index))
        layers[layer_name] = layer
        arrays[name] = (layer_name, block_shape(study, deps[name], lead, chunks[0]),
                        output_shape(study, deps[name], lead), shapes[name].dtype)
    # each array's own graph (its layer and the shared chunk layer)
    out = {n: da.Array(HighLevelGraph({chunk_layer: layers[chunk_layer], key: layers[key]},
                                      {chunk_layer: set(), key: {chunk_layer}}),
                       key, blocks, dtype=dtype, shape=shape)
           for n, (key, blocks, shape, dtype) in arrays.items()}
    return out, deps, dispatcher, owned


class _Queue:
    """The writer protocol of ``Dataset.dump_to_store``: in-memory variables
    (coordinates) are written at once, dask-backed ones are kept for :func:`write_netcdf`."""

    def __init__(self):
        self.lazy = []

    def add(self, source, target, region=None):
        if hasattr(source, "dask"):
            self.lazy.append((source, target))
        else:
            target[region or ...] = source


def write_netcdf(study, path: str | Path, compress: bool = False, progress=None
                 ) -> xr.Dataset:
    """Evaluate the grid into a netCDF file chunk by chunk, atomically (as
    :func:`dse.results.io.write_dataset`): xarray lays out the file (encoding, coordinates,
    attributes) from the lazy Dataset, then each chunk's blocks go into place in grid
    order while the evaluator computes the next ones. Returns the result, its data
    read lazily from the file."""
    from dask.highlevelgraph import HighLevelGraph
    from dask.local import get_sync
    from xarray.backends import H5NetCDFStore

    xla.configure()
    arrays, deps, dispatcher, owned = lazy_arrays(study, progress=progress)
    ds = to_dataset(study, arrays, deps)
    layer_of = {arrays[n].name: n for n in arrays}
    dispatcher.start()  # the first chunks compute while the metadata is written
    with atomic_path(path) as tmp:
        store = H5NetCDFStore.open(tmp, mode="w")
        try:
            queue = _Queue()
            ds.dump_to_store(store, writer=queue, encoding=netcdf_encoding(ds, compress))
            # the encoded variable (e.g. bool -> int8) still depends on its output's layer
            targets = {}
            for source, target in queue.lazy:
                (name,) = [layer_of[k] for k in source.dask.layers if k in layer_of]
                assert source.chunks == arrays[name].chunks, name
                targets[name] = source, target
            graph = HighLevelGraph.merge(*[s.__dask_graph__() for s, _ in targets.values()])
            for pieces in owned:
                # the blocks as they are (dask's compute would copy each)
                keys = [(targets[n][0].name, *b) for n, b in pieces]
                blocks = get_sync(graph.cull(set(keys)), keys)
                for (name, index), block in zip(pieces, blocks):
                    source, target = targets[name]
                    target[_region(source.chunks, index)] = block
        finally:
            store.close()
            dispatcher.bar.close()
    return _file_backed(ds, Path(path))


def _file_backed(ds: xr.Dataset, path: Path) -> xr.Dataset:
    """``ds`` as just written to ``path``, its data variables read lazily from the file
    (coordinates and attributes are already here: re-parsing the file's metadata with
    ``xarray.open_dataset`` costs ~0.2 s for a study's few dozen variables)."""
    import dask.array as da
    import h5py
    from dask.base import tokenize

    f = h5py.File(path, "r")
    token = tokenize(str(path), path.stat().st_mtime_ns)
    data = {}
    for name, var in ds.data_vars.items():
        stored = f[name]  # bool outputs are stored as int8 (netCDF has no bool)
        data[name] = da.from_array(stored, chunks=stored.shape, name=f"dse-read-{name}-{token}"
                                   ).astype(var.dtype)
    return ds.copy(data=data)


def _region(chunks, index) -> tuple[slice, ...]:
    """Where block ``index`` of an array chunked as ``chunks`` lies."""
    out = []
    for sizes, k in zip(chunks, index):
        start = sum(sizes[:k])
        out.append(slice(start, start + sizes[k]))
    return tuple(out)

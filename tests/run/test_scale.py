"""Streamed sweeps: reductions equal brute force, zarr and netCDF streaming give the
in-memory result exactly, interrupted sweeps resume (clusters, killed workers and host
devices: test_processes.py).

Every reference here is independent of the streaming code: the full grid evaluated
in memory by ``dse.sweep`` and reduced with plain numpy (argmax of the first
occurrence in C order, ``np.histogram``, bit counts).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import dse
from dse.errors import InputError
from dse.schema.outputs import REASON_BITS
from dse.study import parse_study
from dse.run.chunks import plan
from dse.run.sweep import sweep_to_file

from ..helpers import GRID, REDUCE


def study(chunk=97, by=None, extra=""):
    text = GRID.format(chunk=chunk) + (REDUCE.format(by=by) if by is not None else "") + extra
    return parse_study(text, "<test>")


@pytest.fixture(scope="module")
def full():
    return dse.sweep(study(chunk=1 << 22))


def _same(a: xr.Dataset, b: xr.Dataset) -> None:
    """Identical data, coordinates and per-variable attrs (run metadata aside)."""
    xr.testing.assert_identical(a.drop_attrs(deep=False), b.drop_attrs(deep=False))


@pytest.mark.parametrize("by, chunk", [([], 97), (["model", "hardware"], 97),
                                       (["tp", "batch"], 61), (["hbm_bw_scale"], 1 << 22),
                                       (["input_len"], 7)])
def test_reduction_equals_brute_force(full, by, chunk):
    red = dse.sweep(study(chunk=chunk, by=str(by).replace("'", '"')))
    assert list(red["n_valid"].dims) == [d for d in full["throughput_tok_s"].dims if d in by]
    dims = list(full["throughput_tok_s"].dims)
    by = [d for d in dims if d in by]  # the result keeps the study's axis order
    rest = [d for d in dims if d not in by]
    tput, ttft, tpot = xr.broadcast(full["throughput_tok_s"], full["ttft_s"], full["tpot_s"])
    valid, reason = xr.broadcast(full["valid"], full["reason"])
    valid = valid.broadcast_like(tput)
    reason = reason.broadcast_like(tput)
    feasible = valid & (ttft <= 1.5)
    score = xr.where(feasible, tput, -np.inf).transpose(*(by + rest))
    flat = score.values.reshape(int(np.prod([full.sizes[d] for d in by])), -1)
    best_pos = flat.argmax(axis=1)  # numpy: first occurrence
    shape_by = [full.sizes[d] for d in by]
    assert np.array_equal(red["n_valid"].values.ravel(),
                          valid.transpose(*(by + rest)).values.reshape(flat.shape).sum(1))
    assert np.array_equal(red["n_feasible"].values.ravel(), np.isfinite(flat).sum(1))
    for k, (name, bit) in enumerate(REASON_BITS.items()):
        expect = ((reason.transpose(*(by + rest)).values & bit) != 0).reshape(flat.shape).sum(1)
        assert np.array_equal(red["reason_count"].isel(reason_flag=k).values.ravel(), expect), name
    assert int(red["n_points"]) == flat.shape[1]
    edges = np.logspace(np.log10(0.002), np.log10(0.2), 13)
    t = tpot.transpose(*(by + rest)).values.reshape(flat.shape)
    for g in range(flat.shape[0]):
        ok = np.isfinite(flat[g])
        hist, _ = np.histogram(t[g][ok], bins=edges)
        got = red["tpot_s_histogram"].values.reshape(flat.shape[0], -1)[g]
        # np.histogram closes the last bin on the right; dse counts a value equal to the
        # upper edge as above the range
        assert np.array_equal(got, hist) or abs(int((got - hist).sum())) <= np.count_nonzero(
            t[g][ok] == edges[-1])
        assert red["tpot_s_below_range"].values.ravel()[g] == np.count_nonzero(
            t[g][ok] < edges[0])
        if not ok.any():
            assert red["best_index"].values.ravel()[g] == -1
            continue
        pos = best_pos[g]
        assert red["throughput_tok_s"].values.ravel()[g] == pytest.approx(flat[g, pos], rel=1e-6)
        where = np.unravel_index(pos, [full.sizes[d] for d in rest])
        for d, j in zip(rest, where):
            expect = full[d].values[j]
            got = red[f"best_{d}"].values.reshape(shape_by or ())[
                np.unravel_index(g, shape_by) if by else ()]
            assert got == expect, (d, got, expect)


def test_reduction_without_any_feasible_point():
    red = dse.sweep(study(by='["model"]', extra="").with_axes(batch=[4096], input_len=[32768]))
    assert (red["n_feasible"] == 0).all()
    assert (red["best_index"] == -1).all()
    assert np.isnan(red["throughput_tok_s"]).all()


def test_zarr_streaming_equals_in_memory(full, tmp_path):
    ds, path = sweep_to_file(study(chunk=97), tmp_path / "grid.zarr")
    assert path.exists() and not (tmp_path / ".grid.zarr.partial").exists()
    _same(full, xr.open_zarr(path).load())


@pytest.mark.parametrize("compress", [False, True])
def test_netcdf_written_chunk_by_chunk_equals_in_memory(full, tmp_path, monkeypatch, compress):
    """The .nc path evaluates ahead while writing: same result, bounded chunks in flight."""
    from dse.run import netcdf

    s = study(chunk=97, extra="compress = true\n" if compress else "")
    n_chunks = len(plan(s.shape, s.output.chunk_points))
    assert n_chunks > 20 and s.output.compress is compress
    in_flight = []
    original = netcdf.Dispatcher._dispatch

    def dispatch(self, i):
        original(self, i)
        in_flight.append(len(self.futures))

    monkeypatch.setattr(netcdf.Dispatcher, "_dispatch", dispatch)
    ds, path = sweep_to_file(s, tmp_path / "grid.nc")
    assert len(in_flight) == n_chunks  # every chunk evaluated exactly once
    assert max(in_flight) <= netcdf.AHEAD + 1
    _same(full, xr.open_dataset(path, engine="h5netcdf").load())
    _same(full, ds.load())  # the returned Dataset: data read back from the file
    assert ds["throughput_tok_s"].attrs["units"] == "tokens/s"


def test_interrupted_netcdf_write_leaves_nothing(tmp_path, monkeypatch):
    sweep_mod = sys.modules["dse.run.progress"]
    monkeypatch.setattr(sweep_mod, "bar", lambda enabled, **kw: Interrupt(3))
    with pytest.raises(KeyboardInterrupt):
        sweep_to_file(study(chunk=97), tmp_path / "grid.nc")
    assert list(tmp_path.iterdir()) == []


class Interrupt:
    """A progress bar that raises KeyboardInterrupt after ``n`` chunks."""

    def __init__(self, n):
        self.n = n

    def __call__(self, total):
        return self

    def update(self, _):
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt

    def close(self):
        pass


@pytest.mark.parametrize("target, by", [("grid.zarr", None), ("grid.nc", None),
                                        ("best.nc", '["tp"]')])
def test_interrupted_sweep_resumes_to_the_same_result(full, tmp_path, monkeypatch, target, by):
    sweep_mod = sys.modules["dse.run.progress"]

    s = study(chunk=200, by=by)
    out = tmp_path / target
    monkeypatch.setattr(sweep_mod, "bar", lambda enabled, **kw: Interrupt(5))
    with pytest.raises(KeyboardInterrupt):
        sweep_to_file(s, out, resume=True)
    partial = tmp_path / f".{target}.partial"
    assert not out.exists(), "no partial file looks complete"
    assert len(list((partial / "done").iterdir())) >= 4
    seen = []
    monkeypatch.setattr(sweep_mod, "bar", lambda enabled, **kw: None)
    from dse.run import cluster

    original = cluster.Runner.run

    def counting(self, fn, args, indices, on_done, progress=None):
        seen.extend(indices)
        return original(self, fn, args, indices, on_done, progress)

    monkeypatch.setattr(cluster.Runner, "run", counting)
    ds, path = sweep_to_file(s, out, resume=True)
    n_chunks = len(plan(s.shape, s.output.chunk_points))
    assert 0 < len(seen) <= n_chunks - 4  # finished chunks were not recomputed
    assert not partial.exists()
    result = xr.open_zarr(path).load() if target.endswith(".zarr") else xr.open_dataset(path).load()
    expect = full if by is None else dse.sweep(study(chunk=1 << 22, by=by))
    _same(expect, result)


def test_resume_refuses_a_different_study(tmp_path, monkeypatch):
    sweep_mod = sys.modules["dse.run.progress"]

    monkeypatch.setattr(sweep_mod, "bar", lambda enabled, **kw: Interrupt(2))
    with pytest.raises(KeyboardInterrupt):
        sweep_to_file(study(chunk=200), tmp_path / "g.zarr")
    monkeypatch.setattr(sweep_mod, "bar", lambda enabled, **kw: None)
    other = study(chunk=200).with_axes(tp=[1, 2])
    with pytest.raises(InputError, match="different study"):
        sweep_to_file(other, tmp_path / "g.zarr", resume=True)


def test_cli_streams_and_rejects_bad_scale_options(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text(GRID.format(chunk=500) + REDUCE.format(by='["hardware"]'))
    run = [sys.executable, "-m", "dse", "sweep", str(toml), "-o", str(tmp_path / "r.nc")]
    done = subprocess.run(run, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "streamed" in done.stdout and (tmp_path / "r.nc").exists()
    bad = subprocess.run(run + ["--scheduler", "tcp://127.0.0.1:9"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--scheduler" in bad.stderr and not list(tmp_path.glob(".*partial"))
    bad = subprocess.run(run + ["--workers", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--workers" in bad.stderr

"""Result files (dse.results.io): the netCDF written without dask's lock lookup is the one
xarray's to_netcdf writes, and a small sweep loads no dask (dse.results.lazydask)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import xarray as xr

import dse
from dse.results import lazydask
from dse.results.io import write_dataset
from dse.study import parse_study

from ..helpers import study_text


@pytest.fixture(scope="module")
def swept_small():
    study = parse_study(study_text(model=["llama-3-8b", "mixtral-8x7b"], hardware="h100-sxm",
                                   batch=[1, 8], usecase=["chat", "summarization"]), "<t>")
    return dse.sweep(study, progress=False)


@pytest.mark.parametrize("compress", [False, True])
def test_the_netcdf_is_xarrays(tmp_path, compress, swept_small):
    ds = swept_small
    assert all(isinstance(v.data, np.ndarray) for v in ds.variables.values())  # fast path
    ours = write_dataset(ds, tmp_path / "ours.nc", compress=compress)
    theirs = tmp_path / "theirs.nc"
    ds.to_netcdf(theirs, engine="h5netcdf", encoding={
        v: {"compression": "gzip", "compression_opts": 1} for v in ds.data_vars}
        if compress else None)
    with xr.open_dataset(ours) as a, xr.open_dataset(theirs) as b:
        assert a.identical(b)
        assert list(a.variables) == list(b.variables)
        for name in a.variables:
            for key in ("dtype", "zlib", "complevel", "chunksizes", "_FillValue"):
                mine, xarrays = a[name].encoding.get(key), b[name].encoding.get(key)
                assert mine == xarrays or np.isnan(mine) and np.isnan(xarrays), (name, key)
        assert a["ttft_s"].encoding.get("zlib", False) == compress


def test_a_lazy_dataset_is_computed_as_it_is_written(tmp_path):
    dask_array = pytest.importorskip("dask.array")
    ds = xr.Dataset({"x": (("a",), dask_array.arange(6, chunks=2))}, coords={"a": list("uvwxyz")})
    with xr.open_dataset(write_dataset(ds, tmp_path / "lazy.nc")) as back:
        assert back["x"].values.tolist() == [0, 1, 2, 3, 4, 5]


def test_a_small_sweep_loads_no_dask_and_dask_arrays_are_still_known(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from dse.cli import main
        assert main(["sweep", "studies/llama-serving.toml", "-o", r"{tmp_path / 'r.nc'}",
                     "-q"]) == 0
        print("dask.array" in sys.modules, "distributed" in sys.modules)
        import xarray as xr
        from dse.results.lazydask import DaskArray
        assert not isinstance(np.zeros(2), DaskArray)
        import dask.array as da
        v = xr.Variable(("a",), da.zeros(4, chunks=2))
        assert isinstance(v.data, da.Array) and v.chunks == ((2, 2),)
        assert isinstance(v.data, DaskArray)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=str(__import__("tests.conftest").conftest.ROOT))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:] == ["False", "False", "ok"]
    assert lazydask.install()  # in this process too (dask.array may be loaded: then no-op)

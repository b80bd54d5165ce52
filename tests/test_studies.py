"""Every example study under studies/ runs through the CLI and writes a sane Dataset."""

import pytest
import xarray as xr

from .conftest import STUDIES

ALL = sorted(p.name for p in STUDIES.glob("*.toml"))


@pytest.mark.parametrize("name", ALL)
def test_example_study_runs(name, swept):
    code, out = swept(name)  # dse sweep STUDY -o OUT -q, shared with the report tests
    assert code == 0
    ds = xr.open_dataset(out)
    assert ds.attrs["study"] == (STUDIES / name).read_text()
    for var in ds.data_vars.values():
        assert var.attrs["units"] and var.attrs["long_name"]
    feasible = ds["n_feasible"] if "n_feasible" in ds else ds["valid"]  # a reduction, or not
    assert int(feasible.sum()) > 0, "an example study should have feasible points"


@pytest.mark.parametrize("name", ALL)
def test_example_study_runs_through_the_library_too(name, swept):
    """``dse.sweep(path)`` gives what ``dse sweep`` wrote (a reduction: the same groups)."""
    import numpy as np

    import dse

    code, out = swept(name)
    ds, written = dse.sweep(STUDIES / name), xr.open_dataset(out)
    assert set(ds.data_vars) == set(written.data_vars)
    for var in ds.data_vars:
        np.testing.assert_array_equal(ds[var].values, written[var].values, err_msg=var)


SMALL = """[study]
name = "options"
[axes]
model = "llama-2-7b"
hardware = ["a100-80gb", "h100-sxm"]
batch = [1, 64]
tp = [1, 2]
[output]
"""
OPTIONS = {
    "variables_all": 'variables = "all"\n',  # dse.sweep(path) raised TypeError on this
    "variables_list": 'variables = ["ttft_s", "valid"]\n',
    "breakdown": "breakdown = true\n",
    "chunk_points": "chunk_points = 3\n",
    "compress": "compress = true\n",
    "workers": "workers = 1\n",
    "reduce": '[output.reduce]\nby = ["hardware"]\n',
}


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_output_option_through_library_and_cli(option, tmp_path):
    import numpy as np

    import dse
    from dse.cli import main

    path = tmp_path / "options.toml"
    path.write_text(SMALL + OPTIONS[option])
    out = tmp_path / "out.nc"
    assert main(["sweep", str(path), "-o", str(out), "-q"]) == 0
    ds, written = dse.sweep(path), xr.open_dataset(out)
    assert set(ds.data_vars) == set(written.data_vars)
    for var in ds.data_vars:
        np.testing.assert_array_equal(ds[var].values, written[var].values, err_msg=var)

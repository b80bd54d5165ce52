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

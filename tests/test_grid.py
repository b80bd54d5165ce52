"""Grid evaluation: pointwise agreement, chunking, dependency dims (dse.run)."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dse.run import chunks as grid
from dse.schema.outputs import REASON_BITS
from dse.study.output import Output
from dse.run.sweep import sweep

from .helpers import sweep_text


@pytest.fixture(scope="module")
def contract_grid():
    from dse.study import load_study

    from .conftest import STUDIES

    study = load_study(STUDIES / "llama-serving.toml")
    return study, sweep(study, progress=False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_grid_equals_pointwise_evaluation(contract_grid, data):
    """Any grid point equals the same configuration evaluated alone (all keys fixed)."""
    study, ds = contract_grid
    index = {a.name: data.draw(st.integers(0, len(a.values) - 1), label=a.name)
             for a in study.dims}
    fixed = {a.name: a.values[index[a.name]] for a in study.dims}
    alone = sweep(study.with_axes(**fixed), progress=False)
    assert alone.sizes == {}
    point = ds.isel(index)
    for name in ds.data_vars:
        a, b = point[name].values, alone[name].values
        if a.dtype.kind in "bu":
            assert a == b, name
        elif name.startswith("max_batch"):
            # floor() of a float32 quotient: XLA fuses the grid and the single point
            # differently, so a quotient a hair below an integer may floor one lower.
            np.testing.assert_allclose(a, b, atol=1.0, err_msg=name)
        else:
            np.testing.assert_allclose(a, b, rtol=2e-6, err_msg=name)


def test_chunked_equals_whole(contract_grid):
    study, whole = contract_grid
    small = dataclasses.replace(study, output=dataclasses.replace(study.output, chunk_points=37))
    assert len(grid.plan(small.shape, 37)) > 40
    chunked = sweep(small, progress=False)
    for name in whole.data_vars:
        np.testing.assert_array_equal(whole[name].values, chunked[name].values, err_msg=name)


@pytest.mark.parametrize("shape, budget", [((2, 3, 4), 5), ((7,), 3), ((3, 1, 5), 100),
                                           ((4, 4), 1), ((), 10), ((5, 6), 12)])
def test_plan_covers_every_point_once(shape, budget):
    if shape == ():
        assert len(grid.plan(shape, budget)) == 1
        return
    hits = np.zeros(shape, int)
    for c in grid.plan(shape, budget):
        assert c.length <= max(budget, 1) or c.axis == 0
        index = tuple(slice(o, o + 1) for o in c.outer) + (slice(c.start, c.stop),)
        hits[index] += 1
    assert (hits == 1).all()


def test_outputs_span_only_their_dependencies(contract_grid):
    study, ds = contract_grid
    assert ds["n_params"].dims == ("model",)
    assert set(ds["weight_bytes"].dims) == {"model", "tp", "pp", "weight_bits"}
    assert ds["ttft_s"].dims == tuple(a.name for a in study.dims)


def test_indivisible_tp_is_marked_not_raised():
    ds = sweep_text("""
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
tp = [1, 3, 64]
""")
    flags = ds["reason"].values
    bit = REASON_BITS["tp_indivisible"]
    assert list(flags & bit) == [0, bit, bit]
    assert list(ds["valid"].values) == [True, False, False]


def test_context_too_long_is_marked():
    ds = sweep_text("""
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
input_len = [1000, 4000]
output_len = 200
""")
    assert list(ds["reason"].values & REASON_BITS["context_too_long"] > 0) == [False, True]

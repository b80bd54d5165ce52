"""Chunk plans (dse/run/chunks.py): every point once, and a chunked sweep equal to the
whole grid in one piece."""

import dataclasses

import numpy as np
import pytest

from dse.run import chunks as grid
from dse.run.sweep import sweep


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

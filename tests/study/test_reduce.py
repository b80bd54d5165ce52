"""The [output.reduce] section and output.workers: bad input names its key
(study/reduce.py, study/output.py)."""

from __future__ import annotations

import pytest

from dse.errors import InputError
from dse.study import parse_study

from ..helpers import GRID


@pytest.mark.parametrize("text, key", [
    ('[output.reduce]\nby = ["nope"]\n', "output.reduce.by"),
    ('[output.reduce]\nobjective = "fits"\n', "output.reduce.objective"),
    ('[output.reduce]\ndirection = "up"\n', "output.reduce.direction"),
    ('[output.reduce]\nconstraints = ["ttft <= 1"]\n', "output.reduce.constraints"),
    ('[output.reduce]\nhistogram = { variable = "tpot_s", range = [0, 1], log = true }\n',
     "output.reduce.histogram.range"),
    ('[output.reduce]\nsort = 1\n', "output.reduce.sort"),
    ('workers = 0\n', "output.workers"),
])
def test_bad_reduce_and_workers_keys(text, key):
    base = GRID.format(chunk=97)
    if text.startswith("workers"):
        base = base.replace("[output]\n", "[output]\n" + text)
        text = ""
    with pytest.raises(InputError) as err:
        parse_study(base + text, "s.toml")
    assert key in str(err.value) and "\n" not in str(err.value)

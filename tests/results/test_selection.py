"""One meaning of feasible and best: ``[output.reduce]`` (the streamed reduction), ``dse
search``'s exhaustive comparison, the printed summary and the ``ds.dse`` accessor pick
the same point for the same objective and constraints, at a strict bound met with
equality, with NaN objectives and with out-of-memory points that would otherwise win.

The expected point is computed here with plain numpy from the full sweep (a masked
argmax, first in grid order), independently of dse's selection code.
"""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.results.summary import best as summary_best
from dse.search.results import exhaustive
from dse.study import parse_study

AXES = """
[study]
name = "select"
[axes]
model = ["llama-2-7b", "llama-2-13b"]
hardware = ["a40", "a100-80gb", "h100-sxm"]
tp = [1, 2]
batch = [1, 32, 512]
input_len = [1024, 4096]
output_len = 256
"""


def _sections(objective, direction, constraints):
    listed = "[" + ", ".join(f'"{c}"' for c in constraints) + "]"
    return (f'[search]\nobjective = "{objective}"\ndirection = "{direction}"\n'
            f"constraints = {listed}\nexhaustive = true\n"
            f'[output.reduce]\nobjective = "{objective}"\ndirection = "{direction}"\n'
            f"constraints = {listed}\n")


@pytest.fixture(scope="module")
def grid():
    return dse.sweep(parse_study(AXES, "<select>"))


def _expected(ds, objective, direction, keep) -> dict:
    """Masked argmax with numpy: valid, ``keep``, objective not NaN; first in C order."""
    dims = [d for d in ds.dims]
    full = {n: ds[n].broadcast_like(ds["valid"]).transpose(*dims).values
            for n in (objective, "valid", "ttft_s")}
    value = full[objective].astype(np.float64)
    ok = full["valid"].astype(bool) & keep(full) & ~np.isnan(value)
    assert ok.any()
    score = np.where(ok, value if direction == "maximize" else -value, -np.inf)
    index = np.unravel_index(int(np.argmax(score)), score.shape)
    return {d: ds[d].values[i].item() for d, i in zip(dims, index)}


def _three_ways(grid, objective, direction, constraints) -> list[dict]:
    study = parse_study(AXES + _sections(objective, direction, constraints), "<select>")
    dims = [a.name for a in study.dims]
    reduced = dse.sweep(study)
    assert int(reduced["n_feasible"]) > 0
    by_reduce = {d: reduced[f"best_{d}"].item() for d in dims}
    by_search = exhaustive(study, study.search, [])["axes"]
    row = summary_best(grid, objective, k=1, direction=direction,
                       constraints=study.search.constraints)[0]
    by_summary = {d: row[d] for d in dims}
    point = grid.dse.best(objective, direction, constraints)
    by_accessor = {d: point[d].item() for d in dims}
    return [by_reduce, by_search, by_summary, by_accessor]


def _plain(value):
    return value if isinstance(value, str) else float(value)


def _same(picks: list[dict], expected: dict) -> None:
    for pick in picks:
        assert {k: _plain(v) for k, v in pick.items()} == {k: _plain(v)
                                                          for k, v in expected.items()}


def test_out_of_memory_points_are_never_best(grid):
    """The largest batch with the longest prompt on one device runs out of memory, yet
    its throughput (computed all the same) beats every point that fits."""
    objective = "throughput_tok_s"
    value = grid[objective].broadcast_like(grid["valid"])
    assert float(value.max()) > float(value.where(grid["valid"]).max())  # an OOM point wins
    expected = _expected(grid, objective, "maximize", lambda f: True)
    _same(_three_ways(grid, objective, "maximize", []), expected)


def test_strict_and_inclusive_bounds_at_equality(grid):
    """``ttft_s < T`` excludes a point whose TTFT is exactly T; ``ttft_s <= T`` keeps it."""
    objective = "throughput_tok_s"
    top = _expected(grid, objective, "maximize", lambda f: True)
    bound = float(grid["ttft_s"].sel({k: v for k, v in top.items()
                                      if k in grid["ttft_s"].dims}).item())
    text = repr(bound)  # float32 value, written exactly
    inclusive = _expected(grid, objective, "maximize", lambda f: f["ttft_s"] <= bound)
    strict = _expected(grid, objective, "maximize", lambda f: f["ttft_s"] < bound)
    assert inclusive == top and strict != top
    _same(_three_ways(grid, objective, "maximize", [f"ttft_s <= {text}"]), inclusive)
    _same(_three_ways(grid, objective, "maximize", [f"ttft_s < {text}"]), strict)


def test_nan_objectives_are_never_best(grid):
    """The A40 has no price in the catalogue: its cost per token is NaN, and NaN is
    neither the cheapest nor any other best."""
    objective = "cost_per_mtok"
    assert np.isnan(grid[objective].sel(hardware="a40")).all()
    expected = _expected(grid, objective, "minimize", lambda f: True)
    assert expected["hardware"] != "a40"
    _same(_three_ways(grid, objective, "minimize", []), expected)
    # the direction defaults to the output's own (less cost is better)
    assert grid.dse.direction(objective) == "minimize"

"""dse.hugepages: whether XLA's buffers get transparent huge pages, and the in-memory
sweep's block size that follows from it (dse.run.chunks.chunk_budget)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from dse.run import chunks as grid, hugepages
from dse.run.memory import run
from dse.study import parse_study

from ..helpers import GRID


@pytest.mark.parametrize("value, expected", [
    ("glibc.malloc.hugetlb=1", True),
    ("glibc.malloc.check=0:glibc.malloc.hugetlb=1", True),
    ("glibc.malloc.hugetlb=0", False),
    ("glibc.malloc.hugetlb=10", False),
    ("glibc.malloc.hugetlb=2", False),  # hugetlbfs pages, not transparent ones
    ("", False),
])
def test_tunable_is_read_from_the_glibc_syntax(value, expected):
    assert hugepages.tunable_set(value) is expected


def test_environment_adds_the_setting_and_keeps_other_tunables():
    env = hugepages.environment({"GLIBC_TUNABLES": "glibc.malloc.check=0:glibc.malloc.hugetlb=0",
                                 "PATH": "/bin"})
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.check=0:glibc.malloc.hugetlb=1"
    assert env["PATH"] == "/bin"
    assert hugepages.environment({})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"


@pytest.mark.parametrize("text, mode", [("always [madvise] never\n", "madvise"),
                                        ("[always] madvise never\n", "always"),
                                        ("always madvise [never]\n", "never")])
def test_thp_mode_is_the_bracketed_one(tmp_path, monkeypatch, text, mode):
    path = tmp_path / "enabled"
    path.write_text(text)
    monkeypatch.setattr(hugepages, "THP_ENABLED", path)
    assert hugepages.thp_mode() == mode
    monkeypatch.setattr(hugepages, "THP_ENABLED", tmp_path / "missing")
    assert hugepages.thp_mode() == ""


def _probe(env) -> str:
    code = "from dse.run import hugepages; print(hugepages.for_malloc())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.mark.skipif(not hugepages.available() or hugepages.thp_mode() != "madvise",
                    reason="needs glibc >= 2.35 and transparent huge pages on madvise")
def test_a_process_started_with_the_setting_has_them():
    """glibc reads the tunable from the environment a process starts with."""
    on, off = hugepages.environment(), hugepages.environment(on=False)
    assert (_probe(on), _probe(off)) == ("True", "False")


@pytest.fixture(scope="module")
def study():
    """test_scale's grid with the block size left to dse (8,640 points)."""
    return parse_study(GRID.replace("chunk_points = {chunk}\n", ""), "<test>")


def test_in_memory_sweep_takes_the_grid_in_one_piece_with_huge_pages(study, monkeypatch):
    """Default block: 2^22 points, or 2^24 for an in-memory sweep when XLA's buffers get
    huge pages (not with the breakdown's 28 values per point); a study's own
    chunk_points always holds."""
    assert study.output.chunk_points is None
    for flag, in_memory in ((False, 1 << 22), (True, 1 << 24)):
        monkeypatch.setattr(hugepages, "for_malloc", lambda flag=flag: flag)
        assert grid.chunk_budget(study, in_memory=True) == in_memory
        assert grid.chunk_budget(study) == 1 << 22  # streamed sweeps keep their blocks
    own = dataclasses.replace(study, output=dataclasses.replace(study.output, chunk_points=999))
    assert grid.chunk_budget(own, in_memory=True) == 999
    breakdown = dataclasses.replace(study, output=dataclasses.replace(study.output,
                                                                      breakdown=True))
    assert grid.chunk_budget(breakdown, in_memory=True) == 1 << 22


def test_one_piece_and_chunks_give_the_same_values(study, monkeypatch):
    """The grid in 12 blocks of up to 300 points (copied into numpy arrays) and in one piece
    (XLA's buffers kept as the results): equal to float32 rounding (4 ulp)."""
    monkeypatch.setattr(grid, "DEFAULT_CHUNK_POINTS", 300)
    monkeypatch.setattr(hugepages, "for_malloc", lambda: False)
    assert len(grid.plan(study.shape, grid.chunk_budget(study, in_memory=True))) > 10
    chunked, _ = run(study)
    monkeypatch.setattr(hugepages, "for_malloc", lambda: True)
    assert len(grid.plan(study.shape, grid.chunk_budget(study, in_memory=True))) == 1
    whole, _ = run(study)
    for name, a in chunked.items():
        if a.dtype.kind == "f":
            np.testing.assert_allclose(whole[name], a, rtol=4 * 2.0 ** -23, err_msg=name)
        else:
            np.testing.assert_array_equal(whole[name], a, err_msg=name)

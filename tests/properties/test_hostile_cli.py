"""Property (issue 36, the hostile corpus): generated command lines, each verb with its
flags given hostile values and hostile files (missing, a directory, an endless device,
junk bytes, a foreign encoding), end with exit code 0 or 2 and an error that is dse's
(argparse's usage line and one ``dse ...: error:`` line, or dse's one line), never a
traceback, and write nothing."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dse.cli import build_parser, main

SUBPARSERS = next(a for a in build_parser()._actions
                  if isinstance(a, argparse._SubParsersAction)).choices
FLAGS = {verb: [a.option_strings[0] for a in p._actions
                if a.option_strings and a.option_strings[0] != "-h"]
         for verb, p in SUBPARSERS.items()}
TAKES = {verb: {a.option_strings[0] for a in p._actions if a.option_strings and a.nargs != 0}
         for verb, p in SUBPARSERS.items()}
HOSTILE = ["-1", "0", "abc", "1e300", "", "nan", "inf", "99999999999999999999", "../..",
           "x" * 300, "tp", "ttft_s <= ", "sglang"]
POSITIONAL = {"sweep": 1, "search": 1, "plan": 1, "sensitivity": 1, "validate": 1,
              "calibrate": 1, "report": 1, "plot": 2}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    (root / "junk.toml").write_bytes(b"\x00\xff junk [[[ \n")
    (root / "latin.csv").write_bytes(b"id,kind\n\xe9,train\n")
    (root / "empty.nc").write_bytes(b"")
    (root / "folder").mkdir()
    (root / "zero.toml").symlink_to("/dev/zero")
    return root


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_hostile_command_line_ends_in_an_error_of_dses(files, data, capsys):
    verb = data.draw(st.sampled_from(sorted(SUBPARSERS)))
    paths = ["missing.toml", "folder", "zero.toml", "junk.toml", "latin.csv", "empty.nc",
             "y" * 300 + ".toml"]
    argv = [verb] + [str(files / data.draw(st.sampled_from(paths)))
                     for _ in range(POSITIONAL.get(verb, 0))]
    for flag in data.draw(st.lists(st.sampled_from(FLAGS[verb] or ["--help-me"]), max_size=3,
                                   unique=True)):
        argv.append(flag)
        if flag in TAKES[verb]:
            value = data.draw(st.sampled_from(HOSTILE + paths))
            argv.append(str(files / value) if value in paths else value)
    before = sorted(p.name for p in files.iterdir())
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse: usage and one error line, exit 2
        code = stop.code
    out = capsys.readouterr()
    assert code in (0, 2), (argv, code, out.err[-500:])
    assert "Traceback" not in out.err and "Traceback" not in out.out, argv
    if code == 2:
        last = out.err.strip().splitlines()[-1]
        assert last.startswith("dse") and "error" in last, (argv, out.err[-500:])
    assert sorted(p.name for p in files.iterdir()) == before, argv

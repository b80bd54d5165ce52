"""Progress bars on a terminal: every sweep, search and sensitivity shows one (tqdm) once
it runs past a delay, under a pseudo-terminal as a user's shell gives it; ``--no-progress``
and a pipe show none."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

STUDY = """[study]
name = "bars"
[axes]
model = "llama-2-7b"
hardware = ["a100-80gb", "h100-sxm"]
batch = [1, 8, 64]
tp = [1, 2]
[search]
objective = "throughput_tok_s"
n_trials = 16
batch_size = 8
storage = ":memory:"
[sensitivity]
params = ["hbm_bw"]
"""


def _run_on_a_terminal(argv, tmp_path) -> str:
    """``python -m dse ARGV`` with stderr on a pseudo-terminal; what the terminal got."""
    leader, follower = pty.openpty()
    # a terminal 24 x 120, as a user's has (a fresh pseudo-terminal is 0 x 0)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    env = dict(os.environ, DSE_PROGRESS_DELAY="0")
    proc = subprocess.Popen([sys.executable, "-m", "dse", *argv], stdout=subprocess.DEVNULL,
                            stderr=follower, env=env, cwd=tmp_path)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize("verb, unit", [("sweep", "pt"), ("search", "trial"),
                                        ("sensitivity", "pt")])
def test_a_bar_on_a_terminal(verb, unit, tmp_path):
    study = tmp_path / "bars.toml"
    study.write_text(STUDY)
    out = tmp_path / ("r.nc" if verb != "search" else "s.nc")
    shown = _run_on_a_terminal([verb, str(study), "-o", str(out)], tmp_path)
    assert "bars:" in shown and "%|" in shown and unit in shown, shown[-500:]


def test_no_progress_hides_the_bar_on_a_terminal(tmp_path):
    """--no-progress on the cheapest verb (search and sensitivity hand the same flag to the
    same dse.run.progress.bar)."""
    study = tmp_path / "bars.toml"
    study.write_text(STUDY)
    quiet = _run_on_a_terminal(["sweep", str(study), "-o", str(tmp_path / "r.nc"),
                                "--no-progress"], tmp_path)
    assert "%|" not in quiet


def test_no_bar_into_a_pipe(tmp_path):
    study = tmp_path / "bars.toml"
    study.write_text(STUDY)
    done = subprocess.run([sys.executable, "-m", "dse", "sweep", str(study), "-o",
                           str(tmp_path / "r.nc")], capture_output=True, text=True,
                          env=dict(os.environ, DSE_PROGRESS_DELAY="0"), check=True)
    assert "%|" not in done.stderr


def test_the_bar_says_the_evaluator_is_being_prepared_until_the_first_chunk(tmp_path):
    """A first run compiles before any point is done: the bar says so while its clock
    runs, and drops the note once points come."""
    study = tmp_path / "bars.toml"
    study.write_text(STUDY)
    shown = _run_on_a_terminal(["sweep", str(study), "-o", str(tmp_path / "r.nc")], tmp_path)
    from dse.run.progress import PREPARING

    assert PREPARING in shown, shown[-500:]
    assert PREPARING not in shown[shown.rindex("100%"):], shown[-500:]

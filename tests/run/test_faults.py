"""Faults around a run: the compilation cache is optional (a place it cannot use is said
once and skipped: issue 36 row 6, a file, /dev/null or an unwritable folder was a
FileExistsError or OSError traceback), and a killed writer's temporaries do not stay."""

import jax
import pytest
import xarray as xr

from dse.cli import main

STUDY = """[study]
name = "cache"
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
batch = [1, 8]
"""


@pytest.mark.parametrize("where", ["a file", "under a file", "/dev/null"])
def test_an_unusable_cache_is_said_once_and_the_run_goes_on(where, tmp_path, monkeypatch,
                                                            capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = {"a file": blocker, "under a file": blocker / "jax", "/dev/null": "/dev/null"}[where]
    monkeypatch.setenv("DSE_CACHE_DIR", str(cache))
    study, out = tmp_path / "s.toml", tmp_path / "out.nc"
    study.write_text(STUDY)
    before = jax.config.jax_compilation_cache_dir
    assert main(["sweep", str(study), "-o", str(out), "-q"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not usable" in err and "running without it" in err
    assert "Traceback" not in err
    assert int(xr.open_dataset(out).valid.sum()) == 2
    assert jax.config.jax_compilation_cache_dir == before  # the run's own cache untouched
    assert blocker.read_text() == ""


def test_a_killed_writers_temporary_goes_with_the_next_run_of_its_target(tmp_path):
    # issue 36 row 9: `kill -9` of a sweep to netCDF left a 204 MB .NAME.nc.tmp-PID-*
    # forever. The next write of the same target removes the temporaries of this host's
    # dead processes (an older dse's names too) and leaves a live process's and another
    # host's (a shared file system) alone.
    import os
    import subprocess
    import sys

    from dse import atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    study, out = tmp_path / "s.toml", tmp_path / "out.nc"
    study.write_text(STUDY)
    host = atomic._HOST
    left = [tmp_path / f".out.nc.tmp-{host}-{dead}-0badc0de",
            tmp_path / f".out.nc.tmp-{dead}-0badc0de"]  # as dse wrote it before
    kept = [tmp_path / f".out.nc.tmp-{host}-{os.getpid()}-0badc0de",  # alive: this test
            tmp_path / f".out.nc.tmp-another_host-{dead}-0badc0de",
            tmp_path / f".other.nc.tmp-{host}-{dead}-0badc0de"]  # another target's
    for p in left + kept:
        p.write_bytes(b"partial")
    assert main(["sweep", str(study), "-o", str(out), "-q"]) == 0
    assert out.exists() and not any(p.exists() for p in left) and all(p.exists() for p in kept)


def test_a_damaged_compilation_cache_entry_is_replaced(tmp_path):
    # issue 36 row 7: a truncated entry of XLA's cache (a run killed while JAX wrote it in
    # place) gave correct values, but JAX warned and recompiled on every later run: it
    # never replaces a file that is there. dse removes the damaged entries on JAX's
    # warning, says so in one line, and the next run reads the rewritten entry quietly.
    import os
    import subprocess
    import sys

    study = tmp_path / "s.toml"
    study.write_text(STUDY)
    env = dict(os.environ, DSE_CACHE_DIR=str(tmp_path / "cache"))

    def sweep():
        run = subprocess.run([sys.executable, "-m", "dse", "sweep", str(study), "-o",
                              str(tmp_path / "o.nc"), "-q"], env=env, capture_output=True,
                             text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        return run.stderr

    assert sweep() == ""
    entries = sorted((tmp_path / "cache").glob("*-cache"), key=lambda p: p.stat().st_size)
    damaged = entries[-1]
    whole = damaged.read_bytes()
    damaged.write_bytes(whole[:len(whole) // 2])
    err = sweep()
    assert err.count("\n") == 1 and "damaged entry of the compilation cache" in err
    assert "1 removed" in err and "site-packages" not in err
    assert damaged.exists() and damaged.stat().st_size > len(whole) // 2  # written again
    assert sweep() == ""


def test_sweeps_killed_at_random_moments_leave_the_whole_result_or_none(tmp_path):
    # issue 36: a sweep killed (SIGKILL, no cleanup of its own) at 10 random moments, five
    # to netCDF and five to zarr, from start-up through evaluation and writing: after each
    # kill the target is absent or the whole result, and the next run of the same target
    # completes it identically to an uninterrupted one and leaves no temporary behind.
    import os
    import random
    import re
    import signal
    import subprocess
    import sys
    import time

    import numpy as np

    from ..conftest import ROOT

    text = (ROOT / "studies" / "llama-serving.toml").read_text()
    study = tmp_path / "s.toml"
    study.write_text(re.sub(r"(?m)^batch = .*$", "batch = { start = 1, stop = 256, num = 60 }",
                            text))

    def command(out):
        return [sys.executable, "-m", "dse", "sweep", str(study), "-o", str(out), "-q"]

    def read(out):
        ds = xr.open_zarr(out) if out.suffix == ".zarr" else xr.open_dataset(out)
        return {v: ds[v].values for v in ds.data_vars}

    rng = random.Random(36)
    for suffix in (".nc", ".zarr"):
        reference = tmp_path / f"reference{suffix}"
        subprocess.run(command(reference), check=True, capture_output=True, timeout=600)
        # the moments are drawn over a run as long as the killed ones: with the program
        # compiled (the first run's compile would put most moments after their end)
        start = time.perf_counter()
        subprocess.run(command(tmp_path / f"timed{suffix}"), check=True, capture_output=True,
                       timeout=600)
        whole = time.perf_counter() - start
        expect = read(reference)
        out = tmp_path / f"out{suffix}"
        for _ in range(5):
            proc = subprocess.Popen(command(out), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            try:  # a run that ends before its moment is not waited for
                proc.wait(timeout=rng.uniform(0.2, 1.1) * whole)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            if out.exists():  # finished before the kill, or completed earlier: whole
                got = read(out)
                assert got.keys() == expect.keys()
                for v in expect:
                    np.testing.assert_array_equal(got[v], expect[v], err_msg=v)
        subprocess.run(command(out), check=True, capture_output=True, timeout=600)
        got = read(out)
        for v in expect:
            np.testing.assert_array_equal(got[v], expect[v], err_msg=v)
        left = [p.name for p in tmp_path.iterdir() if p.name.startswith(f".out{suffix}")]
        assert left == [], left

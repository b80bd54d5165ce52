"""Streamed sweeps across processes and devices: a real dask LocalCluster (2 worker
processes on loopback) gives the in-memory result, a worker killed mid-sweep costs
nothing, two XLA host devices in one process and another process (another hash seed)
give bit-identical results; the XLA flags a run sets (``import dse`` sets none), and the
optimization barriers they keep, change no value.

References are the in-memory sweep, independent of the streaming code (as in
test_scale.py, whose grid and helpers these tests share).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading

import pytest
import xarray as xr

import dse
from dse.run.sweep import sweep_to_file

from ..helpers import GRID, REDUCE
from .test_scale import Interrupt, _same, study


@pytest.fixture(scope="module")
def full():
    return dse.sweep(study(chunk=1 << 22))


@pytest.fixture(scope="module")
def cluster():
    import distributed  # a core dependency: a missing install must fail, not skip
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None,
                                  env={"DSE_WORKER": "1"}) as c:
        yield c


def test_local_cluster_gives_the_in_memory_result(full, cluster, tmp_path):
    ds, path = sweep_to_file(study(chunk=97), tmp_path / "grid.zarr",
                             scheduler=cluster.scheduler_address)
    _same(full, xr.open_zarr(path).load())
    by = '["model", "tp"]'
    local = dse.sweep(study(chunk=97, by=by))
    remote = dse.sweep(study(chunk=97, by=by), scheduler=cluster.scheduler_address)
    _same(local, remote)


def test_killed_worker_mid_sweep_leaves_a_complete_identical_result(full, cluster, tmp_path,
                                                                    monkeypatch):
    from distributed import Client

    sweep_mod = sys.modules["dse.run.progress"]

    with Client(cluster.scheduler_address) as client:
        pids = list(client.run(os.getpid).values())
    killed = threading.Event()

    class KillAfterFirst(Interrupt):
        def update(self, _):
            if not killed.is_set():
                os.kill(pids[0], signal.SIGKILL)
                killed.set()

    monkeypatch.setattr(sweep_mod, "bar", lambda enabled, **kw: KillAfterFirst(0))
    ds, path = sweep_to_file(study(chunk=53), tmp_path / "grid.zarr",
                             scheduler=cluster.scheduler_address)
    assert killed.is_set()
    _same(full, xr.open_zarr(path).load())


def test_results_do_not_depend_on_the_process(full, tmp_path):
    """The study in another process with another hash seed: bit-identical (summation
    order once followed set iteration order, which the seed changes)."""
    script = ("import sys, dse; from dse.study import parse_study; "
              f"ds = dse.sweep(parse_study({GRID.format(chunk=1 << 22)!r})); "
              "ds.drop_attrs(deep=False).to_netcdf(sys.argv[1], engine='h5netcdf')")
    path = tmp_path / "other.nc"
    seed = str(1 + int(os.environ.get("PYTHONHASHSEED", "0") or 0))
    subprocess.run([sys.executable, "-c", script, str(path)], check=True,
                   env=dict(os.environ, PYTHONHASHSEED=seed))
    _same(full, xr.open_dataset(path).load())


MULTI_DEVICE = """
import sys
import dse
dse.configure_xla()  # first: dse asks XLA for the host devices before JAX starts
import jax
from dse.core.evaluator import Evaluator
from dse.run import devices
from dse.study import parse_study
from dse.run.sweep import sweep_to_file
assert len(jax.devices()) == 2, jax.devices()
devices.MULTI_DEVICE_MIN_POINTS = 0  # the test grid is small
used, original = [], Evaluator.on
def on(self, point, device):
    used[-1].add(device.id)
    return original(self, point, device)
Evaluator.on = on
grid, reduce, out = sys.argv[1:]
used.append(set())  # the reduction's task pipeline (zarr writes run the same way)
sweep_to_file(parse_study(reduce), out + "/best.nc")
used.append(set())  # the netCDF writer
sweep_to_file(parse_study(grid), out + "/grid.nc")
print(*(sorted(u) for u in used))
"""


def test_two_host_devices_give_the_same_results(full, tmp_path):
    """Chunks round-robin over two XLA host devices (dse.run.devices) in one process, in
    the engine's task pipeline (a reduction) and the netCDF writer: the same results
    as one device."""
    by = '["model", "tp"]'
    done = subprocess.run(
        [sys.executable, "-c", MULTI_DEVICE, GRID.format(chunk=97),
         GRID.format(chunk=97) + REDUCE.format(by=by), str(tmp_path)],
        capture_output=True, text=True,
        env={**{k: v for k, v in os.environ.items() if k != "DSE_WORKER"},  # (cluster fixture)
             "DSE_HOST_DEVICES": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[0, 1] [0, 1]", done.stdout  # both devices ran chunks
    _same(full, xr.open_dataset(tmp_path / "grid.nc").load())
    _same(dse.sweep(study(chunk=97, by=by)), xr.open_dataset(tmp_path / "best.nc").load())


BARRIERS_DROPPED = """
import sys
import dse
from dse.core import fusion
from dse.study import parse_study
fusion.CPU_OPTIONS.pop("xla_disable_hlo_passes")  # as on a GPU: XLA drops the barriers
ds = dse.sweep(parse_study(sys.argv[1], "<test>"))
ds.to_netcdf(sys.argv[2])
"""


def _env_without_flags():
    return {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "DSE_WORKER")}


TINY = '[study]\nname = "t"\n[axes]\nmodel = "llama-3.2-1b"\nhardware = "h100-sxm"\n'


def test_import_changes_nothing_and_a_run_configures_xla():
    """``import dse`` leaves the environment as it was (and loads neither JAX nor
    xarray); configuring XLA (a run does it, or dse.configure_xla()) asks for one host
    device per core before JAX starts, also after ``import jax``
    (which does not start XLA), leaving a flag the user set alone."""
    env = {**_env_without_flags(), "DSE_HOST_DEVICES": "3"}

    def run(script):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=env, check=True)
        assert done.stderr == ""  # no warning
        return done.stdout.split()

    assert run("import os, sys; before = dict(os.environ); import dse; "
               "print(dict(os.environ) == before, 'jax' in sys.modules, "
               "'xarray' in sys.modules)") == ["True", "False", "False"]
    for first in ("", "import jax; "):
        assert run(first + "import os, dse; dse.configure_xla(); "
                   "print(os.environ['XLA_FLAGS'])") == [
            "--xla_force_host_platform_device_count=3"]
    # a sweep configures XLA before its evaluator starts JAX, and XLA reads the flags
    assert run(f"import jax, dse; dse.sweep(dse.parse_study({TINY!r})); "
               "print(jax.device_count())") == ["3"]
    env["XLA_FLAGS"] = "--xla_disable_hlo_passes=foo"
    assert sorted(run("import os, dse; dse.configure_xla(); print(os.environ['XLA_FLAGS'])")) == [
        "--xla_disable_hlo_passes=foo", "--xla_force_host_platform_device_count=3"]


def test_kept_barriers_change_no_value(full, tmp_path):
    """The barriers that keep TTFT, TPOT and the phase sums out of their consumers'
    fusions (dse.core.fusion.computed_once) are identities: a process whose programs
    are compiled without the CPU's option that keeps them (as on a GPU, where XLA drops
    them) gives the same values. Fused differently,
    float32 rounding may differ in the last place (contracted multiply-adds), hence
    rtol = 4 float32 ulp rather than bit equality."""
    path = tmp_path / "dropped.nc"
    subprocess.run([sys.executable, "-c", BARRIERS_DROPPED, GRID.format(chunk=1 << 22),
                    str(path)], check=True, env=_env_without_flags())
    dropped = xr.open_dataset(path).load()
    for name in full.data_vars:
        if full[name].dtype.kind == "f":
            xr.testing.assert_allclose(full[name], dropped[name], rtol=4 * 2.0 ** -23, atol=0)
        else:
            xr.testing.assert_equal(full[name], dropped[name])


def test_no_cpu_only_switch_reaches_another_backend():
    """XLA_FLAGS binds every backend in a process, so dse sets no CPU-only pass or switch
    there (XLA:GPU fails on a kept barrier: "Unsupported instruction opcode:
    opt-barrier"); the CPU's kept barriers are an option of programs compiled for the
    CPU alone. Checked without a GPU: the flags, the per-platform options, and the
    compiled CPU program, which keeps the barrier only with its option."""
    import jax
    import jax.numpy as jnp

    from dse.core import fusion
    from dse.run import xla

    for current in ("", "--xla_force_host_platform_device_count=2"):
        assert not [f for f in xla.flags(current) if f.startswith(xla.CPU_ONLY_PREFIXES)]
    for platform in ("gpu", "cuda", "rocm", "tpu", "METAL"):
        assert fusion.compiler_options(platform) == {}
    assert fusion.compiler_options("cpu") == {"xla_disable_hlo_passes": "cse_barrier_expander",
                                              "xla_cpu_experimental_ynn_fusion_type": "",
                                              "xla_cpu_use_fusion_emitters": False}

    def f(x):
        (y,) = fusion.computed_once(jnp.exp(x) * 3)
        return y + 1, y * 2

    x = jnp.ones(64)
    kept = fusion.jit(f).on("cpu").lower(x).compile().as_text()
    plain = jax.jit(f).lower(x).compile().as_text()
    assert "opt-barrier" in kept and "opt-barrier" not in plain
    first, second = fusion.jit(f)(x)  # the default backend's program: 3e + 1 and 6e
    assert float(first[0]) == pytest.approx(3 * math.e + 1, rel=1e-6)
    assert float(second[-1]) == pytest.approx(6 * math.e, rel=1e-6)

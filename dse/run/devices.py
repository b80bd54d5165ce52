"""Every core from one process: one XLA CPU device per core.

XLA:CPU runs each elementwise kernel of a program like the evaluator on one core
(independent kernels side by side), and one device runs one program at a time. Asked
before it starts, XLA makes several host devices
(``--xla_force_host_platform_device_count``); chunks dispatched round-robin to them
compute side by side, with no worker processes to start (each device compiles its
own copy of the program, a load from the on-disk cache after the first run).
When a run starts dse asks for one device per usable core (:mod:`dse.run.xla`) unless
XLA has already started, ``XLA_FLAGS`` already sets a count, or ``DSE_HOST_DEVICES`` says
otherwise (``DSE_HOST_DEVICES=1``: one device, JAX's default; read again at each
sweep, it also caps how many of the devices a sweep uses).

Local dask worker processes (``--workers``) are pinned to one core each and use one
device.
"""

from __future__ import annotations

import os

FLAG = "--xla_force_host_platform_device_count"
# Below this size (points x evaluations per point) a second host device's own
# compilation (~3 s without the on-disk cache) costs more than its core saves.
MULTI_DEVICE_MIN_POINTS = 2e8


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def requested_count() -> int:
    """Host devices to ask XLA for: ``$DSE_HOST_DEVICES`` or one per usable core."""
    return _env_count() or usable_cores()


def _env_count() -> int | None:
    env = os.environ.get("DSE_HOST_DEVICES", "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else None


def host_devices() -> list:
    """The CPU devices chunks are spread over: all of them, at most
    ``$DSE_HOST_DEVICES`` (read at each call), one in a pinned worker process."""
    import jax

    devices = jax.local_devices(backend="cpu")
    if os.environ.get("DSE_WORKER") == "1":
        return devices[:1]
    return devices[:_env_count() or len(devices)]


def local_devices(study) -> list | None:
    """The devices a streamed sweep spreads its chunks over (None: the default device),
    once the sweep repays their compilation: on the CPU every host device; where JAX's
    default backend is an accelerator, its devices (several GPUs, say), never the host."""
    if study.size * study.evaluation_width < MULTI_DEVICE_MIN_POINTS:
        return None
    import jax

    if jax.default_backend() != "cpu":
        accelerators = jax.local_devices()
        return accelerators if len(accelerators) > 1 else None
    return host_devices()

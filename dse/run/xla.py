"""What dse asks of XLA, set when a run starts (or by an explicit :func:`configure`), not
when dse is imported. XLA reads ``XLA_FLAGS`` once, when its backend starts:

- one host device per usable core (:mod:`dse.run.devices`);
- optimization barriers kept through fusion. The evaluator marks the few values many
  full-grid outputs derive from (:mod:`dse.core.fusion`) and the small values that
  grid-sized kernels read (:mod:`dse.core.staging`) with
  ``jax.lax.optimization_barrier``; XLA:CPU removes barriers before fusion (its
  ``cse_barrier_expander`` pass) unless that pass is disabled. Values are the same either
  way (to the last place or so); only the speed differs.

Every runner in :mod:`dse.run` calls :func:`configure` before it evaluates, and the CLI
at start. If JAX's backend has already started (something ran in JAX first), nothing is
changed and one warning says so; call :func:`configure` (``dse.configure_xla()``) before
running anything in JAX to avoid it. A flag ``XLA_FLAGS`` already sets is left as set.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from . import devices

KEEP_BARRIERS = "--xla_disable_hlo_passes=cse_barrier_expander"
_WARNED: list[bool] = []


def backend_started() -> bool:
    """Whether XLA has started (and read ``XLA_FLAGS``) in this process."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge  # JAX's own probe; private, hence the fallback

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return True  # cannot tell: assume started, change nothing


def configure() -> None:
    """Add dse's flags to ``XLA_FLAGS`` (this process and its children), if XLA has not
    started yet; otherwise warn once when the barriers are not kept."""
    if backend_started():
        if KEEP_BARRIERS not in os.environ.get("XLA_FLAGS", "") and not _WARNED:
            _WARNED.append(True)
            warnings.warn(
                "dse: JAX started before dse configured XLA, so XLA drops the evaluator's "
                "optimization barriers: same values, sweeps 2-3x slower. Call "
                "dse.configure_xla() before running anything in JAX, or set "
                f"XLA_FLAGS={KEEP_BARRIERS}", stacklevel=3)
        return
    flags = os.environ.get("XLA_FLAGS", "").split()
    if not any(f.startswith("--xla_disable_hlo_passes") for f in flags):
        flags.append(KEEP_BARRIERS)
    if not any(f.startswith(devices.FLAG) for f in flags):
        count = devices.requested_count()
        if count > 1:
            flags.append(f"{devices.FLAG}={count}")
    joined = " ".join(flags)
    if os.environ.get("XLA_FLAGS") != joined:
        os.environ["XLA_FLAGS"] = joined


def enable_compilation_cache(path=None) -> None:
    """Keep compiled evaluators on disk so a repeated study skips XLA compilation.

    ``path`` defaults to ``$DSE_CACHE_DIR`` or ``~/.cache/dse/jax``. The CLI turns this
    on; library users opt in (it sets a process-wide JAX option).
    """
    import jax

    path = Path(path or os.environ.get("DSE_CACHE_DIR") or Path.home() / ".cache/dse/jax")
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

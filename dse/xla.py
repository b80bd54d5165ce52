"""What dse asks of XLA before JAX starts (XLA reads ``XLA_FLAGS`` once, when its
backend starts; ``import dse`` calls :func:`configure` first thing):

- one host device per usable core (:mod:`dse.devices`);
- optimization barriers kept through fusion. XLA fuses a cheap elementwise producer
  into each of its consumers and recomputes it there per element; the evaluator marks
  the few values many full-grid outputs derive from (TTFT, TPOT, the phase sums, the
  mean attention roofline) with ``jax.lax.optimization_barrier`` so they are computed
  once (:func:`dse.formulas.parts.computed_once`), and :mod:`dse.staging` marks the
  small values that grid-sized kernels read. XLA:CPU removes barriers before
  fusion (its ``cse_barrier_expander`` pass) unless that pass is disabled. Values are
  the same either way (to the last place or so: fused differently, a multiply-add may
  round differently); only the speed differs.

``import jax`` alone does not start the backend, so ``import jax; import dse`` works as
well. Once the backend has started (anything run in JAX before ``import dse``), nothing
is changed and a warning says so: the bench grid's evaluator then took 0.24-0.28 s instead
of 0.08-0.10 s. A flag ``XLA_FLAGS`` already sets is left as the user set it.
"""

from __future__ import annotations

import os
import sys
import warnings

from . import devices

KEEP_BARRIERS = "--xla_disable_hlo_passes=cse_barrier_expander"


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
    """Add dse's flags to ``XLA_FLAGS`` (this process and its children)."""
    if backend_started():
        if KEEP_BARRIERS not in os.environ.get("XLA_FLAGS", ""):
            warnings.warn(
                "dse: JAX started before `import dse`, so XLA drops the evaluator's "
                "optimization barriers: same values, sweeps 2-3x slower. Import dse before "
                f"running anything in JAX, or set XLA_FLAGS={KEEP_BARRIERS}", stacklevel=3)
        return
    flags = os.environ.get("XLA_FLAGS", "").split()
    if not any(f.startswith("--xla_disable_hlo_passes") for f in flags):
        flags.append(KEEP_BARRIERS)
    if not any(f.startswith(devices.FLAG) for f in flags):
        count = devices.requested_count()
        if count > 1:
            flags.append(f"{devices.FLAG}={count}")
    os.environ["XLA_FLAGS"] = " ".join(flags)

"""What dse asks of XLA before JAX starts (XLA reads ``XLA_FLAGS`` once, when its
backend starts; ``import dse`` calls :func:`configure` first thing):

- one host device per usable core (:mod:`dse.devices`);
- optimization barriers kept through fusion. XLA fuses a cheap elementwise producer
  into each of its consumers and recomputes it there per element; the evaluator marks
  the few values many full-grid outputs derive from (TTFT, TPOT, the phase sums, the
  mean attention roofline) with ``jax.lax.optimization_barrier`` so they are computed
  once (:func:`dse.formulas.parts.computed_once`). XLA:CPU removes barriers before
  fusion (its ``cse_barrier_expander`` pass) unless that pass is disabled. Values are
  the same either way (to the last place or so: fused differently, a multiply-add may
  round differently); only the speed differs.

Nothing is changed once JAX is imported, and a flag ``XLA_FLAGS`` already sets is
left as the user set it.
"""

from __future__ import annotations

import os
import sys

from . import devices

KEEP_BARRIERS = "--xla_disable_hlo_passes=cse_barrier_expander"


def configure() -> None:
    """Add dse's flags to ``XLA_FLAGS`` (this process and its children)."""
    if "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "").split()
    if not any(f.startswith("--xla_disable_hlo_passes") for f in flags):
        flags.append(KEEP_BARRIERS)
    if not any(f.startswith(devices.FLAG) for f in flags):
        count = devices.requested_count()
        if count > 1:
            flags.append(f"{devices.FLAG}={count}")
    os.environ["XLA_FLAGS"] = " ".join(flags)

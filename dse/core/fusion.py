"""XLA:CPU's fusion choices for the formulas: which values to compute once, what to sum last.

XLA fuses a cheap elementwise producer into each of its consumers and recomputes it
there, per element. Every full-grid output derived from TTFT and TPOT (end-to-end
latency, throughput, cost, energy) would re-derive the whole operator chain behind
them, and both sides of a decode step the mean attention roofline. The formulas mark
those values (:class:`dse.formulas.types.Hints`); here a mark is an optimization
barrier, which ends the fusion at the value so it is computed once into memory. XLA:CPU
drops barriers before fusion unless its ``cse_barrier_expander`` pass is disabled
(:mod:`dse.run.xla` does that when a run starts). The values are the same with or
without the barriers (to the last place or so); only the speed differs.

The order of a phase's sum matters too: XLA:CPU's cost per point of a fused sum follows
the number of operands it reads at the sum's shape, so once a component over more axes
enters a running sum, every later addition happens at that larger shape. In a decode
step only attention varies with the sequence lengths, and only it and the KV-cache
write with the KV precision, so those two are added last and the other twelve
components sum over the few axes they vary along. ``docs/performance.md`` gives the
measured effect of both choices.
"""

from __future__ import annotations

import jax

from ..formulas.types import Hints


def computed_once(*arrays):
    """``arrays`` unchanged, computed once into memory rather than inside each consumer."""
    return jax.lax.optimization_barrier(arrays)


XLA_CPU = Hints(once=computed_once, sum_last=("kv_cache", "attention"))

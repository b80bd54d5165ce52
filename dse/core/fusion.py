"""XLA:CPU's fusion choices for the formulas: which values to compute once, what to sum last.

XLA fuses a cheap elementwise producer into each of its consumers and recomputes it
there, per element. Every full-grid output derived from TTFT and TPOT (end-to-end
latency, throughput, cost, energy) would re-derive the whole operator chain behind
them, and both sides of a decode step the mean attention roofline. The formulas mark
those values (:class:`dse.formulas.types.Hints`); here a mark is an optimization
barrier, which ends the fusion at the value so it is computed once into memory. XLA:CPU
drops barriers before fusion unless its ``cse_barrier_expander`` pass is disabled, which
:func:`jit` asks of the programs it compiles for the CPU (XLA option
``xla_disable_hlo_passes``, per program rather than in ``XLA_FLAGS``): other backends keep
that pass, since their emitters have no instruction for a barrier that reaches them
(XLA:GPU fails with "Unsupported instruction opcode: opt-barrier"). The values are the
same with or without the barriers (to the last place or so); only the speed differs.

The order of a phase's sum matters too: XLA:CPU's cost per point of a fused sum follows
the number of operands it reads at the sum's shape, so once a component over more axes
enters a running sum, every later addition happens at that larger shape. In a decode
step only attention varies with the sequence lengths, and only it and the KV-cache
write with the KV precision, so those two are added last and the other twelve
components sum over the few axes they vary along. ``docs/performance.md`` gives the
measured effect of both choices.
"""

from __future__ import annotations

import functools

import jax

from ..formulas.types import Hints

CPU_OPTIONS = {"xla_disable_hlo_passes": "cse_barrier_expander",
               "xla_cpu_experimental_ynn_fusion_type": "",
               "xla_cpu_use_fusion_emitters": False}
"""XLA options of a program compiled for the CPU: barriers kept through fusion, loop
fusions emitted by XLA's elemental IR emitter rather than its MLIR fusion emitters (which
compile each kernel through an MLIR pipeline of its own: the serving-load example's
~1,100 kernels compile in 18 s instead of 30 s; a streamed 1e8-point reduction runs
within 7% of either, docs/performance.md), and no YNNPACK fusions. jaxlib 0.10.2 and
0.11.0 hand some elementwise/transpose/reduce fusions of rank 7-8 to YNNPACK's slinky
pipelines, which crash on x86-64 (SIGSEGV on AMD EPYC and AVX2-only hosts, a hang on others; jax-ml/jax#39257 and #40412): the serving load
model's closed loop and the example studies died of it on such a host. XLA's own
emitters compute the same values (tests/core/test_fusion_options.py)."""


def computed_once(*arrays):
    """``arrays`` unchanged, computed once into memory rather than inside each consumer."""
    return jax.lax.optimization_barrier(arrays)


XLA_CPU = Hints(once=computed_once, sum_last=("kv_cache", "attention"))


def tracing(tree) -> bool:
    """Whether any leaf of ``tree`` is a tracer (inside a transformation)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def compiler_options(platform: str) -> dict:
    """The XLA options dse compiles a program with on ``platform`` ("cpu", "gpu",
    "cuda", "rocm", "tpu", ...): the CPU's fusion barriers; nothing elsewhere."""
    return dict(CPU_OPTIONS) if platform == "cpu" else {}


class jit:  # noqa: N801 (used like jax.jit, also as a decorator)
    """``jax.jit(fn, **kwargs)`` compiled with :func:`compiler_options` of the backend
    that runs it: JAX's default backend at the call (one jitted function per backend,
    made at its first call). Called inside another transformation, it is a plain nested
    ``jax.jit``: JAX takes compiler options at the top level only."""

    def __init__(self, fn=None, **kwargs):
        self._fn, self._kwargs, self._by_platform = fn, kwargs, {}
        if fn is not None:
            functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if self._fn is None:  # @jit(static_argnames=...)
            return jit(args[0], **self._kwargs)
        if tracing((args, kwargs)):
            return self.on(None)(*args, **kwargs)  # nested: the outer program's options
        return self.on(jax.default_backend())(*args, **kwargs)

    def on(self, platform: str | None):
        """The jitted function for ``platform`` (None: inside another program, which JAX
        compiles with its own options)."""
        fn = self._by_platform.get(platform)
        if fn is None:
            fn = self._by_platform[platform] = jax.jit(
                self._fn, compiler_options=platform and compiler_options(platform) or None,
                **self._kwargs)
        return fn

"""Parts: an operator's time with the FLOPs, bytes and roofline sides behind it.

Phases are sums of parts grouped by component (qkv_proj, attention, mlp, tp_comm, ...),
so a breakdown of TTFT or TPOT sums to the total (to float rounding, as :func:`total`
may add the components in another order) and its bound label (compute, memory,
communication) comes from the same numbers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .roofline import (Cost, Rates, compute_time_s, mean_context, mean_roofline_over_context,
                       memory_time_s)


class Part(NamedTuple):
    time: Any
    flops: Any
    bytes: Any
    compute: Any  # seconds the arithmetic alone would take
    memory: Any  # seconds the memory traffic alone would take
    comm: Any  # seconds of communication (time of comm parts)


ZERO = Part(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def of(cost: Cost, rates: Rates) -> Part:
    """An operator timed by the roofline: max(compute, memory)."""
    c, m = compute_time_s(cost, rates), memory_time_s(cost, rates)
    return Part(jnp.maximum(c, m), cost.flops, cost.bytes, c, m, 0.0)


def comm(seconds) -> Part:
    return Part(seconds, 0.0, 0.0, 0.0, 0.0, seconds)


def overhead(seconds) -> Part:
    """Fixed time with no FLOPs or bytes behind it (kernel launches, synchronization)."""
    return Part(seconds, 0.0, 0.0, 0.0, 0.0, 0.0)


def add(*parts: Part) -> Part:
    return Part(*(sum(xs) for xs in zip(*parts)))


def scale(part: Part, k) -> Part:
    return Part(*(k * x for x in part))


def where(condition, a: Part, b: Part) -> Part:
    return Part(*(jnp.where(condition, x, y) for x, y in zip(a, b)))


def combine(groups: list[tuple[Any, dict[str, Part]]]) -> dict[str, Part]:
    """sum_i k_i * parts_i, component by component."""
    names = dict.fromkeys(n for _, parts in groups for n in parts)
    return {n: add(*(scale(parts[n], k) for k, parts in groups if n in parts)) for n in names}


def computed_once(*arrays):
    """``arrays`` unchanged, computed once into memory rather than inside each consumer.

    XLA fuses a cheap elementwise producer into every consumer and recomputes it there,
    per element: each full-grid output derived from TTFT and TPOT (end-to-end latency,
    throughput, cost, energy) would re-derive the whole operator chain behind them, and
    both sides of a decode step (traversal, busiest stage) the mean attention roofline.
    An optimization barrier ends the fusion at a value; ``import dse`` keeps XLA:CPU
    from dropping it (:mod:`dse.xla`). The values are the same with or without it. On
    bench_sweep's 1.1e7-point grid the barriers took the in-memory sweep from 0.33-0.37 s
    to 0.14-0.18 s; a 3e6-point training grid went from 0.155 s to 0.103 s.
    """
    return jax.lax.optimization_barrier(arrays)


SECONDS = ("time", "compute", "memory", "comm")


def settled(part: Part, fields: tuple[str, ...] = SECONDS) -> Part:
    """``part`` with its seconds (by default the time and the compute, memory, comm
    sides) computed once (:func:`computed_once`); FLOPs and bytes stay fusible."""
    seconds = computed_once(*(getattr(part, f) for f in fields))
    return part._replace(**dict(zip(fields, seconds)))


def total(parts: dict[str, Part], last: tuple[str, ...] = ()) -> Part:
    """The parts summed field by field, left to right in dict order, except that the
    components named in ``last`` are added at the end (in that order).

    XLA:CPU's cost per point of a fused sum follows the number of operands it reads at
    the sum's shape: once a component over more axes enters a running sum, every
    later addition happens at that larger shape. Adding the components that vary over
    the most axes last keeps the rest of the sum at the few axes it varies along.
    """
    order = [k for k in parts if k not in last] + [k for k in last if k in parts]
    return add(*(parts[k] for k in order))


def total_time(parts: dict[str, Part]):
    return sum(p.time for p in parts.values())


def mean_of(cost_at, rates: Rates, lo, hi, window=0.0) -> Part:
    """Mean part of an operator whose cost is affine in x (in min(x, W) with a window).

    The time is the exact mean roofline over the integers in [lo, hi]; FLOPs, bytes and
    the compute and memory sides are affine, so their means are the values at the mean x.
    """
    c = cost_at(mean_context(lo, hi, window))
    # the costliest formula per element, shared by every sum the part enters
    time, = computed_once(mean_roofline_over_context(cost_at, rates, lo, hi, window))
    return Part(time, c.flops, c.bytes,
                compute_time_s(c, rates), memory_time_s(c, rates), 0.0)

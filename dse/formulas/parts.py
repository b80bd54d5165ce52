"""Parts: an operator's time with the FLOPs, bytes and roofline sides behind it.

Phases are sums of parts grouped by component (qkv_proj, attention, mlp, tp_comm, ...),
so a breakdown of TTFT or TPOT sums to the total (to float rounding, as :func:`total`
may add the components in another order) and its bound label (compute, memory,
communication) comes from the same numbers.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .roofline import (compute_time_s, mean_context, mean_roofline_over_context, memory_time_s,
                       surface_efficiency)
from .types import MOE_SURFACE_AXES, PLAIN, SURFACE_AXES, Cost, Hints, Part, Rates

ZERO = Part(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def surface_of(cost: Cost, rates: Rates):
    """(efficiency array, its axes) that prices ``cost`` (static): the MoE surface for a
    device's routed experts where one is shipped, the GEMM surface otherwise."""
    if cost.surface == "moe" and rates.moe_surface is not None:
        return rates.moe_surface, MOE_SURFACE_AXES
    return rates.gemm_surface, SURFACE_AXES


def surfaced(cost: Cost, rates: Rates) -> bool:
    """Whether ``cost`` is a matmul a measured surface may price (static)."""
    return cost.unit == "gemm" and cost.shape is not None and rates.gemm_surface is not None


def read_shape(cost: Cost, rates: Rates):
    """The shape ``cost`` reads its surface at: a routed-expert matmul under no MoE
    surface reads the GEMM surface at its own grouped shape (``cost.shape[3:]``)."""
    if cost.surface == "moe" and rates.moe_surface is None:
        return cost.shape[3:]
    return cost.shape[:3]


def of(cost: Cost, rates: Rates, efficiency=None) -> Part:
    """An operator timed by the roofline: max(compute, memory).

    A matmul on a device with a measured surface (``rates.kernel_table`` >= 0) is its
    roofline at the point's peaks (what-if scales, no other calibration) divided by the
    surface's efficiency at its shape times the calibration's factor on it; both sides
    are divided, so the bound stays the roofline's and a what-if on either peak moves
    exactly the side it binds. ``efficiency``: the surface's value at the matmul's shape
    where the caller read it already (:func:`priced`).
    """
    c, m = compute_time_s(cost, rates), memory_time_s(cost, rates)
    if surfaced(cost, rates):
        if efficiency is None:
            table, axes = surface_of(cost, rates)
            efficiency = surface_efficiency(table, rates.kernel_table, rates.kernel_slot,
                                            *read_shape(cost, rates), axes=axes)
        eff = rates.kernel_scale * efficiency
        measured = rates.kernel_table >= 0.0
        # one division each, by the achieved rate: XLA rewrites a / b / c as a / (b c)
        # in some fusions and not others, so a value would depend on the chunking
        c = jnp.where(measured, cost.flops / (rates.gemm_peak_flops_per_s * eff), c)
        m = jnp.where(measured, cost.bytes / (rates.hbm_peak_bytes_per_s * eff), m)
    return Part(jnp.maximum(c, m), cost.flops, cost.bytes, c, m, 0.0)


def priced(groups: dict) -> dict:
    """``{key: add(*(of(cost, rates) for cost, rates in pairs))}`` for ``groups`` of
    (cost, rates) pairs, with every surface read done as one lookup per surface of the
    matmuls' shapes stacked: a layer's matmuls compile to one interpolation per surface
    instead of one each (XLA's compile time grows with each copy). The values are those
    of :func:`of`, bit for bit: each matmul reads the same nodes with the same weights.
    Pairs whose rates do not share one surface, table and slot are read one by one."""
    pairs = [pair for group in groups.values() for pair in group]
    known = {}
    by_surface = {}
    for c, r in pairs:
        if surfaced(c, r):
            by_surface.setdefault(id(surface_of(c, r)[0]), []).append((c, r))
    for reads in by_surface.values():
        if len(reads) < 2:
            continue
        first = reads[0][1]
        same = all(r.gemm_surface is first.gemm_surface and r.moe_surface is first.moe_surface
                   and r.kernel_table is first.kernel_table
                   and r.kernel_slot is first.kernel_slot for _, r in reads)
        if not same:
            continue
        array, axes = surface_of(reads[0][0], first)
        dtype = array.dtype
        shapes = [read_shape(c, r) for c, r in reads]
        table, slot = (jnp.asarray(first.kernel_table), jnp.asarray(first.kernel_slot))
        common = jnp.broadcast_shapes(table.shape, slot.shape,
                                      *(jnp.shape(x) for sh in shapes for x in sh))

        def stacked(xs):
            return jnp.stack([jnp.broadcast_to(jnp.asarray(x, dtype), common) for x in xs])

        m, n, k = (stacked([sh[axis] for sh in shapes]) for axis in range(3))
        whole = surface_efficiency(array, stacked([table]), stacked([slot]), m, n, k, axes=axes)
        known.update({id(c): whole[i] for i, (c, _) in enumerate(reads)})
    return {key: add(*(of(c, r, known.get(id(c))) for c, r in group))
            for key, group in groups.items()}


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


SECONDS = ("time_s", "compute_s", "memory_s", "comm_s")


def settled(part: Part, hints: Hints, fields: tuple[str, ...] = SECONDS) -> Part:
    """``part`` with its seconds (by default the time and the compute, memory, comm
    sides) marked as values many outputs read (``hints.once``); FLOPs and bytes are
    left alone."""
    seconds = hints.once(*(getattr(part, f) for f in fields))
    return part._replace(**dict(zip(fields, seconds)))


def total(parts: dict[str, Part], hints: Hints = PLAIN) -> Part:
    """The parts summed field by field, left to right in dict order, except that the
    components named in ``hints.sum_last`` are added at the end (in that order)."""
    last = hints.sum_last
    order = [k for k in parts if k not in last] + [k for k in last if k in parts]
    return add(*(parts[k] for k in order))


def bound_code(time_s, compute_s, memory_s, comm_s):
    """The binding roof: 0 compute, 1 memory, 2 communication, 3 absent (no time)."""
    return jnp.where(time_s > 0.0, jnp.where(comm_s > 0.0, 2, jnp.where(compute_s >= memory_s,
                                                                         0, 1)), 3)


REGIMES = ("compute", "memory", "communication", "host")  # the regime codes, in order


def roof_seconds(total: Part, host_s) -> list:
    """A phase's seconds on each roof, in :data:`REGIMES` order, from its summed part:
    the compute and memory sides and the messages of all its operators, and the host
    time (launch and scheduling overheads: the ``overhead`` component, which has no
    FLOPs, bytes or messages). The regime compares what each roof alone would take."""
    return [total.compute_s, total.memory_s, total.comm_s, host_s]


def regime(seconds: list):
    """The roof with the most seconds (:data:`REGIMES` code, uint8); 0 (compute) where
    there is no time."""
    return jnp.argmax(jnp.stack(jnp.broadcast_arrays(*seconds)), axis=0).astype(jnp.uint8)


def total_time(parts: dict[str, Part]):
    return sum(p.time_s for p in parts.values())


def mean_of(cost_at, rates: Rates, lo, hi, window=0.0, hints: Hints = PLAIN) -> Part:
    """Mean part of an operator whose cost is affine in x (in min(x, W) with a window).

    The time is the exact mean roofline over the integers in [lo, hi]; FLOPs, bytes and
    the compute and memory sides are affine, so their means are the values at the mean x.
    The time is the costliest formula per element, shared by every sum the part enters
    (``hints.once``).
    """
    c = cost_at(mean_context(lo, hi, window))
    time, = hints.once(mean_roofline_over_context(cost_at, rates, lo, hi, window))
    return Part(time, c.flops, c.bytes, compute_time_s(c, rates), memory_time_s(c, rates), 0.0)

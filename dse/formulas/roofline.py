"""Roofline time of an operator (scaling-book, "All About Rooflines": T = max(T_math, T_comms)).

All functions are pure and broadcast their arguments against each other.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import SURFACE_AXES, Cost, Rates


def compute_width(bits):
    """Arithmetic width for operands of ``bits``: the smallest of 4/8/16/32 that holds them."""
    return jnp.where(bits <= 4, 4.0, jnp.where(bits <= 8, 8.0, jnp.where(bits <= 16, 16.0, 32.0)))


def peak_at_width(width, flops_4, flops_8, flops_16, flops_32):
    """The peak among the four per-width peaks that serves arithmetic of ``width`` bits."""
    return jnp.where(width <= 4, flops_4, jnp.where(width <= 8, flops_8,
                                                    jnp.where(width <= 16, flops_16, flops_32)))


def shaped(rates: Rates, rows) -> Rates:
    """Rates of matmuls with ``rows`` activation rows (the M of an [M, K] x [K, N] GEMM).

    Small GEMMs leave tensor cores idle (tile quantization, too few thread blocks, the
    weight stream not amortized): the achieved rate saturates as rows / (rows + R_half),
    half the calibrated gemm rate at R_half rows. R_half = 0 is the plain roofline.
    """
    rows = jnp.maximum(rows, 1e-30)
    return rates._replace(
        gemm_flops_per_s=rates.gemm_flops_per_s * rows / (rows + rates.gemm_half_rows))


def surface_slot(weight_bits, act_bits):
    """The surface slot a matmul runs in: NVFP4 with 4-bit weights and activations, FP8
    with 8-bit ones, the 16-bit GEMM otherwise (weight-only kernels dequantize to 16 bits)."""
    width = compute_width(jnp.maximum(weight_bits, act_bits))
    return jnp.where(width <= 4.0, 3.0, jnp.where(width <= 8.0, 1.0, 0.0))


def surface_position(x, lo, hi, step):
    """(node index, fraction) of ``x`` on a surface axis whose nodes are 2^(lo + step j),
    clamped to [2^lo, 2^hi]; the fraction is linear in x between the two nodes, from the
    node values themselves. The logarithm only picks the interval, with a margin of 1e-4
    of a step: its vectorized and scalar forms differ in the last bit, which would move a
    value between chunked and whole sweeps if it entered the fraction.

    The nodes are made by arithmetic, not read from a table: a power of two by an integer
    shift, times sqrt(2) at odd half octaves, both exact (a gather per node and axis made
    the matmuls' share of the compile time)."""
    count = int(round((hi - lo) / step)) + 1
    halves = round(1.0 / step)
    assert halves in (1, 2) and lo >= 0 and hi <= 30, "surface axes: octaves or half octaves"
    x = jnp.clip(x, 2.0 ** lo, 2.0 ** hi)
    j = jnp.clip(jnp.floor((jnp.log2(x) - lo) / step + 1e-4), 0.0, count - 2.0).astype(jnp.int32)

    def node(q):  # 2^(lo + q / halves), q = index in steps
        q = q + int(round(lo * halves))
        octave = jnp.left_shift(jnp.int32(1), q // halves).astype(x.dtype)
        if halves == 1:
            return octave
        return jnp.where(q % 2 == 1, jnp.asarray(2.0 ** 0.5, x.dtype), 1.0) * octave

    below, above = node(j), node(j + 1)
    return j, jnp.clip((x - below) / (above - below), 0.0, 1.0)


def surface_efficiency(eff, table, slot, m, n, k, axes=SURFACE_AXES):
    """Measured efficiency of an [m, k] x [k, n] matmul: multilinear interpolation of the
    efficiency table ``eff`` [table, slot, M, N, K] between the nodes around (m, n, k)
    (:func:`surface_position`), clamped at the grid's edges (a shape outside the measured
    range takes the edge's value). ``table`` < 0 reads table 0; the caller discards it.

    The eight corners are read by one gather from the flattened table (eight gathers per
    matmul doubled the evaluators' compile time); the weighted sum keeps the corners'
    order, so the value is the same as reading them one by one."""
    tables, slots, size_m, size_n, size_k = eff.shape
    t = jnp.maximum(table, 0.0).astype(jnp.int32)
    s = slot.astype(jnp.int32) if hasattr(slot, "astype") else jnp.int32(slot)
    # N and K are whole numbers: rounded, a width computed as 4095.9998 in one program and
    # 4096 in another (the same formula fused differently) reads the same node
    shape = (m, jnp.round(n), jnp.round(k))
    (i, fi), (j, fj), (l, fl) = (surface_position(jnp.asarray(x, eff.dtype), lo, hi, step)
                                 for (_, lo, hi, step), x in zip(axes, shape))
    # int32 is ample: the index is below tables x slots x M x N x K (about 5e5 shipped)
    base = (((t * slots + s) * size_m + i) * size_n + j) * size_k + l
    corners = [(di, dj, dl) for di in (0, 1) for dj in (0, 1) for dl in (0, 1)]
    offsets = jnp.asarray([(di * size_n + dj) * size_k + dl for di, dj, dl in corners],
                          jnp.int32)
    base = jnp.asarray(base)
    values = eff.reshape(-1)[base[..., None] + offsets.reshape((1,) * base.ndim + (8,))]
    weights = ((1.0 - fi, fi), (1.0 - fj, fj), (1.0 - fl, fl))
    total = 0.0
    for c, (di, dj, dl) in enumerate(corners):
        total = total + weights[0][di] * weights[1][dj] * weights[2][dl] * values[..., c]
    return total


def compute_time_s(cost: Cost, rates: Rates):
    """Seconds of arithmetic at the achieved peak of the operator's dtype."""
    return cost.flops / rates.flops_per_s(cost.unit)


def memory_time_s(cost: Cost, rates: Rates):
    """Seconds to stream the operator's bytes through device memory."""
    return cost.bytes / rates.hbm_bw_bytes_per_s


def roofline_time_s(cost: Cost, rates: Rates):
    """Lower bound assuming compute and memory traffic overlap perfectly."""
    return jnp.maximum(compute_time_s(cost, rates), memory_time_s(cost, rates))


def mean_max_affine(a0, a1, b0, b1, lo, hi):
    """Exact mean over the integers x in [lo, hi] of max(a0 + a1 x, b0 + b1 x).

    The mean decode step time over a generation is this quantity for the attention
    operator, whose FLOPs and bytes both grow linearly with the KV length x: taking the
    roofline at the mean length instead would be wrong wherever the binding roof
    changes inside the generation. With g(x) = (a0 - b0) + (a1 - b1) x,
    max = b + relu(g), and relu(g) is an arithmetic series on one side of its root.
    Requires lo <= hi (integer-valued floats).
    """
    n = hi - lo + 1.0
    mean_b = b0 + b1 * (lo + hi) / 2.0
    g0, g1 = a0 - b0, a1 - b1
    flat = g1 == 0.0
    safe = jnp.where(flat, 1.0, g1)
    root = -g0 / safe
    # g > 0 on (root, inf) when g1 > 0, on (-inf, root) when g1 < 0
    start = jnp.where(g1 > 0.0, jnp.clip(jnp.floor(root) + 1.0, lo, hi + 1.0), lo)
    stop = jnp.where(g1 > 0.0, hi, jnp.clip(jnp.ceil(root) - 1.0, lo - 1.0, hi))
    count = jnp.maximum(stop - start + 1.0, 0.0)
    positive_sum = count * g0 + g1 * (start + stop) * count / 2.0
    positive_sum = jnp.where(flat, n * jnp.maximum(g0, 0.0), positive_sum)
    return mean_b + positive_sum / n


def mean_roofline_over_context(cost_at, rates: Rates, lo, hi, window=0.0):
    """Mean roofline time of an operator whose cost is affine in the attended context.

    ``cost_at(x)`` returns the :class:`Cost` at context length x. The mean is over the
    integers in [lo, hi]; with a sliding ``window`` W > 0 the context is min(x, W), so
    the range splits into an affine part [lo, W] and a constant tail at W.
    """
    windowed = window > 0.0
    edge = jnp.where(windowed, jnp.clip(window, lo - 1.0, hi), hi)
    n_affine = edge - lo + 1.0
    top = jnp.maximum(edge, lo)
    c_lo, c_hi = cost_at(lo), cost_at(top)
    span = jnp.where(top > lo, top - lo, 1.0)
    t_c = (compute_time_s(c_lo, rates), compute_time_s(c_hi, rates))
    t_m = (memory_time_s(c_lo, rates), memory_time_s(c_hi, rates))
    slope_c, slope_m = (t_c[1] - t_c[0]) / span, (t_m[1] - t_m[0]) / span
    affine = mean_max_affine(t_c[0] - slope_c * lo, slope_c, t_m[0] - slope_m * lo, slope_m,
                             lo, top)
    tail = roofline_time_s(cost_at(jnp.where(windowed, window, hi)), rates)
    n = hi - lo + 1.0
    return (jnp.maximum(n_affine, 0.0) * affine + (n - jnp.maximum(n_affine, 0.0)) * tail) / n


def mean_context(lo, hi, window=0.0):
    """Mean over the integers x in [lo, hi] of the attended context min(x, W) (W = 0: x)."""
    windowed = window > 0.0
    edge = jnp.where(windowed, jnp.clip(window, lo - 1.0, hi), hi)
    n_affine = jnp.maximum(edge - lo + 1.0, 0.0)
    n = hi - lo + 1.0
    return (n_affine * (lo + edge) / 2.0 + (n - n_affine) * jnp.where(windowed, window, 0.0)) / n

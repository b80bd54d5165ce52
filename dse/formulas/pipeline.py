"""Inference over a heterogeneous pipeline: stages on different devices, slow links between.

Stage i (device i, n_i consecutive layers) runs its layers on its own roofline; stage 0
also embeds, the last stage also holds the final norm and LM head. Between stages the
hidden states of the new tokens cross link j: a latency and a per-message overhead (RPC,
serialization) per message, the bytes over the link's bandwidth (divided by a compression
ratio) and the compression time at its throughput; a round trip (together-LLM's client
sends each stage its input and receives its output) is two messages and twice the bytes.

With batch B split into m = min(S, B) micro-batches of b = B / m sequences kept in
flight (as in :mod:`.inference`), stages and links are the pipeline's resources:

    TPOT = max(sum_i T_i + sum_j H_j,  m max(max_i T_i, max_j H_j))
    TTFT = sum_i P_i + sum_j G_j + (m - 1) max(max_i P_i, max_j G_j)

(T, H: decode step of a stage and a link; P, G: prefill). Every candidate split of the
layers over the stages (the study's candidate table; stages with a fixed layer count
constrain it) is evaluated at once; the recommended split is the feasible one (every
stage's memory fits) with the best objective.

Network requirements invert the link time for a uniform link: with a communication
budget C for one token's traversal (a share of the target, as together-LLM's hand
estimate, or what the target leaves after the engine's own compute time),

    bandwidth >= sum_j dir_j bytes / ratio / (C - sum_j dir_j (latency_j + overhead_j
                 + bytes / compression_throughput))
    latency   <= (C - sum_j (overhead_j + transfer_j + compression_j)) / sum_j dir_j

and no bandwidth (latency) suffices when the fixed terms alone exceed the budget (NaN).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp

from . import memory, params, parts
from .transformer import end_parts, layer_parts
from .types import PLAIN, Hints, Links, ModelSpec, Options, Parallel, Pass, Precision, Rates


def _compress_s(links: Links, moved):
    """Seconds to compress ``moved`` bytes (0 without compression)."""
    on = links.compress_bytes_per_s > 0.0
    return jnp.where(on, moved / jnp.where(on, links.compress_bytes_per_s, 1.0), 0.0)


def link_time_s(links: Links, bytes_, bw_scale):
    """Seconds for ``bytes_`` of hidden states to cross each link."""
    moved = links.direction * bytes_
    compress = _compress_s(links, moved)
    return (links.direction * (links.latency_s + links.overhead_s)
            + moved / links.ratio / (links.bw_bytes_per_s * bw_scale) + compress)


def required_bandwidth(links: Links, bytes_, budget):
    """Smallest uniform link bandwidth (bytes/s) fitting one traversal in ``budget``."""
    moved = links.direction * bytes_
    compress = _compress_s(links, moved)
    fixed = jnp.sum(links.direction * (links.latency_s + links.overhead_s) + compress, axis=1,
                    keepdims=True)
    data = jnp.sum(moved / links.ratio, axis=1, keepdims=True)
    room = budget - fixed
    return jnp.where(room > 0.0, data / jnp.where(room > 0.0, room, 1.0), jnp.nan)


def max_latency(links: Links, bytes_, budget, bw_scale):
    """Largest uniform one-way link latency (s) fitting one traversal in ``budget``."""
    rest = link_time_s(links, bytes_, bw_scale) - links.direction * links.latency_s
    room = budget - jnp.sum(rest, axis=1, keepdims=True)
    per = room / jnp.sum(links.direction, axis=1, keepdims=True)
    return jnp.where(room >= 0.0, per, jnp.nan)


class Traffic(NamedTuple):
    decode_bytes: Any
    prefill_bytes: Any


def _layer_time(m, s, p, ps, rates, flash, features, hints):
    dense, moe = layer_parts(m, s, p, ps, rates, Parallel(1.0, 1.0, 1.0, 1.0),
                             Options(flash, 0.0, 1.0), features, hints)
    n_dense, n_moe = params.layer_counts(m)
    t = parts.total_time(dense) * n_dense
    if moe:
        t = t + parts.total_time(moe) * n_moe
    return t / m.n_layers


def pipeline(m: ModelSpec, rates: Rates, links: Links, capacity, candidates, candidate_ok,
             batch, input_len, output_len, p: Precision, flash, bw_scale, targets, comm_share,
             features: frozenset, objective: str, hints: Hints = PLAIN) -> dict:
    """Every output of one heterogeneous pipeline deployment, all candidate splits at once.

    Leading axes: (candidate, stage) for stage quantities, (1, link) for links; grid axes
    follow. ``candidates`` holds layers per stage, ``candidate_ok`` marks the candidates
    of this model's layer count. ``targets`` = (tpot, ttft) seconds (0: none).
    """
    n_stages = candidates.shape[1]
    s = params.whole(m)
    micro = jnp.minimum(float(n_stages), batch)
    b = batch / micro
    layer_features = frozenset(features) & {"moe", "mla", "sparse", "window", "linear"}
    lo = input_len + 1.0
    hi = input_len + jnp.maximum(output_len - 1.0, 1.0)
    decode_pass = Pass("decode", b, 1.0, lo, hi)
    prefill_pass = Pass("prefill", b, input_len, 0.0, 0.0, 1.0)
    t_dec = _layer_time(m, s, p, decode_pass, rates, flash, layer_features, hints)
    t_pre = _layer_time(m, s, p, prefill_pass, rates, flash, layer_features, hints)

    index = jnp.arange(n_stages, dtype=t_dec.dtype).reshape((1, n_stages) + (1,) * (t_dec.ndim - 2))
    first, last = index == 0.0, index == float(n_stages - 1)

    def ends(ps):
        head, tail = end_parts(m, s, p, ps, rates, 1.0)
        return (jnp.where(first, parts.total_time(head), 0.0)
                + jnp.where(last, parts.total_time(tail), 0.0))

    stage_dec = candidates * t_dec + ends(decode_pass)
    stage_pre = candidates * t_pre + ends(prefill_pass)
    per_token = m.d_model * p.act_bits / 8.0
    traffic = Traffic(b * per_token, b * input_len * per_token)
    hop_dec = link_time_s(links, traffic.decode_bytes, bw_scale)
    hop_pre = link_time_s(links, traffic.prefill_bytes, bw_scale)

    def total(x):
        return jnp.sum(x, axis=1, keepdims=True)

    def peak(x):
        if x.shape[1] == 0:  # one stage, no loop: no links
            return jnp.zeros(x.shape[:1] + (1,) + x.shape[2:], x.dtype)
        return jnp.max(x, axis=1, keepdims=True)

    traversal_dec = total(stage_dec) + total(hop_dec)
    tpot = jnp.maximum(traversal_dec, micro * jnp.maximum(peak(stage_dec), peak(hop_dec)))
    ttft = (total(stage_pre) + total(hop_pre)
            + (micro - 1.0) * jnp.maximum(peak(stage_pre), peak(hop_pre)))
    e2e = ttft + (output_len - 1.0) * tpot

    # memory per stage: its layers' weights and KV cache, its end tables, the activations
    length = input_len + output_len
    n_dense, n_moe = params.layer_counts(m)
    body = (params.total_params(m) - params.embedding_params(m, s) - (1.0 - m.tied_embeddings)
            * s.vocab * m.d_model - m.norm_params * m.d_model)
    layer_bytes = body / m.n_layers * p.weight_bits / 8.0
    kv = memory.cache_bytes_per_layer(m, s, p, batch, length, "mla" in features)
    table = params.embedding_params(m, s) * p.weight_bits / 8.0
    head = (s.vocab * m.d_model + m.norm_params * m.d_model) * p.weight_bits / 8.0
    single = n_stages == 1
    end_bytes = (jnp.where(first, table, 0.0)
                 + jnp.where(last, jnp.where(single, (1.0 - m.tied_embeddings), 1.0) * head, 0.0))
    act = memory.activation_bytes(m, s, p, Parallel(1.0, 1.0, 1.0, 1.0), b, input_len, 0.0, flash)
    stage_mem = candidates * (layer_bytes + kv) + end_bytes + act
    fits = candidate_ok & jnp.all(stage_mem <= capacity, axis=1, keepdims=True)

    score = {"tpot": tpot, "ttft": ttft, "e2e": e2e}[objective]
    feasible_score = jnp.where(fits, score, jnp.inf)
    any_fit = jnp.any(fits, axis=0, keepdims=True)
    best = jnp.where(any_fit, jnp.argmin(feasible_score, axis=0, keepdims=True),
                     jnp.argmin(jnp.where(candidate_ok, score, jnp.inf), axis=0, keepdims=True))

    shape = jnp.broadcast_shapes(stage_dec.shape, stage_mem.shape, tpot.shape)

    def pick(x):
        """The recommended candidate's entries: (candidate, k, *grid) -> (k, *grid)."""
        x = jnp.broadcast_to(x, (shape[0], x.shape[1]) + shape[2:])
        idx = jnp.broadcast_to(best, (1, x.shape[1]) + shape[2:])
        return jnp.take_along_axis(x, idx, axis=0)[0]

    split = pick(candidates)
    s_dec, s_pre, s_mem = pick(stage_dec), pick(stage_pre), pick(stage_mem)
    tpot_b, ttft_b, e2e_b = pick(tpot)[0], pick(ttft)[0], pick(e2e)[0]
    comm_dec = jnp.sum(hop_dec, axis=1)[0]
    comm_pre = jnp.sum(hop_pre, axis=1)[0]
    compute_dec = jnp.sum(s_dec, axis=0)
    compute_pre = jnp.sum(s_pre, axis=0)
    throughput = batch[0, 0] * output_len[0, 0] / e2e_b

    target_tpot, target_ttft = targets
    share = comm_share > 0.0
    budget_dec = jnp.where(share, target_tpot * comm_share, target_tpot - compute_dec)
    budget_pre = jnp.where(share, target_ttft * comm_share, target_ttft - compute_pre)
    budget_dec = jnp.where(target_tpot > 0.0, budget_dec, jnp.nan)[None, None]
    budget_pre = jnp.where(target_ttft > 0.0, budget_pre, jnp.nan)[None, None]
    req_dec = required_bandwidth(links, traffic.decode_bytes, budget_dec)[0, 0]
    req_pre = required_bandwidth(links, traffic.prefill_bytes, budget_pre)[0, 0]
    stage_peak = jnp.max(s_dec, axis=0)
    return dict(
        n_params=params.total_params(m)[0, 0],
        split_layers=split,
        stage_decode_s=s_dec,
        stage_prefill_s=s_pre,
        stage_memory_bytes=s_mem,
        stage_capacity_bytes=jnp.broadcast_to(capacity[0], s_mem.shape),
        link_decode_s=hop_dec[0],
        link_prefill_s=hop_pre[0],
        ttft_s=ttft_b,
        tpot_s=tpot_b,
        e2e_s=e2e_b,
        throughput_tok_s=throughput,
        comm_share_decode=comm_dec / (comm_dec + compute_dec),
        comm_share_prefill=comm_pre / (comm_pre + compute_pre),
        bottleneck_stage=jnp.argmax(s_dec, axis=0).astype(s_dec.dtype),
        link_bound=peak(hop_dec)[0, 0] > stage_peak,
        feasible_splits=jnp.sum(fits, axis=0)[0].astype(s_dec.dtype),
        required_link_bw_decode_bytes_per_s=req_dec,
        required_link_bw_decode_bit_per_s=8.0 * req_dec,
        required_link_bw_prefill_bytes_per_s=req_pre,
        required_link_bw_prefill_bit_per_s=8.0 * req_pre,
        max_link_latency_decode_s=max_latency(links, traffic.decode_bytes, budget_dec,
                                              bw_scale)[0, 0],
        max_link_latency_prefill_s=max_latency(links, traffic.prefill_bytes, budget_pre,
                                               bw_scale)[0, 0],
        fits=any_fit[0, 0],
    )

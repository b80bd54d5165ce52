"""The step of a continuous-batching engine, from the cost model (serving under load).

A step runs one forward pass over the B sequences it decodes (one token each) and the P
prompt tokens of the n prompt chunks it carries. Its time is that pass's, costed as a
static batch's is (roofline per operator, communication not overlapped):

- the operators that take every token as a row (projections, MLP or experts, norms,
  embedding and their collectives): L(B + P), tabulated at :data:`TABLE_NODES` token
  counts from 1 to the largest step (geometric) and interpolated linearly between them;
- attention: each decoding sequence reads its cache at the mean context of a running
  request, a_d per sequence; each prompt token attends to its prompt, a_p per token;
- the LM head and the logits gather, once per sequence that samples (B + n);
- the engine's host time: step_overhead_s + seq_overhead_s x (B + n).

With pp stages the step's min(pp, B + n) micro-batches flow through the pipeline as a
static batch's do: max(traversal + hops, micro-batches x busiest stage).

:func:`step_time` takes an array namespace so that the test oracle (a discrete-event
simulator) can run the same step in plain numpy.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from . import comm, memory, params
from . import queueing as q
from .transformer import end_parts, layer_parts
from .types import Options, Parallel, Pass, Precision, Rates

TABLE_NODES = 16
_ATTENTION = ("attention", "kv_cache")


class StepModel(NamedTuple):
    """One replica's step; table leaves lead with the :data:`TABLE_NODES` axis."""

    tokens: Any  # token counts at the nodes (geometric, 1 .. the largest step)
    body_total: Any  # L(T) of all layers and ends, seconds, as :func:`hinges`
    body_stage: Any  # L(T) of the busiest pipeline stage
    head: Any  # LM head and logits gather at T rows
    decode_attention_s: Any  # per decoding sequence, all layers
    decode_attention_stage_s: Any
    prompt_attention_s: Any  # per prompt token, all layers
    prompt_attention_stage_s: Any
    hop_s_per_token: Any  # pipeline transfer per token and its latency
    hop_latency_s: Any
    step_overhead_s: Any
    seq_overhead_s: Any
    pp: Any
    # speculative decoding (spec_tokens = k > 0): a decoding sequence's attention for its
    # k + 1 verified positions, and the model's layers (a draft layer is one of them)
    verify_attention_s: Any = 0.0
    verify_attention_stage_s: Any = 0.0
    layers: Any = 1.0
    # a vision-language model's encoder, per prompt token (its time per request over the
    # request's prompt: an uncached prompt token pays its share; dse.formulas.vision)
    prompt_vision_s: Any = 0.0


def _sum_body(parts: dict):
    return sum(p.time_s for k, p in parts.items() if k not in _ATTENTION)


def _sum_attention(parts: dict):
    return sum(parts[k].time_s for k in _ATTENTION if k in parts)


def _layers(m, s, p, ps: Pass, rates, par, o, features):
    """(all layers, busiest stage) of the body parts and of the attention parts."""
    dense, moe = layer_parts(m, s, p, ps, rates, par, o, features)
    n_dense, n_moe = params.layer_counts(m)
    _, dense_stage, moe_stage = memory.stage_layers(m, par.pp)
    body = (n_dense * _sum_body(dense), dense_stage * _sum_body(dense))
    attention = ((n_dense + n_moe) * _sum_attention(dense),
                 (dense_stage + moe_stage) * _sum_attention(dense))
    if moe:
        body = (body[0] + n_moe * _sum_body(moe), body[1] + moe_stage * _sum_body(moe))
    return body, attention


def step_model(m, s, p: Precision, rates: Rates, par: Parallel, o: Options, features,
               largest, input_len, context, budget, prefix_hit, spec=None) -> StepModel:
    """The step of one replica; ``largest`` is the most tokens a step can hold (its table's
    range), ``context`` the mean context of a decoding sequence, ``budget`` the step's
    token budget (prompt chunks of at most that), ``prefix_hit`` the cached share of a
    prompt, ``spec`` the draft tokens per decode step (None: no speculation)."""
    rank = max(jnp.ndim(x) for x in (largest, input_len, context, budget))
    k = np.arange(TABLE_NODES, dtype=float) / (TABLE_NODES - 1)
    tokens = jnp.maximum(largest, 2.0)[None] ** q.lead(k, rank)
    table = Pass("prefill", 1.0, tokens, 0.0, 0.0)
    (body_total, body_stage), _ = _layers(m, s, p, table, rates, par, o, features)
    first, last = end_parts(m, s, p, table, rates, par.tp)
    body_total = body_total + first["embedding"].time_s + last["norms"].time_s
    body_stage = jnp.where(par.pp > 1.0, body_stage + last["norms"].time_s, body_total)
    rows = Pass("decode", tokens, 1.0, 0.0, 0.0)
    _, head = end_parts(m, s, p, rows, rates, par.tp)
    head = head["lm_head"].time_s + head["tp_comm"].time_s
    # attention: a decoding sequence at the mean context; a prompt in chunks of the budget
    decode = Pass("decode", 1.0, 1.0, context, context)
    _, (decode_total, decode_stage) = _layers(m, s, p, decode, rates, par, o, features)
    computed = jnp.maximum((1.0 - prefix_hit) * input_len, 1.0)
    chunks = jnp.ceil(input_len / jnp.maximum(budget, 1.0))
    prompt = Pass("prefill", 1.0, input_len / chunks, 0.0, chunks - 1.0, chunks)
    _, (prompt_total, prompt_stage) = _layers(m, s, p, prompt, rates, par, o, features)
    # a cached prefix of share h: the computed tokens attend to it, (1 - h^2) of the pairs
    share = (1.0 - prefix_hit ** 2) / computed
    hop = comm.pipeline_transfer_s(m.d_model * p.act_bits / 8.0, par.pp, par.tp, rates)
    latency = comm.pipeline_transfer_s(0.0, par.pp, par.tp, rates)
    verify, verify_stage = decode_total, decode_stage
    if spec is not None:  # k + 1 queries per sequence over its cache (absorbed MLA: decode)
        _, (verify, verify_stage) = _layers(m, s, p, Pass("decode", 1.0, spec + 1.0, context,
                                                          context), rates, par, o, features)
    return StepModel(tokens, hinges(tokens, body_total), hinges(tokens, body_stage),
                     hinges(tokens, head), decode_total,
                     jnp.where(par.pp > 1.0, decode_stage, decode_total),
                     prompt_total * share, jnp.where(par.pp > 1.0, prompt_stage, prompt_total) * share,
                     hop - latency, latency, rates.step_overhead_s, rates.seq_overhead_s, par.pp,
                     verify, jnp.where(par.pp > 1.0, verify_stage, verify), m.n_layers)


def hinges(nodes, values):
    """Piecewise-linear ``values`` at ``nodes`` (leading node axis) as (value at the first
    node, first slope, slope changes at the inner nodes): v(T) = v0 + s0 (T - t0) +
    sum_k ds_k max(0, T - t_k), linear past the last node."""
    slopes = (values[1:] - values[:-1]) / (nodes[1:] - nodes[:-1])
    return values[0], slopes[0], slopes[1:] - slopes[:-1]


def interpolate(nodes, tables, x, rank: int, xp=jnp):
    """Each of ``tables`` (from :func:`hinges`) at ``x`` (held at the first node below
    it); ``nodes`` and the slope changes lead with the node axis over ``rank`` point axes,
    ``x`` may have more leading axes."""
    extra = max(xp.ndim(x) - rank, 0)
    inner = nodes[1:-1]
    inner = xp.reshape(inner, inner.shape[:1] + (1,) * extra + inner.shape[1:])
    x = xp.maximum(x, nodes[0])
    ramp = xp.maximum(x[None] - inner, 0.0)
    out = []
    for v0, s0, ds in tables:
        ds = xp.reshape(ds, ds.shape[:1] + (1,) * extra + ds.shape[1:])
        out.append(v0 + s0 * (x - nodes[0]) + xp.sum(ds * ramp, axis=0))
    return out


def step_time(sm: StepModel, decode, prompt, chunks, rank: int, xp=jnp, spec=None):
    """Seconds of a step with ``decode`` sequences decoding and ``prompt`` tokens in
    ``chunks`` prompt chunks (arrays broadcast; ``rank`` point axes, any leading axes).

    With ``spec`` = k draft tokens per step (MTP, EAGLE: Leviathan et al. 2023 with the
    model's own draft layer, DeepSeek-V3 Sec. 2.2), each decoding sequence first drafts k
    tokens, one pass of a draft layer and the LM head over the B sequences each (a layer
    of the model: L(B) / layers and its attention over the cache, the head at B rows),
    then the step verifies k + 1 positions per sequence: B (k + 1) token rows through the
    body and the head, and each sequence's k + 1 queries over its cache."""
    seqs = decode + chunks
    verified = decode if spec is None else decode * (spec + 1.0)
    micro = xp.minimum(sm.pp, xp.maximum(seqs, 1.0))
    tokens = xp.maximum((verified + prompt) / micro, 1.0)
    rows = xp.maximum((verified + chunks) / micro, 1.0)
    body_total, body_stage = interpolate(sm.tokens, (sm.body_total, sm.body_stage), tokens,
                                         rank, xp)
    head, = interpolate(sm.tokens, (sm.head,), rows, rank, xp)
    per_seq, per_seq_stage = ((sm.decode_attention_s, sm.decode_attention_stage_s)
                              if spec is None else
                              (sm.verify_attention_s, sm.verify_attention_stage_s))
    total = (body_total + head
             + (decode * per_seq + prompt * (sm.prompt_attention_s + sm.prompt_vision_s)) / micro
             + tokens * sm.hop_s_per_token + sm.hop_latency_s)
    stage = (body_stage + head
             + (decode * per_seq_stage
                + prompt * (sm.prompt_attention_stage_s + sm.prompt_vision_s)) / micro)
    step = xp.maximum(total, micro * stage) + sm.step_overhead_s + sm.seq_overhead_s * seqs
    if spec is None:
        return step
    drafted = xp.maximum(decode, 1.0)
    layer, draft_head = interpolate(sm.tokens, (sm.body_total, sm.head), drafted, rank, xp)
    draft = layer / sm.layers + draft_head + decode * sm.decode_attention_s / sm.layers
    return step + xp.where(decode > 0.0, spec * draft, 0.0)

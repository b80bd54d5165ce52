"""Serving under load: continuous batching with closed-loop clients or open-loop arrivals.

A replica runs engine steps back to back. A step decodes one token of each of the B
running sequences whose prompt is done and spends what is left of the token budget M on
prompt chunks, oldest first (``separate = 0``: vLLM V1, TensorRT-LLM, llama.cpp); or,
with ``separate = 1`` (SGLang), a step with prompt work waiting is a prefill step that
decodes nothing. A request holds one of the S running slots from admission to its last
token. Its step time is the engine's (:mod:`dse.formulas.engine`):
``step(B, P, n)`` with B decoding sequences, P prompt tokens in n chunks.

The model is a mean field over steps, solved as a fixed point a fixed number of times
(no per-point simulation), everything an array:

- **Steps.** A step carries prompt work when the prompt buffer is not empty: prompts
  arrived during the previous step (open loop: Poisson at rate lambda over the step's
  length; closed loop: the requests that finished in it), or work carried over, whose
  probability is that of a slotted queue (:func:`~dse.formulas.queueing.busy_probability`)
  or of a prompt longer than the budget. Decode-only and prompt steps alternate as a
  two-state chain; prompt tokens per prompt step follow from conservation of work
  (lognormal buffer capped at the budget); the mean step comes from the linearized
  balance tbar = tau_d / (1 - kappa lambda E[I]) (kappa: seconds a prompt token adds).
- **Batch.** Decoding sequences B = lambda x decode time (Little's law); a decoding
  request sees itself plus the others (Poisson occupancy in the open loop, c - 1 in the
  closed loop), which matters where the step grows with the batch (MoE experts).
- **TTFT** = residual of the running step (open loop: E[tau^2] / 2 E[tau]) + the steps
  that process the prompt: the tokens ahead (work carried over + half the prompts that
  arrived with it) fill full steps before its last one, which it shares with the rest.
- **TPOT** per output length: the decode step plus the prompt work of others in the
  steps it decodes in; the step after its own prompt step is correlated with it (more
  arrivals during a long step), decaying with the branching ratio.
- **Closed loop**: throughput X from Little's law c = X (TTFT + decode time), with the
  c - S requests beyond the slots waiting for S departures; **open loop**: capacity is
  the closed loop at c = S (slots always full), ``overloaded`` where lambda >= capacity,
  and the wait for a slot is M/G/S (Erlang C with the Allen-Cunneen factor).
- **Attention-DP ranks** (``ranks`` = R > 1: data-parallel attention ranks whose MoE
  layers run as one expert-parallel group, SGLang ``--enable-dp-attention``, TensorRT-LLM
  ``enable_attention_dp``, vLLM DP+EP): each rank runs its own share of the load, but the
  ranks run every step together, so a step lasts as the slowest rank's: the decode step
  plus the largest of the R ranks' prompt-step excesses over it, each rank carrying prompt
  work with probability f independently (the expected largest of R draws, exact over the
  prompt buffer's quadrature nodes: :func:`dse.formulas.queueing.largest_moments`). Where
  prompts are rare the stream meets prompt work R times as often; where every step
  carries some, about as often but at the longest of R. A decoding request meets its
  rank's other requests' prompt work and every other rank's (in another rank's prompt
  step its own rank decodes: SGLang runs a decode batch beside another rank's prefill);
  its own prompt step lasts at least the other ranks'.
  With context balancing (``balance`` = T > 0 steps: TensorRT-LLM's ``attention_dp_config``
  ``enable_balance``) a rank's prompts wait until every rank has one, or T steps after
  the last release: prompt steps coincide on all ranks (each as long as the longest of
  the R ranks' prompt steps) and a prompt waits half a release cycle, L / 2 steps, L = min(H_R / a, T)
  with a = lambda tbar the prompts a rank receives per step (H_R / a: the mean of the
  longest of R exponential waits for the next prompt, H_R the R-th harmonic number),
  where every rank has a sequence decoding (else the engine releases the prompts at
  once: a prefill-only worker never waits).
- **Percentiles**: mixtures over quantile nodes of the length distributions (inputs for
  TTFT, outputs for TPOT and E2E), the residual of the running step (uniform over a step
  drawn size-biased), the wait for a slot, and the prompt work of others. The
  inter-token latency (ITL: every gap between two tokens of a request, pooled over
  tokens, as ``vllm bench serve`` reports it) is the distribution of the steps a
  decoding request decodes in: the decode step as it sees it, or one with the others'
  prompt work (:func:`dse.formulas.load_tails.gaps`).

Lengths are lognormal with the given means and coefficients of variation.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from . import queueing as q
from .load_tails import busy, itl_quantiles, tails

ITERATIONS = 24  # relaxations of the step mean field at a given rate (open loop)
BISECTIONS = 16  # bracketed trials of the closed loop's throughput
DAMP = 0.5
PROMPT_MARGIN = 0.02  # share of the prompt server's limit kept as margin (see _steps)
INNER = 4  # relaxations per trial (the mean field is carried from one to the next)


class Load(NamedTuple):
    """The request load on one replica and how its engine schedules."""

    rate: Any  # open-loop arrivals per second (0: closed loop)
    clients: Any  # closed-loop clients (0: open loop)
    arrival_cv: Any  # coefficient of variation of the open loop's gaps (1: Poisson)
    slots: Any  # running-batch cap S (max_num_seqs, at most what the KV memory holds)
    budget: Any  # tokens per engine step M (max_num_tokens)
    separate: Any  # 1: prefill steps apart from decode steps, 0: chunked prefill mixed in
    prefix_hit: Any  # fraction of prompt tokens served from the prefix cache
    ranks: Any = 1.0  # ranks in lock-step per step (attention-DP ranks sharing the experts)
    balance: Any = 0.0  # steps a rank's prompts may wait for every rank to have one (0: none)
    # 1: an open-loop arrival meets a running step only while the engine is busy (Poisson
    # occupancy of the requests in the system: 1 - exp(-x (TTFT + decode time))); 0: it
    # always does, as the request loads are modelled (agentic sessions set 1: a thinking
    # session's next turn often finds its replica idle)
    idle: Any = 0.0
    # requests of a closed-loop benchmark run (vllm bench serve --num-prompts), its clients
    # starting together on an idle engine: the first wave's share of the requests runs in
    # lock step (:func:`lockstep`); 0: the steady state
    prompts: Any = 0.0
    # decode steps between the scheduler's looks for new requests (SGLang
    # --scheduler-recv-interval; a prompt step is followed by a look at once); 1: every step
    poll: Any = 1.0


class Lengths(NamedTuple):
    input_len: Any
    input_cv: Any
    output_len: Any
    output_cv: Any


StepTime = Callable[[Any, Any, Any], Any]  # (decoding B, prompt tokens P, chunks n) -> s


class _Nodes(NamedTuple):
    prompt: Any  # computed prompt tokens at the input-length nodes
    prompt_w: Any
    decode: Any  # decode steps (output tokens - 1) at the output-length nodes
    decode_w: Any
    mean_prompt: Any
    prompt_m2: Any
    mean_decode: Any
    prompt_q: Any  # at the quantile nodes (percentiles)
    decode_q: Any


def _nodes(lengths: Lengths, hit, rank: int) -> _Nodes:
    inputs, iw = q.lognormal_nodes(lengths.input_len, lengths.input_cv ** 2)
    outputs, ow = q.lognormal_nodes(lengths.output_len, lengths.output_cv ** 2)
    prompt = (1.0 - hit) * jnp.maximum(inputs, 1.0)
    decode = jnp.maximum(outputs - 1.0, 0.0)
    prompt_q = (1.0 - hit) * jnp.maximum(
        q.lognormal_quantile_nodes(lengths.input_len, lengths.input_cv ** 2), 1.0)
    decode_q = jnp.maximum(
        q.lognormal_quantile_nodes(lengths.output_len, lengths.output_cv ** 2) - 1.0, 0.0)
    return _Nodes(prompt, iw, decode, ow, jnp.sum(iw * prompt, 0), jnp.sum(iw * prompt ** 2, 0),
                  jnp.sum(ow * decode, 0), prompt_q, decode_q)


def _continuation(nodes: _Nodes, budget):
    """Steps a prompt spans beyond its first when it runs alone."""
    return jnp.sum(nodes.prompt_w * (jnp.ceil(nodes.prompt / budget - 1e-6) - 1.0), 0)


class _State(NamedTuple):
    x: Any  # throughput (requests/s)
    tbar: Any  # mean step
    var_t: Any  # variance of a step's length
    f: Any  # share of steps with prompt work
    m1: Any  # mean prompt step
    tpot: Any
    ttft: Any  # without the wait for a slot
    pinned: Any  # open loop's trial running batch while it is searched (0: none)


def _steps(step: StepTime, nodes: _Nodes, load: Load, s: _State, closed, clients):
    """One pass of the step mean field at throughput s.x: its new values and the parts
    the tagged request reads."""
    x, sep = s.x, load.separate
    # decoding: at most every slot, and in a closed loop at most every client
    most = jnp.where(closed, jnp.minimum(jnp.maximum(clients, 1.0), load.slots), load.slots)
    b = jnp.where(s.pinned > 0.0, jnp.minimum(s.pinned, most),
                  jnp.minimum(x * nodes.mean_decode * s.tpot, most))
    bs = b * (1.0 - sep)
    cap = jnp.maximum(load.budget - bs, 1.0)
    tau_d = step(b, 0.0, 0.0)
    ei, ei2 = nodes.mean_prompt, nodes.prompt_m2
    work = x * ei * s.tbar  # prompt tokens per step
    a_closed = jnp.where(sep > 0.0, x * s.tbar / jnp.maximum(1.0 - s.f, 1e-6), x * s.tbar)
    a_d = jnp.where(closed, a_closed, x * tau_d)
    a_m = jnp.where(closed, jnp.where(sep > 0.0, 0.0, a_closed), x * s.m1)
    var_work = x * ei2 * s.tbar + jnp.where(closed, 0.0, (x * ei) ** 2 * s.var_t)
    carry = q.busy_probability(x * s.tbar, ei, ei2 + ei * ei * x * s.var_t
                               / jnp.maximum(s.tbar, 1e-30), cap)
    carry = 1.0 - (1.0 - carry) * (1.0 - jnp.minimum(x * s.tbar * _continuation(nodes, cap),
                                                      1.0))
    # a scheduler that looks for new requests every N decode steps (:func:`_tagged`)
    # admits a look's worth of arrivals at once: prompt steps that many times rarer
    look = _look(load, s, tau_d, closed)
    p_d = 1.0 - (1.0 - carry) * jnp.exp(-a_d * look)
    p_m = 1.0 - (1.0 - carry) * jnp.exp(-a_m * look)
    f = p_d / jnp.maximum(1.0 - p_m + p_d, 1e-12) / look
    # The prompt server (time) works a share rho_t = lambda E[I] t_full / M of the time
    # in full steps. In a busy period (M/G/1: E[I] / (1 - rho_t) prompt tokens) prompt
    # steps are full but the last, so at most that many tokens per prompt step: prompts
    # queued behind each other pack the steps, where arrivals alone would spread them.
    t_full = step(bs, cap, jnp.maximum(x * s.tbar / jnp.maximum(s.f, 1e-9), 1.0))
    rho_t = jnp.clip(x * ei * t_full / cap, 0.0, 1.0 - 1e-6)
    period = ei / (1.0 - rho_t)
    packed = period / (jnp.floor(period / cap) + 1.0)
    f = jnp.clip(jnp.maximum(jnp.minimum(f, work / packed), work / cap), 1e-9, 1.0)
    # the prompt buffer of a prompt step: lognormal, its capped mean the work per step
    buffer = work / f
    cv2 = jnp.maximum(var_work / f + work ** 2 / f - work ** 2 / f ** 2, 0.0) / jnp.maximum(
        buffer, 1e-30) ** 2
    s2 = jnp.log1p(cv2)
    buffer = q.lognormal_mean_with_capped_mean(jnp.minimum(buffer, cap * (1.0 - 1e-6)), s2, cap)
    wn, ww = q.lognormal_nodes(buffer, cv2, 5)
    chunks = jnp.maximum(x * s.tbar / f, 1.0)
    tq = step(bs, jnp.minimum(wn, cap), chunks)
    m1, m2 = jnp.sum(ww * tq, 0), jnp.sum(ww * tq * tq, 0)
    # balanced ranks (TensorRT-LLM's attention-DP context balancing) have their prompt
    # steps together: such a step lasts the longest of the R ranks' prompt steps
    aligned = (load.ranks > 1.0) & (load.balance > 0.0)
    m1_all, m2_all = q.largest_moments(tq, ww, [(1.0, load.ranks)])
    m1, m2 = jnp.where(aligned, m1_all, m1), jnp.where(aligned, m2_all, m2)
    # attention-DP ranks in lock-step (R = ranks): a step of the group lasts the decode
    # step plus the largest excess of a rank's prompt step over it (its prompt buffer at
    # the nodes wn, each rank with prompt work with probability f, independently)
    coupled = (load.ranks > 1.0) & (load.balance <= 0.0)  # balanced: prompt steps aligned
    excess = jnp.maximum(tq - tau_d, 0.0)
    e_r, e_r2 = q.largest_moments(excess, ww, [(f, load.ranks)])
    e_1 = jnp.sum(ww * excess, 0)
    per_token = jnp.where(coupled, e_r, jnp.where(sep > 0.0, f * m1, f * (m1 - tau_d))
                          ) / jnp.maximum(work, 1e-30)
    den = 1.0 - per_token * x * ei
    tb = jnp.where(coupled | (sep <= 0.0), tau_d, (1.0 - f) * tau_d) / jnp.maximum(den, 0.05)
    # overloaded: prompt work alone would fill every step (full steps of the budget), to
    # within PROMPT_MARGIN, short of which the step mean field is singular
    over = x * ei * t_full >= cap * (1.0 - PROMPT_MARGIN)
    damp = DAMP * sep  # a separate prefill step feeds back on itself: damped
    tbar = damp * s.tbar + (1.0 - damp) * tb
    var_t = jnp.maximum(jnp.where(coupled, tau_d ** 2 + 2.0 * tau_d * e_r + e_r2,
                                  (1.0 - f) * tau_d ** 2 + f * m2) - tbar ** 2, 0.0)
    r = jnp.clip(per_token * x * ei, 0.0, 0.95)  # step-length autocorrelation
    share = jnp.where(closed, (clients - 1.0) / jnp.maximum(clients, 1.0), 1.0)
    seen = _seen_decode_step(step, b, closed, share, load.slots)
    fo = f * share
    # coupled: its rank's decode steps last as the other ranks' prompt work makes them,
    # and (mixed) the others of its rank have prompt work with probability fo; apart from
    # decodes (separate), its rank's prompt steps stall it, each as long as the longest
    alone = seen + jnp.where(sep > 0.0, fo / jnp.maximum(1.0 - fo, 1e-6) * m1, fo * (m1 - tau_d))
    others_mass = q.largest_mass(ww, [(f, load.ranks - 1.0)])  # the other ranks' largest
    others = jnp.sum(excess * others_mass, 0)
    mixed_r, _ = q.largest_moments(excess, ww, [(fo, 1.0), (f, load.ranks - 1.0)])
    own_r, _ = q.largest_moments(excess, ww, [(1.0, 1.0), (f, load.ranks - 1.0)])
    grouped = seen + jnp.where(sep > 0.0, fo / jnp.maximum(1.0 - fo, 1e-6) * (tau_d + own_r)
                               + others, mixed_r)
    base = jnp.where(coupled, grouped, alone)
    parts = dict(coupled=coupled, excess=excess,
                 others_mass=others_mass, tq=tq, tq_w=ww, aligned=aligned,
                 b=b, bs=bs, cap=cap, tau_d=tau_d, carry=carry, work=work, buffer=buffer,
                 chunks=chunks, m2=m2, p_d=p_d, p_m=p_m, r=r, share=share, base=base, seen=seen,
                 over=over, t_full=t_full, rho_t=rho_t,
                 # how much more prompt work the coupled stream carries than one rank's
                 amplify=jnp.where(coupled, e_r / jnp.maximum(f * e_1, 1e-30), 1.0),
                 slope=(step(b + 1.0, 0.0, 0.0)
                        - step(jnp.maximum(b - 1.0, 0.0), 0.0, 0.0)) / 2.0)
    return s._replace(tbar=tbar, var_t=var_t, f=f, m1=m1), parts


def _look(load: Load, s: _State, tau_d, closed):
    """Steps' worth of arrivals a look of the scheduler gathers (1: it looks every step):
    the N - 1 decode steps a request arriving in a run of them waits out beyond the mean
    field's (:func:`_tagged`), over the mean step."""
    decoding = jnp.where(closed, jnp.where(load.separate > 0.0, 1.0, 1.0 - s.f),
                         (1.0 - s.f) * tau_d / jnp.maximum(s.tbar, 1e-30))
    gathered = jnp.maximum(load.poll - 1.0, 0.0) * tau_d * jnp.clip(decoding, 0.0, 1.0)
    return 1.0 + gathered / jnp.maximum(s.tbar, 1e-30)


def _seen_decode_step(step, b, closed, share, slots):
    """The decode step as a decoding request sees it: itself and the others (open loop:
    Poisson occupancy, as normal nodes; closed loop: the other clients' share)."""
    zn, wn = q.normal_nodes(5, jnp.ndim(b))
    others = jnp.clip(b + jnp.sqrt(jnp.maximum(b, 1e-12)) * zn, 0.0, slots - 1.0)
    open_loop = jnp.sum(wn * step(1.0 + others, 0.0, 0.0), 0)
    closed_loop = step(jnp.minimum(b * share + 1.0, slots), 0.0, 0.0)
    return jnp.where(closed, closed_loop, open_loop)


def _tagged(step, nodes: _Nodes, load: Load, s: _State, p, closed, full: bool):
    """TTFT (without the wait for a slot), TPOT per output node and what they need."""
    x, ei = s.x, nodes.mean_prompt
    et2 = s.var_t + s.tbar ** 2
    residual = jnp.where(closed, 0.0, et2 / (2.0 * s.tbar)) * busy(load, s, nodes)
    # a scheduler that looks for new requests every N decode steps (SGLang's receive
    # skipper: a decode step counts 1, a prompt step N at once): a request that arrives
    # in a run of decode steps waits for the next look, N / 2 decode steps on average
    # where the mean field's arrival met the step's end (closed loop) or its residual
    # (open), and the prompts of the N steps join at the look, prefilled together; one
    # that arrives in a prompt step is looked for at its end. A closed loop's requests
    # arrive as others finish, in steps that decode: every one on an engine that
    # prefills apart (SGLang), a share 1 - f of steps on one that mixes; an open loop's
    # arrive in time. ``look``: the steps' worth of arrivals a look gathers
    look = _look(load, s, p["tau_d"], closed)
    # (an engine with nothing else running looks at once: none of the others decoding)
    poll_wait = 0.5 * (look - 1.0) * s.tbar * (1.0 - jnp.exp(-p["b"] * p["share"]))
    # prompts arriving with it: closed loop, the others finishing in the same step (or,
    # polled, in the steps a look gathers); open loop, those arriving during the
    # (size-biased) step it arrives in
    arrivals = jnp.where(closed, x * s.tbar, x * et2 / s.tbar) * p["share"] * look
    # open loop: the wait for the prompt server, M/G/1 in time: its unfinished work at an
    # arrival (Pollaczek-Khinchine, in tokens at M per full step) beyond the step in
    # progress and the carry-over, at t_full per M tokens; busy with probability rho_t
    pk = (x * p["share"] * nodes.prompt_m2 * p["t_full"]
          / (2.0 * p["cap"] * (1.0 - p["rho_t"])))
    # prompt tokens carried over from step to step (the buffer beyond the budget), at most
    # the open loop's unfinished prompt work: where a prompt step's mean work nears the
    # budget, the buffer's lognormal inverts to an unbounded mean (2e5 tokens at 80% of
    # capacity, 2e4 at 90%: a TTFT that fell as the load rose)
    backlog = jnp.maximum(s.f * p["buffer"] - p["work"], 0.0)
    backlog = jnp.where(closed, backlog, jnp.minimum(backlog, pk))
    current = jnp.minimum(p["work"] / s.f, p["cap"])
    prompt_wait = jnp.where(closed, 0.0, jnp.maximum(pk - current - backlog, 0.0)
                            / p["cap"] * p["t_full"])
    ahead = backlog + arrivals / 2.0 * ei
    behind = arrivals / 2.0 * ei
    cap, bs, chunks = p["cap"], p["bs"], p["chunks"]
    t_full = step(bs, cap, chunks)
    if full:
        p_ahead = jnp.maximum(1.0 - (1.0 - p["carry"]) * jnp.exp(-arrivals / 2.0), 1e-9)
        mean_a = jnp.maximum(ahead, 1e-9 * ei) / p_ahead
        var_a = (arrivals / 2.0 * nodes.prompt_m2 + backlog ** 2) / p_ahead - mean_a ** 2
        an, aw = q.lognormal_nodes(mean_a, jnp.maximum(var_a, 0.0) / mean_a ** 2, 5)
        an = jnp.concatenate([jnp.zeros_like(an[:1]), an])
        aw = jnp.concatenate([(1.0 - p_ahead)[None] * jnp.ones_like(aw[:1]), p_ahead * aw])
        total = nodes.prompt[:, None] + an[None]  # [input node, ahead node]
    else:
        total = nodes.prompt + ahead
    full_steps = jnp.floor(total / cap)
    last = jnp.minimum(total - full_steps * cap + behind, cap)
    t_last = step(bs, last, chunks)
    # coupled ranks: a step of its prompt lasts at least the other ranks' prompt steps
    t_last = jnp.where(p["coupled"], p["tau_d"] + q.at_least(
        jnp.maximum(t_last - p["tau_d"], 0.0), p["excess"], p["others_mass"]), t_last)
    duration = full_steps * t_full + t_last
    if full:
        own = jnp.sum(nodes.prompt_w[:, None] * aw[None] * t_last, (0, 1))
        prefill = jnp.sum(nodes.prompt_w * jnp.sum(aw[None] * duration, 1), 0)
    else:
        own = jnp.sum(nodes.prompt_w * t_last, 0)
        prefill = jnp.sum(nodes.prompt_w * duration, 0)
    first = jnp.where(closed, s.tbar, s.tbar + p["r"] * (own - s.tbar))
    n = jnp.maximum(nodes.decode, 1.0)
    r = p["r"]
    decay = (1.0 - r ** n) / jnp.maximum((1.0 - r) * n, 1e-12)
    tpot_n = p["base"] + (first - s.tbar) * decay
    w = jnp.where(nodes.decode > 0.5, nodes.decode_w, 0.0)
    tpot = jnp.sum(w * tpot_n, 0) / jnp.maximum(jnp.sum(w, 0), 1e-30)
    decode_time = jnp.sum(nodes.decode_w * nodes.decode * tpot_n, 0)
    # attention-DP context balancing: half a release cycle of L steps
    ranks = jnp.maximum(load.ranks, 1.0)
    harmonic = jnp.log(ranks) + 0.5772156649 + 0.5 / ranks  # H_R (to 1 / (12 R^2))
    cycle = jnp.minimum(harmonic / jnp.maximum(x * s.tbar, 1e-30), load.balance)
    # (released at once where some rank has nothing decoding: Poisson occupancy at b)
    every_rank_decodes = (1.0 - jnp.exp(-p["b"])) ** ranks
    adp_wait = jnp.where((load.ranks > 1.0) & (load.balance > 0.0),
                         0.5 * cycle * s.tbar * every_rank_decodes, 0.0)
    prompt_wait = prompt_wait + adp_wait + poll_wait
    prefill = prefill + prompt_wait
    # the prompt work queued when a request starts to decode (M/G/1: a departure leaves
    # the time-average workload behind, mean pk in tokens, busy with probability rho_t)
    backlog_s = jnp.where(closed, 0.0, pk / p["cap"] * p["t_full"])
    out = dict(residual=residual, prefill=prefill, prompt_wait=prompt_wait, tpot=tpot,
               backlog_s=backlog_s, look=look,
               tpot_n=tpot_n,
               decode_time=decode_time, t_full=t_full, backlog=backlog, arrivals=arrivals)
    if full:
        out.update(aw=aw, an=an)
    return out


def fastest_decode_step(step, batch, one=None):
    """The shorter of the decode steps at batch 1 and at ``batch`` (the most that can
    decode together), a floor under every step in between where the step grows with the
    batch. Measured kernel surfaces need not: a table's GEMM at M = 1 can measure slower
    than at M = 2-8 (aiconfigurator-core's vLLM FP8 table on B200: 23 us at M = 1, 10.4-10.7
    us at M = 2-6, N = 1024, K = 8192), and a bracket from batch 1 alone then leaves the
    fixed point outside (a closed loop of 4 clients priced at batch-1 steps, its TTFT the
    shortfall by Little's law: 33 s instead of 0.2 s). Where the step grows with the
    batch it is the step at batch 1, as before (``one``: that step, where known)."""
    one = step(1.0, 0.0, 0.0) if one is None else one
    return jnp.minimum(one, step(jnp.maximum(batch, 1.0), 0.0, 0.0))


def _solve(step, nodes: _Nodes, load: Load, closed, iterations: int) -> _State:
    """The fixed point, in one loop: relax the step mean field, and every ``INNER``
    relaxations take a bisection step, ``BISECTIONS`` of them, then relax ``iterations``
    times from the last trial known to lie below the fixed point.

    Closed loops bisect in log x on Little's law x (TTFT + decode time) = min(c, S)
    within [x_lo, x_hi] (x_hi from the decode time at batch 1). Open loops bisect in log b
    on the running batch at their rate, b = min(x E[decode steps] TPOT(b), S), within
    [x E[decode steps] TPOT(1), S]: plain relaxation converges as (x E[decode] dTPOT/db)^n,
    which near the rate where the decode steps' growth with the batch meets the arrivals
    (the KV reads of every running request: the batch then fills every slot) takes
    hundreds of relaxations, and a float32 run stopped short of it by a different
    amount on each backend (running batch 860-1024 of 1024 at 97% of capacity, TTFT
    3.4-11.8 s)."""
    # clients past the slots wait outside the engine: the engine runs as at c = S
    clients = jnp.minimum(load.clients, load.slots)
    n_target = clients
    init_tau = step(1.0, 0.0, 0.0)
    # the shortest decode step the loop can run: closed, at most its clients decoding;
    # open, at most its slots
    fastest = fastest_decode_step(step, jnp.where(n_target > 0.0, n_target, load.slots),
                                  init_tau)
    # (the state takes every axis of the load and of the lengths: a spread of the prompt
    # lengths as a study axis of its own shaped the iteration's values, not its start)
    zero = 0.0 * (load.rate + n_target + init_tau + nodes.mean_prompt + nodes.mean_decode
                  + load.ranks + load.balance)
    # the bracket: no request is faster than its decode steps at their fastest; none slower
    # than its prompt and decode steps all at the longest step (every slot decoding, a
    # full budget of prompt), except past the prompt server's limit (below half of it)
    # nor faster than the prompt server at its best (full budgets at batch 1; twice that
    # for a margin): the bound that holds where nothing decodes (one output token), which
    # a float32 search from n / 1e-30 would overflow
    prompt_best = load.budget / jnp.maximum(nodes.mean_prompt * step(1.0, load.budget, 1.0),
                                            1e-30)
    x_hi = jnp.minimum(n_target / jnp.maximum(nodes.mean_decode * fastest, 1e-30),
                       2.0 * prompt_best) + zero
    longest = step(load.slots, load.budget, 1.0)
    slowest = (nodes.mean_decode + jnp.ceil(nodes.mean_prompt / load.budget) + 2.0) * longest
    prompt_limit = load.budget / jnp.maximum(nodes.mean_prompt * longest, 1e-30)
    x_lo = jnp.minimum(n_target / slowest, 0.5 * prompt_limit)
    lo = jnp.log(jnp.maximum(jnp.minimum(x_lo, 0.5 * x_hi), 1e-30))
    hi = jnp.log(jnp.maximum(x_hi, 1e-30))
    # the open loop's running batch: no fewer than its arrivals decoding at the fastest steps
    rate = load.rate + zero
    b_lo = jnp.log(jnp.maximum(rate * nodes.mean_decode * fastest, 1e-30))
    b_hi = jnp.log(jnp.maximum(load.slots + zero, 1e-30))
    b_lo = jnp.minimum(b_lo, b_hi)
    lo, hi = jnp.where(closed, lo, b_lo), jnp.where(closed, hi, b_hi)
    x0 = jnp.where(closed, jnp.exp(0.5 * (lo + hi)), rate)
    pinned = jnp.where(closed, 0.0, jnp.exp(0.5 * (lo + hi)))
    init = _State(x0, init_tau + zero, zero, zero + 1e-9, init_tau + zero, init_tau + zero,
                  zero, pinned)
    searching = BISECTIONS * INNER

    def body(i, carry):
        s, fit, lo, hi = carry
        s, p = _steps(step, nodes, load, s, closed, clients)
        t = _tagged(step, nodes, load, s, p, closed, full=False)
        s = s._replace(tpot=t["tpot"], ttft=t["residual"] + t["prefill"])
        decide = (i < searching) & (i % INNER == INNER - 1)
        # a trial above the fixed point: the closed loop's clients cannot keep that
        # throughput; the open loop's arrivals keep fewer requests decoding than pinned
        high = jnp.where(closed, p["over"] | (s.x * (t["prefill"] + t["decode_time"]) > n_target),
                         s.x * nodes.mean_decode * s.tpot < s.pinned)
        here = jnp.log(jnp.maximum(jnp.where(closed, s.x, s.pinned), 1e-30))  # (pinned 0: unused)
        lo = jnp.where(decide & ~high, here, lo)
        hi = jnp.where(decide & high, here, hi)
        # the next trial starts from the mean field of the last trial that fitted: the
        # step grows with the batch, so a state carried down from a trial that did not
        # fit can sit on the congested branch of the fixed point and misjudge
        fit = jax.tree_util.tree_map(lambda a, b: jnp.where(decide & ~high, a, b), s, fit)
        s = jax.tree_util.tree_map(lambda a, b: jnp.where(decide & high, b, a), s, fit)
        last = i == searching - 1
        trial = jnp.exp(jnp.where(last, lo, 0.5 * (lo + hi)))
        x = jnp.where(decide & closed, trial, s.x)
        # the open loop relaxes unpinned from the last batch below its fixed point
        pinned = jnp.where(decide & ~closed, jnp.where(last, 0.0, trial), s.pinned)
        return s._replace(x=x, pinned=pinned), fit, lo, hi

    s, _, _, _ = jax.lax.fori_loop(0, searching + iterations, body, (init, init, lo, hi))
    return s


def serve(step: StepTime, lengths: Lengths, load: Load, iterations: int = ITERATIONS,
          percentiles: bool = True) -> dict:
    """Latency and throughput of one replica under ``load``; arrays broadcast.

    Returns means (``ttft_s``, ``tpot_s``, ``e2e_s``, ``queue_s``), the throughput in
    requests/s, the running batch, the capacity (requests/s at full slots), utilization,
    ``overloaded`` (open loop at or past capacity: latencies NaN) and, with
    ``percentiles``, the P50/P90/P99 of TTFT, TPOT and E2E and the CDFs of TTFT and TPOT
    (``ttft_cdf(t)``, ``tpot_cdf(t)``).
    """
    rank = max(jnp.ndim(a) for a in (*lengths, *load))
    nodes = _nodes(lengths, load.prefix_hit, rank)
    open_loop = jnp.asarray(load.clients) <= 0.0
    # the capacity (the closed loop with every slot taken: the open loop's limit) and the
    # load itself, stacked on a leading axis and solved together
    def ranked(v):
        v = jnp.asarray(v)
        return jnp.reshape(v, (1,) * (rank - v.ndim) + v.shape)

    def stack(a, b):
        return jnp.stack(jnp.broadcast_arrays(ranked(a), ranked(b)))

    pair = Load(*(stack(a, b) for a, b in zip(
        Load(0.0 * load.rate, load.slots, *load[2:]), load)))
    pair_closed = stack(True, ~open_loop)
    pair_nodes = _Nodes(*(jnp.expand_dims(v, v.ndim - rank) if jnp.ndim(v) > rank
                          else v for v in nodes))
    s2 = _solve(step, pair_nodes, pair, pair_closed, iterations)
    capacity = s2.x[0]
    s = jax.tree_util.tree_map(lambda v: v[1], s2)
    closed = ~open_loop
    s, p = _steps(step, nodes, load, s, closed, jnp.minimum(load.clients, load.slots))
    t = _tagged(step, nodes, load, s, p, closed, full=True)
    slot_time = t["prefill"] + t["decode_time"]
    # closed loop: Little's law gives the wait in front of the prompt (and the slots)
    n_running = jnp.minimum(load.clients, load.slots)
    x = jnp.where(closed, s.x, load.rate)
    little = jnp.maximum(n_running / jnp.maximum(x, 1e-30) - t["decode_time"], t["prefill"])
    extra_closed = little - t["prefill"]
    slot_wait_closed = jnp.maximum(load.clients - load.slots, 0.0) / jnp.maximum(x, 1e-30)
    # open loop: M/G/S wait for a slot, relative to capacity
    utilization = x / jnp.maximum(capacity, 1e-30)
    rho = jnp.clip(utilization, 0.0, 1.0 - 1e-9)
    servers = load.slots
    p_wait = q.erlang_c(servers, rho * servers)
    cs2 = jnp.sum(nodes.decode_w * (nodes.decode * t["tpot_n"]) ** 2, 0) / jnp.maximum(
        t["decode_time"] ** 2, 1e-30) - 1.0  # no decode (one output token): 0 / 1e-30
    factor = (load.arrival_cv ** 2 + jnp.maximum(cs2, 0.0)) / 2.0
    slot_wait_open = factor * p_wait * slot_time / (servers * (1.0 - rho))
    slot_wait = jnp.where(closed, slot_wait_closed, slot_wait_open)
    # past the capacity (the closed loop at c = S, which keeps the prompt server short of
    # saturation): latencies unbounded
    overloaded = open_loop & ((load.rate >= capacity) | p["over"])
    ttft = t["residual"] + t["prefill"] + jnp.where(closed, extra_closed, 0.0) + slot_wait
    # the wait before its first prompt step: the running step's residual, the wait for a
    # slot and the full steps of prompt work ahead of it
    ahead_steps = jnp.sum(t["aw"] * jnp.floor(t["an"] / p["cap"]), 0)
    queue = (t["residual"] + slot_wait + ahead_steps * t["t_full"] + t["prompt_wait"]
             + jnp.where(closed, extra_closed, 0.0))
    out = dict(ttft_s=ttft, tpot_s=t["tpot"], e2e_s=ttft + t["decode_time"], queue_s=queue,
               request_throughput_req_s=x, running_batch=p["b"], capacity_req_s=capacity,
               utilization=utilization, overloaded=overloaded, mean_step_s=s.tbar,
               prompt_step_share=s.f)
    lock = lockstep(step, nodes, lengths, load)
    # clients beyond the slots wait for slots to free: S departures per cycle
    lock["wait"] = jnp.where(lock["weight"] > 0.0, slot_wait_closed * x
                             / jnp.maximum(lock["x"], 1e-30), 0.0)
    if percentiles:
        out.update(tails(step, nodes, load, s, p, t, closed, slot_wait, p_wait, extra_closed,
                         lock))
    return _with_lockstep(out, lock, percentiles, rank)


def lockstep(step: StepTime, nodes: _Nodes, lengths: Lengths, load: Load) -> dict:
    """A closed loop in waves: the clients' requests arrive together and the engine
    prefills the wave, n = min(c, S) prompts of P tokens, in K = ceil(n P / M) prompt
    steps of the budget M; they then decode together and finish together, and the next
    wave arrives. The requests of the first prompt step (k1 = ceil(P / M) steps for a
    prompt) have their first token after k1 steps, the last after K: the mean TTFT is
    (K + k1) / 2 steps of the wave. A request whose prompt is done early waits for the
    wave's prefill before it decodes (SGLang), or decodes in the wave's prompt steps
    (vLLM, TensorRT-LLM: they carry the decodes of the prompts done, n / 2 on average,
    in their budget), which its TPOT counts.

    This is how a closed loop of benchmark clients with fixed lengths runs on an engine
    that runs prefill steps apart from decode steps (SGLang): nothing breaks the waves
    up. Spread lengths do (a request that finishes a step early comes back a step early
    and is prefilled alone): the steady share of lock step is exp(-d), d the spread of
    the completion times in steps (output_cv x decode steps + input_cv x prompt steps);
    the discrete-event oracle (tests/oracles) dissolves the waves at a spread of 0.1
    already. Engines that mix prompt chunks into decode steps (vLLM, TensorRT-LLM) start
    the first requests' decodes while the rest of the wave is prefilled; the waves
    stagger after one cycle, and the mean field holds (steady share 0).

    A benchmark run of N requests (``load.prompts``: ``vllm bench serve --num-prompts``,
    InferenceX's and srt-slurm's 10 x concurrency) starts its c clients together on an
    idle engine, whatever the engine and the spread: its first wave is one, c / N of the
    requests it measures, and the rest run as the steady state. ``weight`` is the share
    of requests in lock step: c / N + (1 - c / N) x the steady share."""
    n = jnp.maximum(jnp.minimum(load.clients, load.slots), 1.0)
    prompt, budget = jnp.maximum(nodes.mean_prompt, 1.0), load.budget
    total = n * prompt
    mixed = 1.0 - load.separate
    # a mixed engine's wave steps decode the prompts already done: from none to n over
    # the wave, n / 2 on average (at most half the budget)
    k0 = jnp.maximum(jnp.ceil(total / budget - 1e-6), 1.0)
    decoding = mixed * jnp.minimum(0.5 * n * (k0 - 1.0) / k0, 0.5 * budget)
    room = budget - decoding
    k = jnp.maximum(jnp.ceil(total / room - 1e-6), 1.0)
    k1 = jnp.minimum(jnp.maximum(jnp.ceil(prompt / room - 1e-6), 1.0), k)
    per_step = jnp.minimum(jnp.maximum(room / prompt, 1.0), n)
    rest = total - (k - 1.0) * room
    wave = ((k - 1.0) * step(decoding, jnp.minimum(room, total), per_step)
            + step(decoding, rest, jnp.maximum(rest / prompt, 1.0)))
    first = wave * k1 / k
    ttft = 0.5 * (first + wave)
    d = nodes.mean_decode
    tau = step(n, 0.0, 0.0)
    # the wait for the rest of the wave, spread over a request's decode steps; a mixed
    # engine's request decodes in those steps (one token each): only their excess over a
    # decode step counts
    excess = 1.0 - mixed * jnp.clip(tau * k / jnp.maximum(wave, 1e-30), 0.0, 1.0)
    spread_s = jnp.where(d > 0.5, (wave - first) * excess / jnp.maximum(d, 1.0), 0.0)
    tpot = tau + 0.5 * spread_s
    # a mixed engine's early requests finish early by the tokens they decoded in the wave
    e2e_hi = wave + d * tau
    e2e_lo = e2e_hi - mixed * jnp.minimum(k - k1, d) * tau
    e2e = 0.5 * (e2e_lo + e2e_hi)
    closed = load.clients > 0.0
    spread = lengths.output_cv * d + lengths.input_cv * prompt / budget
    steady = jnp.where(closed, load.separate * jnp.exp(-spread), 0.0)
    run = jnp.where(closed & (load.prompts > 0.0),
                    jnp.clip(load.clients / jnp.maximum(load.prompts, 1.0), 0.0, 1.0), 0.0)
    weight = run + (1.0 - run) * steady
    return dict(weight=weight, n=n, wave=wave, first=first, ttft=ttft, tpot=tpot, tau=tau, d=d,
                spread_s=spread_s, e2e=e2e, e2e_lo=e2e_lo, e2e_hi=e2e_hi,
                x=n / jnp.maximum(e2e, 1e-30), batch=n * d * tau / jnp.maximum(e2e, 1e-30),
                own=wave / k)


def _with_lockstep(out: dict, lock: dict, percentiles: bool, rank: int = 0) -> dict:
    """The mean field's outputs and the lock-step waves', mixed by the waves' share:
    means, throughput (cycle times); the percentiles and CDFs are the mixtures' own
    (:func:`dse.formulas.load_tails.tails`), as are the gaps between tokens'."""
    w, wait = lock["weight"], lock["wait"]
    x = 1.0 / (w / lock["x"] + (1.0 - w) / jnp.maximum(out["request_throughput_req_s"], 1e-30))

    def mix(key, v):
        return w * v + (1.0 - w) * out[key]

    res = dict(out, ttft_s=mix("ttft_s", lock["ttft"] + wait), tpot_s=mix("tpot_s", lock["tpot"]),
               e2e_s=mix("e2e_s", lock["e2e"] + wait),
               queue_s=mix("queue_s", lock["ttft"] - lock["own"] + wait),
               request_throughput_req_s=x, running_batch=mix("running_batch", lock["batch"]),
               utilization=x / jnp.maximum(out["capacity_req_s"], 1e-30))
    if not percentiles:
        return res
    # a wave's gaps between tokens are its decode steps, but for each request's first: it
    # waits for the rest of the wave's prefill, 0 to wave - first beyond its step (one gap
    # in d)
    itl = itl_quantiles(res.pop("itl_gaps"), w, lock["tau"], lock["wave"] - lock["first"],
                        1.0 / jnp.maximum(lock["d"], 1.0), rank)
    for q, value in zip((50, 90, 99), itl):
        res[f"itl_p{q}_s"] = value
    return res

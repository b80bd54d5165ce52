"""A discrete-event simulator of a continuous-batching serving engine (test-only oracle).

The analytical serving-under-load model (closed forms inside the jitted evaluator) is
checked against this: an explicit queue, an explicit scheduler and one engine step at a
time, as vLLM, SGLang and TensorRT-LLM run them. It shares only the step-time model
with the code under test, so the queueing and batching logic is independent.

Scheduler (first come first served):

- waiting requests are admitted in arrival order while the running batch is below
  ``max_num_seqs``;
- ``policy = "mixed"`` (vLLM V1, TensorRT-LLM in-flight batching, llama.cpp): every
  engine step decodes one token of every running sequence whose prompt is done; the
  step's token budget ``max_num_tokens`` is spent on those decode tokens first, then on
  prompt chunks of admitted requests (chunked prefill), oldest first; a prompt may take
  several steps;
- ``policy = "separate"`` (SGLang without --enable-mixed-chunk): a step with prompt work
  waiting is a prefill step (prompt chunks only, up to ``max_num_tokens``, oldest
  first) and decodes nothing; otherwise it is a decode step;
- a request's first token comes out of the step that finishes its prompt; it leaves
  after ``output_len`` tokens (its first included). With ``prefix_cache_hit`` h, the
  first round(h x input_len) prompt tokens are cached: the prompt computes the rest,
  attending to them.

The step time is ``step_time(decoding, chunks)``: the number of sequences decoding in the
step and (tokens, tokens before them) of each prompt chunk. A run of decode-only steps
with nothing to admit has a fixed composition, so it is advanced to its next event (a
finish, or an arrival that can be admitted) at once, which is exact.

Load: ``concurrency`` closed-loop clients (each sends its next request when the last
one completes, no think time), or open-loop arrivals at ``request_rate`` per second,
Poisson or gamma-distributed gaps with coefficient of variation ``arrival_cv``. Lengths
are lognormal with the given mean and coefficient of variation (rounded, at least 1).

Records per request: arrival, admission (its first prefill step starts), first token,
finish. TTFT = first token - arrival, TPOT = (finish - first token) / (output_len - 1),
queue = admission - arrival. Statistics are taken in steady state: over the requests
that arrive after the first ``warmup`` and before the last ``cooldown`` (which keep the
load on while the measured ones finish); throughput and the running batch over the time
those measured requests arrive in.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from typing import Callable

import numpy as np

StepTime = Callable[[int, list[tuple[int, int]]], float]


@dataclasses.dataclass(frozen=True)
class Result:
    arrival: np.ndarray  # the measured requests
    admitted: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    output_len: np.ndarray
    duration_s: float  # the window they arrived in
    completions: int  # requests (any) finished in that window
    steps: int
    mean_running: float  # sequences per step in the window, time-weighted
    mixed_share: float  # share of the window's steps that carried prompt work
    gap_s: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    gap_count: np.ndarray = dataclasses.field(  # the measured requests' gaps between tokens
        default_factory=lambda: np.zeros(0, int))

    def itl(self) -> np.ndarray:
        """Every gap between two tokens of the measured requests, pooled (vllm bench
        serve's ITL)."""
        return np.repeat(self.gap_s, self.gap_count)

    def ttft(self) -> np.ndarray:
        return self.first_token - self.arrival

    def tpot(self) -> np.ndarray:
        long = self.output_len > 1
        return (self.finish - self.first_token)[long] / (self.output_len[long] - 1)

    def e2e(self) -> np.ndarray:
        return self.finish - self.arrival

    def queue(self) -> np.ndarray:
        return self.admitted - self.arrival

    def throughput_req_s(self) -> float:
        return self.completions / self.duration_s


def lengths(rng, mean: float, cv: float, n: int, range_ratio: float = 0.0) -> np.ndarray:
    """n integer lengths >= 1, lognormal with that mean and coefficient of variation; with
    ``range_ratio`` r > 0, uniform integers from int(r x mean) to mean (``mean``: the
    stated length), as vLLM's and InferenceX's ``benchmark_serving.py --dataset-name
    random --random-range-ratio r`` draw them."""
    if range_ratio > 0.0:
        top = int(round(mean))
        return rng.integers(int(top * range_ratio), top + 1, n)
    if cv <= 0.0:
        return np.full(n, max(int(round(mean)), 1))
    sigma2 = math.log1p(cv * cv)
    draws = rng.lognormal(math.log(mean) - sigma2 / 2.0, math.sqrt(sigma2), n)
    return np.maximum(np.rint(draws), 1).astype(int)


def simulate(step_time: StepTime, *, input_len: float, output_len: float,
             concurrency: int = 0, request_rate: float = 0.0, arrival_cv: float = 1.0,
             input_len_cv: float = 0.0, output_len_cv: float = 0.0,
             max_num_seqs: int = 256, max_num_tokens: int = 8192, policy: str = "mixed",
             prefix_cache_hit: float = 0.0, n_requests: int = 2000, warmup: int = 200,
             cooldown: int | None = None, seed: int = 0, ranks: int = 1,
             balance: int = 0, range_ratio: float = 0.0, recv_interval: int = 1) -> Result:
    """Run the engine until every request has completed and measure the ``n_requests``
    that arrive after the first ``warmup`` (``cooldown`` more arrive after them: by
    default 2 x concurrency x ranks + 50). Exactly one of ``concurrency`` and
    ``request_rate``.

    ``ranks`` > 1: attention data parallelism with the experts shared, as SGLang's
    ``--enable-dp-attention`` and TensorRT-LLM's ``enable_attention_dp`` run it. Each rank
    has its own clients (``concurrency`` each) or arrivals (``request_rate`` each, an
    independent stream), its own queue, batch cap and token budget, and schedules its
    own step; the ranks then run that step together (the experts' all-to-all), so the
    step lasts as long as the slowest rank's. ``mean_running`` is per rank.

    ``balance`` > 0 (with ranks > 1): TensorRT-LLM's context balancing
    (``attention_dp_config.enable_balance``, ``timeout_iters`` = balance,
    ``batching_wait_iters`` 0; ``PyExecutor._balance_adp_requests``): prompt work is
    scheduled in a step where every rank has some, or where a counter of the steps
    since the last release reaches ``balance``, or where some rank has nothing decoding;
    otherwise the ranks decode only.

    ``range_ratio`` > 0: the lengths of a benchmark client's random dataset, uniform from
    that share of ``input_len`` / ``output_len`` to them (:func:`lengths`). A closed loop
    starts its clients together at time 0 on an idle engine; with ``warmup`` and
    ``cooldown`` 0 and ``n_requests`` = N it is a benchmark run of N requests
    (``--num-prompts N --max-concurrency c``), every one measured.

    ``recv_interval`` N > 1: the scheduler looks for new requests only every N decode
    steps, as SGLang's ``--scheduler-recv-interval`` (``SchedulerRecvSkipper``: a counter
    that a decode step raises by 1 and any other step by 1,000, a look when it reaches N,
    and at once when the engine is idle); requests that arrived in between wait, then
    join together (one engine rank)."""
    if (concurrency > 0) == (request_rate > 0.0):
        raise ValueError("exactly one of concurrency and request_rate")
    if policy not in ("mixed", "separate"):
        raise ValueError(f"unknown policy {policy!r}")
    if cooldown is None:
        cooldown = 2 * concurrency * ranks + 50
    rng = np.random.default_rng(seed)
    total = n_requests + warmup + cooldown
    ins_ = lengths(rng, input_len, input_len_cv, total, range_ratio)
    outs_ = lengths(rng, output_len, output_len_cv, total, range_ratio)
    cached = np.minimum(np.rint(prefix_cache_hit * ins_).astype(int), ins_ - 1)
    # per-request state as Python lists: the loop below reads and writes one element at a
    # time, which numpy arrays make several times slower (the same values: Python's
    # floats and ints are float64 and exact integers)
    ins, outs = ins_.tolist(), outs_.tolist()
    arrival = [math.nan] * total
    admitted = [math.nan] * total
    first = [math.nan] * total
    finish = [math.nan] * total
    rank_of = [0] * total
    prefilled = cached.tolist()
    generated = [0] * total
    last = [math.nan] * total  # a request's latest token
    gap_r: list[int] = []  # (request, gap, how many such gaps in a row)
    gap_v: list[float] = []
    gap_n: list[int] = []

    def token(r: int, at: float, more: int = 0, dt: float = 0.0) -> None:
        """Request r decodes a token at ``at``, then ``more`` more ``dt`` apart."""
        gap_r.append(r), gap_v.append(at - last[r]), gap_n.append(1)
        if more:
            gap_r.append(r), gap_v.append(dt), gap_n.append(more)
        last[r] = at + more * dt
    pending: list[tuple[float, int]] = []  # heap of (time, request id) not yet arrived
    made = 0

    def make(t: float, rank: int) -> None:
        nonlocal made
        if made < total:
            arrival[made] = t
            rank_of[made] = rank
            heapq.heappush(pending, (t, made))
            made += 1

    if concurrency:
        for rank in range(ranks):
            for _ in range(concurrency):
                make(0.0, rank)
    else:
        streams = []
        for rank in range(ranks):
            if arrival_cv <= 0.0:
                gaps = np.full(total, 1.0 / request_rate)
            else:
                shape = 1.0 / arrival_cv ** 2
                gaps = rng.gamma(shape, 1.0 / (request_rate * shape), total)
            streams += [(float(t), rank) for t in np.cumsum(gaps)]
        for t, rank in sorted(streams)[:total]:
            make(t, rank)
    waiting: list[deque[int]] = [deque() for _ in range(ranks)]
    running: list[list[int]] = [[] for _ in range(ranks)]
    now, steps, finished, counter = 0.0, 0, 0, 0
    log: list[tuple[float, float, int, int, bool]] = []  # start, end, steps, running, prompt

    def retire() -> None:
        nonlocal finished
        for k in range(ranks):
            for r in running[k]:
                if generated[r] >= outs[r]:
                    finish[r] = now
                    finished += 1
                    if concurrency:
                        make(now, k)
            running[k] = [r for r in running[k] if finish[r] != finish[r]]  # not finished (NaN)

    polled = recv_interval  # the receive skipper's counter (a look due at once)
    while finished < total:
        if not any(running) and not any(waiting) and pending and pending[0][0] > now:
            now = pending[0][0]  # idle until the next arrival, then a look at once
            polled = recv_interval
        if polled >= recv_interval:
            polled = 0
            while pending and pending[0][0] <= now:
                r = heapq.heappop(pending)[1]
                waiting[rank_of[r]].append(r)
        if not any(running) and not any(waiting):
            polled = recv_interval  # arrivals not yet looked for, on an idle engine
            continue
        for k in range(ranks):
            while waiting[k] and len(running[k]) < max_num_seqs:
                running[k].append(waiting[k].popleft())
        prompts = [[r for r in running[k] if prefilled[r] < ins[r]] for k in range(ranks)]
        in_flight = sum(len(rs) for rs in running)
        held = False
        if balance and ranks > 1:
            if any(prompts) and all(prompts):
                counter = 0
            else:
                counter += 1
                gen = all(any(prefilled[r] == ins[r] for r in rs) for rs in running)
                if counter >= balance or not gen:
                    counter = 0
                elif any(prompts):
                    held = True  # the prompts wait: this step decodes only
        if held:
            dt = max(step_time(len([r for r in rs if prefilled[r] == ins[r]]), [])
                     for rs in running if rs)
            log.append((now, now + dt, 1, in_flight, False))
            now += dt
            steps += 1
            polled += 1
            for rs in running:
                for r in rs:
                    if prefilled[r] == ins[r]:
                        generated[r] += 1
                        token(r, now)
            retire()
            continue
        if not any(prompts):  # decode-only: the same step until a finish or an admission
            dt = max(step_time(len(rs), []) for rs in running if rs)
            left = min(outs[r] - generated[r] for rs in running for r in rs)
            n = left
            if pending and len(running[rank_of[pending[0][1]]]) < max_num_seqs:
                n = min(n, max(1, math.ceil((pending[0][0] - now) / dt)))
            if recv_interval > 1 and (pending or any(waiting)):
                n = min(n, max(1, recv_interval - polled))  # up to the next look
            if balance and ranks > 1:  # the counter, stepped once above, wraps every balance
                counter = (counter + n - 1) % balance
            log.append((now, now + n * dt, n, in_flight, False))
            now += n * dt
            steps += n
            # the counter: up to the next look, then from 0 again at each look (which
            # found nothing on the way)
            polled = polled + n if polled + n <= recv_interval else (
                (polled + n - 1) % recv_interval) + 1
            for rs in running:
                for r in rs:
                    generated[r] += n
                    token(r, now - (n - 1) * dt, n - 1, dt)
            retire()
            continue
        dt, work = 0.0, []
        for k in range(ranks):
            if not running[k]:
                continue
            decoding = ([] if policy == "separate" or not prompts[k] else
                        [r for r in running[k] if prefilled[r] == ins[r]])
            if not prompts[k]:
                decoding = list(running[k])
            budget = max_num_tokens - len(decoding)
            chunks: list[tuple[int, int]] = []
            for r in prompts[k]:
                if budget <= 0:
                    break
                take = min(ins[r] - prefilled[r], budget)
                chunks.append((r, take))
                budget -= take
            if not decoding and not chunks:
                raise RuntimeError("max_num_tokens admits no work")
            dt = max(dt, step_time(len(decoding), [(take, int(prefilled[r]))
                                                   for r, take in chunks]))
            work.append((decoding, chunks))
        for _, chunks in work:
            for r, _ in chunks:
                if admitted[r] != admitted[r]:  # NaN: not admitted yet
                    admitted[r] = now
        log.append((now, now + dt, 1, in_flight, True))
        now += dt
        steps += 1
        polled += 1000
        for decoding, chunks in work:
            for r in decoding:
                generated[r] += 1
                token(r, now)
            for r, take in chunks:
                prefilled[r] += take
                if prefilled[r] == ins[r]:
                    generated[r] = 1
                    first[r] = last[r] = now
        retire()
    arrival, admitted, first, finish = (np.asarray(a, float) for a in
                                        (arrival, admitted, first, finish))
    outs = outs_
    order = np.lexsort((np.arange(total), arrival))
    kept = order[warmup:warmup + n_requests]
    start, end = arrival[kept[0]], arrival[kept[-1]]
    if end <= start:  # every measured request arrived at once: use their service span
        end = float(np.max(finish[kept]))
    completions = int(np.sum((finish > start) & (finish <= end)))
    weighted = 0.0
    mixed = count = 0.0
    for t0, t1, k, n, prompt in log:
        overlap = min(t1, end) - max(t0, start)
        if overlap > 0.0:
            weighted += overlap * n / ranks
            share = overlap / (t1 - t0)
            count += k * share
            mixed += prompt * k * share
    measured = np.isin(np.asarray(gap_r, int), kept)
    return Result(arrival[kept], admitted[kept], first[kept], finish[kept], outs[kept],
                  end - start, completions, steps, weighted / max(end - start, 1e-30),
                  mixed / max(count, 1e-30), np.asarray(gap_v)[measured],
                  np.asarray(gap_n, int)[measured])

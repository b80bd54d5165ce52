"""A discrete-event simulator of a continuous-batching serving engine (test-only oracle).

The analytical serving-under-load model (closed forms inside the jitted evaluator) is
checked against this: an explicit queue, an explicit scheduler and one engine step at a
time, as vLLM, SGLang and TensorRT-LLM run them. It shares only the step-time model
with the code under test, so the queueing and batching logic is independent.

Scheduler (vLLM V1 / SGLang style, first come first served):

- every engine step decodes one token of every running sequence whose prompt is done;
- waiting requests are admitted in arrival order while the running batch is below
  ``max_num_seqs``; the step's token budget ``max_num_tokens`` is spent on the decode
  tokens first, then on prompt chunks of admitted requests (chunked prefill), oldest
  first; a prompt may take several steps;
- a request's first token comes out of the step that finishes its prompt; it leaves
  after ``output_len`` tokens (its first included).

Load: ``concurrency`` closed-loop clients (each sends its next request when the last
one completes, no think time), or open-loop arrivals at ``request_rate`` per second,
Poisson or gamma-distributed gaps with coefficient of variation ``arrival_cv``.

Records per request: arrival, admission (its first prefill step starts), first token,
finish. TTFT = first token - arrival, TPOT = (finish - first token) / (output_len - 1),
queue = admission - arrival.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from typing import Callable

import numpy as np


@dataclasses.dataclass
class Request:
    id: int
    arrival: float
    input_len: int
    output_len: int
    prefilled: int = 0  # prompt tokens processed
    generated: int = 0  # output tokens produced
    admitted: float = math.nan
    first_token: float = math.nan
    finish: float = math.nan
    client: int = -1


# step_time(decode_contexts, prefill_chunks) -> seconds: the contexts (tokens in the KV
# cache) of the sequences decoding this step, and (chunk tokens, tokens before the chunk)
# of each prompt chunk in it.
StepTime = Callable[[list[int], list[tuple[int, int]]], float]


@dataclasses.dataclass(frozen=True)
class Result:
    requests: list[Request]
    duration_s: float
    steps: int
    mean_running: float  # sequences per step, time-weighted

    def _done(self):
        return [r for r in self.requests if not math.isnan(r.finish)]

    def ttft(self) -> np.ndarray:
        return np.asarray([r.first_token - r.arrival for r in self._done()])

    def tpot(self) -> np.ndarray:
        return np.asarray([(r.finish - r.first_token) / (r.output_len - 1)
                           for r in self._done() if r.output_len > 1])

    def e2e(self) -> np.ndarray:
        return np.asarray([r.finish - r.arrival for r in self._done()])

    def queue(self) -> np.ndarray:
        return np.asarray([r.admitted - r.arrival for r in self._done()])

    def throughput_req_s(self) -> float:
        done = self._done()
        return len(done) / self.duration_s


def _lengths(rng, mean: float, cv: float, n: int) -> np.ndarray:
    """n integer lengths >= 1 with that mean and coefficient of variation (gamma)."""
    if cv <= 0.0:
        return np.full(n, max(int(round(mean)), 1))
    shape = 1.0 / cv ** 2
    return np.maximum(np.rint(rng.gamma(shape, mean / shape, n)), 1).astype(int)


def simulate(step_time: StepTime, *, input_len: float, output_len: float,
             concurrency: int = 0, request_rate: float = 0.0, arrival_cv: float = 1.0,
             input_len_cv: float = 0.0, output_len_cv: float = 0.0,
             max_num_seqs: int = 256, max_num_tokens: int = 8192,
             n_requests: int = 2000, warmup: int = 200, seed: int = 0) -> Result:
    """Run the engine until ``n_requests`` have completed after the first ``warmup``
    (whose records are dropped). Exactly one of ``concurrency`` and ``request_rate``."""
    if (concurrency > 0) == (request_rate > 0.0):
        raise ValueError("exactly one of concurrency and request_rate")
    rng = np.random.default_rng(seed)
    total = n_requests + warmup
    ins = _lengths(rng, input_len, input_len_cv, total)
    outs = _lengths(rng, output_len, output_len_cv, total)
    arrivals: list[tuple[float, int]] = []  # heap of (time, request id)
    made = 0

    def make(t: float, client: int = -1) -> None:
        nonlocal made
        if made < total:
            heapq.heappush(arrivals, (t, made))
            requests.append(Request(made, t, int(ins[made]), int(outs[made]), client=client))
            made += 1

    requests: list[Request] = []
    if concurrency:
        for c in range(concurrency):
            make(0.0, c)
    else:
        if arrival_cv <= 0.0:
            gaps = np.full(total, 1.0 / request_rate)
        else:
            shape = 1.0 / arrival_cv ** 2
            gaps = rng.gamma(shape, 1.0 / (request_rate * shape), total)
        for t in np.cumsum(gaps):
            make(float(t))
    waiting: deque[Request] = deque()
    running: list[Request] = []
    now, steps, busy_weighted, finished = 0.0, 0, 0.0, 0
    while finished < total:
        while arrivals and arrivals[0][0] <= now:
            waiting.append(requests[heapq.heappop(arrivals)[1]])
        if not running and not waiting:
            now = arrivals[0][0]  # idle until the next arrival
            continue
        while waiting and len(running) < max_num_seqs:
            running.append(waiting.popleft())
        decoding = [r for r in running if r.prefilled == r.input_len]
        budget = max_num_tokens - len(decoding)
        chunks: list[tuple[Request, int]] = []
        for r in running:
            if r.prefilled < r.input_len and budget > 0:
                take = min(r.input_len - r.prefilled, budget)
                chunks.append((r, take))
                budget -= take
        if not decoding and not chunks:
            raise RuntimeError("max_num_tokens admits no work")
        dt = step_time([r.input_len + r.generated for r in decoding],
                       [(take, r.prefilled) for r, take in chunks])
        for r, _ in chunks:
            if math.isnan(r.admitted):
                r.admitted = now
        now += dt
        steps += 1
        busy_weighted += dt * len(running)
        for r in decoding:
            r.generated += 1
        for r, take in chunks:
            r.prefilled += take
            if r.prefilled == r.input_len:
                r.generated = 1
                r.first_token = now
        for r in [r for r in running if r.generated >= r.output_len]:
            r.finish = now
            running.remove(r)
            finished += 1
            if concurrency:
                make(now, r.client)
    kept = sorted(requests, key=lambda r: r.arrival)[warmup:]
    start = min(r.arrival for r in kept)
    end = max(r.finish for r in kept if not math.isnan(r.finish))
    return Result(kept, end - start, steps, busy_weighted / now)

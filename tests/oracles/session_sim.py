"""A discrete-event simulator of agentic sessions over replicas with LRU KV-cache tiers
(test-only oracle of :mod:`dse.formulas.sessions`).

It shares nothing with the closed forms but the engine step: explicit sessions, explicit
think times, an explicit router, an explicit engine per replica (continuous batching as
:mod:`tests.oracles.serving_sim` runs it, one step at a time) and explicit LRU caches.

- **Sessions**: ``sessions`` concurrent (closed: a session that ends starts a new one at
  once) or ``session_rate`` new sessions per second (open, Poisson). A session has
  ``turns`` turns (lognormal with ``turns_cv``, rounded, at least 1); turn n + 1 sends
  the shared prefix s, the n earlier turns' inputs and outputs and u new tokens, and
  generates o tokens (lognormal with ``output_len_cv``, rounded, at least 1); the next
  turn arrives an exponential think time (mean ``think_s``; 0: at once) after the last
  token. The closed loop's first sessions start at a random turn
  (a steady state's phases: sessions of fixed lengths started together would run in
  lock step, the waves of :func:`dse.formulas.load.lockstep`).
- **Router**: ``random`` (any replica, each turn), ``session-affinity`` (a replica drawn
  when the session starts, kept), ``prefix-aware`` (the replica that holds the session's
  longest cached prefix, in any tier; a session's first turn, or one whose prefix is
  gone everywhere, to the replica with the fewest requests).
- **HBM**: ``hbm_tokens`` KV tokens per replica: the shared prefix (pinned), the running
  requests' contexts (prompt and output, from admission), and idle copies of sessions'
  contexts, kept after each turn and evicted least recently used first whenever the
  rest needs room. A turn's lookup (at its arrival) takes the session's copy out of the
  idle list (the request now holds it).
- **DRAM, SSD** (per replica, ``dram_tokens``, ``ssd_tokens``): a turn's context is
  written through when the turn ends (``offload`` "prompt": without its output
  tokens), LRU. A prefix found there beyond what HBM holds is reloaded over the tier's
  link (a FIFO: ``dram_s_per_token``; ``ssd_s_per_token`` after ``ssd_latency_s``)
  where that is faster per token than ``recompute_s_per_token``, else recomputed; the
  turn joins the engine's queue when its reload is done.
- **Engine**: first come first served up to ``slots`` running requests whose contexts
  (prompt and output) fit in HBM beside the shared prefix, ``budget``
  tokens per step, prompt chunks mixed into decode steps (``policy`` "mixed") or in
  prefill steps of their own ("separate"). Runs of decode-only steps are advanced to
  their next event at once (cut short where a turn arrives that could be admitted).

Measured over the turns that arrive after ``warmup`` turns and before the last
``cooldown``: the shares of prompt tokens found in each tier (the shared prefix counted
in HBM), TTFT (first token - arrival), TPOT, the turn throughput.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import OrderedDict, deque
from typing import Callable

import numpy as np

StepTime = Callable[[int, list[tuple[int, int]]], float]


@dataclasses.dataclass
class Result:
    hbm_hit: float
    dram_hit: float
    ssd_hit: float
    ttft: np.ndarray
    tpot: np.ndarray
    turn_rate: float  # turns completed per second, all replicas
    reload: np.ndarray  # seconds each measured turn waited for its reload

    @property
    def prefix_hit(self) -> float:
        return self.hbm_hit + self.dram_hit + self.ssd_hit


class _Lru:
    """An LRU list of session copies (tokens), with its total."""

    def __init__(self):
        self.items: OrderedDict[int, int] = OrderedDict()
        self.total = 0

    def get(self, key: int) -> int:
        return self.items.get(key, 0)

    def pop(self, key: int) -> int:
        tokens = self.items.pop(key, 0)
        self.total -= tokens
        return tokens

    def put(self, key: int, tokens: int) -> None:
        self.pop(key)
        self.items[key] = tokens
        self.total += tokens

    def touch(self, key: int) -> None:
        if key in self.items:
            self.items.move_to_end(key)

    def fit(self, room: float) -> None:
        while self.items and self.total > room:
            _, tokens = self.items.popitem(last=False)
            self.total -= tokens


def simulate_sessions(step_time: StepTime, *, replicas: int = 1, routing: str = "random",
                      sessions: int = 0, session_rate: float = 0.0, turns: float = 4,
                      turns_cv: float = 0.0, turn_input: int = 256, output_len: int = 64,
                      output_len_cv: float = 0.0,
                      shared_prefix: int = 0, think_s: float = 0.0, hbm_tokens: float = 1e12,
                      slots: int = 256, budget: int = 8192, policy: str = "mixed",
                      dram_tokens: float = 0.0, dram_s_per_token: float = 0.0,
                      ssd_tokens: float = 0.0, ssd_s_per_token: float = 0.0,
                      ssd_latency_s: float = 0.0, offload: str = "all",
                      recompute_s_per_token: float = math.inf, n_turns: int = 2000,
                      warmup: int = 400, cooldown: int | None = None, seed: int = 0) -> Result:
    if (sessions > 0) == (session_rate > 0.0):
        raise ValueError("exactly one of sessions and session_rate")
    rng = np.random.default_rng(seed)
    cooldown = 2 * sessions + 50 if cooldown is None else cooldown
    total_turns = warmup + n_turns + cooldown
    s, u, o = shared_prefix, turn_input, output_len
    g = u + o
    tiers_on = offload != "none"
    hbm = [_Lru() for _ in range(replicas)]
    dram = [_Lru() for _ in range(replicas)]
    ssd = [_Lru() for _ in range(replicas)]
    link_free = [[0.0, 0.0] for _ in range(replicas)]  # DRAM, SSD
    # per session: turns, turns done, replica (affinity), per replica the copy's turns
    sess_turns: list[int] = []
    sess_done: list[int] = []
    sess_home: list[int] = []
    sess_ctx: list[int] = []  # the session's context beyond the shared prefix
    # requests
    req_sess: list[int] = []
    req_arrival: list[float] = []
    req_in: list[int] = []
    req_first: list[float] = []
    req_finish: list[float] = []
    req_found: list[tuple[int, int, int]] = []  # tokens from HBM, DRAM, SSD
    req_reload: list[float] = []
    req_out: list[int] = []
    prefilled: list[int] = []
    generated: list[int] = []
    req_replica: list[int] = []
    waiting = [deque() for _ in range(replicas)]
    running: list[list[int]] = [[] for _ in range(replicas)]
    busy = [False] * replicas
    version = [0] * replicas
    run_state: list[tuple | None] = [None] * replicas  # (start, dt, n, decode-only)
    events: list[tuple[float, int, str, int, int]] = []
    counter = 0
    made = 0
    now = 0.0

    def push(t: float, kind: str, a: int, b: int = 0) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(events, (t, counter, kind, a, b))

    def draw_turns() -> int:
        if turns_cv <= 0.0:
            return max(int(round(turns)), 1)
        s2 = math.log1p(turns_cv ** 2)
        return max(int(round(rng.lognormal(math.log(turns) - s2 / 2.0, math.sqrt(s2)))), 1)

    def draw_output() -> int:
        if output_len_cv <= 0.0:
            return max(int(round(output_len)), 1)
        s2 = math.log1p(output_len_cv ** 2)
        return max(int(round(rng.lognormal(math.log(output_len) - s2 / 2.0, math.sqrt(s2)))), 1)

    def load_of(r: int) -> int:
        return len(running[r]) + len(waiting[r])

    def new_session(t: float, midway: bool = False) -> None:
        sid = len(sess_turns)
        sess_turns.append(draw_turns())
        # the closed loop's first sessions start at random turns, as sessions in a steady
        # state are (started together at their first turns, sessions of fixed lengths
        # would stay in lock step)
        sess_done.append(int(rng.integers(sess_turns[-1])) if midway else 0)
        sess_ctx.append(sess_done[-1] * g)
        sess_home.append(int(rng.integers(replicas)))
        push(t, "arrive", sid)

    def held(r: int) -> int:
        return sum(req_in[q] + generated[q] for q in running[r])

    def route(sid: int) -> int:
        if routing == "random":
            return int(rng.integers(replicas))
        if routing == "session-affinity":
            return sess_home[sid]
        best = max(range(replicas), key=lambda r: (max(hbm[r].get(sid), dram[r].get(sid),
                                                       ssd[r].get(sid)), -load_of(r), -r))
        if max(hbm[best].get(sid), dram[best].get(sid), ssd[best].get(sid)) == 0:
            best = min(range(replicas), key=lambda r: (load_of(r), r))
        return best

    def arrive(sid: int, t: float) -> None:
        nonlocal made
        r = route(sid)
        prompt = s + sess_ctx[sid] + u
        found_hbm = hbm[r].pop(sid)  # the request holds it from now
        found_dram = dram[r].get(sid) if tiers_on else 0
        found_ssd = ssd[r].get(sid) if tiers_on else 0
        from_dram = from_ssd = 0
        ready = t
        if found_dram > found_hbm and dram_s_per_token < recompute_s_per_token:
            from_dram = found_dram - found_hbm
            dram[r].touch(sid)
            start = max(t, link_free[r][0])
            link_free[r][0] = start + from_dram * dram_s_per_token
            ready = max(ready, link_free[r][0])
        reached = found_hbm + from_dram
        if found_ssd > reached and (ssd_s_per_token + ssd_latency_s / max(found_ssd - reached, 1)
                                    < recompute_s_per_token):
            from_ssd = found_ssd - reached
            ssd[r].touch(sid)
            start = max(t, link_free[r][1])
            link_free[r][1] = start + ssd_latency_s + from_ssd * ssd_s_per_token
            ready = max(ready, link_free[r][1])
        q = len(req_sess)
        req_sess.append(sid)
        req_arrival.append(t)
        req_in.append(prompt)
        req_first.append(math.nan)
        req_finish.append(math.nan)
        req_found.append((s + found_hbm, from_dram, from_ssd))
        req_reload.append(ready - t)
        req_out.append(draw_output())
        prefilled.append(min(s + found_hbm + from_dram + from_ssd, prompt - 1))
        generated.append(0)
        req_replica.append(r)
        made += 1
        push(ready, "ready", q, r)

    def start(r: int, t: float) -> None:
        # admission: a slot, and KV room for its prompt and output beside the running
        # requests (idle copies are evicted for it), as vLLM allocates blocks
        while waiting[r] and len(running[r]) < slots:
            q = waiting[r][0]
            if running[r] and held(r) + req_in[q] + req_out[q] > hbm_tokens - s:
                break
            running[r].append(waiting[r].popleft())
        if not running[r]:
            busy[r] = False
            return
        # HBM: the running contexts and the pinned prefix first, idle copies in the rest
        hbm[r].fit(hbm_tokens - s - held(r))
        prompts = [q for q in running[r] if prefilled[q] < req_in[q]]
        busy[r] = True
        version[r] += 1
        if not prompts:
            dt = step_time(len(running[r]), [])
            n = min(req_out[q] - generated[q] for q in running[r])
            run_state[r] = (t, dt, n, True, [])
            push(t + n * dt, "step", r, version[r])
            return
        decoding = ([] if policy == "separate" else
                    [q for q in running[r] if prefilled[q] == req_in[q]])
        room = budget - len(decoding)
        chunks = []
        for q in prompts:
            if room <= 0:
                break
            take = min(req_in[q] - prefilled[q], room)
            chunks.append((q, take))
            room -= take
        dt = step_time(len(decoding), [(take, prefilled[q]) for q, take in chunks])
        run_state[r] = (t, dt, 1, False, (decoding, chunks))
        push(t + dt, "step", r, version[r])

    def cut(r: int, t: float) -> None:
        """A turn may be admitted at t: a decode-only run stops at its first step end
        at or after t."""
        state = run_state[r]
        if not busy[r] or state is None or not state[3] or len(running[r]) >= slots:
            return
        t0, dt, n, _, _ = state
        k = max(1, math.ceil((t - t0) / dt - 1e-9))
        if k < n:
            version[r] += 1
            run_state[r] = (t0, dt, k, True, [])
            push(t0 + k * dt, "step", r, version[r])

    def end_step(r: int, t: float) -> None:
        _, _, n, decode_only, work = run_state[r]
        if decode_only:
            for q in running[r]:
                generated[q] += n
        else:
            decoding, chunks = work
            for q in decoding:
                generated[q] += 1
            for q, take in chunks:
                prefilled[q] += take
                if prefilled[q] == req_in[q]:
                    generated[q] = 1
                    req_first[q] = t
        done = [q for q in running[r] if generated[q] >= req_out[q]]
        running[r] = [q for q in running[r] if generated[q] < req_out[q]]
        for q in done:
            req_finish[q] = t
            sid = req_sess[q]
            sess_done[sid] += 1
            n = sess_done[sid]
            sess_ctx[sid] += u + req_out[q]
            kept = sess_ctx[sid] - (req_out[q] if offload == "prompt" else 0)
            hbm[r].put(sid, sess_ctx[sid])
            hbm[r].fit(hbm_tokens - s - held(r))
            if tiers_on:
                if dram_tokens > 0:
                    dram[r].put(sid, kept)
                    dram[r].fit(dram_tokens)
                if ssd_tokens > 0:
                    ssd[r].put(sid, kept)
                    ssd[r].fit(ssd_tokens)
            if made >= total_turns:
                continue
            if n < sess_turns[sid]:
                gap = rng.exponential(think_s) if think_s > 0 else 0.0
                push(t + gap, "arrive", sid)
            elif sessions:
                new_session(t)
        start(r, t)

    if sessions:
        for _ in range(sessions):
            new_session(0.0, midway=True)
    else:
        t = 0.0
        for _ in range(total_turns):  # more sessions than needed; arrivals stop at the total
            t += rng.exponential(1.0 / session_rate)
            push(t, "new", 0)
    while events:
        now, _, kind, a, b = heapq.heappop(events)
        if kind == "new":
            if made < total_turns:
                new_session(now)
        elif kind == "arrive":
            if made < total_turns:
                arrive(a, now)
        elif kind == "ready":
            waiting[b].append(a)
            if not busy[b]:
                start(b, now)
            else:
                cut(b, now)
        elif kind == "step" and b == version[a]:
            end_step(a, now)
    order = np.argsort(req_arrival, kind="stable")
    kept = order[warmup:warmup + n_turns]
    found = np.asarray([req_found[q] for q in kept], float)
    prompt = float(sum(req_in[q] for q in kept))
    first = np.asarray([req_first[q] for q in kept])
    finish = np.asarray([req_finish[q] for q in kept])
    arrival = np.asarray([req_arrival[q] for q in kept])
    t0, t1 = arrival.min(), arrival.max()
    completions = np.sum((np.asarray(req_finish) > t0) & (np.asarray(req_finish) <= t1))
    outs = np.asarray([req_out[q] for q in kept], float)
    tpot = np.where(outs > 1, (finish - first) / np.maximum(outs - 1, 1), np.nan)
    return Result(found[:, 0].sum() / prompt, found[:, 1].sum() / prompt,
                  found[:, 2].sum() / prompt, first - arrival, tpot,
                  float(completions / max(t1 - t0, 1e-30)),
                  np.asarray([req_reload[q] for q in kept]))

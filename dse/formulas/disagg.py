"""Disaggregated serving (xPyD): a prefill pool and a decode pool joined by a KV transfer.

Each pool is a deployment of its own, served under its share of the load by the
serving-under-load model (:mod:`dse.formulas.serving`): ``prefill_workers`` workers
each take request_rate / prefill_workers and run the prompt and the first token
(output length 1); ``decode_workers`` workers each take request_rate / decode_workers
and run the other output_len - 1 tokens, the prompt's cache arriving by transfer (the
decode worker computes only the prompt's last token, as a 1-token chunk). A worker is
tp x pp x dp devices; its dp attention-data-parallel ranks split its load and share
its experts (ep over tp x dp devices, moe_tp = tp x dp / ep), as the serving layouts of
TensorRT-LLM and SGLang state them.

Joined (DistServe, Zhong et al. OSDI 2024, section 3; Mooncake, Qin et al. FAST 2025):

- KV transfer of one request: the prompt's cache over the whole model (quantized KV at
  kv_bits; MLA's latents), sent by the prefill worker's tp x pp devices that hold it to
  the decode worker's, min(tp pp) of each side in parallel, over the scale-up links when
  both pools share one domain (the same device and at most devices_per_node of them in
  all) and otherwise over the scale-out NICs (inter_bw per device):
  ``kv_transfer_s = bytes / (streams x bandwidth x link efficiency) + latency``.
  Layer-wise streaming hides it behind the prefill: with ``kv_transfer_overlap`` = o
  the exposed part is max(t - o x prefill, t (1 - o (1 - 1/L))) (o = 1: what the
  transfer takes beyond the prefill, at least its last layer's share).
- Rate matching: each pool's capacity (requests/s) is workers x one worker's capacity;
  the deployment's is the smaller, ``bottleneck`` names the pool; past it the point is
  ``overloaded``.
- TTFT = the prefill pool's (its queue and prefill) + the exposed transfer + the decode
  pool's wait for a slot; TPOT is the decode pool's at its running batch; E2E = TTFT +
  the decode pool's time for the rest. Percentiles add the prefill pool's TTFT
  percentile to the decode pool's (comonotone: an upper bound on the sum's percentile).
- Closed loops (``concurrency`` = C benchmark clients, each sending its next request
  when the last one ends): the decode workers share the clients, C / decode_workers
  each, run as a closed loop of the load model (an upper bound on the running batch:
  each client spends part of its cycle in the prefill pool); a prefill worker runs one
  prompt alone, and the queue in front of it follows from the deployment's throughput X,
  the fixed point of X x E2E(X) = C (Little's law) with an M/D/1 wait at the prefill
  workers' load (:func:`prefill_queue`). Lock-step waves do not form: a decode pool
  staggers the clients' returns (aiconfigurator-core's silicon runs: TTFT at 128
  clients is 3x that at 4, not the 30x of a wave).
- Goodput: requests/s x P(TTFT <= ttft_slo_s) x P(TPOT <= tpot_slo_s), each probability
  read from the P50/P90/P99 (lognormal between them in log time).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr

# the standard normal quantiles of P50, P90, P99
_Z = (0.0, 1.2815515655446004, 2.3263478740408408)

AGG, DISAGG = 0.0, 1.0
PREFILL, DECODE = 0, 1  # codes of ``bottleneck``


def transfer_s(kv_bytes, streams, bandwidth, latency, link_efficiency):
    """Seconds to send one request's prompt cache (``kv_bytes``) over ``streams``
    links in parallel."""
    return kv_bytes / (streams * bandwidth * link_efficiency) + latency


def exposed_transfer_s(transfer, prefill, overlap, n_layers):
    """The part of the transfer the request waits for after its prefill."""
    hidden = overlap * prefill
    return jnp.maximum(transfer - hidden, transfer * (1.0 - overlap * (1.0 - 1.0 / n_layers)))


def share_within(limit, p50, p90, p99):
    """P(X <= limit) for X with these percentiles: piecewise lognormal (linear in log x
    against the normal quantile between the given points, the end segments extended);
    limit 0 (no objective): 1."""
    lx = jnp.log(jnp.maximum(limit, 1e-30))
    l50, l90, l99 = (jnp.log(jnp.maximum(v, 1e-30)) for v in (p50, p90, p99))

    def seg(a, b, za, zb):
        return za + (lx - a) * (zb - za) / jnp.maximum(b - a, 1e-12)

    z = jnp.where(lx <= l90, seg(l50, l90, _Z[0], _Z[1]), seg(l90, l99, _Z[1], _Z[2]))
    return jnp.where(limit > 0.0, ndtr(z), 1.0)


BISECTIONS = 40  # of the closed loop's throughput (a factor 2^-40 of its bracket)


def prefill_queue(clients, workers_p, service_s, cycle_s):
    """A closed loop's throughput X (requests/s) and its mean wait W (s) in front of a
    prefill worker: ``clients`` in all, each back after ``cycle_s`` + W (the rest of its
    cycle: its own prefill, the transfer, its decode), ``workers_p`` workers that each
    finish a prompt per ``service_s`` at most (1 / the worker's capacity).

    Many clients on long, unequal cycles arrive at a worker nearly at random: W is the
    M/D/1 wait (Pollaczek-Khinchine, deterministic service), rho S / (2 (1 - rho)) at
    rho = X S / workers_p, and at most the (clients / workers_p - 1) S of every other
    client of the worker ahead; X solves X (cycle + W(X)) = clients, by bisection (the
    left side grows with X; at X = 0 it is 0, at min(clients / cycle, workers_p / S) at
    least clients)."""
    share = jnp.maximum(clients / workers_p - 1.0, 0.0)

    def wait(x):
        rho = jnp.clip(x * service_s / workers_p, 0.0, 1.0 - 1e-9)
        return jnp.minimum(rho * service_s / (2.0 * (1.0 - rho)), share * service_s)

    hi = jnp.minimum(clients / jnp.maximum(cycle_s, 1e-30), workers_p / service_s)

    def step(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        high = mid * (cycle_s + wait(mid)) > clients
        return jnp.where(high, lo, mid), jnp.where(high, mid, hi)

    lo, hi = jax.lax.fori_loop(0, BISECTIONS, step, (0.0 * hi, hi))
    # Little's law at the throughput found (the M/D/1 wait at the fixed point; where the
    # workers' bound stops X first, the wait that bound leaves)
    return lo, jnp.maximum(clients / jnp.maximum(lo, 1e-30) - cycle_s, 0.0)


def wait_quantile(mean_wait, rho, q):
    """The q-quantile of an M/D/1-like wait of mean ``mean_wait`` at load ``rho``: a
    request waits with probability rho, and then about exponentially (Kingman's heavy-
    traffic form, P(W > t) = rho exp(-rho t / mean_wait))."""
    safe = jnp.clip(rho, 1e-9, 1.0 - 1e-9)
    return jnp.maximum(mean_wait / safe * jnp.log(safe / (1.0 - q)), 0.0)


def burst_queue(clients, prompts, workers_p, service_s, mean_wait, rho):
    """(mean, P50/P90/P99) of the wait in front of a prefill worker over a closed-loop
    benchmark run of ``prompts`` requests whose ``clients`` start together (0 prompts:
    the steady state's, ``mean_wait`` at load ``rho``): the first wave, a share b =
    clients / prompts of the requests, finds clients / workers_p prompts at each worker,
    its own anywhere among them (a uniform wait from 0 to (clients / workers_p - 1)
    service); the rest wait as in the steady state (:func:`wait_quantile`). The
    percentiles are the mixture's (a bisection of its CDF)."""
    b = jnp.where(prompts > 0.0, jnp.clip(clients / jnp.maximum(prompts, 1.0), 0.0, 1.0), 0.0)
    span = jnp.maximum(clients / workers_p - 1.0, 0.0) * service_s
    mean = b * 0.5 * span + (1.0 - b) * mean_wait
    # the three percentiles on a leading axis (explicitly: no rank promotion)
    b, span, mean_wait, rho = (jnp.broadcast_to(jnp.asarray(v, mean.dtype), mean.shape)[None]
                               for v in (b, span, mean_wait, rho))
    shares = jnp.reshape(jnp.asarray([0.5, 0.9, 0.99], mean.dtype), (3,) + (1,) * mean.ndim)
    safe = jnp.clip(rho, 1e-9, 1.0 - 1e-9)

    def cdf(t):
        steady = 1.0 - safe * jnp.exp(-safe * t / jnp.maximum(mean_wait, 1e-30))
        steady = jnp.where(mean_wait > 0.0, steady, 1.0)
        return b * jnp.clip(t / jnp.maximum(span, 1e-30), 0.0, 1.0) + (1.0 - b) * steady

    steady_q = wait_quantile(mean_wait, rho, shares)
    hi = jnp.maximum(span, steady_q) + 1e-12

    def step(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < shares
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, BISECTIONS, step, (0.0 * hi, hi))
    out = list(jnp.where(b > 0.0, 0.5 * (lo + hi), steady_q))
    return mean, out


def combine(rate, clients, out_len, prefill: dict, decode: dict, workers_p, workers_d,
            transfer, overlap, n_layers, usd_per_s, watts, ttft_slo, tpot_slo,
            prompts=0.0) -> dict:
    """The deployment's outputs from one prefill worker's and one decode worker's under
    their shares of the load (dicts of the load model's outputs): ``rate`` requests/s
    (open loop), or ``clients`` (closed loop; rate 0): throughput by Little's law over
    the whole deployment, clients / E2E; a closed loop is never overloaded. ``prompts``:
    the requests of a closed-loop benchmark run whose clients start together
    (:func:`burst_queue`; 0: the steady state)."""
    closed = clients > 0.0
    cap_p = workers_p * prefill["capacity_req_s"]
    cap_d = workers_d * decode["capacity_req_s"]
    capacity = jnp.minimum(cap_p, cap_d)
    over = ~closed & (rate >= capacity)
    nan = jnp.nan

    def latency(v):
        return jnp.where(over, nan, v)

    pre_time = jnp.maximum(prefill["ttft_s"] - prefill["queue_s"] - prefill["frontend_s"],
                           0.0)
    exposed = exposed_transfer_s(transfer, pre_time, overlap, n_layers)
    wait = decode["queue_s"]
    # the frontend once, with the prompt (the prefill worker's TTFT counts it; the decode
    # worker's E2E counts it again)
    once = decode["frontend_s"]
    rest = jnp.maximum(decode["e2e_s"] - wait - once, 0.0)
    # a closed loop: the prefill worker ran one client (its prompt alone), the queue in
    # front of it follows from the deployment's throughput (prefill_queue)
    service = 1.0 / jnp.maximum(prefill["capacity_req_s"], 1e-30)
    x_closed, queue_p = prefill_queue(jnp.maximum(clients, 1.0), workers_p, service,
                                      prefill["ttft_s"] + exposed + wait + rest)
    queue_p = jnp.where(closed, queue_p, 0.0)
    rho_p = x_closed * service / workers_p
    queue_p, queue_q = burst_queue(jnp.maximum(clients, 1.0), jnp.where(closed, prompts, 0.0),
                                   workers_p, service, queue_p, rho_p)
    ttft = prefill["ttft_s"] + queue_p + exposed + wait
    out = dict(ttft_s=ttft, tpot_s=decode["tpot_s"], e2e_s=ttft + rest,
               queue_s=prefill["queue_s"] + queue_p + wait, frontend_s=prefill["frontend_s"])
    for (q, share), queued_q in zip((("p50", 0.5), ("p90", 0.9), ("p99", 0.99)), queue_q):
        queued = jnp.where(closed, queued_q, 0.0)
        out[f"ttft_{q}_s"] = prefill[f"ttft_{q}_s"] + queued + exposed + wait
        out[f"tpot_{q}_s"] = decode[f"tpot_{q}_s"]
        out[f"itl_{q}_s"] = decode[f"itl_{q}_s"]  # the decode pool's steps alone
        out[f"e2e_{q}_s"] = (prefill[f"ttft_{q}_s"] + queued + exposed + decode[f"e2e_{q}_s"]
                             - once)
    out = {k: latency(v) for k, v in out.items()}
    offered = jnp.where(closed, x_closed, rate)
    requests = jnp.minimum(offered, capacity)
    tokens = requests * out_len
    good = requests * share_within(ttft_slo, out["ttft_p50_s"], out["ttft_p90_s"],
                                   out["ttft_p99_s"]) * share_within(
        tpot_slo, out["tpot_p50_s"], out["tpot_p90_s"], out["tpot_p99_s"])
    good = jnp.where(over, 0.0, good)
    out.update(
        kv_transfer_s=transfer + 0.0 * rate, prefill_capacity_req_s=cap_p,
        decode_capacity_req_s=cap_d, capacity_req_s=capacity,
        bottleneck=jnp.where(cap_p <= cap_d, float(PREFILL), float(DECODE)),
        prefill_utilization=offered / cap_p, decode_utilization=offered / cap_d,
        utilization=offered / capacity, overloaded=over,
        request_throughput_req_s=requests, throughput_tok_s=tokens,
        tokens_per_s_per_user=latency(1.0 / decode["tpot_s"]),
        cost_per_mtok=usd_per_s / tokens * 1e6, energy_per_tok_j=watts / tokens,
        goodput_req_s=good, goodput_req_per_usd=good / usd_per_s)
    return out

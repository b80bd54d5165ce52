"""Random serving-under-load points, evaluated by dse and by the discrete-event oracle with
the same engine step (shared by the closed- and open-loop oracle tests)."""

from __future__ import annotations

import functools

import jax
import numpy as np

from dse.core.encoding import trial_point
from dse.core.evaluate import serving_replica
from dse.core.evaluator import Evaluator
from dse.formulas import engine
from dse.study.study import parse_study_dict

from .serving_sim import simulate

NAMES = ("ttft_s", "tpot_s", "e2e_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s",
         "tpot_p90_s", "tpot_p99_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s", "capacity_req_s",
         "valid", "reason", "running_batch", "queue_s", "max_batch", "utilization",
         "frontend_s", "itl_p50_s", "itl_p90_s", "itl_p99_s")
MEANS = ("ttft_s", "tpot_s", "e2e_s")
ITL = ("itl_p50_s", "itl_p90_s", "itl_p99_s")  # the gaps between tokens, pooled
TAILS = ("ttft_p90_s", "ttft_p99_s", "tpot_p90_s", "tpot_p99_s", "e2e_p90_s", "e2e_p99_s")
# (model, tensor-parallel degrees that fit its weights on every device below)
DENSE = (("llama-3.1-8b", (1, 2)), ("qwen3-32b", (2, 4)), ("llama-3.1-70b", (4, 8)))
MOE = (("mixtral-8x7b", (2, 4)), ("qwen3-30b-a3b", (1, 2)), ("gpt-oss-20b", (1, 2)))
HARDWARE = ("h100-sxm", "a100-80gb", "h200", "l40s")
KEYS = ("model", "hardware", "tp", "weight_bits", "kv_bits", "framework", "input_len",
        "output_len", "input_len_cv", "output_len_cv", "max_num_seqs", "max_num_tokens",
        "prefix_cache_hit")


def draw(seed: int, n: int) -> list[dict]:
    """n points, dense and MoE alternately: engines, devices, layouts, precisions, lengths
    and their spread, caps, budgets, prefix caching; a load drawn later (``u``: share of
    capacity in the open loop, ``c``: log-uniform clients up to twice the slots)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        model, tps = (MOE if i % 2 else DENSE)[rng.integers(3)]
        rows.append(dict(
            model=model, hardware=HARDWARE[rng.integers(len(HARDWARE))], tp=int(rng.choice(tps)),
            weight_bits=int(rng.choice([16, 8])), kv_bits=int(rng.choice([16, 8])),
            framework=str(rng.choice(["vllm", "sglang", "trtllm"], p=[0.45, 0.3, 0.25])),
            input_len=int(np.exp(rng.uniform(np.log(64), np.log(8192)))),
            output_len=int(np.exp(rng.uniform(np.log(16), np.log(1024)))),
            input_len_cv=float(rng.choice([0.0, 0.3, 0.7, 1.0])),
            # closed loops with fixed output lengths run in lock step (waves), outside the
            # mean field (docs/serving.md): outputs vary here, as in real datasets
            output_len_cv=float(rng.choice([0.3, 0.7, 1.0])),
            max_num_seqs=int(rng.choice([0, 32, 64, 128, 256])),
            max_num_tokens=int(rng.choice([0, 2048, 4096, 8192])),
            prefix_cache_hit=float(0.0 if rng.random() < 0.7
                                   else round(rng.uniform(0.2, 0.9), 2)),
            u=float(rng.uniform(0.1, 0.9)), c_frac=float(rng.uniform(0.0, 1.0))))
    return rows


# every categorical value the points may take: one study layout (one compiled program)
# whatever the points
UNIVERSE = dict(model=[m for m, _ in DENSE + MOE], hardware=list(HARDWARE),
                framework=["vllm", "sglang", "trtllm"], tp=[1, 2, 4, 8], weight_bits=[8, 16],
                kv_bits=[8, 16])


def evaluate(rows: list[dict], load_key: str, loads: list) -> tuple[dict, tuple]:
    """dse's outputs at the points, and each replica's (step model, load, lengths)."""
    axes = {k: UNIVERSE.get(k) or sorted(set(r[k] for r in rows), key=str) for k in KEYS}
    axes[load_key] = sorted(set(loads))
    study = parse_study_dict({"study": {"name": "oracle"}, "axes": axes}, "", "<oracle>")
    columns = {k: [r[k] for r in rows] for k in KEYS}
    columns[load_key] = list(loads)
    point = trial_point(study, columns)
    ev = Evaluator.of(study, names=NAMES)
    out = {k: np.asarray(v) for k, v in ev(point).items()}
    # the oracle is the engine: the calibration's frontend, a constant outside the engine
    # steps (dse.formulas.serving), is not in it
    for k in out:
        if k.startswith(("ttft", "e2e")):
            out[k] = out[k] - out["frontend_s"]
    with ev.precision():
        replica = jax.jit(serving_replica, static_argnames="features")(
            point, ev.models, ev.hardware, features=study.features)
    return out, jax.tree_util.tree_map(np.asarray, replica)


def _one(tree, i):
    return jax.tree_util.tree_map(
        lambda a: a if np.ndim(a) == 0 else (a[..., 0] if a.shape[-1] == 1 else a[..., i]), tree)


def simulated(row: dict, replica, i: int, load: dict, n_requests: int = 1500) -> dict:
    """The oracle's means and percentiles at point ``i`` (``load``: concurrency= or
    request_rate=), with dse's engine step of that point."""
    sm, ld = _one(replica[0], i), _one(replica[1], i)

    @functools.lru_cache(maxsize=None)  # the step depends on these three counts only
    def counted(decoding, prompt, n_chunks):
        return float(engine.step_time(sm, float(decoding), float(prompt), float(n_chunks), 0,
                                      np))

    def step(decoding, chunks):
        return counted(decoding, sum(t for t, _ in chunks), len(chunks))

    res = simulate(step, input_len=row["input_len"], output_len=row["output_len"],
                   input_len_cv=row["input_len_cv"], output_len_cv=row["output_len_cv"],
                   max_num_seqs=int(ld.slots), max_num_tokens=int(ld.budget),
                   policy="separate" if ld.separate > 0 else "mixed",
                   prefix_cache_hit=row["prefix_cache_hit"], n_requests=n_requests,
                   warmup=200, seed=i, **load)
    ttft, tpot, e2e, itl = res.ttft(), res.tpot(), res.e2e(), res.itl()
    out = dict(ttft_s=ttft.mean(), tpot_s=tpot.mean(), e2e_s=e2e.mean())
    for name, values in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e), ("itl", itl)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}_s"] = float(np.percentile(values, q))
    return out


def errors(model: dict, oracle: list[dict], index: list[int],
           keys: tuple[str, ...] = MEANS + TAILS) -> dict[str, np.ndarray]:
    """Relative error of dse against the oracle, per output, over the points."""
    return {k: np.asarray([model[k][i] / o[k] - 1.0 for i, o in zip(index, oracle)])
            for k in keys}


def check_itl(label: str, err: dict, median: tuple[float, float, float],
              share: tuple[float, float, float]):
    """The ITL percentiles (P50, P90, P99): median |error| at most ``median``, the share
    within 20% at least ``share``."""
    lines = [f"{label}, ITL: {len(err[ITL[0]])} points"]
    for k in ITL:
        v = np.abs(err[k])
        lines.append(f"  {k:9s} median |error| {np.median(v):.3f}, within 20%: "
                     f"{np.mean(v <= 0.2):.0%}")
    text = "\n".join(lines)
    print(text)
    for k, m, w in zip(ITL, median, share):
        v = np.abs(err[k])
        assert np.median(v) <= m and np.mean(v <= 0.2) >= w, text


def report(label: str, err: dict) -> str:
    lines = [f"{label}: {len(next(iter(err.values())))} points"]
    for k, v in err.items():
        tol = 0.1 if k in MEANS else 0.2
        lines.append(f"  {k:11s} median |error| {np.median(np.abs(v)):.3f}, within "
                     f"{int(tol * 100)}%: {np.mean(np.abs(v) <= tol):.0%}")
    return "\n".join(lines)


def check(label: str, err: dict, median: tuple[float, float], share: tuple[float, float]):
    """Print the comparison and assert, for means and for tails, the median |error| at
    most ``median`` and the share within tolerance (10% / 20%) at least ``share``."""
    text = report(label, err)
    print(text)
    for k, v in err.items():
        mean = k in MEANS
        assert np.median(np.abs(v)) <= median[0 if mean else 1], text
        assert np.mean(np.abs(v) <= (0.1 if mean else 0.2)) >= share[0 if mean else 1], text

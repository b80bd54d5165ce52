"""Random agentic-session points, evaluated by dse and by the session oracle with the
same engine step (tests/oracles/test_sessions_oracle.py)."""

from __future__ import annotations

import functools

import jax
import numpy as np

from dse.core.encoding import trial_point
from dse.core.evaluate import serving_replica
from dse.core.evaluator import Evaluator
from dse.formulas import engine
from dse.study.study import parse_study_dict

from .session_sim import simulate_sessions

NAMES = ("ttft_s", "tpot_s", "prefix_hit_rate", "hbm_hit_rate", "dram_hit_rate",
         "ssd_hit_rate", "kv_reload_s", "valid", "reason", "frontend_s",
         "request_throughput_req_s", "running_batch", "max_batch", "capacity_req_s")
MODELS = (("llama-3.1-8b", 1), ("qwen3-32b", 2), ("llama-3.1-70b", 4))
KEYS = ("model", "hardware", "tp", "framework", "replicas", "routing", "turns", "turns_cv",
        "turn_input_len", "output_len", "output_len_cv", "shared_prefix_len", "think_time_s",
        "memory_reserve",
        "kv_dram_bytes", "kv_dram_bw_bytes_per_s", "kv_offload")
UNIVERSE = dict(model=[m for m, _ in MODELS], hardware=["h100-sxm", "h200"], tp=[1, 2, 4],
                framework=["vllm", "sglang"], replicas=[1, 2, 4],
                routing=["random", "session-affinity", "prefix-aware"],
                kv_offload=["prompt", "all"])


def draw(seed: int, n: int) -> list[dict]:
    """n points: models, devices, engines, replicas and routers, session shapes, think
    times, HBM left for the cache (memory_reserve), DRAM tiers; the load drawn later."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        model, tp = MODELS[rng.integers(len(MODELS))]
        dram = rng.random() < 0.4
        rows.append(dict(
            model=model, tp=tp, hardware=str(rng.choice(UNIVERSE["hardware"])),
            framework=str(rng.choice(["vllm", "sglang"], p=[0.7, 0.3])),
            replicas=int(rng.choice([1, 2, 4])), routing=str(rng.choice(UNIVERSE["routing"])),
            turns=int(rng.integers(2, 13)), turns_cv=float(rng.choice([0.0, 0.5])),
            turn_input_len=int(np.exp(rng.uniform(np.log(64), np.log(2048)))),
            output_len=int(np.exp(rng.uniform(np.log(16), np.log(256)))),
            # closed loops of fixed lengths run in lock step (tests/oracles/load_points.py):
            # outputs vary, as an agent's do
            output_len_cv=float(rng.choice([0.3, 0.7, 1.0])),
            shared_prefix_len=int(rng.choice([0, 512, 2048])),
            think_time_s=float(0.0 if rng.random() < 0.3 else np.exp(rng.uniform(np.log(0.2),
                                                                                np.log(20.0)))),
            memory_reserve=float(rng.uniform(0.1, 0.8)),
            kv_dram_bytes=float(np.exp(rng.uniform(np.log(2e9), np.log(200e9))) if dram else 0.0),
            kv_dram_bw_bytes_per_s=float(rng.choice([25e9, 55e9])),
            kv_offload=str(rng.choice(["prompt", "all"])),
            load=float(rng.uniform(0.0, 1.0)), closed=bool(rng.random() < 0.6)))
    return rows


def evaluate(rows: list[dict], load_key: str, loads: list):
    """dse's outputs at the points, and each replica's (step model, load, KV bytes per
    token, bytes for the KV cache)."""
    axes = {k: UNIVERSE.get(k) or sorted(set(r[k] for r in rows), key=str) for k in KEYS}
    axes[load_key] = sorted(set(loads))
    study = parse_study_dict({"study": {"name": "sessions-oracle"}, "axes": axes}, "",
                             "<oracle>")
    columns = {k: [r[k] for r in rows] for k in KEYS}
    columns[load_key] = list(loads)
    point = trial_point(study, columns)
    ev = Evaluator.of(study, names=NAMES)
    out = {k: np.asarray(v) for k, v in ev(point).items()}
    out["ttft_s"] = out["ttft_s"] - out["frontend_s"]  # the oracle is the engine
    with ev.precision():
        replica = jax.jit(serving_replica, static_argnames=("features", "kv"))(
            point, ev.models, ev.hardware, features=study.features, kv=True)
    return out, jax.tree_util.tree_map(np.asarray, replica)


def _one(tree, i):
    return jax.tree_util.tree_map(
        lambda a: a if np.ndim(a) == 0 else (a[..., 0] if a.shape[-1] == 1 else a[..., i]), tree)


def simulated(row: dict, replica, i: int, load: dict, n_turns: int = 1500):
    """The oracle at point ``i`` with dse's engine step there: body, head and host time
    from the step model, each prompt chunk's attention over its own context (linear in
    it: the step model's mean per prompt token at half the mean prompt)."""
    sm, ld, lengths, kappa, room = (_one(x, i) for x in replica)
    attention = float(sm.prompt_attention_s)
    half = max(float(lengths.input_len) / 2.0, 1.0)
    plain = sm._replace(prompt_attention_s=0.0 * sm.prompt_attention_s,
                        prompt_attention_stage_s=0.0 * sm.prompt_attention_stage_s)

    @functools.lru_cache(maxsize=None)
    def counted(decoding, prompt, n_chunks):
        return float(engine.step_time(plain, float(decoding), float(prompt), float(n_chunks),
                                      0, np))

    def step(decoding, chunks):
        pairs = sum(take * (before + take / 2.0) for take, before in chunks)
        return counted(decoding, sum(t for t, _ in chunks), len(chunks)) + attention * pairs / half

    kappa, room = float(kappa), float(room)
    devices = row["tp"]
    budget = float(ld.budget)
    # prefilling a token again: the engine's full-budget step per token, its attention
    # at the step model's mean (as dse.formulas.serving reckons what a reload must beat)
    recompute = (counted(0, int(budget), 1) - counted(0, 0, 0)) / budget + attention
    dram = row["kv_dram_bytes"]
    warmup = 400
    if load.get("session_rate"):  # open: sessions in flight take a lifetime to build up
        lifetime = (row["turns"] - 1) * row["think_time_s"] + row["turns"] * 2.0
        warmup += int(2.0 * lifetime * load["session_rate"] * row["turns"])
    res = simulate_sessions(
        step, replicas=row["replicas"], routing=row["routing"], turns=row["turns"],
        turns_cv=row["turns_cv"], turn_input=row["turn_input_len"], output_len=row["output_len"],
        output_len_cv=row["output_len_cv"],
        shared_prefix=row["shared_prefix_len"], think_s=row["think_time_s"],
        hbm_tokens=room / kappa, slots=int(ld.slots), budget=int(budget),
        policy="separate" if ld.separate > 0 else "mixed",
        dram_tokens=dram / devices / kappa, dram_s_per_token=kappa / row["kv_dram_bw_bytes_per_s"],
        offload=row["kv_offload"], recompute_s_per_token=recompute, n_turns=n_turns,
        warmup=warmup, seed=i, **load)
    return res

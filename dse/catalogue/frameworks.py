"""Serving frameworks: how each schedules an engine step, and its defaults per device.

Read from the engines' own code (versions in each entry's ``source``):

- **vllm** (V1 engine): a step serves the running requests first (decodes and partial
  prefills), then chunks waiting prompts into the rest of ``--max-num-batched-tokens``
  (``vllm/v1/core/sched/scheduler.py``; chunked prefill always on).
  ``vllm/engine/arg_utils.py``: ``vllm serve`` on a GPU of at least 160 GiB takes
  16,384 tokens and 1,024 sequences (0.33), of at least 70 GiB and not an A100 8,192 and
  1,024, otherwise 2,048 and 256.
- **sglang**: a prefill batch runs first and decode waits (mixing only with
  ``--enable-mixed-chunk``, off by default: ``managers/scheduler.py``); the token budget
  is ``--chunked-prefill-size`` by GPU memory (``server_args.py``: under 35 GiB 4,096 in
  0.5.23, under 60 GiB 4,096, under 160 GiB 8,192, else 16,384; 2,048 under 20 GiB);
  ``--max-running-requests`` follows from the KV pool, min(KV tokens / 2, 2,048 to
  4,096) (``model_runner.py``), taken here as 4,096 (the KV memory caps it anyway).
- **trtllm** (TensorRT-LLM ``trtllm-serve``): in-flight batching mixes context and
  generation tokens in one step; ``--max_batch_size`` 2,048, ``--max_num_tokens`` 8,192
  (``tensorrt_llm/llmapi/llm_args.py``). With attention data parallelism its
  deployments balance the context phase across ranks (``attention_dp_config:
  enable_balance: true, batching_wait_iters: 0, timeout_iters: 60`` in NVIDIA's
  DeepSeek-R1 recipes, the InferenceX benchmark scripts and AIConfigurator's generated
  configs): a rank's waiting prompts are scheduled only in a step where every rank has
  one, or once 60 steps have passed since the last (``PyExecutor._balance_adp_requests``).
- **llama.cpp** (``llama-server``): each step adds one token per generating slot, then
  prompt tokens up to ``--batch-size`` 2,048 (``tools/server/server-context.cpp``);
  ``--parallel`` auto is 4 slots (``common/arg.cpp``).
- **generic**: an engine of this kind with vLLM's mid-size defaults (256 sequences,
  8,192 tokens), mixed steps; the default calibration's framework.

Each framework names the fit of a calibration file it runs under (its ``calibration``
entry, or the first of ``fallback`` the file has).
"""

from __future__ import annotations

import dataclasses

from ..errors import InputError, suggest
from .. import units


@dataclasses.dataclass(frozen=True)
class Framework:
    name: str
    separate: bool  # prefill steps apart from decode steps
    calibration: tuple[str, ...]  # calibration framework names, first found wins
    source: str
    # attention-DP context balancing: the most steps a rank's prompts wait for every rank
    # to have one (0: none, each rank schedules its own)
    adp_balance_iters: float = 0.0

    def max_num_seqs(self, memory_bytes: float, hardware: str) -> float:
        gib = memory_bytes / units.GIB
        if self.name == "vllm":
            return 1024.0 if gib >= 70.0 and "a100" not in hardware else 256.0
        return {"sglang": 4096.0, "trtllm": 2048.0, "llama.cpp": 4.0}.get(self.name, 256.0)

    def max_num_tokens(self, memory_bytes: float, hardware: str) -> float:
        gib = memory_bytes / units.GIB
        if self.name == "vllm":
            if gib >= 160.0:
                return 16384.0
            return 8192.0 if gib >= 70.0 and "a100" not in hardware else 2048.0
        if self.name == "sglang":
            if gib < 20.0:
                return 2048.0
            return 4096.0 if gib < 60.0 else (8192.0 if gib < 160.0 else 16384.0)
        return {"trtllm": 8192.0, "llama.cpp": 2048.0}.get(self.name, 8192.0)


FRAMEWORKS = {
    "vllm": Framework("vllm", False, ("vllm", "generic"), "vLLM 0.11.0 / 0.33.0 wheels"),
    "sglang": Framework("sglang", True, ("sglang", "vllm", "generic"),
                        "SGLang 0.5.3 / 0.5.23 wheels"),
    "trtllm": Framework("trtllm", False, ("tensorrt-llm", "generic"),
                        "TensorRT-LLM trtllm-serve and llm_args.py (2025-26)", 60.0),
    "llama.cpp": Framework("llama.cpp", False, ("llama.cpp", "generic"),
                           "llama.cpp @0c1e57098 (llama-cpp-python 0.3.36)"),
    "generic": Framework("generic", False, ("generic",), "vLLM's defaults for mid-size GPUs"),
}
ALIASES = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm",
           "llamacpp": "llama.cpp", "llama-cpp": "llama.cpp"}
NAMES = tuple(FRAMEWORKS)


def resolve(name: str, file, key: str) -> Framework:
    """The framework a study names (case-insensitive, with aliases)."""
    if not isinstance(name, str) or not name:
        raise InputError(file, key, f"value {name!r} is not valid", ", ".join(NAMES))
    low = name.strip().lower()
    low = ALIASES.get(low, low)
    if low not in FRAMEWORKS:
        raise InputError(file, key, f"unknown framework {name!r}" + suggest(low, NAMES),
                         ", ".join(NAMES))
    return FRAMEWORKS[low]


def fit_of(name: str, fitted) -> str | None:
    """The fit among ``fitted`` that rows or studies of the framework ``name`` (as
    measured rows name it: "tensorrt-llm", "sglang", "megatron", ...) run under: its own,
    else the next of its engine's chain (SGLang: vLLM's, then generic's), else None."""
    if name in fitted:
        return name
    engine = FRAMEWORKS.get(ALIASES.get(name, name))
    return None if engine is None else calibration_name(engine, fitted)


def calibration_name(framework: Framework, available) -> str | None:
    """The fit of a calibration with these ``available`` frameworks the framework runs
    under (None: none of its own; the caller falls back and says so)."""
    for name in framework.calibration:
        if name in available:
            return name
    return None

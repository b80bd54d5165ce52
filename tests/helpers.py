"""Small helpers shared by tests: evaluate one configuration given as keyword values, and
the study texts and references that tests in several folders use."""

from __future__ import annotations

import numpy as np

from dse.study import parse_study
from dse.run.sweep import sweep


def study_text(**axes) -> str:
    """A study of one name and ``axes``, under the plain roofline (the numbers tests
    derive by hand), unless an axis says otherwise."""
    lines = ["[study]", 'name = "t"', 'calibration = "none"', "[axes]"]
    for key, value in axes.items():
        lines.append(f"{key} = {_toml(value)}")
    return "\n".join(lines) + "\n"


def _toml(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def evaluate_point(dtype: str = "float64", **axes) -> dict[str, float]:
    """All outputs of one configuration (every key fixed), as Python floats."""
    text = study_text(**axes).replace('name = "t"', f'name = "t"\ndtype = "{dtype}"')
    ds = sweep(parse_study(text, "<test>"), progress=False)
    return {k: ds[k].item() for k in ds.data_vars}


def plain(text: str) -> str:
    """Study ``text`` under the plain roofline (what the tests derive by hand), unless it
    names a calibration."""
    if "calibration" in text:
        return text
    if "[study]" not in text:
        return '[study]\nname = "t"\ncalibration = "none"\n' + text
    return text.replace("[study]\n", '[study]\ncalibration = "none"\n', 1)


def sweep_text(text: str):
    return sweep(parse_study(plain(text), "<test>"), progress=False)


# --- shared by the tests of several folders ----------------------------------------------

# The grid of the streaming tests (run/test_scale.py, run/test_processes.py,
# run/test_hugepages.py, core/test_staging.py, study/test_reduce.py): 8,640 points.
GRID = """
[study]
name = "scale"
[axes]
model = ["llama-2-7b", "llama-3-8b", "mixtral-8x7b"]
hardware = ["a100-80gb", "h100-sxm"]
batch = [1, 4, 16, 64, 256]
input_len = [512, 4096, 32768]
output_len = [128, 1024]
tp = [1, 2, 4, 8]
hbm_bw_scale = [0.5, 1.0, 2.0]
[output]
chunk_points = {chunk}
"""
REDUCE = """
[output.reduce]
by = {by}
constraints = ["ttft_s <= 1.5"]
histogram = {{ variable = "tpot_s", bins = 12, range = [0.002, 0.2], log = true }}
"""

# The small search space of search/test_search.py (also properties/test_search.py and
# report/test_report.py).
SMALL = """
[study]
name = "small"
[axes]
model = "llama-3.2-1b"
hardware = ["l40s", "a100-80gb", "h100-sxm"]
tp = [1, 2]
batch = {{ start = 1, stop = 64, step = 1 }}
weight_bits = [16, 8]
input_len = 1000
output_len = 200
[search]
objective = "throughput_tok_s"
constraints = {constraints}
n_trials = {n}
seed = 1
batch_size = 8
storage = "{storage}"
"""


def small(tmp_path, constraints='["fits", "tpot_s <= 0.02"]', n=40, storage=":memory:"):
    text = SMALL.format(constraints=constraints, n=n, storage=storage)
    path = tmp_path / "small.toml"
    path.write_text(text)
    return path


def one_point(**axes):
    """A float64 study of one configuration (sensitivity tests)."""
    text = study_text(**axes).replace('name = "t"', 'name = "t"\ndtype = "float64"')
    return parse_study(text, "<t>")


# Speculative decoding: the target, draft and lengths of formulas/test_serving.py and
# properties/test_serving.py.
SPECULATION_AXES = dict(model="llama-3-70b", hardware="h100-sxm", tp=4, batch=8,
                        input_len=1000, output_len=200, draft_model="llama-3.2-1b", draft_len=4)


def pipeline_study(axes: dict, pipeline: str, dtype="float64") -> str:
    """A pipeline-mode study text (formulas/test_pipeline.py, study/test_pipeline.py)."""
    lines = ["[study]", 'name = "p"', 'mode = "pipeline"', f'dtype = "{dtype}"', "[axes]"]
    for k, v in axes.items():
        lines.append(f"{k} = {v!r}".replace("'", '"'))
    return "\n".join(lines) + "\n[pipeline]\n" + pipeline


def brute_force_front(x, y) -> np.ndarray:
    """Non-dominated points (x minimized, y maximized), by comparing every pair."""
    keep = np.ones(len(x), bool)
    for i in range(len(x)):
        for j in range(len(x)):
            if x[j] <= x[i] and y[j] >= y[i] and (x[j] < x[i] or y[j] > y[i]):
                keep[i] = False
                break
    return keep


def write_csv(path, fields, rows):
    """``rows`` (dicts) as a CSV file with header ``fields`` at ``path``; returns ``path``."""
    import csv

    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path

"""Derivatives of every numeric output, in every mode, against finite differences.

``dse sensitivity`` differentiates the evaluator with forward-mode autodiff (a JVP along
a parameter's multiplier). Here, for every float output of every mode (the breakdown and
the optional outputs included) and a set of hardware parameters, the JVP at the point is
compared with a central finite difference in float64 (h = 1e-6). Where the output has a
kink at the point (the one-sided differences disagree: a roofline max switching sides, a
floor stepping), no derivative exists and the pair is skipped; most pairs are smooth.
Training's mfu and hfu, whose sensitivities were reported as exactly zero, are checked
like every other output, and must move with the peak FLOP/s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dse.core.evaluator import Evaluator
from dse.run.chunks import chunk_point, plan
from dse.schema.outputs import OUTPUTS
from dse.sensitivity.elasticity import scaled_evaluate
from dse.study import parse_study

from ..conftest import STUDIES

H = 1e-6
DEVICE = ("hbm_bw", "peak_flops_16", "intra_bw", "inter_bw", "flops_efficiency",
          "hbm_efficiency")
CASES = {
    "inference_dense": ("""[study]
name = "g"
dtype = "float64"
[axes]
model = "llama-2-7b"
hardware = "h100-sxm"
tp = 2
pp = 2
batch = 16
input_len = 1000
output_len = 200
[output]
variables = "all"
breakdown = true
""", DEVICE),
    "inference_moe": ("""[study]
name = "g"
dtype = "float64"
[axes]
model = "mixtral-8x7b"
hardware = "a100-80gb"
tp = 4
dp = 2
ep = 8
batch = 32
input_len = 2000
output_len = 300
[output]
variables = "all"
""", DEVICE),
    "training": ("""[study]
name = "g"
mode = "training"
dtype = "float64"
[axes]
model = "llama-2-13b"
hardware = "h100-sxm"
num_devices = 32
tp = 4
pp = 2
micro_batch = 2
global_batch = 128
seq_len = 4096
recompute = "selective"
[output]
variables = "all"
""", DEVICE),
    "pipeline": (None, ("hbm_bw", "peak_flops_16", "flops_efficiency", "pipeline_link_bw",
                        "pipeline_link_latency")),
}


def _study(case):
    text, params = CASES[case]
    if text is None:  # the example pipeline study, in float64
        text = (STUDIES / "pipeline-apple-lan.toml").read_text().replace(
            'mode = "pipeline"', 'mode = "pipeline"\ndtype = "float64"').replace(
            'path = "results/pipeline-apple-lan.nc"', 'variables = "all"')
    return parse_study(text, f"<{case}>"), params


@pytest.mark.parametrize("case", sorted(CASES))
def test_jvp_of_every_output_matches_finite_differences(case):
    study, params = _study(case)
    registry = OUTPUTS[study.mode]
    names = tuple(n for n in study.variables
                  if registry[n].kind == "float" and not registry[n].alias_of)
    evaluator = Evaluator.of(study, names)
    point = chunk_point(study, plan(study.shape, max(study.size, 1))[0])
    n = len(params)

    def f(u):
        return scaled_evaluate(u, point, evaluator.models, evaluator.hardware, params,
                               study.mode, names, study.features)

    checked, skipped, moved = 0, [], set()
    with jax.enable_x64(True):
        ones = jnp.ones(n, jnp.float64)
        base = {k: np.asarray(v) for k, v in f(ones).items()}
        for i, param in enumerate(params):
            e = jnp.zeros(n, jnp.float64).at[i].set(1.0)
            _, tangent = jax.jvp(f, (ones,), (e,))
            up = {k: np.asarray(v) for k, v in f(ones + H * e).items()}
            down = {k: np.asarray(v) for k, v in f(ones - H * e).items()}
            for name in names:
                value, jvp = base[name], np.asarray(tangent[name])
                forward, backward = (up[name] - value) / H, (value - down[name]) / H
                central = (up[name] - down[name]) / (2 * H)
                scale = np.maximum(np.abs(value), 1e-300)
                finite = np.isfinite(value) & np.isfinite(forward) & np.isfinite(backward)
                smooth = finite & (np.abs(forward - backward) <= 1e-4 * (np.abs(central)
                                                                         + 1e-6 * scale))
                if not smooth.any():
                    skipped.append((name, param))
                    continue
                np.testing.assert_allclose(
                    np.broadcast_to(jvp, central.shape)[smooth], central[smooth],
                    rtol=1e-5, atol=1e-9 * float(np.max(scale[smooth])),
                    err_msg=f"{case}: d {name} / d {param}")
                checked += 1
                if np.any(np.abs(np.broadcast_to(jvp, central.shape)[smooth]) > 0):
                    moved.add(name)
    assert checked >= 0.8 * (checked + len(skipped)), skipped
    if study.mode == "training":
        assert {"mfu", "hfu", "step_s", "throughput_tok_s"} <= moved

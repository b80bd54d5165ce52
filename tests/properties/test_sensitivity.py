"""Property: dse sensitivity's elasticities match central finite differences of the
evaluator, away from roofline kinks (sensitivity/)."""

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from dse.catalogue import lookup as catalogue
from dse.core.evaluator import Evaluator
from dse.run.chunks import chunk_point, plan
from dse.sensitivity import sensitivity

from ..helpers import one_point


HW_PARAMS = {"hbm_bw": "hbm_bw_bytes_per_s", "peak_flops_16": "flops_per_s_16",
             "intra_bw": "intra_bw_bytes_per_s", "intra_latency": "intra_latency_s"}


METRICS = ("ttft_s", "tpot_s")


def finite_differences(study, field, h=1e-5):
    """Central differences of log(metric) in log(field), changing the hardware table."""
    evaluator = Evaluator.of(study, METRICS)
    hardware = evaluator.hardware
    point = chunk_point(study, plan(study.shape, 1 << 20)[0])
    values = []
    with jax.enable_x64(True):
        for f in (1 + h, 1 - h):
            hw = dataclasses.replace(hardware, **{field: getattr(hardware, field) * f})
            out = evaluator.traced(point, hardware=hw)
            values.append({m: float(out[m]) for m in METRICS})
    return {m: (np.log(values[0][m]) - np.log(values[1][m])) / (np.log1p(h) - np.log1p(-h))
            for m in METRICS}


@settings(max_examples=12, deadline=None)
@given(model=st.sampled_from(["llama-2-7b", "llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b"]),
       hardware=st.sampled_from(["a100-80gb", "h100-sxm", "mi300x", "l40s"]),
       tp=st.sampled_from([1, 2, 4]), batch=st.integers(1, 256),
       input_len=st.integers(32, 4000), output_len=st.integers(2, 1000))
def test_elasticities_match_finite_differences(model, hardware, tp, batch, input_len,
                                               output_len):
    assume(catalogue.load_model(model).divisors_ok(tp))
    study = one_point(model=model, hardware=hardware, tp=tp, batch=batch, input_len=input_len,
                      output_len=output_len, memory_scale=100.0)
    ds = sensitivity(study)
    for param, field in HW_PARAMS.items():
        fd = finite_differences(study, field)
        for metric in METRICS:
            e = ds[metric].sel(hw_param=param).item()
            up = ds[metric + "_up"].sel(hw_param=param).item()
            down = ds[metric + "_down"].sel(hw_param=param).item()
            if not np.isfinite(e) or abs(up - down) > 1e-9:
                continue  # at a kink: no derivative to compare with
            assert e == pytest.approx(fd[metric], rel=1e-3, abs=1e-6), (param, metric)

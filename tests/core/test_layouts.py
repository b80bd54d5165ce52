"""Output layouts kept on disk (dse.core.trace): a process that finds its study's layout
reads it instead of tracing the evaluator, and reads what the trace gave."""

from __future__ import annotations

import jax
import pytest

from dse.core import trace
from dse.core.evaluator import Evaluator
from dse.study import parse_study
from tests.helpers import study_text


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(trace, "_CACHE", {})
    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    yield tmp_path
    jax.config.update("jax_compilation_cache_dir", before)


def test_a_kept_layout_is_read_not_traced(cache, monkeypatch):
    study = parse_study(study_text(model=["llama-3-8b", "mixtral-8x7b"],
                                   hardware=["h100-sxm", "a100-80gb"], batch=[1, 8],
                                   input_len=512, output_len=64), "<test>")
    ev = Evaluator.of(study)
    traced = trace.layout(study, ev)
    assert len(list((cache / "layouts").glob("*.json"))) == 1
    monkeypatch.setattr(trace, "_CACHE", {})

    def no_tracing(*args, **kwargs):
        raise AssertionError("traced although the layout was kept")

    monkeypatch.setattr(trace, "function_layout", no_tracing)
    assert trace.layout(study, ev) == traced
    # n_params varies over the model only (the reason layouts exist)
    assert traced["n_params"].deps == ("model",)
    assert traced["ttft_s"].deps == ("model", "hardware", "batch")

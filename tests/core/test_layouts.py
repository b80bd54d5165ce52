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


@pytest.mark.parametrize("axes", [
    dict(model=["llama-3-8b", "mixtral-8x7b"], hardware=["h100-sxm", "a100-80gb"],
         batch=[1, 8, 64], input_len=[512, 2048], output_len=64, tp=[1, 2]),
    dict(model="llama-3-8b", hardware="h100-sxm", usecase=["chat", "summarization"],
         max_num_seqs=[8, 64], request_rate=[0.5, 4.0]),
])
def test_a_whole_grid_evaluation_gives_the_traced_layout(cache, monkeypatch, axes):
    """The layout read off one evaluation of the whole grid (dse.run.memory, a study whose
    layout nothing has yet) is the shape trace's, and the sweep traces no layout."""
    from dse.run import budget, memory

    study = parse_study(study_text(**axes), "<test>")
    traced = trace.function_layout(study, Evaluator.of(study), Evaluator.of(study).traced,
                                   Evaluator.of(study).lead_dims())
    calls = []
    real = trace.function_layout
    monkeypatch.setattr(trace, "function_layout",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    assert budget.check(study, "memory") is None  # the bound fits: no exact layout needed
    arrays, deps = memory.run(study)
    assert not calls
    assert deps == {n: o.deps for n, o in traced.items()}
    assert trace.layout(study, Evaluator.of(study)) == traced  # kept: read, not traced
    assert not calls
    for name, o in traced.items():
        assert arrays[name].shape == o.lead + tuple(study.shape[[a.name for a in study.dims]
                                                                 .index(d)] for d in o.deps)


def test_the_bound_holds_the_exact_estimate():
    from dse.run import budget

    for axes in (dict(model=["llama-3-8b", "mixtral-8x7b"], batch=[1, 8], tp=[1, 2]),
                 dict(model="llama-3-8b", batch=[1, 8], input_len=[100, 1000])):
        study = parse_study(study_text(hardware="h100-sxm", **axes), "<test>")
        upper, exact = budget.bound(study), budget.estimate(study)
        assert upper.points == exact.points
        assert exact.result_bytes <= upper.result_bytes
        assert exact.chunk_bytes <= upper.chunk_bytes

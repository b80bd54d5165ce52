"""dse.core.staging: small intermediates computed once before the large kernels that read them.

The barriers only move fusion boundaries, so values are those of the unstaged function
(to float32 rounding: a multiply-add contracted on one side of a boundary may round
differently in the last place). References: the same function unstaged, and numpy.
"""

from __future__ import annotations

import functools
import importlib

import jax
from jax.extend import core as jcore
import jax.numpy as jnp
import numpy as np
import pytest

from dse.core import staging
from dse.core.evaluator import Evaluator
from dse.core.tables import tables
from dse.core.trace import dependencies, function_dependencies, template_point
from dse.run.chunks import chunk_point, plan
from dse.run.memory import run, run_function
from dse.schema.outputs import OUTPUTS
from dse.study import parse_study

from ..helpers import GRID

evaluate_module = importlib.import_module("dse.core.evaluate")


def _barriered(fn, *args) -> list:
    """The shapes of the values that ``fn``'s program puts behind optimization barriers."""
    out = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "optimization_barrier":
                out.extend(tuple(v.aval.shape) for v in eqn.invars)
            for sub in jcore.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return out


def toy(a, b, x):
    """A small computed value (a * b + a, over 4 x 1) feeding a 4 x 256 kernel, an input
    broadcast into it (a * x) and a small kernel (4 x 8) reading a small value."""
    small = a * b + a
    grid_sized = small * x + a * x
    return grid_sized, (small * 2.0 + b) * jnp.ones((1, 8))


def toy_args():
    rng = np.random.default_rng(0)
    a, b = (rng.random((4, 1), np.float32) + 0.5 for _ in range(2))
    return a, b, rng.random((1, 256), np.float32)


def test_small_computed_value_feeding_a_large_kernel_is_computed_once():
    args = toy_args()
    # the 4 x 1 sum (not the inputs a, b, x, nor anything read by the 4 x 8 kernel)
    assert _barriered(staging.staged(toy), *args) == [(4, 1)]
    assert _barriered(toy, *args) == []
    for staged, plain in zip(jax.jit(staging.staged(toy))(*args), toy(*args)):
        np.testing.assert_allclose(staged, plain, rtol=4 * 2.0 ** -23)
    a, b, x = (np.float64(v) for v in args)
    np.testing.assert_allclose(jax.jit(staging.staged(toy))(*args)[0], (a * b + a) * x + a * x,
                               rtol=1e-6)


def test_staged_function_differentiates_and_vectorizes_like_the_original():
    a, b, x = toy_args()

    def loss(fn):
        return lambda a: jnp.sum(fn(a, b, x)[0])

    np.testing.assert_allclose(jax.grad(loss(staging.staged(toy)))(a), jax.grad(loss(toy))(a),
                               rtol=1e-6)
    batched = jax.vmap(staging.staged(toy), in_axes=(None, None, 0))(a, b, np.stack([x, 2 * x]))
    np.testing.assert_allclose(batched[0][1], toy(a, b, 2 * x)[0], rtol=1e-6)


@pytest.fixture(scope="module")
def bench_like():
    """test_scale's grid with a second what-if axis (the 4 x 3 what-ifs make the ~40x
    expansions that bench_sweep's grid has) and weight and KV precisions: 51,840 points,
    enough for dse.evaluate to stage."""
    study = parse_study(GRID.format(chunk=1 << 22).replace("hbm_bw_scale", (
        "weight_bits = [16, 8, 4]\nkv_bits = [16, 8]\ntflops_scale = [0.5, 1.0, 1.5, 2.0]\n"
        "hbm_bw_scale")), "<test>")
    assert study.size >= staging.MIN_POINTS
    return study


def test_evaluator_values_are_those_of_the_unstaged_evaluator(bench_like, monkeypatch):
    study = bench_like
    names = study.variables
    extra = {n: len(OUTPUTS[study.mode][n].dims) for n in names}
    deps = dependencies(study, Evaluator.of(study, names))
    staged, _ = run(study)
    monkeypatch.setattr(staging, "staged", lambda fn: fn)
    unstaged_evaluate = jax.jit(functools.partial(  # a fresh trace, with staging off
        evaluate_module.evaluate.__wrapped__, mode=study.mode, names=names,
        features=study.features))
    plain, _ = run_function(study, Evaluator.of(study), unstaged_evaluate, extra, deps)
    for name in names:
        if plain[name].dtype.kind == "f":
            np.testing.assert_allclose(staged[name], plain[name], rtol=4 * 2.0 ** -23, atol=0,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(staged[name], plain[name], err_msg=name)


def test_small_programs_are_not_staged(bench_like, monkeypatch):
    """Shape traces (every axis of length 2) and search batches skip the re-emission."""
    monkeypatch.setattr(staging, "staged", None)  # would fail if called
    template = template_point(bench_like)
    assert np.prod(jnp.broadcast_shapes(*(x.shape for x in jax.tree_util.tree_leaves(
        template)))) < staging.MIN_POINTS
    assert function_dependencies(bench_like, Evaluator.of(bench_like), functools.partial(
        evaluate_module.evaluate, mode="inference", names=("tpot_s",)), {"tpot_s": 0}) == {
        "tpot_s": tuple(a.name for a in bench_like.dims)}


def test_evaluator_on_a_grid_stages_its_large_kernels(bench_like, monkeypatch):
    study = bench_like
    models, hardware = tables(study)
    point = chunk_point(study, plan(study.shape, study.size)[0])
    full = int(np.prod(study.shape))
    ratio_in_use = staging.RATIO

    def small_barriered(ratio):
        monkeypatch.setattr(staging, "RATIO", ratio)
        fn = functools.partial(  # a new function object: a fresh trace
            evaluate_module.evaluate.__wrapped__, mode=study.mode, names=study.variables,
            features=study.features)
        return [s for s in _barriered(fn, point, models, hardware)
                if np.prod(s) * ratio_in_use <= full]

    # with staging off (an expansion ratio no equation reaches) only computed_once's few
    # barriers remain (TTFT, TPOT, the phase sums; some over a few axes); staging adds
    # one per small value a large kernel reads
    plain = small_barriered(10 ** 12)
    assert len(plain) <= 8
    assert len(small_barriered(ratio_in_use)) >= len(plain) + 100


def test_phase_sums_add_the_sequence_length_components_last(bench_like, monkeypatch):
    """In a decode step only attention varies with the sequence lengths (and it and
    kv_cache with the KV precision): summed last, the other components add at their own
    shape and the sums over the whole grid take a few additions instead of one per
    component (Hints.sum_last; counted in the evaluator's program)."""
    study = bench_like
    models, hardware = tables(study)
    point = chunk_point(study, plan(study.shape, study.size)[0])
    hints = evaluate_module.XLA_CPU
    assert hints.sum_last == ("kv_cache", "attention")

    def grid_sized_adds(last):
        monkeypatch.setattr(evaluate_module, "XLA_CPU", hints._replace(sum_last=last))
        fn = functools.partial(evaluate_module.evaluate.__wrapped__, mode=study.mode,
                               names=("tpot_s",), features=study.features)
        count = 0

        def walk(jaxpr):
            nonlocal count
            for eqn in jaxpr.eqns:
                count += eqn.primitive.name == "add" and eqn.outvars[0].aval.shape == study.shape
                for sub in jcore.jaxprs_in_params(eqn.params):
                    walk(sub)

        walk(jax.make_jaxpr(fn)(point, models, hardware).jaxpr)
        return count

    in_order, last = grid_sized_adds(()), grid_sized_adds(("kv_cache", "attention"))
    assert last <= 12 and in_order >= 2 * last, (in_order, last)


def chain(x, steps: int):
    """``steps`` elementwise operations on ``x``: x * 1.5 + 0.25, repeated."""
    for _ in range(steps // 2):
        x = x * 1.5 + 0.25
    return x


def reused(x, y):
    """A long chain read by two outputs, a short chain read by two, a long one read once."""
    long, short = chain(x, staging.LEAN_COST + 2), chain(y, 2)
    once = chain(x + y, 2 * staging.LEAN_COST)
    return long * 2.0, long + short, short * 3.0, once


def test_lean_computes_each_reused_costly_chain_once():
    x, y = (np.linspace(0.5, 1.5, 8, dtype=np.float32).reshape(2, 4) + k for k in (0, 1))
    # only the long chain read twice: the short one is cheap to copy, the other read once
    assert _barriered(staging.lean(reused), x, y) == [(2, 4)]
    assert _barriered(reused, x, y) == []
    x64, y64 = np.float64(x), np.float64(y)  # by hand: the chain's affine map, in float64
    steps = (staging.LEAN_COST + 2) // 2
    long = 1.5 ** steps * x64 + 0.25 * sum(1.5 ** i for i in range(steps))
    short = 1.5 * y64 + 0.25
    for got, want in zip(jax.jit(staging.lean(reused))(x, y), (long * 2.0, long + short,
                                                                short * 3.0)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    for lean, plain in zip(jax.jit(staging.lean(reused))(x, y), jax.jit(reused)(x, y)):
        np.testing.assert_allclose(lean, plain, rtol=4 * 2.0 ** -23)


def test_lean_function_differentiates_and_vectorizes_like_the_original():
    x, y = (np.linspace(0.5, 1.5, 8, dtype=np.float32).reshape(2, 4) + k for k in (0, 1))

    def loss(fn):
        return lambda x: sum(jnp.sum(v) for v in fn(x, y))

    np.testing.assert_allclose(jax.grad(loss(staging.lean(reused)))(x),
                               jax.grad(loss(reused))(x), rtol=1e-5)
    batched = jax.vmap(staging.lean(reused), in_axes=(0, None))(np.stack([x, 2 * x]), y)
    np.testing.assert_allclose(batched[1][1], reused(2 * x, y)[1], rtol=1e-6)


def test_small_programs_compute_reused_chains_once(monkeypatch):
    """The evaluator over a few points goes through :func:`staging.lean` (and the grid
    staging is left for large grids)."""
    called = []
    monkeypatch.setattr(staging, "lean", lambda fn: called.append(fn) or fn)
    study = parse_study(GRID.format(chunk=1 << 22), "<test>")
    point = chunk_point(study, plan(study.shape, study.size)[0])
    assert study.size < staging.MIN_POINTS
    models, hardware = tables(study)
    jax.make_jaxpr(functools.partial(evaluate_module.evaluate.__wrapped__, mode=study.mode,
                                     names=("tpot_s",), features=study.features))(
        point, models, hardware)
    assert len(called) == 1

"""Small intermediates computed once, at their own shape, before a grid-sized kernel reads them.

XLA fuses an elementwise producer into each of its consumers and, inside a fused kernel,
computes every value once per element of the kernel's output. A value over a few axes
that feeds a kernel over the whole grid is therefore recomputed at every grid point: an
operator's FLOPs over batch x tp x pp, a device's rate over hardware x tflops_scale.

:func:`staged` re-emits a function's jaxpr with an optimization barrier (the one
:func:`dse.core.fusion.computed_once` uses; :mod:`dse.run.xla` keeps XLA:CPU from
dropping it) on each intermediate that a large kernel expands at least :data:`RATIO`
times: a broadcast into the grid, mostly. "Large" is at least 1/:data:`SHARE` of the
program's largest value, so small kernels keep their fusion and the compile time barely
moves. XLA then computes such an intermediate in a kernel of its own size, once, and the
grid-sized kernel reads it. The operations and their order are unchanged; only fusion
boundaries move, so values agree with the unstaged program to float32 rounding (XLA
contracts the arithmetic on either side of a boundary a little differently).

Re-emitting the jaxpr adds to the trace, so :func:`dse.core.evaluate.evaluate` stages
programs over at least :data:`MIN_POINTS` grid points only (not its shape traces or search
batches). :data:`RATIO` is tied to the order of a phase's sum
(:data:`dse.core.fusion.XLA_CPU`): the partial sum of the components added first expands
the grid 24x on the benchmark grid, and must be staged. ``docs/performance.md`` gives the
measurements behind these thresholds.
"""

from __future__ import annotations

import contextlib
import math

import jax
from jax.extend import core as jcore

try:  # JAX's own (private) way to bind at a recorded location, as jax.core.eval_jaxpr does
    from jax._src import source_info_util as _source_info
except ImportError:  # pragma: no cover - a JAX without it: locations are the re-emitter's
    _source_info = None

RATIO = 16  # expansion from which an intermediate is computed once
SHARE = 4  # kernels of at least 1/SHARE of the largest value get staged inputs
MIN_POINTS = 1 << 15  # grid points from which dse.core.evaluate stages a program

# primitives whose body is inlined (and staged) rather than bound as a unit
_INLINE = frozenset({"pjit", "jit", "closed_call", "core_call"})
# primitives that only move or relabel elements: their output of an input is no work
_MOVES = frozenset({"broadcast_in_dim", "reshape", "squeeze", "convert_element_type", "copy"})


def staged(fn):
    """``fn`` (pytrees of arrays -> pytree of arrays) with its small intermediates
    computed once before the large kernels that read them (see the module docstring).

    Traces ``fn`` on each call's arguments (concrete or traced) and evaluates the jaxpr
    with barriers inserted; meant to run under ``jax.jit``. Differentiable and
    vmappable like ``fn`` (the barrier has both rules).
    """

    def run(jaxpr, consts, leaves):
        largest = max((_size(v) for e in jaxpr.eqns for v in e.outvars), default=0)
        return _run(jaxpr, consts, leaves, largest // SHARE)

    return _re_emitted(fn, run)


def _re_emitted(fn, run):
    """``fn`` traced on each call's arguments and its jaxpr evaluated by ``run(jaxpr,
    consts, leaves) -> output leaves`` (which binds the equations again, barriers added)."""

    def wrapped(*args):
        leaves, tree = jax.tree_util.tree_flatten(args)
        closed, shapes = jax.make_jaxpr(
            lambda *xs: fn(*jax.tree_util.tree_unflatten(tree, xs)), return_shape=True)(*leaves)
        out = run(closed.jaxpr, closed.consts, leaves)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), out)

    return wrapped


def _bind(eqn, values) -> list:
    """``eqn`` bound again on ``values`` (its outputs, as a list), at the source location it
    was traced at: the compiled program's metadata (XLA dumps, profiles) names the
    formula's line, not the re-emitter's."""
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns, params = params if isinstance(params, tuple) else ((), params)
    with _located(eqn):
        outs = eqn.primitive.bind(*subfuns, *values, **params)
    return list(outs) if eqn.primitive.multiple_results else [outs]


def _located(eqn):
    if _source_info is None:
        return contextlib.nullcontext()
    return _source_info.user_context(eqn.source_info.traceback,
                                     name_stack=eqn.source_info.name_stack)


def _size(var) -> int:
    return math.prod(getattr(var.aval, "shape", ()))


def _run(jaxpr, consts, args, large: int, worked=None) -> list:
    """Evaluate ``jaxpr``, cutting fusion in front of kernels of >= ``large`` elements.

    ``worked[i]`` says whether argument i took arithmetic to produce (an inlined call's
    arguments computed by its caller).
    """
    env: dict = {}
    computed: set = {v for v, w in zip(jaxpr.invars, worked or ()) if w}
    once: dict = {}  # variable -> its barriered value (one barrier per variable)

    def is_var(atom) -> bool:
        return not isinstance(atom, jcore.Literal)

    def read(atom):
        return env[atom] if is_var(atom) else atom.val

    def took_work(atom) -> bool:
        return is_var(atom) and atom in computed

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        size = max((_size(v) for v in eqn.outvars), default=0)
        values = []
        for atom in eqn.invars:
            value = read(atom)
            if size >= large and took_work(atom) and 0 < _size(atom) * RATIO <= size:
                if atom not in once:
                    once[atom], = jax.lax.optimization_barrier((value,))
                value = once[atom]
            values.append(value)
        if eqn.primitive.name in _INLINE:
            inner = eqn.params["jaxpr"]
            outs = _run(inner.jaxpr, inner.consts, values, large,
                        [took_work(a) for a in eqn.invars])
        else:
            outs = _bind(eqn, values)
        work = eqn.primitive.name not in _MOVES or any(map(took_work, eqn.invars))
        for var, value in zip(eqn.outvars, outs):
            env[var] = value
            if work:
                computed.add(var)
    return [read(v) for v in jaxpr.outvars]


# --- small programs: reused values computed once, for the compiler's sake ----------------

LEAN_COST = 16
"""Operations behind a reused value (since the last value in memory) from which
:func:`lean` computes it once: XLA:CPU would copy them into each consumer's kernel."""

_MATERIALIZED = frozenset({"while", "cond", "scan", "optimization_barrier"})
# primitives whose results XLA keeps in memory anyway: nothing behind them is copied


def lean(fn):
    """``fn`` with each intermediate that is read more than once and takes at least
    :data:`LEAN_COST` operations computed once into memory (an optimization barrier).

    For programs over few points (a serving-load model's grid, a search batch), where
    what XLA:CPU spends is compile time, not arithmetic: it copies a cheap elementwise
    producer into every consumer's kernel, so a chain that many outputs read (the step
    model behind every latency percentile) is compiled, not just computed, once per
    reader. The serving-load example's program shrinks from ~190,000 instructions after
    fusion to ~45,000 and compiles 2-3x faster (``docs/performance.md``); on a small grid
    the extra stores cost nothing. As with :func:`staged`, only fusion boundaries move.
    """

    return _re_emitted(fn, lambda jaxpr, consts, leaves: _run_lean(
        jaxpr, consts, leaves, [0] * len(leaves))[0])


def _run_lean(jaxpr, consts, args, costs) -> tuple[list, list]:
    """Evaluate ``jaxpr`` with reused costly values computed once; ``costs[i]``: the
    operations behind argument i not yet in memory. Returns the outputs and theirs."""
    uses: dict = {}
    for atom in [a for e in jaxpr.eqns for a in e.invars] + list(jaxpr.outvars):
        if not isinstance(atom, jcore.Literal):
            uses[atom] = uses.get(atom, 0) + 1
    env: dict = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    cost: dict = dict(zip(jaxpr.invars, costs))

    def read(atom):
        return atom.val if isinstance(atom, jcore.Literal) else env[atom]

    def behind(atom) -> int:
        return 0 if isinstance(atom, jcore.Literal) else cost.get(atom, 0)

    for eqn in jaxpr.eqns:
        values = [read(a) for a in eqn.invars]
        name = eqn.primitive.name
        if name in _INLINE:
            inner = eqn.params["jaxpr"]
            outs, out_costs = _run_lean(inner.jaxpr, inner.consts, values,
                                        [behind(a) for a in eqn.invars])
        else:
            outs = _bind(eqn, values)
            own = 0 if name in _MATERIALIZED else 1 + sum(map(behind, eqn.invars))
            out_costs = [own] * len(outs)
        reused = [i for i, (v, c) in enumerate(zip(eqn.outvars, out_costs))
                  if c >= LEAN_COST and uses.get(v, 0) >= 2]
        if reused:
            kept = jax.lax.optimization_barrier(tuple(outs[i] for i in reused))
            for i, value in zip(reused, kept):
                outs[i], out_costs[i] = value, 0
        env.update(zip(eqn.outvars, outs))
        cost.update(zip(eqn.outvars, out_costs))
    return [read(v) for v in jaxpr.outvars], [behind(v) for v in jaxpr.outvars]

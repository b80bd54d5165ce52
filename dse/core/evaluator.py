"""The :class:`Evaluator`: the one way dse evaluates.

It binds what every evaluation of a study shares (the mode, the spec tables, the
features, the outputs asked for, the dtype) to the composition root
(:func:`dse.core.evaluate.evaluate`), so that a sweep's chunks, a search's trial
batches, a sensitivity's tangents, a reduction's kernel, uncertainty draws and
validation rows all run the same program at the same precision. A float64 study is
evaluated with JAX's 64-bit mode on, wherever it is evaluated.

    >>> ev = Evaluator.of(study)                    # doctest: +SKIP
    >>> out = ev(point)                             # {name: array}, in the study's dtype
"""

from __future__ import annotations

from collections.abc import Iterable

import jax

from ..schema.outputs import OUTPUTS
from . import programs
from .evaluate import evaluate, outputs
from .tables import tables

DTYPES = ("float32", "float64")


class Evaluator:
    """A mode's outputs ``names`` with ``models`` and ``hardware`` tables, ``features``
    (static switches: "moe", "mla", ...) and ``dtype`` bound.

    ``ev(point)`` evaluates at the top level (in the evaluator's precision);
    :meth:`traced` is the same jitted program for use inside another JAX
    transformation (jit, vmap, jvp, grad) whose precision the caller has set;
    :meth:`formulas` the arithmetic alone, neither jitted nor staged, for a kernel
    that fuses it with a reduction of its own.
    """

    def __init__(self, mode: str, models, hardware, *, features: Iterable[str] = (),
                 names: Iterable[str] | None = None, dtype: str = "float32"):
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
        self.mode = mode
        self.models, self.hardware = models, hardware
        self.features = frozenset(features)
        self.names = tuple(names) if names else OUTPUTS[mode].defaults(self.features)
        self.dtype = dtype
        self._placed: dict = {}

    @classmethod
    def of(cls, study, names: Iterable[str] | None = None) -> "Evaluator":
        """The evaluator of ``study``'s outputs (default: the ones it writes)."""
        models, hardware = tables(study)
        return cls(study.mode, models, hardware, features=study.features,
                   names=tuple(names) if names else study.variables, dtype=study.dtype)

    def with_names(self, names: Iterable[str]) -> "Evaluator":
        """The same evaluator for other outputs."""
        return type(self)(self.mode, self.models, self.hardware, features=self.features,
                          names=names, dtype=self.dtype)

    @property
    def x64(self) -> bool:
        return self.dtype == "float64"

    def precision(self):
        """A context in which JAX computes at the evaluator's precision."""
        return jax.enable_x64(self.x64)

    def lead_dims(self) -> dict[str, int]:
        """Leading axes of each output's own (breakdown phase and component, ...)."""
        return {n: len(OUTPUTS[self.mode][n].dims) for n in self.names}

    def __call__(self, point, models=None, hardware=None) -> dict:
        """The outputs at ``point`` (a knob pytree whose leaves broadcast)."""
        models = self.models if models is None else models
        hardware = self.hardware if hardware is None else hardware
        with self.precision():
            return programs.call(self, point, models, hardware)

    def traced(self, point, models=None, hardware=None) -> dict:
        """:meth:`__call__` without setting the precision (inside a transformation);
        ``models`` and ``hardware`` replace the bound tables (e.g. scaled or traced)."""
        return evaluate(point, self.models if models is None else models,
                        self.hardware if hardware is None else hardware, self.mode,
                        self.names, self.features)

    def formulas(self, point, models=None, hardware=None) -> dict:
        """The outputs' arithmetic, neither jitted nor staged (inside a kernel)."""
        return outputs(point, self.models if models is None else models,
                       self.hardware if hardware is None else hardware, self.mode,
                       self.names, self.features)

    def tables_on(self, device):
        """The tables on ``device`` (None: as they are), copied once per device."""
        if device is None:
            return self.models, self.hardware
        if device not in self._placed:
            with self.precision():
                self._placed[device] = jax.device_put((self.models, self.hardware), device)
        return self._placed[device]

    def on(self, point, device):
        """``(point, models, hardware)`` placed on ``device`` (a jitted function runs where
        its inputs are); None leaves them where they are."""
        if device is None:
            return point, self.models, self.hardware
        with self.precision():
            return (jax.device_put(point, device), *self.tables_on(device))

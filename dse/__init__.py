"""dse: vectorized design-space exploration for LLM training and inference systems.

One jit-compiled JAX evaluator of analytical cost formulas runs over whole broadcast
grids of configurations; results are labelled xarray Datasets.

    >>> import dse
    >>> ds = dse.sweep("studies/llama-serving.toml")      # doctest: +SKIP
    >>> ds.dse.best()                                      # doctest: +SKIP

The names below are re-exported from the modules that define them, imported when first
used (``import dse`` loads neither JAX nor xarray, and changes nothing in the process:
XLA is configured when a run starts, or by :func:`configure_xla`).
"""

from __future__ import annotations

import importlib
import sys

from ._version import __version__

# Functions named as the packages that hold them (dse.search is a package too): bound here,
# after their packages load, so that ``dse.search`` stays the function. Light imports.
from .report.api import plot, report
from .search.api import search
from .sensitivity.api import sensitivity

_EXPORTS = {
    "Evaluator": "dse.core.evaluator",
    "InferencePoint": "dse.schema.knobs",
    "InputError": "dse.errors",
    "SearchResult": "dse.search.results",
    "Study": "dse.study.study",
    "configure_xla": ("dse.run.xla", "configure"),
    "load_hardware": "dse.catalogue.lookup",
    "load_model": "dse.catalogue.lookup",
    "load_study": "dse.study.study",
    "parse_study": "dse.study.study",
    "plan": "dse.search.plan",
    "sweep": "dse.run.sweep",
    "sweep_to_file": "dse.run.sweep",
    "write_dataset": "dse.results.io",
}
__all__ = sorted(["__version__", "plot", "report", "search", "sensitivity", *_EXPORTS])

if "xarray" in sys.modules:  # the ``ds.dse`` accessor, for Datasets opened with xarray
    importlib.import_module("dse.results.select")


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dse' has no attribute {name!r}")
    module, attribute = _EXPORTS[name] if isinstance(_EXPORTS[name], tuple) else (
        _EXPORTS[name], name)
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

"""dse: vectorized design-space exploration for LLM training and inference systems.

One jit-compiled JAX evaluator of analytical cost formulas runs over whole broadcast
grids of configurations; results are labelled xarray Datasets.

    >>> import dse
    >>> ds = dse.sweep("studies/llama-serving.toml")      # doctest: +SKIP
    >>> ds.throughput_tok_s.where(ds.valid).max()          # doctest: +SKIP
"""

from ._version import __version__
from .catalogue import load_hardware, load_model
from .errors import InputError
from .evaluate import evaluate
from .io import write_dataset
from .knobs import InferencePoint
from .report import plot, report
from .search import SearchResult, search
from .sensitivity import sensitivity
from .study import Study, load_study, parse_study
from .sweep import sweep, sweep_to_file

__all__ = [
    "__version__", "InferencePoint", "InputError", "SearchResult", "Study", "evaluate",
    "load_hardware", "load_model", "load_study", "parse_study", "plot", "report", "search",
    "sensitivity", "sweep", "sweep_to_file", "write_dataset",
]

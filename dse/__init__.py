"""dse: vectorized design-space exploration for LLM training and inference systems.

One jit-compiled JAX evaluator of analytical cost formulas runs over whole broadcast
grids of configurations; results are labelled xarray Datasets.

    >>> import dse
    >>> ds = dse.sweep("studies/llama-serving.toml")      # doctest: +SKIP
    >>> ds.throughput_tok_s.where(ds.valid).max()          # doctest: +SKIP
"""

from . import xla as _xla

_xla.configure()  # before JAX starts: host devices, kept barriers (dse.xla)

from ._version import __version__  # noqa: E402
from .catalogue.lookup import load_hardware, load_model  # noqa: E402
from .errors import InputError  # noqa: E402
from .evaluate import evaluate  # noqa: E402
from .results.io import write_dataset  # noqa: E402
from .schema.knobs import InferencePoint  # noqa: E402
from .report import plot, report  # noqa: E402
from .search import SearchResult, search  # noqa: E402
from .sensitivity import sensitivity  # noqa: E402
from .study.study import Study, load_study, parse_study  # noqa: E402
from .sweep import sweep, sweep_to_file  # noqa: E402

__all__ = [
    "__version__", "InferencePoint", "InputError", "SearchResult", "Study", "evaluate",
    "load_hardware", "load_model", "load_study", "parse_study", "plot", "report", "search",
    "sensitivity", "sweep", "sweep_to_file", "write_dataset",
]

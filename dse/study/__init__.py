"""The input boundary: a study file read, every section checked, into a :class:`Study`.

Past :func:`load_study` nothing raises on a study: bad input is an
:class:`~dse.errors.InputError` here, infeasible points are results.
"""

from .constraints import Constraint, feasible
from .output import Output
from .reduce import ReduceSpec
from .search import SearchConfig
from .sensitivity import SensitivityConfig
from .study import Axis, Study, load_study, parse_study, parse_study_dict

__all__ = ["Axis", "Constraint", "Output", "ReduceSpec", "SearchConfig", "SensitivityConfig",
           "Study", "feasible", "load_study", "parse_study", "parse_study_dict"]

"""What a study may say and what dse answers: the knobs (study keys, one dataclass field
each, which are also the evaluator's input pytrees) and the outputs (variables with units
and long names, the infeasibility reasons)."""

from .knobs import MODES, POINT_TYPES, InferencePoint, PipelinePoint, TrainingPoint
from .outputs import OUTPUTS, PRIMARY_METRIC, REASON_BITS, REASONS, Output, reason_names

__all__ = ["MODES", "OUTPUTS", "POINT_TYPES", "PRIMARY_METRIC", "REASONS", "REASON_BITS",
           "InferencePoint", "Output", "PipelinePoint", "TrainingPoint", "reason_names"]

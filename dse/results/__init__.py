"""Results: the labelled Dataset, its files, printed summaries and selection."""

from .dataset import coords, provenance, to_dataset
from .io import write_dataset

__all__ = ["coords", "provenance", "to_dataset", "write_dataset"]

"""``dse search``: optuna over a study's space, evaluated in batches by the one evaluator."""

from .api import search

__all__ = ["search"]

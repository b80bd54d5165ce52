"""``dse sensitivity``: elasticities through the one evaluator (forward-mode autodiff)."""

from .api import sensitivity

__all__ = ["sensitivity"]

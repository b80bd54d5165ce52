"""``dse report`` and ``dse plot``: figures chosen by what a result Dataset holds."""

from .api import figure, plot, report

__all__ = ["figure", "plot", "report"]

"""``dse.sensitivity``: what each hardware parameter is worth, by exact derivatives.

    >>> import dse
    >>> ds = dse.sensitivity("studies/sensitivity-genz.toml")      # doctest: +SKIP
    >>> ds.tpot_s.sel(hw_param="hbm_bw")                            # doctest: +SKIP

(Its imports are inside the function: importing dse stays light.)
"""

from __future__ import annotations


def sensitivity(study, *, progress=None):
    """Elasticities of ``study``'s metrics to each hardware parameter at every grid point,
    the exact +-delta what-ifs beside the linear prediction, kink flags, inverse answers
    and workload mixes (its ``[sensitivity]`` section, or the defaults): an xarray
    Dataset with a ``hw_param`` dimension (:mod:`dse.sensitivity.analysis`)."""
    from ..study.study import Study, load_study
    from .analysis import analyze

    if not isinstance(study, Study):
        study = load_study(study)
    return analyze(study, progress)

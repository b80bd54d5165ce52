"""Property: dse search's best points satisfy every constraint (search/)."""

import json

from hypothesis import given, settings, strategies as st

from dse.search import search

from ..helpers import small


@settings(max_examples=12, deadline=None)
@given(ttft=st.floats(0.05, 5.0), tpot=st.floats(0.002, 0.05), fits=st.booleans())
def test_best_satisfies_every_constraint(tmp_path_factory, ttft, tpot, fits):
    constraints = json.dumps((["fits"] if fits else []) + [f"ttft_s <= {ttft}",
                                                            f"tpot_s <= {tpot}"])
    path = small(tmp_path_factory.mktemp("c"), constraints=constraints, n=24)
    result = search(path, out=path.with_suffix(".nc"))
    for best in result.best:
        out = best["outputs"]
        assert out["ttft_s"] <= ttft and out["tpot_s"] <= tpot
        assert out["reason"] & ~4 == 0  # structurally valid (oom is the fits flag)
        if fits:
            assert out["fits"]
    assert bool(result.best) == bool(result.trials["feasible"].any())

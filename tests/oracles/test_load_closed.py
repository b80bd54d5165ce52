"""The serving-under-load model against the discrete-event oracle, closed loop.

100 random points as in test_load_open.py, each with c clients, log-uniform from 1 to
twice the replica's running-batch cap (past it, requests wait for a slot). See
test_load_open.py for the oracle and what the shares mean.
"""

from __future__ import annotations

import numpy as np

from .load_points import ITL, check, check_itl, draw, errors, evaluate, simulated

SEED, POINTS = 2026, 100


def test_closed_loop_against_the_oracle():
    rows = draw(SEED, POINTS)
    _, (_, probe, _) = evaluate(rows, "concurrency", [1] * POINTS)
    clients = [max(1, int(round(np.exp(r["c_frac"] * np.log(2.0 * probe.slots[..., i].max())))))
               for i, r in enumerate(rows)]
    out, replica = evaluate(rows, "concurrency", clients)
    index = [i for i in range(POINTS) if out["valid"][i]]
    assert len(index) >= 0.9 * POINTS  # the few that do not fit are left out
    oracle = [simulated(rows[i], replica, i, dict(concurrency=clients[i])) for i in index]
    err = errors(out, oracle, index)
    check("closed loop", err, median=(0.03, 0.12), share=(0.8, 0.7))
    check_itl("closed loop", errors(out, oracle, index, ITL), median=(0.01, 0.02, 0.05),
              share=(0.8, 0.74, 0.73))

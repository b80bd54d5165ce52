"""Summaries of serving studies with SLOs rank by goodput per device at the SLOs, the
points that meet them first (dse.results.summary)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from dse.results.summary import best, sweep_summary


def _grid(ttft_slo: float) -> xr.Dataset:
    """Three deployments: A serves 8 req/s on 4 devices, half its requests within the
    SLOs (goodput 4: 1 per device); B 4 req/s on 4 devices, all within (1 per device,
    0.99 of the requests at least); C 6 req/s on 8 devices, all within (0.75)."""
    x = ["A", "B", "C"]
    served = np.array([8.0, 4.0, 6.0])
    good = np.array([4.4, 4.0, 6.0])
    devices = np.array([4.0, 4.0, 8.0])
    data = dict(valid=("deployment", [True] * 3), reason=("deployment", np.zeros(3, np.uint16)),
                request_throughput_req_s=("deployment", served),
                goodput_req_s=("deployment", good), n_devices=("deployment", devices),
                throughput_per_device_tok_s=("deployment", served * 300 / devices))
    return xr.Dataset(data, coords=dict(deployment=x, ttft_slo_s=ttft_slo, tpot_slo_s=0.05),
                      attrs=dict(mode="inference", study_name="slo"))


def test_points_that_meet_the_slos_rank_first_by_goodput_per_device():
    """A has the most goodput per device (1.1) but 45% of its requests miss: it ranks
    after B (1.0, all within) and C (0.75, all within); the table says the share."""
    rows = best(_grid(2.0))
    assert [r["deployment"] for r in rows] == ["B", "C", "A"]
    assert [round(r["slo_met"], 3) for r in rows] == [1.0, 1.0, 0.55]
    text = sweep_summary(_grid(2.0), 1.0)
    assert "goodput per device at the SLOs" in text and "55.0%" in text


def test_without_slos_the_summary_ranks_by_throughput_per_device():
    grid = _grid(0.0).assign_coords(tpot_slo_s=0.0)
    assert [r["deployment"] for r in best(grid)] == ["A", "B", "C"]
    assert "by throughput_per_device_tok_s" in sweep_summary(grid, 1.0)


def test_the_report_of_a_serving_sweep_with_slos_picks_its_best_by_goodput_per_device():
    """The report's best point per facet follows the same goodput per device at the SLOs
    (dse.report.result: a sweep with SLOs)."""
    from dse.report.result import open_result

    grid = _grid(2.0)
    grid.attrs["study"] = "[study]\nname = 'slo'"
    res = open_result(grid)
    assert res.primary_metric == "goodput_per_device_req_s"
    np.testing.assert_allclose(res.ds["goodput_per_device_req_s"].values, [1.1, 1.0, 0.75])
    assert res.ds["goodput_per_device_req_s"].attrs["units"] == "requests/s"
    plain = _grid(0.0).assign_coords(tpot_slo_s=0.0)
    plain.attrs["study"] = "[study]\nname = 'slo'"
    assert open_result(plain).primary_metric == "throughput_tok_s"  # PRIMARY_METRIC


def test_points_alike_in_every_output_are_one_row_with_the_axis_shown_as_any():
    """A decode_tp axis an aggregated deployment ignores: its two values give identical
    outputs, so each deployment is one row with decode_tp 'any'."""
    grid = xr.concat([_grid(0.0), _grid(0.0)], dim=xr.DataArray([1, 8], dims="decode_tp",
                                                                  name="decode_tp"))
    grid = grid.assign_coords(tpot_slo_s=0.0)
    grid["valid"] = grid["valid"].astype(bool)
    rows = best(grid)
    assert [r["deployment"] for r in rows] == ["A", "B", "C"]
    assert all(r["decode_tp"] == "any" for r in rows)

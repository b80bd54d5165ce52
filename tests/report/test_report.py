"""dse report / dse plot: every example study's report, figures that are real images
referenced by the page, reductions stated in captions, Pareto fronts against brute
force, bad input, and the page rendered by a real browser."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
import xarray as xr

import dse
from dse.cli import main
from dse.report import figure
from dse.report.facets import best_over
from dse.report.result import open_result

from ..conftest import STUDIES
from ..helpers import SMALL, brute_force_front

# Reverse order: test_studies sweeps from the front on the other worker; each study is
# swept once (see conftest.Shared) and the two workers meet in the middle.
ALL = sorted((p.name for p in STUDIES.glob("*.toml")), reverse=True)


class Reports:
    """Each study's report, made once per module from the session's shared sweep."""

    def __init__(self, swept, root: Path):
        self.swept, self.root, self.done = swept, root, {}

    def __call__(self, name: str) -> Path:
        if name not in self.done:
            code, result = self.swept(name)
            assert code == 0
            self.done[name] = dse.report(result, self.root / name.removesuffix(".toml"))
        return self.done[name]


@pytest.fixture(scope="module")
def reports(swept, tmp_path_factory):
    return Reports(swept, tmp_path_factory.mktemp("reports"))


def images(html_path: Path) -> dict[str, str]:
    """src -> alt (the figure kind) of every <img> in a report page."""
    text = html_path.read_text()
    return dict(re.findall(r'<img src="([^"]+)" alt="([^"]+)"', text))


def assert_real_image(path: Path) -> None:
    pixels = mpimg.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 150 and pixels.shape[1] > 300, path
    rgb = pixels[..., :3]
    assert rgb.std() > 0.05, f"{path} is (nearly) a flat colour"
    assert np.mean(rgb.min(axis=-1) < 0.9) > 0.02, f"{path} is (nearly) blank"


@pytest.mark.parametrize("name", ALL)
def test_report_of_every_example_study(name, reports):
    page = reports(name)
    figures = images(page)
    assert figures, "a report of an example study draws at least one figure"
    on_disk = {p.name for p in page.parent.iterdir() if p.suffix == ".png"}
    assert on_disk == set(figures), "every figure file is referenced, every reference exists"
    for src in figures:
        assert_real_image(page.parent / src)
    html = page.read_text()
    assert html.startswith("<!doctype html>") and "Best configuration per" in html
    assert "<h2>Study</h2>" in html
    # inference and training sweeps say each best point's regime (issue 37 item 3)
    text = (STUDIES / name).read_text()
    if "[output.reduce]" not in text and 'mode = "pipeline"' not in text and (
            "\nvariables" not in text):
        assert "<th>bound</th>" in html and re.search(
            r"<td>((prefill|decode): )?(compute|memory|communication|host)</td>", html), name


# What the Datasets hold decides the figures: per-component variables give a roofline
# and latency breakdown; without them those figures are omitted, never drawn empty.
EXPECTED = {
    "breakdown.toml": ({"roofline", "latency", "memory"}, {"heatmap"}),
    "llama-serving.toml": ({"heatmap", "pareto", "memory"}, {"roofline", "latency"}),
    "stream-reduce.toml": ({"heatmap", "pareto", "memory"}, {"roofline", "latency"}),
    "training-zero.toml": ({"heatmap", "memory", "latency"}, {"pareto", "roofline"}),
    "pipeline-apple-lan.toml": ({"heatmap", "pareto", "latency"}, {"roofline", "memory"}),
    "capacity.toml": ({"heatmap"}, {"pareto", "roofline", "latency"}),
    "serving-load.toml": ({"load", "frontier", "heatmap"}, {"roofline", "latency"}),
    "agentic-sessions.toml": ({"tiers", "heatmap"}, {"roofline", "latency", "load"}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_figures_follow_the_dataset(name, reports):
    drawn = set(images(reports(name)).values())
    present, absent = EXPECTED[name]
    assert present <= drawn and not (absent & drawn), drawn


def test_heatmap_reduction_caption_and_infeasible_reasons(swept):
    _, path = swept("serving-cost.toml")
    ds = xr.open_dataset(path)
    res = open_result(path)
    fig, caption = figure(res, "heatmap", x="batch", y="tp")
    fig.clf()
    assert "over tp x batch, one panel per model x hardware" in caption
    assert "best (highest) over weight_bits subject to feasibility" in caption
    keep = ["model", "hardware", "tp", "batch"]
    best, labels, reduced, seen = best_over(res, "throughput_tok_s", keep)
    assert reduced == ["weight_bits"]
    # independently: xarray's max over the other axes of the valid points
    expect = (ds["throughput_tok_s"].where(ds["valid"])
              .max(reduced).transpose(*keep).values)
    np.testing.assert_allclose(best, expect, rtol=1e-6)
    # a cell without a valid point is labelled with the flags all its points share
    bits = dict(zip(ds["reason"].attrs["flag_meanings"].split(), ds["reason"].attrs["flag_masks"]))
    empty = np.argwhere(np.isnan(expect))
    assert len(empty) > 0 and seen == ["oom"]
    for index in empty:
        cell = ds["reason"].isel(dict(zip(keep, index)))
        assert bool((cell & bits["oom"]).all()) and labels[tuple(index)] == "OOM"
    assert all(labels[tuple(i)] == "" for i in np.argwhere(~np.isnan(expect)))
    assert "no feasible point, labelled by reason: OOM = oom" in caption


def test_pareto_figure_fronts_match_brute_force(swept):
    _, path = swept("llama-serving.toml")
    ds = xr.open_dataset(path)
    res = open_result(path)
    fig, caption = figure(res, "pareto")
    one = ds.sel(model="llama-2-70b", hardware="h100-sxm")
    ok = one["valid"].broadcast_like(one["tpot_s"]).values.ravel()
    x, y = one["tpot_s"].values.ravel()[ok], one["throughput_tok_s"].values.ravel()[ok]
    front = brute_force_front(x, y)
    panel = fig.axes[1]  # llama-2-70b; lines: one per hardware, h100-sxm second
    line = [ln for ln in panel.get_lines() if ln.get_label() == "h100-sxm"][0]
    drawn = np.sort(line.get_xdata())  # in ms
    np.testing.assert_allclose(drawn, np.sort(x[front]) * 1e3, rtol=1e-6)
    fig.clf()
    assert "non-dominated" in caption and "per hardware" in caption


def test_plot_png_and_svg(swept, tmp_path):
    _, path = swept("breakdown.toml")
    png, svg = tmp_path / "roof.png", tmp_path / "lat.svg"
    assert main(["plot", str(path), "roofline", "-o", str(png)]) == 0
    assert main(["plot", str(path), "latency", "-o", str(svg)]) == 0
    assert_real_image(png)
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and svg.stat().st_size > 20_000
    assert len(root.findall(".//{http://www.w3.org/2000/svg}path")) > 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lat.svg", "roof.png"]


@pytest.fixture(scope="module")
def searches(tmp_path_factory):
    """dse search on test_search's small space: one objective, then two (the same
    evaluator, compiled once), trials kept in SQLite beside the results."""
    root = tmp_path_factory.mktemp("search")
    objectives = {"one": 'objective = "throughput_tok_s"',
                  "two": 'objective = ["throughput_tok_s", "tpot_s"]\n'
                         'direction = ["maximize", "minimize"]'}
    out = {}
    for name, objective in objectives.items():
        text = SMALL.format(constraints='["fits", "tpot_s <= 0.02"]', n=16,
                            storage=f"sqlite:///{root / name}.db")
        study = root / f"{name}.toml"
        study.write_text(text.replace('objective = "throughput_tok_s"',
                                      f"{objective}\nexhaustive = false"))
        out[name] = root / f"{name}-search.nc"
        assert main(["search", str(study), "-o", str(out[name])]) == 0
    return out


def test_search_report_has_history_and_best_trials(searches, tmp_path):
    for name, result in searches.items():
        page = dse.report(result, tmp_path / name)
        figures = images(page)
        assert list(figures.values()) == ["history"]
        for src in figures:
            assert_real_image(page.parent / src)
        html = page.read_text()
        trials = xr.open_dataset(result)
        feasible = trials["throughput_tok_s"].values[trials["feasible"].values.astype(bool)]
        row = re.search(r"<h2>Best feasible trials by throughput_tok_s</h2><table><tr>.*?</tr>"
                        r"<tr>(.*?)</tr>", html).group(1)
        assert f"<td>{feasible.max():,.0f}</td>" in row
        assert ("Optimization history" if name == "one" else "Pareto front of the search") in html


def test_sensitivity_report_has_a_tornado_per_workload(genz_sensitivity, tmp_path):
    code, result = genz_sensitivity
    assert code == 0
    page = dse.report(result, tmp_path / "genz")
    figures = images(page)
    assert sorted(figures) == [f"tornado-{i}.png" for i in range(4)]
    for src in figures:
        assert_real_image(page.parent / src)
    html = page.read_text()
    ds = xr.open_dataset(result)
    e = ds["tpot_s"].sel(hw_param="hbm_bw", usecase="chat", batch=1).item()
    assert f"{e:+.3f}" in html  # the elasticity table


def _bad(tmp_path, swept):
    _, sweep_nc = swept("llama-serving.toml")
    foreign = tmp_path / "foreign.nc"
    xr.Dataset({"a": ("x", [1.0, 2.0])}).to_netcdf(foreign)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    return {
        "missing": (["report", str(tmp_path / "nope.nc")], "nope.nc", "no such file"),
        "foreign": (["report", str(foreign)], "foreign.nc", "not a dse result"),
        "extension": (["report", str(tmp_path / "notes" / "keep.txt")], "keep.txt",
                      "unsupported extension"),
        "kind": (["plot", str(sweep_nc), "violin"], "KIND", "unknown figure kind"),
        "axis": (["plot", str(sweep_nc), "heatmap", "--x", "seq"], "--x", "no axis 'seq'"),
        # issue 36 row 5: the same axis twice was a ValueError traceback
        "same axis": (["plot", str(sweep_nc), "heatmap", "--x", "tp", "--y", "tp", "-o",
                       str(tmp_path / "out" / "h.png")], "--y", "axis 'tp' is already --x"),
        "metric": (["plot", str(sweep_nc), "pareto", "--metric", "speed"], "--metric",
                   "no variable"),
        "figure extension": (["plot", str(sweep_nc), "heatmap", "-o",
                              str(tmp_path / "out" / "h.jpg")], "-o", "unsupported extension"),
        "not applicable": (["plot", str(sweep_nc), "roofline", "-o",
                            str(tmp_path / "out" / "r.png")], "roofline", "does not apply"),
        "option": (["plot", str(sweep_nc), "memory", "--workload", "1", "-o",
                    str(tmp_path / "out" / "m.png")], "--workload", "not an option"),
        "out dir": (["report", str(sweep_nc), "-o", str(tmp_path / "notes")], "-o",
                    "not a dse report directory"),
    }


@pytest.mark.parametrize("case", ["missing", "foreign", "extension", "kind", "axis", "same axis",
                                  "metric",
                                  "figure extension", "not applicable", "option", "out dir"])
def test_bad_input_exits_2_with_one_line(case, tmp_path, swept, capsys):
    argv, key, problem = _bad(tmp_path, swept)[case]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dse: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert key in err and problem in err
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before, "bad input writes nothing"


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _screenshot(browser: str, page: Path, png: Path, profile: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", f"--screenshot={png}",
         "--window-size=1280,2000", "--hide-scrollbars", page.resolve().as_uri()],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_report_renders_in_a_browser(reports, tmp_path):
    browser = _chromium()
    if browser is None:
        print("Chromium not installed: no chromium, chromium-browser or google-chrome on PATH")
        pytest.skip("Chromium not installed: no chromium, chromium-browser or google-chrome "
                    "on PATH (.ci/run installs it)")
    page = reports("breakdown.toml")
    # the same page with its figures removed: what the browser draws without images
    bare = page.with_name("bare.html")
    bare.write_text(re.sub(r"<img [^>]*>", "", page.read_text()))
    shots = {p: tmp_path / f"{p.stem}.png" for p in (page, bare)}
    procs = [_screenshot(browser, p, png, tmp_path / f"profile-{p.stem}")
             for p, png in shots.items()]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    bare.unlink()
    full, empty = (mpimg.imread(shots[p])[..., :3] for p in (page, bare))
    assert full.shape[:2] == (2000, 1280)
    assert_real_image(shots[page])
    # the figures loaded: large regions differ from the page without them
    differs = np.abs(full - empty).max(axis=-1) > 0.1
    assert differs.mean() > 0.05, f"only {differs.mean():.1%} of the page comes from figures"


def test_load_figures_follow_the_dataset(swept):
    """The hockey stick draws the Dataset's own series: each mean line is a configuration's
    TTFT over the request rates it carries, its band runs from P50 to P99, and it stops
    where the next rate is past the deployment's capacity (reason overloaded)."""
    from dse.report.load import frontier, hockey
    from dse.schema.outputs import REASON_BITS

    _, path = swept("serving-load.toml")
    res, ds = open_result(path), xr.open_dataset(path)
    fig, caption = hockey(res)
    model = str(ds.model.values[0])
    ax = fig.axes[0]  # TTFT of the first model
    assert ax.get_title() == model and "overloaded" in caption
    factor = {"(s)": 1.0, "(ms)": 1e-3}[ax.get_ylabel().split()[-1]]
    sub = ds.sel(model=model)
    series = [sub.isel(hardware=h, tp=t) for h in range(ds.sizes["hardware"])
              for t in range(ds.sizes["tp"])]
    means = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert means
    for line in means:
        x, y = line.get_xdata(), line.get_ydata() * factor
        match = [s for s in series if np.array_equal(s.request_rate.values[s.valid.values], x)
                 and np.allclose(s.ttft_s.values[s.valid.values], y, rtol=1e-6)]
        assert match, line.get_label()
        s = match[0]
        after = s.request_rate.values > x.max()
        assert np.all(s.reason.values[after] & REASON_BITS["overloaded"])
        assert np.all(s.ttft_p50_s.values[s.valid.values] <= s.ttft_p99_s.values[s.valid.values])
    plt_close(fig)
    fig, _ = frontier(res)
    plt_close(fig)


def plt_close(fig):
    import matplotlib.pyplot as plt

    plt.close(fig)

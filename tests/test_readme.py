"""The README's promises: it starts with the two set-up commands, its test command is the
one CI runs (and it says what else CI does), and it stays a README."""

import re

from .conftest import ROOT


def _commands() -> list[tuple[str, str]]:
    """(comment, command) of the README's first code block."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    lines = [line for line in block.splitlines() if line.strip()]
    return [(lines[i], lines[i + 1]) for i in range(0, len(lines), 2)]


def test_the_readme_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert text.index("```sh") < text.index("\n## ")  # before any section
    (run_comment, run), (test_comment, test) = _commands()
    assert "dse sweep studies/" in run and "pip install -e ." in run
    assert "pytest" in test and "pip install -e \".[test]\"" in test


def test_the_test_command_is_what_ci_runs_and_says_what_ci_adds():
    """.ci/run runs the README's test command verbatim; it also installs Chromium for
    the browser test, which the README's comment must say (it claimed 'exactly')."""
    ci = (ROOT / ".ci" / "run").read_text()
    _, (comment, test) = _commands()
    assert test in ci
    if "chromium" in ci:
        assert "Chromium" in comment and "exactly" not in comment


def test_the_readme_is_a_readme():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 20_000
    assert not re.search(r"20\d\d-\d\d-\d\d", text)  # no dated diary
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link


def test_the_readme_sample_output_is_what_the_example_study_prints(monkeypatch):
    """The README's sample summary (everything but the timing line) is what dse prints
    for the example study today: the calibration named, per-device ranking, and the same
    leading rows, so its figures cannot go stale."""
    import dse
    from dse.results.summary import sweep_summary

    text = (ROOT / "README.md").read_text()
    sample = re.search(r"```\n(llama-serving: .*?)```", text, re.S).group(1).splitlines()
    monkeypatch.chdir(ROOT)
    ds = dse.sweep(str(ROOT / "studies" / "llama-serving.toml"), progress=False)
    printed = sweep_summary(ds, 1.0).splitlines()
    shown = [line for line in sample[1:] if line.strip() != "..."]
    assert shown == printed[1:len(shown) + 1]
    assert shown[0].startswith("numbers: calibrated (calibrations/generic.toml")
    assert "by throughput_per_device_tok_s" in "\n".join(shown)

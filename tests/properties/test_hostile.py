"""Property (issue 36, the hostile corpus): any value of any study key, generated from the
knob registry (dse.schema.knobs: every key of every mode, so a new key is fuzzed without
a new test), is either a study or bad input with one line naming the file and the key;
never another exception. Checked before any work: parsing runs no evaluator."""

from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from dse.errors import InputError
from dse.schema.knobs import MODES, POINT_TYPES, fields
from dse.study.study import parse_study_dict

FILE = "fuzz.toml"
BASE = {"inference": {"model": "llama-2-7b", "hardware": "h100-sxm"},
        "training": {"model": "llama-2-7b", "hardware": "h100-sxm"},
        "pipeline": {"model": "llama-3.2-1b"}}
PIPELINE = {"objective": "tpot", "stages": [{"hardware": "m3-pro"}, {"hardware": "m2"}],
            "link": {"bandwidth": "66 Mbit/s", "latency_ms": 0.5}}
# names a key of some kind accepts, so that valid-looking values are tried too
WORDS = ["llama-2-7b", "h100-sxm", "vllm", "full", "1f1b", "disagg", "adamw", "chat", "",
         "nowhere/config.json", "h900", "NaN", "1e300", "-1", "true"]

scalars = st.one_of(
    st.integers(-2 ** 70, 2 ** 70), st.sampled_from([0, 1, -1, 2 ** 53, 2 ** 53 - 1, 2 ** 64]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e300, -1e300, 1e-320]),
    st.booleans(), st.sampled_from(WORDS), st.text(max_size=6))
values = st.one_of(
    scalars, st.lists(scalars, max_size=4),
    st.fixed_dictionaries({}, optional={"start": scalars, "stop": scalars, "step": scalars,
                                        "num": scalars, "factor": scalars, "log": scalars}),
    st.dictionaries(st.text(max_size=4), scalars, max_size=2))


@st.composite
def studies(draw):
    mode = draw(st.sampled_from(MODES))
    keys = sorted(fields(POINT_TYPES[mode]))
    axes = dict(BASE[mode])
    for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True)):
        axes[key] = draw(values)
    if draw(st.booleans()):
        axes[draw(st.text(min_size=1, max_size=8))] = draw(values)  # a key no mode has
    raw = {"study": {"name": "fuzz", "mode": mode}, "axes": axes}
    if mode == "pipeline":
        raw["pipeline"] = dict(PIPELINE)
    return raw


def _has_nan(value) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, list):
        return any(map(_has_nan, value))
    if isinstance(value, dict):
        return any(map(_has_nan, value.values()))
    return False


@settings(max_examples=400, deadline=None)
@given(raw=studies())
def test_any_value_of_any_key_is_a_study_or_one_line_of_bad_input(raw):
    try:
        study = parse_study_dict(raw, "", FILE)
    except InputError as err:
        text = str(err)
        assert "\n" not in text and text.startswith(FILE), text
        return
    # accepted: every value of every axis is a finite number or a name
    for dim in study.dims:
        for v in dim.values:
            assert not _has_nan(v) and not (isinstance(v, float) and math.isinf(v)), (
                dim.name, v)

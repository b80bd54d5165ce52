"""Speculative decoding under a load (spec_tokens, spec_acceptance; dse.formulas.engine
and dse.formulas.serving): a decode step drafts k tokens with one draft layer of the
model and verifies k + 1 positions per sequence; TPOT is the step over the tokens it
yields. Numbers by hand from the Llama-3.1-8B card (models/llama-3.1-8b.toml) under the
plain roofline, where one client's decode step streams the weights."""

from __future__ import annotations

import numpy as np
import pytest

from dse.run.sweep import sweep
from dse.study import parse_study

# Llama-3.1-8B, config.json: d 4096, 32 layers, 32 heads of 128 (8 kv heads), MLP 14336,
# vocabulary 128256. A layer: q, o 4096 x 4096, k, v 4096 x 1024, gate/up/down 3 x 4096 x
# 14336, two RMSNorms: 41,943,040 + 176,160,768 + 8,192 parameters.
LAYER = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096
HEAD = 128256 * 4096
STEP = 32 * LAYER + HEAD  # what a one-sequence decode step reads (the embedding: one row)

STUDY = """
[study]
name = "mtp"
dtype = "float64"
calibration = "none"
[axes]
model = "llama-3.1-8b"
hardware = "h100-sxm"
framework = "vllm"
input_len = 100
output_len = 200
concurrency = 1
spec_tokens = [0, 1, 3]
spec_acceptance = [0, 1.5]
acceptance_rate = 0.7
[output]
variables = "all"
"""


@pytest.fixture(scope="module")
def ds():
    return sweep(parse_study(STUDY, "mtp.toml"), progress=False)


def test_one_client_streams_the_weights_once_per_step_and_the_draft_layer_k_times(ds):
    """At one client every pass is bound by the weights it reads: a plain step reads the
    model once (STEP); a speculative one reads it once to verify k + 1 positions (the
    same bytes) and a layer and the LM head k times to draft, and yields E tokens. So
    TPOT(k) x E / TPOT(0) = 1 + k (LAYER + HEAD) / STEP: 1.0991 for k = 1, 1.2972 for
    k = 3. What this leaves out (the KV reads of 100-300 tokens, the verify's extra rows
    and the draft layer's attention) is under 1%."""
    plain = ds.tpot_s.sel(spec_tokens=0, spec_acceptance=1.5).item()
    for k in (1, 3):
        spec = ds.tpot_s.sel(spec_tokens=k, spec_acceptance=1.5).item()
        assert spec * 1.5 / plain == pytest.approx(1 + k * (LAYER + HEAD) / STEP, rel=0.01)


def test_the_tokens_per_step_follow_the_acceptance_rate_where_not_given(ds):
    """spec_acceptance 0: E = (1 - a^(k+1)) / (1 - a) at a = 0.7 (Leviathan et al. 2023,
    Eq. 1): k = 1, E = 1.7; k = 3, E = (1 - 0.2401) / 0.3 = 2.533. The step is the same
    as at E = 1.5, so TPOT scales by 1.5 / E."""
    for k, e in ((1, 1.7), (3, (1 - 0.7 ** 4) / 0.3)):
        given = ds.tpot_s.sel(spec_tokens=k, spec_acceptance=1.5).item()
        derived = ds.tpot_s.sel(spec_tokens=k, spec_acceptance=0.0).item()
        assert derived == pytest.approx(given * 1.5 / e, rel=1e-3)


def test_no_drafts_is_the_plain_engine(ds):
    """spec_tokens = 0 ignores spec_acceptance, and a study without the keys gives the
    same numbers."""
    plain = sweep(parse_study(STUDY.replace("spec_tokens = [0, 1, 3]\n", "").replace(
        "spec_acceptance = [0, 1.5]\n", ""), "plain.toml"), progress=False)
    for name in ("tpot_s", "ttft_s", "e2e_s", "memory_bytes"):
        a = ds[name].sel(spec_tokens=0).values
        assert np.allclose(a, plain[name].item(), rtol=1e-6, atol=0), name


def test_the_draft_layer_takes_memory(ds):
    """The draft layer holds one layer's share of the weights (1 / 32 of them) more, and
    its cache a layer's (0.25% of that here)."""
    plain = ds.weight_bytes.item()
    drafted = ds.memory_bytes.sel(spec_tokens=1, spec_acceptance=1.5).item()
    base = ds.memory_bytes.sel(spec_tokens=0, spec_acceptance=1.5).item()
    assert drafted - base == pytest.approx(plain / 32, rel=0.02)

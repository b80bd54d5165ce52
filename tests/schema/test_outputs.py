"""The output registry (schema/outputs.py): old output names still work for a release."""

from __future__ import annotations

import pytest


def test_the_old_throughput_names_still_work_for_a_release():
    """Training's tokens_per_s is throughput_tok_s now (the inference name); a study that
    asks for the old name gets the same values, with a FutureWarning naming the new one."""
    from dse.study import parse_study
    from dse.run.sweep import sweep

    text = ('[study]\nname = "t"\nmode = "training"\n[axes]\nmodel = "llama-2-7b"\n'
            'hardware = "h100-sxm"\ntp = [1, 2]\nglobal_batch = 64\n[output]\n'
            'variables = ["tokens_per_s", "tokens_per_s_per_device", "throughput_tok_s", '
            '"throughput_per_device_tok_s"]\n')
    with pytest.warns(FutureWarning) as caught:
        study = parse_study(text, "<t>")
    assert [str(w.message).split(": ", 2)[2] for w in caught] == [
        "output 'tokens_per_s' is called 'throughput_tok_s' now; the old name works until "
        "the next release",
        "output 'tokens_per_s_per_device' is called 'throughput_per_device_tok_s' now; the "
        "old name works until the next release"]
    ds = sweep(study, progress=False)
    assert (ds["tokens_per_s"] == ds["throughput_tok_s"]).all()
    assert (ds["tokens_per_s_per_device"] == ds["throughput_per_device_tok_s"]).all()
    assert "tokens_per_s" not in parse_study(text.split("[output]")[0], "<t>").variables

"""The catalogue listings run without JAX, and the spec classes still become pytrees
once JAX is imported (dse.pytrees). Each case runs in a fresh interpreter: this test
process has JAX loaded already."""

import json
import subprocess
import sys
import textwrap


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_models_listing_counts_parameters_without_jax():
    out = _python("""
        import contextlib, io, json, sys
        from dse.cli import main
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main(["models", "--json"]) == 0
            assert main(["hardware"]) == 0
        assert "jax" not in sys.modules, "the listings imported JAX"
        print(json.dumps({k: v["n_params"] for k, v in
                          json.loads(buffer.getvalue().split("\\nname")[0]).items()}))
    """)
    n = json.loads(out)
    # Exact counts of the Hugging Face checkpoints (sum of the safetensors shapes):
    # Llama-2-70B 68,976,648,192 (hand count in dse.formulas.params), Llama-3-8B
    # 8,030,261,248. Counted in float64 NumPy: exact, where float32 rounded to 2^13.
    assert n["llama-2-70b"] == 68_976_648_192
    assert n["llama-3-8b"] == 8_030_261_248


def test_spec_classes_are_pytrees_when_jax_comes_later():
    out = _python("""
        import sys
        from dse.catalogue import load_hardware, load_model
        assert "jax" not in sys.modules
        import jax
        # dse.schema loads the formulas, and so JAX, after defining its point classes
        from dse.schema.knobs import InferencePoint
        spec = load_hardware("h100-sxm").spec()
        leaves = jax.tree_util.tree_leaves(spec)
        model = load_model("llama-3-8b").spec()
        doubled = jax.jit(lambda m: m.d_model * 2.0)(model)
        print(len(leaves), float(leaves[0]), float(doubled),
              len(jax.tree_util.tree_leaves(InferencePoint())) > 0)
    """).split()
    assert int(out[0]) == 27  # the HardwareSpec fields but gemm_surface (None: no leaf)
    assert float(out[1]) == 80 * 2**30  # H100 SXM: 80 GiB of HBM3
    assert float(out[2]) == 2 * 4096.0
    assert out[3] == "True"

"""XLA:CPU programs compiled by dse run without YNNPACK fusions: jaxlib 0.10.2 and 0.11.0
crash (SIGSEGV) or hang executing some rank-7/8 elementwise-reduce fusions through
YNNPACK's slinky pipelines on x86-64 hosts (jax-ml/jax#39257, #40412), and the serving
load model's closed loop met it on an AVX2-only AMD EPYC host. The two programs below are
the upstream reproducers; run through :func:`dse.core.fusion.jit` in a child process (a
crash there fails this test instead of killing the test worker), they must give numpy's
values. On hosts or versions without the bug they pass either way."""

import subprocess
import sys

import numpy as np

PROGRAMS = """
import jax, jax.numpy as jnp, numpy as np
from dse.core.fusion import jit
shape = (3, 1, 2, 2, 8, 8, 8)  # jax-ml/jax#40412: f32 multiply-reduce, rank 7, a unit dim
u = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
v = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
got = np.asarray(jit(lambda a, b: jnp.sum(a * b, axis=3))(u, v))
np.save(sys.argv[1] + "/a.npy", got)
obs = np.full((10, 4, 6), 0.5, np.float32)  # jax-ml/jax#39257: rank-3 into rank-8, reduce, log
big = np.ones((10, 4, 6, 9, 9, 9, 9, 9), np.float32)
f = lambda o, a: jnp.log(jnp.maximum(jnp.sum(o[..., None, None, None, None, None] * a, axis=2),
                                     2.220446049250313e-16))
np.save(sys.argv[1] + "/b.npy", np.asarray(jit(f)(obs, big)))
"""


def test_rank_7_and_8_fusions_run_and_give_numpys_values(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import sys\n" + PROGRAMS, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    shape = (3, 1, 2, 2, 8, 8, 8)
    u = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    v = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    expected = (u.astype(np.float64) * v).sum(axis=3)
    np.testing.assert_allclose(np.load(tmp_path / "a.npy"), expected, rtol=1e-5, atol=1e-5)
    b = np.load(tmp_path / "b.npy")
    assert b.shape == (10, 4, 9, 9, 9, 9, 9)
    np.testing.assert_allclose(b, np.log(6 * 0.5), rtol=1e-6)  # sum of six 0.5 x 1

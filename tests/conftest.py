"""Test settings: strict JAX promotion rules, as equinox/diffrax test suites do.

Strict dtype promotion makes an accidental float64/int mix inside the evaluator an
error instead of a silent upcast; rank promotion "raise" makes every broadcast in the
formulas explicit.
"""

import ctypes
import fcntl
import gc
import os
from pathlib import Path

import dse
import jax
import pytest

dse.configure_xla()  # before anything starts JAX: host devices

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "studies"


@pytest.fixture(autouse=True, scope="session")
def _compilation_cache(tmp_path_factory):
    # The CLI keeps compiled evaluators on disk; in tests, away from the user's cache,
    # one cache for the whole run: both xdist workers and every CLI subprocess reuse
    # what any of them compiled (the same study compiled twice gives the same program).
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "jax-cache"
    path.mkdir(exist_ok=True)
    os.environ["DSE_CACHE_DIR"] = str(path)
    from dse.run.xla import enable_compilation_cache

    enable_compilation_cache(path)


class Shared:
    """Results made once per test run and shared by the modules that need them, across
    xdist workers: the first to ask makes one under a file lock, the others wait for it
    and reuse it (the xdist docs' recipe for session fixtures that run once)."""

    def __init__(self, tmp_path_factory):
        base = tmp_path_factory.getbasetemp()
        self.root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
        self.root.mkdir(exist_ok=True)

    def get(self, key: str, argv: list[str]) -> tuple[int, Path]:
        """(exit code, output path) of ``dse ARGV -o ROOT/KEY``, run once."""
        out, code = self.root / key, self.root / f"{key}.exit-code"
        with open(self.root / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not code.exists():
                from dse.cli import main

                code.write_text(str(main(argv + ["-o", str(out), "-q"])))
        return int(code.read_text()), out


@pytest.fixture(scope="session")
def swept(tmp_path_factory):
    """name -> (exit code, path) of ``dse sweep studies/NAME -o PATH -q``, once per run
    (shared by the study and report tests)."""
    shared = Shared(tmp_path_factory)
    return lambda name: shared.get(name.removesuffix(".toml") + ".nc",
                                   ["sweep", str(STUDIES / name)])


@pytest.fixture(scope="session")
def genz_sensitivity(tmp_path_factory) -> tuple[int, Path]:
    """``dse sensitivity`` of studies/sensitivity-genz.toml, once per run: (exit code,
    Dataset path; the Markdown/HTML report and tornado charts are beside it)."""
    return Shared(tmp_path_factory).get("genz.nc", ["sensitivity",
                                                    str(STUDIES / "sensitivity-genz.toml")])


@pytest.fixture(scope="session")
def contract_grid():
    """The contract study (studies/llama-serving.toml) and its in-memory sweep, once per
    worker (core/test_grid.py, run/test_chunks.py, properties/test_grid.py)."""
    from dse.run.sweep import sweep
    from dse.study import load_study

    study = load_study(STUDIES / "llama-serving.toml")
    return study, sweep(study, progress=False)


@pytest.fixture
def contract_study():
    from dse.study import load_study

    return load_study(STUDIES / "llama-serving.toml")


@pytest.fixture(autouse=True, scope="module")
def _release_programs():
    # Each module's compiled programs are dropped when it ends (dse.core.programs.release),
    # and the heap XLA's compiler left behind goes back to the system (glibc keeps freed
    # arenas otherwise): a worker that kept everything grew to 9-10 GB over a run, and a
    # CI run died of it; what a later module needs again comes from the run's cache on disk.
    yield
    from dse.core import programs

    programs.release()
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _glibc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # not glibc (macOS, musl): nothing to trim
        return None


_LIBC = _glibc()

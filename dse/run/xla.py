"""What dse asks of XLA, set when a run starts (or by an explicit :func:`configure`), not
when dse is imported. XLA reads ``XLA_FLAGS`` once, when its backend starts, and the
flags apply to every backend in the process (the host's CPU and any GPU or TPU), so dse
sets only one, harmless on every backend:

- one host device per usable core (:mod:`dse.run.devices`), for sweeps on the CPU.

What is the CPU's alone (the optimization barriers kept through fusion, no YNNPACK
fusions) is an option of each program compiled for the CPU (:func:`dse.core.fusion.jit`),
never a flag: XLA:GPU has no instruction for a barrier that survives to its emitter.

Every runner in :mod:`dse.run` calls :func:`configure` before it evaluates, and the CLI
at start. If JAX's backend has already started (something ran in JAX first), nothing is
changed: a sweep then uses one host device (same values). A flag ``XLA_FLAGS`` already
sets is left as set.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path

from . import devices

CPU_ONLY_PREFIXES = ("--xla_disable_hlo_passes", "--xla_cpu_")
"""Flags dse never sets in ``XLA_FLAGS``: they bind every backend, and the passes and
switches they name are the CPU's (tests/run)."""


def backend_started() -> bool:
    """Whether XLA has started (and read ``XLA_FLAGS``) in this process."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge  # JAX's own probe; private, hence the fallback

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return True  # cannot tell: assume started, change nothing


def flags(current: str = "") -> list[str]:
    """``XLA_FLAGS`` as dse sets it from ``current``: the user's flags, and one host device
    per usable core unless they set a count."""
    flags = current.split()
    if not any(f.startswith(devices.FLAG) for f in flags):
        count = devices.requested_count()
        if count > 1:
            flags.append(f"{devices.FLAG}={count}")
    return flags


def configure() -> None:
    """Add dse's flags to ``XLA_FLAGS`` (this process and its children), if XLA has not
    started yet."""
    if backend_started():
        return
    joined = " ".join(flags(os.environ.get("XLA_FLAGS", "")))
    if os.environ.get("XLA_FLAGS") != joined:
        os.environ["XLA_FLAGS"] = joined


def enable_compilation_cache(path=None) -> None:
    """Keep compiled evaluators on disk so a repeated study skips XLA compilation.

    ``path`` defaults to ``$DSE_CACHE_DIR`` or ``~/.cache/dse/jax``. The CLI turns this
    on; library users opt in (it sets a process-wide JAX option).
    """
    import jax

    path = Path(path or os.environ.get("DSE_CACHE_DIR") or Path.home() / ".cache/dse/jax")
    try:  # a cache is optional: where it cannot be written, say so once and run without
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        print(f"dse: warning: compilation cache {str(path)!r} is not usable "
              f"({e.strerror or e}); running without it", file=sys.stderr)
        return
    jax.config.update("jax_compilation_cache_dir", str(path))
    _heal_on_damage()
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


DAMAGED = "Error reading persistent compilation cache entry"  # JAX's warning
UNWRITTEN = "Error writing persistent compilation cache entry"  # JAX's warning


def remove_damaged_entries(path) -> int:
    """Remove the entries of XLA's compilation cache in ``path`` that do not decompress
    (a run killed while JAX wrote one: JAX writes in place); returns how many. JAX reads
    such an entry, warns, recompiles and, finding the file there, never replaces it."""
    from jax._src import compilation_cache as cc  # its own format: compressed, then timed

    removed = 0
    for entry in Path(path).glob("*-cache"):
        try:
            cc.extract_executable_and_time(cc.decompress_executable(entry.read_bytes()))
        except Exception:
            entry.unlink(missing_ok=True)
            entry.with_name(entry.name[:-len("-cache")] + "-atime").unlink(missing_ok=True)
            removed += 1
    return removed


def _heal_on_damage() -> None:
    """On JAX's warning that it could not read a cache entry, remove the damaged entries
    (the next compile of that program writes it again) and say so in one line instead;
    its warning that it could not write one (a full disk) is not the user's concern."""
    previous = warnings.showwarning
    if getattr(previous, "_dse_heals", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if UNWRITTEN in str(message):
            # a full disk or a file-size limit: the program ran and its result stands; the
            # cache is an optional speed-up, and the run's own error (if its result cannot
            # be written either) is the one line the user needs
            return None
        if DAMAGED not in str(message):
            return previous(message, category, filename, lineno, file, line)
        import jax

        folder = jax.config.jax_compilation_cache_dir
        removed = remove_damaged_entries(folder) if folder else 0
        print(f"dse: warning: a damaged entry of the compilation cache {folder!r} was read; "
              f"{removed} removed, the program recompiled", file=sys.stderr)

    show._dse_heals = True
    warnings.showwarning = show

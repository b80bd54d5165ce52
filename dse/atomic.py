"""Files written atomically: a reader never sees a half-written file or store.

A result goes to a temporary name in the target's directory and is renamed into place
only when complete (``os.replace`` is atomic on POSIX); on any failure the temporary is
removed and an existing result is left untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path


def remove_path(path: Path) -> None:
    """Remove a file or a directory tree, if there is one."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def replace_path(source: Path, path: Path) -> None:
    """Move ``source`` to ``path``, replacing what is there (a directory: via a
    hidden aside name, so ``path`` is at every moment either the old or the new store)."""
    if path.exists() and path.is_dir():
        old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(path, old)
        os.replace(source, path)
        remove_path(old)
    else:
        os.replace(source, path)


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """A temporary name beside ``path`` to write to; renamed to ``path`` when the block
    completes, removed if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        if tmp.is_dir():
            replace_path(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        remove_path(tmp)

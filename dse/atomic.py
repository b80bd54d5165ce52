"""Files written atomically: a reader never sees a half-written file or store.

A result goes to a temporary name in the target's directory and is renamed into place
only when complete (``os.replace`` is atomic on POSIX); on any failure the temporary is
removed and an existing result is left untouched.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path

from . import checks
from .errors import InputError


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


_HOST = socket.gethostname().replace("-", "_") or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by another user
        return True
    return True


def remove_leftovers(path: Path) -> None:
    """Remove the temporaries a killed writer of ``path`` left beside it (``kill -9``: no
    ``finally`` ran): those named by this host and a process id no longer running. A
    live writer's, or another host's (a shared file system), are left alone."""
    for old in path.parent.glob(f".{glob.escape(path.name)}.tmp-*"):
        parts = old.name[len(path.name) + len(".tmp-") + 1:].split("-")
        if len(parts) == 2:  # an older dse's name, without the host: taken as this one's
            parts = [_HOST] + parts
        if len(parts) == 3 and parts[0] == _HOST and parts[1].isdigit() and not _alive(
                int(parts[1])):
            remove_path(old)


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """A temporary name beside ``path`` to write to; renamed to ``path`` when the block
    completes, removed if it raises. Temporaries of earlier writers of ``path`` that were
    killed are removed first (:func:`remove_leftovers`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path)
    tmp = path.with_name(f".{path.name}.tmp-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        if tmp.is_dir():
            replace_path(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        remove_path(tmp)


def check_writable(path, source, key: str | None = None, suffixes: Iterable[str] = (),
                   directory: bool = False) -> Path:
    """``path`` checked before any work: that it ends in one of ``suffixes`` (if given),
    that it is not a directory where a file goes (``directory``: not a file where a
    directory goes; a ``.zarr`` store is a directory), and that it can be created: its
    nearest existing ancestor is a directory where a file can be made (missing parents
    are made when the result is written). Otherwise an :class:`InputError` naming
    ``source`` (the study file, or a command-line flag such as ``-o``) and ``key``."""
    path = Path(path)

    def refuse(problem, allowed):
        return InputError(source, key, f"{path}: {problem}", allowed)

    suffixes = tuple(suffixes)
    if suffixes and path.suffix not in suffixes:
        raise refuse(f"unsupported extension {path.suffix or '(none)'!r}",
                     "a path ending in " + " or ".join(suffixes))
    is_store = directory or path.suffix == ".zarr"
    if size := checks.long_name(path):  # the file system's limit on one name
        raise refuse(f"a name of {size} bytes", f"names of at most {checks.NAME_MAX} bytes")
    if path.exists() and path.is_dir() != is_store:
        raise refuse("is a directory" if path.is_dir() else "is a file",
                     "a directory to write into" if is_store else "a file name")
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise refuse(f"{parent} is a file, not a directory", "a path under a directory")
    try:  # a file made and dropped there: the real test (root passes every access check)
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as err:
        raise refuse(f"cannot write in {parent} ({err.strerror or err})",
                     "a path in a writable directory") from None
    return path


def no_space(err: BaseException) -> bool:
    """Whether ``err`` is a full disk (ENOSPC, or HDF5's words for it) or the process's
    file-size limit (EFBIG: ``ulimit -f``), the two ways a result outgrows its room."""
    return (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EFBIG)) or (
        "No space left on device" in str(err) or "File too large" in str(err))

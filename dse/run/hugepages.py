"""Whether XLA's buffers get transparent huge pages in this process, and how to ask for them.

A sweep's results land in fresh memory, and the first write to each page faults it in
(the kernel zeroes it). numpy asks for 2 MiB transparent huge pages for its large arrays
(``madvise``), so its arrays fault once per 2 MiB. XLA:CPU takes its buffers from glibc's
``malloc``, which asks for them only when the process starts with the glibc tunable
``glibc.malloc.hugetlb=1`` (glibc >= 2.35) or the system gives every mapping huge pages
(transparent_hugepage ``always``); otherwise they fault every 4 KiB, 512 times as often.

It decides how an in-memory sweep is cut (:func:`dse.run.chunks.chunk_budget`). With
4 KiB pages, chunks whose buffers glibc recycles, each copied into numpy result arrays,
are faster; with huge pages, one evaluation of the whole grid (up to 2^24 points), whose
outputs are the results, saves the copy (``docs/performance.md`` has the figures).

glibc reads its tunables once, when the process starts: set ``GLIBC_TUNABLES`` in the
environment that starts Python (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1 jupyter lab``);
setting it from Python changes nothing for the running process.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

TUNABLE = "glibc.malloc.hugetlb"
SETTING = f"{TUNABLE}=1"
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str:
    """The system's transparent huge page mode: always, madvise, never ("" if unknown)."""
    try:
        text = THP_ENABLED.read_text()
    except OSError:
        return ""
    start, stop = text.find("["), text.find("]")
    return text[start + 1:stop] if 0 <= start < stop else ""


def _glibc_supports_tunable() -> bool:
    libc, version = platform.libc_ver()
    try:
        return libc == "glibc" and tuple(map(int, version.split(".")[:2])) >= (2, 35)
    except ValueError:
        return False


def _startup_tunables() -> str:
    """``GLIBC_TUNABLES`` as the process started with it (what glibc read)."""
    try:
        entries = Path("/proc/self/environ").read_bytes().split(b"\0")
    except OSError:
        return os.environ.get("GLIBC_TUNABLES", "")
    for entry in entries:
        if entry.startswith(b"GLIBC_TUNABLES="):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return ""


def tunable_set(tunables: str) -> bool:
    """Whether a ``GLIBC_TUNABLES`` value sets ``glibc.malloc.hugetlb=1``."""
    return any(item.strip() == SETTING for item in tunables.split(":"))


def for_malloc() -> bool:
    """Whether glibc's large allocations (XLA's buffers) get huge pages in this process."""
    mode = thp_mode()
    if mode == "always":
        return True
    return mode == "madvise" and _glibc_supports_tunable() and tunable_set(_startup_tunables())


def available() -> bool:
    """Whether a process started with :data:`SETTING` would get them (see :func:`for_malloc`)."""
    mode = thp_mode()
    return mode == "always" or (mode == "madvise" and _glibc_supports_tunable())


def environment(env: dict[str, str] | None = None, on: bool = True) -> dict[str, str]:
    """``env`` (default: this process's) with ``GLIBC_TUNABLES`` asking for huge pages
    (:data:`SETTING`), or with ``on=False`` for none, for starting a process."""
    env = dict(os.environ if env is None else env)
    items = [i for i in env.get("GLIBC_TUNABLES", "").split(":")
             if i and not i.startswith(TUNABLE + "=")]
    env["GLIBC_TUNABLES"] = ":".join([*items, f"{TUNABLE}={int(on)}"])
    return env

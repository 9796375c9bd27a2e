"""Disk mode: where a test's files live (``memory``: the memory-backed data directory; ``disk``: the configured disk
path) and the checks that keep a disk test safe.

A disk path is refused, naming the node and the path, when it is missing, not a writable directory, or
memory-backed (tmpfs/ramfs: a "disk" test there would measure memory). A disk test that would leave less than the
reserve free is refused with the figures (needed, free, reserve) before anything is written. Cold reads: a disk
set's files are flushed (fsync) and dropped from the page cache (posix_fadvise DONTNEED) whenever the set is
prepared, so a protocol that reads through the page cache (XRootD, GridFTP) starts each test from the device.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import memory

STORAGES = ("memory", "disk")
# protocols whose disk-mode data path is built: the built-in mover (O_DIRECT on both ends), XRootD and GridFTP (their
# servers reach the disk path through the data dir's disk/ links; the agent fsyncs what they land). iperf3 moves no
# file.
DISK_PROTOCOLS = ("builtin", "xrootd-https", "xrootd-root", "gridftp")


class StorageRefused(ValueError):
    """A disk test cannot run here; the message names the node, the path and why."""


@dataclass(frozen=True)
class Storage:
    """Where a test reads its files (the source's storage) and writes them (this destination's)."""

    source: str = "memory"
    destination: str = "memory"

    @property
    def disk(self) -> bool:
        return "disk" in (self.source, self.destination)

    def as_dict(self) -> dict[str, str]:
        return {"source": self.source, "destination": self.destination}


def parse_storage(given: object) -> Storage:
    """``storage``: "memory" | "disk" (both ends) | {"source": ..., "destination": ...}; ValueError names it."""
    if given is None:
        return Storage()
    if isinstance(given, str):
        if given not in STORAGES:
            raise ValueError(f"storage must be one of {', '.join(STORAGES)} or {{source, destination}}, got {given!r}")
        return Storage(given, given)
    if not isinstance(given, dict) or not set(given) <= {"source", "destination"}:
        raise ValueError(f"storage must be one of {', '.join(STORAGES)} or an object {{source, destination}}, "
                         f"got {given!r}")
    for end in ("source", "destination"):
        if given.get(end, "memory") not in STORAGES:
            raise ValueError(f"storage.{end} must be one of {', '.join(STORAGES)}, got {given.get(end)!r}")
    return Storage(given.get("source", "memory"), given.get("destination", "memory"))


def disk_problem(node: str, path: Path | None) -> str | None:
    """Why ``path`` cannot hold disk-mode files on ``node``; None when it can."""
    where = f"node {node}: disk path {path}"
    if path is None:
        return f"node {node} has no disk path (set disk_dir, TPCMESH_AGENT_DISK_DIR)"
    if not path.exists():
        return f"{where} does not exist"
    if not path.is_dir():
        return f"{where} is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{where} is not writable"
    kind = memory.filesystem_type(path)
    if kind in memory.MEMORY_FILESYSTEMS:
        return f"{where} is memory-backed ({kind}): a disk test there would measure memory"
    return None


def entry_problem(node: str, path: Path, uid: int, gid: int) -> str | None:
    """Why the protocol servers' user (``uid``, ``gid``, no other groups: setpriv clears them) cannot reach ``path``
    (search permission on it and every directory above it), or None. XRootD and GridFTP run as that user and
    would only say "permission denied" mid-test."""
    if uid == 0:
        return None
    for d in (path, *path.parents):
        st = d.stat()
        shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
        if not (st.st_mode >> shift) & 0o1:
            return (f"node {node}: disk path {path}: the protocol servers' user (uid {uid}) cannot enter {d} "
                    f"(mode {st.st_mode & 0o7777:04o}, owner uid {st.st_uid}); let it in (o+x) or use the builtin "
                    "protocol")
    return None


def space_problem(node: str, path: Path, needed: int, reserve: int) -> str | None:
    """Why writing ``needed`` bytes under ``path`` would eat into the reserve; None when it fits."""
    free = shutil.disk_usage(path).free
    if needed + reserve > free:
        return (f"node {node}: disk path {path} has {free} bytes free; {needed} bytes needed plus a reserve of "
                f"{reserve} bytes do not fit")
    return None


def drop_cache(paths: Iterable[Path]) -> None:
    """Flush each file to the device and drop it from the page cache: its next read comes from the device."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

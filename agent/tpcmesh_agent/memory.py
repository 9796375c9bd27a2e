"""How much memory this node can still give, and whether a directory lives in it.

A test that stores into a memory-backed directory, or drives a server that buffers in RAM, can exhaust the node;
the kernel's OOM killer then picks a victim (measured: XRootD's multi-stream HTTP-TPC, 11 files x 8 streams of
1 GB, grew to 8.8 GB and was killed mid-transfer). The agent refuses such a test up front instead, with the
figures and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def _meminfo_available(meminfo: str) -> int | None:
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def _cgroup_room(cgroup_dir: Path) -> int | None:
    """memory.max - memory.current of a cgroup v2 directory; None when unlimited or unreadable."""
    try:
        limit = (cgroup_dir / "memory.max").read_text().strip()
        if limit == "max":
            return None
        current = int((cgroup_dir / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return max(0, int(limit) - current)


def available_bytes(proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What the node (and, in a pod, its cgroup v2 limit) can still give; None when nothing can be read."""
    candidates: list[int] = []
    try:
        found = _meminfo_available((proc / "meminfo").read_text())
        if found is not None:
            candidates.append(found)
    except OSError:
        pass
    try:
        # cgroup v2: the line "0::/path" names this process's group under the unified hierarchy
        for line in (proc / "self" / "cgroup").read_text().splitlines():
            if line.startswith("0::"):
                room = _cgroup_room(cgroup_root / line[3:].lstrip("/"))
                if room is not None:
                    candidates.append(room)
    except OSError:
        pass
    return min(candidates) if candidates else None


def filesystem_type(path: Path, mounts: str | None = None) -> str | None:
    """The type of the filesystem holding ``path`` (the longest mount point that contains it)."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return None
    target = os.path.realpath(path)
    best, best_type = "", None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, best_type = point, fields[2]
    return best_type


def memory_backed(path: Path, mounts: str | None = None) -> bool:
    return filesystem_type(path, mounts) in MEMORY_FILESYSTEMS


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.1f} GB"

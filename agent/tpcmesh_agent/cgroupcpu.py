"""The CPU quota of the agent's own cgroup and how much of it was used: a pod's CPU limit, or a lab node's quota.

A node can be starved by its quota while none of its cores is busy (the kernel throttles the group when the quota
of a period is spent), so the busiest core says nothing there; the group's counters do. Read from the cgroup
filesystem (no maintained Python library reads cgroups; psutil does not):

- cgroup v2 (``0::/path``): ``cpu.max`` (``quota period`` or ``max``), ``cpu.stat`` ``usage_usec``,
  ``nr_periods``, ``nr_throttled``;
- cgroup v1 (``N:cpu,...:/path``): ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: none), ``cpu.stat``
  ``nr_periods``, ``nr_throttled``; the usage is left out (cpuacct is often a hierarchy of its own, where this
  group is not).

The nearest group with a quota counts, from the agent's own group up to the root: Kubernetes puts the limit on the
container's group, the lab on the node's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class QuotaCounters:
    """One reading of the quota'd group: cumulative counters."""

    cores: float  # the quota in cores (quota ÷ period)
    periods: int  # enforcement periods that had runnable tasks
    throttled: int  # periods in which the quota ran out
    usage_us: int | None  # CPU time used by the group (cgroup v2 only)


def _own_groups(proc_cgroup: Path) -> dict[str, str]:
    """controller (``""`` for v2) -> the group's path, from /proc/<pid>/cgroup."""
    out: dict[str, str] = {}
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _stat(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines() if " " in line)}


def _ancestors(root: Path, group: str) -> list[Path]:
    parts = [p for p in group.split("/") if p]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _v2(root: Path, group: str) -> QuotaCounters | None:
    for d in _ancestors(root, group):
        try:
            quota, period = (d / "cpu.max").read_text().split()
        except (OSError, ValueError):
            continue
        if quota == "max":
            continue
        stat = _stat(d / "cpu.stat")
        return QuotaCounters(int(quota) / int(period), stat.get("nr_periods", 0), stat.get("nr_throttled", 0),
                             stat.get("usage_usec"))
    return None


def _v1(root: Path, group: str) -> QuotaCounters | None:
    for d in _ancestors(root, group):
        try:
            quota = int((d / "cpu.cfs_quota_us").read_text())
            period = int((d / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        if quota <= 0:
            continue
        stat = _stat(d / "cpu.stat")
        return QuotaCounters(quota / period, stat.get("nr_periods", 0), stat.get("nr_throttled", 0), None)
    return None


def read(root: Path = CGROUP_ROOT, proc_cgroup: Path | None = None) -> QuotaCounters | None:
    """The quota'd group's counters now; None when no group of this process has a CPU quota (or none is readable)."""
    groups = _own_groups(proc_cgroup or Path(f"/proc/{os.getpid()}/cgroup"))
    try:
        if "" in groups and (root / "cgroup.controllers").exists():
            return _v2(root, groups[""])
        for controller, path in groups.items():
            if controller == "cpu":
                mount = next((m for m in root.iterdir() if "cpu" in m.name.split(",")), None)
                return _v1(mount, path) if mount is not None else None
    except OSError:
        return None
    return None


def summary(first: QuotaCounters | None, last: QuotaCounters | None, seconds: float) -> dict[str, float | None] | None:
    """``{cores, throttled_pct, used_pct}`` over a window: the share of the window's enforcement periods in which the
    quota ran out, and the CPU used as a share of the quota (v2 only, else null); None without a quota."""
    if first is None or last is None or last.periods < first.periods:
        return None
    periods = last.periods - first.periods
    used = None
    if first.usage_us is not None and last.usage_us is not None and seconds > 0:
        used = round(100 * (last.usage_us - first.usage_us) / 1e6 / (last.cores * seconds), 1)
    return {"cores": round(last.cores, 3),
            "throttled_pct": round(100 * (last.throttled - first.throttled) / periods, 1) if periods else 0.0,
            "used_pct": used}

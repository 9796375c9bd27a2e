"""A lab node's own limits (the WAN profile's ``hosts``): TCP buffer maxima in its namespace and a CPU quota.

**Buffers.** ``net.ipv4.tcp_rmem`` and ``tcp_wmem`` are per network namespace (a new namespace starts with the
host's values): only the third value (the maximum autotuning may reach) is replaced, and the default is lowered to
it when it is larger. ``net.core.rmem_max``/``wmem_max`` are left alone: on this project's kernels (6.18 seen) they
are visible inside a namespace but writing them there is refused (EACCES): they are host-wide, and the lab never
changes a host-wide setting.

**CPU.** One cgroup per node (``tpcm-<pid>-<node>``) with a quota of ``cpuQuota`` cores per 100 ms period: cgroup v2's
``cpu.max`` where the cpu controller is on the unified hierarchy, else cgroup v1's ``cpu.cfs_quota_us`` (hybrid
machines like this one mount the cpu controller on v1). Every process the lab starts on the node joins it before it
runs (agents, their protocol servers, the tests' clients, ``cpuHogs`` busy loops), and their children inherit it.
The lab refuses (``LabError``) a quota where neither hierarchy offers the cpu controller to child groups, rather
than enabling it host-wide.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


class LimitError(RuntimeError):
    """A node's limits could not be applied; the message names the node, the setting and why."""


def _in_netns(netns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv]


def read_sysctl(netns: str, name: str) -> list[int]:
    out = subprocess.run(_in_netns(netns, ["sysctl", "-n", name]), capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise LimitError(f"reading {name} in {netns} failed: {out.stderr.strip()}")
    return [int(x) for x in out.stdout.split()]


def set_buffer_max(netns: str, name: str, maximum: int) -> list[int]:
    """Set the third value of ``name`` (tcp_rmem or tcp_wmem) in the namespace; returns the triple written."""
    low, default, _ = read_sysctl(netns, name)
    triple = [min(low, maximum), min(default, maximum), maximum]
    value = " ".join(str(v) for v in triple)
    out = subprocess.run(_in_netns(netns, ["sysctl", "-w", f"{name}={value}"]), capture_output=True, text=True,
                         timeout=30)
    if out.returncode != 0:
        raise LimitError(f"setting {name} = {value} in {netns} failed: {out.stderr.strip()}")
    if read_sysctl(netns, name) != triple:
        raise LimitError(f"{name} in {netns} did not take {value}")
    return triple


@dataclass(frozen=True)
class CpuHierarchy:
    version: int  # 1 or 2
    root: Path

    def describe(self) -> str:
        return f"cgroup v{self.version} at {self.root}"


def cpu_hierarchy(root: Path = CGROUP_ROOT) -> CpuHierarchy | None:
    """Where child cgroups can get a CPU quota here, without enabling anything host-wide; None: nowhere."""
    for v2 in (root, root / "unified"):
        controllers = v2 / "cgroup.subtree_control"
        if (v2 / "cgroup.controllers").exists() and controllers.exists():
            if "cpu" in controllers.read_text().split():
                return CpuHierarchy(2, v2)
    v1 = root / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return CpuHierarchy(1, v1)
    return None


def cpu_unavailable_reason(root: Path = CGROUP_ROOT) -> str:
    if os.geteuid() != 0:
        return "not root"
    if cpu_hierarchy(root) is None:
        return (f"no cgroup under {root} offers the cpu controller to child groups (cgroup v2 with cpu in "
                "cgroup.subtree_control, or a cgroup v1 cpu hierarchy)")
    return ""


@dataclass
class CpuGroup:
    """A node's cgroup with a CPU quota of ``cores``."""

    path: Path
    hierarchy: CpuHierarchy
    cores: float

    @classmethod
    def create(cls, name: str, cores: float, hierarchy: CpuHierarchy | None = None) -> CpuGroup:
        h = hierarchy or cpu_hierarchy()
        if h is None:
            raise LimitError(f"cannot give {name} a CPU quota: {cpu_unavailable_reason()}")
        path = make_group(h.root / name)
        group = cls(path, h, cores)
        try:
            group.set_quota(cores)
        except LimitError:
            group.remove()
            raise
        return group

    def set_quota(self, cores: float) -> None:
        """Change the quota (also while its processes run: a fault injected into a running mesh)."""
        quota = max(1000, round(cores * PERIOD_US))
        try:
            if self.hierarchy.version == 2:
                (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            else:
                (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError as exc:
            raise LimitError(f"setting a quota of {cores:g} cores on {self.path} failed: {exc.strerror}") from exc
        self.cores = cores

    def join(self) -> Callable[[], None]:
        return joiner(self.path)

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        return []

    def throttled(self) -> int:
        """How many periods the group was throttled in (its quota used up)."""
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return int(stat.get("nr_throttled", 0))

    def remove(self) -> None:
        remove_group(self.path)


def make_group(path: Path) -> Path:
    try:
        path.mkdir()
    except OSError as exc:
        raise LimitError(f"creating the cgroup {path} failed: {exc.strerror}") from exc
    return path


def joiner(group: Path) -> Callable[[], None]:
    """A ``preexec_fn`` step: the child moves itself into the cgroup ``group`` before it execs."""
    procs = str(group / "cgroup.procs")

    def preexec() -> None:
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))

    return preexec


def remove_group(path: Path) -> None:
    """Kill what is left in the group, then remove it (a cgroup with processes cannot be removed)."""
    for _ in range(50):
        try:
            pids = [int(x) for x in (path / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)


def lab_groups(prefix: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """The lab's cgroups in every hierarchy that can hold a quota or a disk throttle."""
    found: list[Path] = []
    for parent in (root, root / "unified", root / "cpu", root / "blkio"):  # blkio: disk throttles (diskpath.py)
        with contextlib.suppress(OSError):
            found += [p for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix)]
    return found


def cgroup_view(hierarchy: CpuHierarchy) -> tuple[Path, Callable[[], None]]:
    """The CPU hierarchy bind-mounted where a node's processes still see it: ``ip netns exec`` remounts /sys, so an
    agent in a namespace finds /sys/fs/cgroup empty and could not read its own quota. Returns the directory to give
    as the agent's ``cgroup_root`` (laid out like /sys/fs/cgroup: v1's hierarchy as ``cpu/``) and its removal. The
    view lives in a directory of its own, never inside one the lab deletes as a tree (a recursive delete of a
    cgroup mount would remove cgroups)."""
    top = Path(tempfile.mkdtemp(prefix="tpcmesh-cgroup-"))
    target = top / "cpu" if hierarchy.version == 1 else top
    target.mkdir(exist_ok=True)
    out = subprocess.run(["mount", "--bind", str(hierarchy.root), str(target)], capture_output=True, text=True,
                         timeout=30)
    if out.returncode != 0:
        raise LimitError(f"bind-mounting {hierarchy.root} at {target} failed: {out.stderr.strip()}")

    def remove() -> None:
        subprocess.run(["umount", "--lazy", str(target)], capture_output=True, timeout=30)
        for d in (target, top):
            with contextlib.suppress(OSError):
                d.rmdir()  # empty once unmounted; never a recursive delete

    return top, remove

"""A lab node's disk path: a loop device over a file on the machine's real disk, formatted (ext4 or xfs) and
mounted on a directory the node's agent uses as its ``disk_dir``; and a slow disk injected with a cgroup's I/O
throttle on that device.

**Loop disk.** ``<dir>/<prefix><name>.img`` (sparse), ``losetup --find --show``, ``mkfs``, ``mount`` on
``<dir>/<prefix><name>/``. Removal unmounts, detaches and deletes both; ``leftovers`` finds what a killed run left
(a loop device whose backing file carries the prefix) for ``tpcmesh-local cleanup``.

**Throttle.** One cgroup per node (``tpcm-<pid>-<node>-io``) limiting the loop device's read and write bytes/s:
cgroup v2's ``io.max`` where the io controller is on the unified hierarchy, else cgroup v1's
``blkio.throttle.{read,write}_bps_device`` (hybrid machines like this one). cgroup v1 throttles only I/O its
processes submit themselves, which O_DIRECT is (the built-in mover's disk path and fio): buffered writeback is
not charged there. The agent joins the group before it runs; its children (fio) inherit it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .hostlimits import CGROUP_ROOT, LimitError, joiner, make_group, remove_group

PREFIX = "tpcmesh-disk-"
DISK_DIR = Path("/var/tmp")  # on the machine's real disk (/tmp may be tmpfs elsewhere)
FILESYSTEMS = ("ext4", "xfs")


def _run(argv: list[str], what: str) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        said = (out.stderr or out.stdout).strip().splitlines()
        raise LimitError(f"{what} failed ({' '.join(argv)}): {said[0] if said else f'exit {out.returncode}'}")
    return out.stdout.strip()


@dataclass
class LoopDisk:
    image: Path
    device: str
    mount: Path

    @classmethod
    def create(cls, name: str, size_bytes: int, directory: Path, fstype: str = "ext4") -> LoopDisk:
        if fstype not in FILESYSTEMS:
            raise LimitError(f"disk of {name}: filesystem {fstype!r} is not one of {', '.join(FILESYSTEMS)}")
        image, mount = directory / f"{PREFIX}{name}.img", directory / f"{PREFIX}{name}"
        with open(image, "wb") as fh:
            fh.truncate(size_bytes)
        device = ""
        try:
            mkfs = ["mkfs.ext4", "-q", "-F", "-E", "nodiscard"] if fstype == "ext4" else ["mkfs.xfs", "-q", "-f"]
            _run([*mkfs, str(image)], f"formatting the disk of {name}")
            device = _run(["losetup", "--find", "--show", "--direct-io=on", str(image)],
                          f"attaching the disk of {name}")
            mount.mkdir()
            _run(["mount", "-t", fstype, device, str(mount)], f"mounting the disk of {name}")
            os.chmod(mount, 0o755)
        except BaseException:
            cls(image, device, mount).remove()
            raise
        return cls(image, device, mount)

    @property
    def majmin(self) -> str:
        rdev = os.stat(self.device).st_rdev
        return f"{os.major(rdev)}:{os.minor(rdev)}"

    def remove(self) -> None:
        _detach(self.device, self.mount)
        with contextlib.suppress(OSError):
            self.mount.rmdir()
        with contextlib.suppress(OSError):
            self.image.unlink()


def _detach(device: str, mount: Path | None) -> None:
    if mount is not None and os.path.ismount(mount):
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    if device:
        subprocess.run(["losetup", "-d", device], capture_output=True)


def leftovers() -> list[tuple[str, Path]]:
    """(loop device, backing file) of every lab disk still attached."""
    out = subprocess.run(["losetup", "--list", "--json"], capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        return []
    found = []
    for dev in json.loads(out.stdout).get("loopdevices", []):
        backing = Path((dev.get("back-file") or "").removesuffix(" (deleted)"))
        if backing.name.startswith(PREFIX):
            found.append((dev["name"], backing))
    return found


def clean_leftovers(gone: Callable[[str], bool] = lambda rest: True) -> list[str]:
    """Unmount, detach and delete every lab disk a killed run left (``gone`` of the name after the prefix, which
    starts with the owner's pid); returns the devices removed."""
    removed = []
    for device, backing in leftovers():
        if not gone(backing.name[len(PREFIX):]):
            continue
        mount = backing.with_suffix("")
        _detach(device, mount)
        with contextlib.suppress(OSError):
            mount.rmdir()
        with contextlib.suppress(OSError):
            backing.unlink()
        removed.append(device)
    return removed


@dataclass(frozen=True)
class IoHierarchy:
    version: int
    root: Path


def io_hierarchy(root: Path = CGROUP_ROOT) -> IoHierarchy | None:
    """Where child cgroups can get an I/O throttle here, without enabling anything host-wide; None: nowhere."""
    for v2 in (root, root / "unified"):
        controllers = v2 / "cgroup.subtree_control"
        if controllers.exists() and "io" in controllers.read_text().split():
            return IoHierarchy(2, v2)
    if (root / "blkio" / "blkio.throttle.write_bps_device").exists():
        return IoHierarchy(1, root / "blkio")
    return None


@dataclass
class IoThrottle:
    """A node's cgroup that caps one block device's read and write rates (bytes/s; 0: no cap)."""

    path: Path
    hierarchy: IoHierarchy
    device: str  # major:minor

    @classmethod
    def create(cls, name: str, device: str, read_bps: int, write_bps: int) -> IoThrottle:
        h = io_hierarchy()
        if h is None:
            raise LimitError(f"cannot throttle the disk of {name}: no cgroup under {CGROUP_ROOT} offers io (v2) "
                             "or blkio (v1) to child groups")
        group = cls(make_group(h.root / name), h, device)
        try:
            group.set_rates(read_bps, write_bps)
        except LimitError:
            group.remove()
            raise
        return group

    def set_rates(self, read_bps: int, write_bps: int) -> None:
        try:
            if self.hierarchy.version == 2:
                rates = " ".join(f"{k}={v or 'max'}" for k, v in (("rbps", read_bps), ("wbps", write_bps)))
                (self.path / "io.max").write_text(f"{self.device} {rates}")
            else:
                for kind, v in (("read", read_bps), ("write", write_bps)):
                    (self.path / f"blkio.throttle.{kind}_bps_device").write_text(f"{self.device} {v}")
        except OSError as exc:
            raise LimitError(f"throttling {self.device} in {self.path} failed: {exc.strerror}") from exc

    def join(self) -> Callable[[], None]:
        return joiner(self.path)

    def remove(self) -> None:
        remove_group(self.path)

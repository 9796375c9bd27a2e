"""A disk path's storage ceilings: its local sequential write and read rates, measured with fio (Debian package
``fio``): 1 MiB blocks, O_DIRECT, ``concurrency`` jobs each writing then reading its own file (the read job
stonewalled behind the write job, so it reads the files just written, cold: O_DIRECT never cached them).
The files live in ``<disk_dir>/fio/`` and are removed afterwards.

Each ceiling is measured alone: the read rate with nothing writing, the write rate with nothing reading. When a
copy's source and destination share one device (same_device: one filesystem, or partitions of one disk), the device
serves both at once, and min(read, write) alone overstates what a copy can get: SharedDevicePlan measures the
device with the readers and the writers running at the same time, held in step as a copy holds them (fio's flow
control: neither side gets ahead), which is that topology's ceiling."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

BLOCK = "1M"
DEFAULT_SIZE = 64 * 2**20  # bytes per job
MAX_SIZE = 64 * 10**9
MAX_CONCURRENCY = 256
MAX_RUNTIME = 600
FLOW_SLEEP_US = 100


class CeilingError(RuntimeError):
    """fio could not measure; the message says why (missing program, a failed job)."""


@dataclass(frozen=True)
class FioPlan:
    directory: Path
    concurrency: int = 1
    size: int = DEFAULT_SIZE  # bytes each job writes and reads
    runtime: int = 60  # seconds each phase may take at most

    def argv(self, fio: str = "fio") -> list[str]:
        return [fio, "--output-format=json", f"--directory={self.directory}", f"--bs={BLOCK}", "--direct=1",
                "--ioengine=psync", f"--numjobs={self.concurrency}", f"--size={self.size}",
                f"--runtime={self.runtime}", "--group_reporting", "--filename_format=tpcmesh-fio.$jobnum",
                "--name=write", "--rw=write", "--end_fsync=1",
                "--name=read", "--rw=read", "--stonewall"]


@dataclass(frozen=True)
class SharedDevicePlan:
    """``concurrency`` sequential readers in ``read_dir`` and as many writers in ``write_dir``, all at once for
    ``runtime`` seconds (time-based, so they overlap from start to end), every job given the same flow weight: fio
    keeps their progress equal, as a copy's reads and writes are (unheld, the readers took 1361 MB/s and left the
    writers 191 here). A job held back sleeps FLOW_SLEEP_US instead of spinning (16 spinning jobs on 2 cores
    measured the CPU, 266 MB/s, not the device). Same blocks and O_DIRECT as FioPlan."""

    read_dir: Path
    write_dir: Path
    concurrency: int = 1
    size: int = DEFAULT_SIZE  # bytes of each job's file (read, or rewritten, in a loop until the time is up)
    runtime: int = 10

    def argv(self, fio: str = "fio") -> list[str]:
        return [fio, "--output-format=json", f"--bs={BLOCK}", "--direct=1", "--ioengine=psync",
                f"--numjobs={self.concurrency}", f"--size={self.size}", "--time_based", f"--runtime={self.runtime}",
                "--flow=1", f"--flow_sleep={FLOW_SLEEP_US}", "--group_reporting",
                "--filename_format=tpcmesh-fio.$jobnum",
                "--name=read", "--rw=read", f"--directory={self.read_dir}",
                "--name=write", "--new_group", "--rw=write", f"--directory={self.write_dir}", "--end_fsync=1"]


def same_device(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are stored on one device: one filesystem, or filesystems on one disk (its
    partitions, as sysfs tells)."""
    da, db = os.stat(a).st_dev, os.stat(b).st_dev
    return da == db or (whole_disk(da) or da) == (whole_disk(db) or db)


def whole_disk(dev: int, sysfs: Path = Path("/sys/dev/block")) -> str | None:
    """The disk a block device number belongs to (a partition's parent, as sysfs names it); None for a device
    sysfs does not know (tmpfs, overlayfs and other filesystems without one)."""
    node = sysfs / f"{os.major(dev)}:{os.minor(dev)}"
    try:
        real = node.resolve(strict=True)
    except OSError:
        return None
    return real.parent.name if (real / "partition").exists() else real.name


def parse_fio(output: str) -> dict[str, float]:
    """``{"write_bps", "read_bps"}`` (bytes/s) from fio's JSON output of FioPlan's two groups."""
    try:
        jobs = json.loads(output[output.index("{"):])["jobs"]
        by_name = {job["jobname"]: job for job in jobs}
        return {"write_bps": float(by_name["write"]["write"]["bw_bytes"]),
                "read_bps": float(by_name["read"]["read"]["bw_bytes"])}
    except (ValueError, KeyError, TypeError) as e:
        raise CeilingError(f"fio's output could not be read ({type(e).__name__}: {e}): {output[:300]!r}") from e


def fio_version() -> str | None:
    fio = shutil.which("fio")
    if fio is None:
        return None
    out = subprocess.run([fio, "--version"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip().removeprefix("fio-") or None


def _run(argv: list[str], directories: tuple[Path, ...], runtime: int) -> dict[str, float]:
    """Run fio in ``directories`` (made for it, removed after); its parsed rates. CeilingError when it cannot."""
    fio = shutil.which("fio")
    if fio is None:
        raise CeilingError("fio is not installed (Debian package fio)")
    for d in directories:
        d.mkdir(exist_ok=True)
    try:
        out = subprocess.run([fio, *argv[1:]], capture_output=True, text=True, timeout=2 * runtime + 60)
    finally:
        for d in directories:
            shutil.rmtree(d, ignore_errors=True)
    if out.returncode != 0:
        raise CeilingError(f"fio exited with {out.returncode}: {(out.stderr or out.stdout).strip()[-500:]}")
    return parse_fio(out.stdout)


def measure(plan: FioPlan) -> dict:
    """Run fio; the ceilings with what was measured. Blocking; CeilingError when fio is missing or fails."""
    return {**_run(plan.argv(), (plan.directory,), plan.runtime), "block_bytes": 2**20, "direct": True,
            "concurrency": plan.concurrency, "bytes_per_job": plan.size, "fio_version": fio_version()}


def measure_shared(plan: SharedDevicePlan) -> dict:
    """Run SharedDevicePlan's fio: the read and write rates while both ran, and ``copy_bps``, the lower of the
    two (a copy moves at its slower side's pace). Blocking; CeilingError as measure."""
    got = _run(plan.argv(), (plan.read_dir, plan.write_dir), plan.runtime)
    return {**got, "copy_bps": min(got["read_bps"], got["write_bps"]), "block_bytes": 2**20, "direct": True,
            "concurrency": plan.concurrency, "bytes_per_job": plan.size, "runtime_seconds": plan.runtime,
            "fio_version": fio_version()}

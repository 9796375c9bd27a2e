"""A disk path's storage ceilings: its local sequential write and read rates, measured with fio (Debian package
``fio``): 1 MiB blocks, O_DIRECT, ``concurrency`` jobs each writing then reading its own file (the read job
stonewalled behind the write job, so it reads the files just written, cold: O_DIRECT never cached them).
The files live in ``<disk_dir>/fio/`` and are removed afterwards."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

BLOCK = "1M"
DEFAULT_SIZE = 64 * 2**20  # bytes per job
MAX_SIZE = 64 * 10**9
MAX_CONCURRENCY = 256
MAX_RUNTIME = 600


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


def measure(plan: FioPlan) -> dict:
    """Run fio; the ceilings with what was measured. Blocking; CeilingError when fio is missing or fails."""
    fio = shutil.which("fio")
    if fio is None:
        raise CeilingError("fio is not installed (Debian package fio)")
    plan.directory.mkdir(exist_ok=True)
    try:
        out = subprocess.run(plan.argv(fio), capture_output=True, text=True,
                             timeout=2 * plan.runtime + 60)
    finally:
        shutil.rmtree(plan.directory, ignore_errors=True)
    if out.returncode != 0:
        raise CeilingError(f"fio exited with {out.returncode}: {(out.stderr or out.stdout).strip()[-500:]}")
    return {**parse_fio(out.stdout), "block_bytes": 2**20, "direct": True, "concurrency": plan.concurrency,
            "bytes_per_job": plan.size, "fio_version": fio_version()}

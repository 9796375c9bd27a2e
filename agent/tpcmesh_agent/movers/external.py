"""Helpers shared by the movers that drive external programs and servers (XRootD, GridFTP, iperf3).

- child processes run in their own session and are killed (whole group) on timeout or cancellation;
- the per-test destination directory is created for the user the protocol servers run as;
- received files are checked for size and adler32 against what the source published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import shutil
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from ..daemons.configs import DISK
from ..records import peak_from_samples
from .base import FileResult, FileSpec, MoverUnavailable, TransferJob, run_files_concurrently

log = logging.getLogger(__name__)

PACKAGES = {
    "xrdcp": "xrootd-client",
    "xrootd": "xrootd-server",
    "globus-url-copy": "globus-gass-copy-progs",
    "globus-gridftp-server": "globus-gridftp-server-progs",
    "iperf3": "iperf3",
}


def now() -> datetime:
    return datetime.now(UTC)


def missing(program: str) -> str | None:
    """None when ``program`` is on PATH, else a message naming the Debian package."""
    if shutil.which(program):
        return None
    return f"{program} is not installed: install the Debian package {PACKAGES.get(program, program)}"


@dataclass
class ProcessResult:
    returncode: int | None  # None: killed at the deadline
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def _killpg(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def run_program(argv: list[str], deadline: float, env: dict[str, str] | None = None,
                      on_stdout_line: Any = None) -> ProcessResult:
    """Run ``argv`` until it exits or ``deadline`` (monotonic) passes; kill its process group on timeout/cancel."""
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})}, start_new_session=True)
    out: list[str] = []

    async def read_out() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            out.append(line)
            if on_stdout_line is not None:
                on_stdout_line(line)

    async def read_err() -> bytes:
        assert proc.stderr is not None
        return await proc.stderr.read()

    readers = asyncio.gather(read_out(), read_err())
    try:
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            await asyncio.wait_for(proc.wait(), remaining)
        except TimeoutError:
            _killpg(proc)
            await proc.wait()
            _, err = await readers
            return ProcessResult(None, "".join(out), err.decode("utf-8", "replace"), time.monotonic() - t0)
        _, err = await readers
        return ProcessResult(proc.returncode, "".join(out), err.decode("utf-8", "replace"), time.monotonic() - t0)
    except asyncio.CancelledError:
        _killpg(proc)
        readers.cancel()
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    finally:
        if proc.returncode is None:
            _killpg(proc)


def local_source_address(peer_host: str, peer_port: int) -> str:
    """The address this host uses to reach the peer (what the peer sees as our address)."""
    family = socket.AF_INET6 if ":" in peer_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((peer_host, peer_port))
        return s.getsockname()[0]


def run_user_ids(settings: Any) -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(settings.run_user)
    except KeyError as e:
        raise MoverUnavailable(f"run_user {settings.run_user!r} does not exist on this host") from e
    return pw.pw_uid, pw.pw_gid


def prepare_destination(settings: Any, job: TransferJob, protocol: str) -> str:
    """Create the test's destination dir writable by the servers' run user; return its path below data_dir."""
    if job.destination_dir is None:
        raise MoverUnavailable(f"{protocol} writes through the local protocol server and supports only destination "
                               "'store' (use the builtin mover for 'sink')")
    path = served_path(settings, Path(job.destination_dir))
    job.destination_dir.mkdir(parents=True, exist_ok=True)
    ids = run_user_ids(settings)
    if ids is not None:
        os.chown(job.destination_dir, *ids)
    return path


def served_path(settings: Any, path: Path) -> str:
    """``path`` as the protocol servers name it: below the data dir as it is (``/incoming/<test>``), below the disk
    path under ``/disk`` (daemons.configs.disk_links: ``/disk/incoming/<test>``)."""
    roots = [(Path(settings.data_dir), "")]
    if settings.disk_dir is not None:
        roots.insert(0, (Path(settings.disk_dir), DISK))
    for root, prefix in roots:
        try:
            return prefix + "/" + path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            continue
    raise MoverUnavailable(f"destination {path} is outside the data dir {settings.data_dir}"
                           + (f" and the disk path {settings.disk_dir}" if settings.disk_dir is not None else ""))


def source_sets(job: TransferJob) -> str:
    """The source's directory of test sets as its servers name it: ``/sets``, ``/disk/sets`` when the test reads
    the source's disk copy, an external endpoint's own path."""
    return f"{DISK}/sets" if job.storage.source == "disk" else job.source.path


# Disk mode for the servers that write a TPC's file themselves (XRootD, GridFTP): neither has a setting that writes
# around the page cache or syncs a file at its close (XRootD 5.5's default storage plug-in has none; GridFTP's
# -sync-writes only flushes before restart markers, server-wide), so the agent fsyncs each received file before its
# end time is taken, and the record says so (storage.fallback, direct_write false).
LANDING_FALLBACK = "{server} writes through the page cache; the agent fsyncs each received file before its end time"


LANDING_SERVERS = {"xrootd": "XRootD", "gridftp": "globus-gridftp-server"}


async def land_on_disk(watch: FileWatch, result: FileResult, error: str | None, protocol: str) -> str | None:
    """Disk mode, after a server wrote ``result``'s file: it is on the device (fsync) before its end time, which
    moves to when that was so; the record names the fallback (LANDING_FALLBACK). Returns the file's error."""
    result.write_fallback = LANDING_FALLBACK.format(server=LANDING_SERVERS[protocol.split("-")[0]])
    if error is not None:
        return error
    try:
        synced = await watch.synced()
    except OSError as e:
        return f"the received file could not be synced to the disk: {e.strerror or e}"
    if result.finished_at is None or synced > result.finished_at:
        result.finished_at = synced
    return None


def fsync_file(path: Path) -> None:
    """Flush ``path``'s data to the device (whichever process wrote it: fsync covers the inode's dirty pages)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def finish_file(result: FileResult, spec: FileSpec, job: TransferJob, error: str | None) -> FileResult:
    """Fill bytes (from the stored file), error and checksum verdict of a stored file. Blocking (adler32)."""
    from ..files import adler32_of

    path = job.destination_dir / spec.name if job.destination_dir is not None else None
    if path is not None:
        try:
            result.bytes = path.stat().st_size
        except FileNotFoundError:
            result.bytes = 0
    if error is None and result.bytes != spec.size:
        error = f"received {result.bytes} of {spec.size} bytes"
    result.error = error
    if error is None and path is not None and job.verify_checksums and spec.checksum:
        got = adler32_of(path)
        result.checksum_ok = got == spec.checksum
        if not result.checksum_ok:
            result.error = f"checksum mismatch: got {got}, source published {spec.checksum}"
    return result


def short(text: str, limit: int = 400) -> str:
    """The last lines of a program's output, for an error message. NULs are dropped: xrdcp ends some server
    messages with one, and the measurement contract's text (stored in PostgreSQL) cannot hold it."""
    lines = [line.strip() for line in text.replace("\x00", "").strip().splitlines() if line.strip()]
    out = " | ".join(lines[-4:])
    return out[-limit:]


class FileWatch:
    """Polls a file being written by a server: progress bytes, and when its first and last byte arrived.

    Client programs (xrdcp, globus-url-copy) add their own set-up and polling time; the file's growth is what the
    server actually did, so per-file start/end come from here when the file was seen growing.
    """

    INTERVAL = 0.02

    def __init__(self, path: Path, size: int, progress: Any, sync: bool = False) -> None:
        self.path, self.size, self.progress = path, size, progress
        self.reported = 0
        self.first_byte: datetime | None = None
        self.complete: datetime | None = None
        self.samples: list[tuple[float, int]] = []
        self._task: asyncio.Task | None = None
        # disk mode (``sync``): an fsync started as soon as the file reached its size, while the client program
        # still polls for the copy's end (xrdcp --tpc only: about 0.8 s), and its (mtime before, end time)
        self.sync = sync
        self._early: asyncio.Future | None = None

    def _poll(self) -> None:
        try:
            n = self.path.stat().st_size
        except OSError:
            return
        t = now()
        if n > 0 and self.first_byte is None:
            self.first_byte = t
        if n >= self.size and self.complete is None:
            self.complete = t
            if self.sync:
                self._early = asyncio.ensure_future(asyncio.to_thread(self._stamped_fsync))
        if n > self.reported:
            self.progress.add_bytes(n - self.reported)
            self.reported = n
            self.samples.append((time.monotonic(), n))

    async def _loop(self) -> None:
        while True:
            self._poll()
            await asyncio.sleep(self.INTERVAL)

    def __enter__(self) -> FileWatch:
        self._task = asyncio.create_task(self._loop())
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._task is not None:
            self._task.cancel()
        self._poll()

    def _stamped_fsync(self) -> tuple[int, datetime] | None:
        try:
            before = self.path.stat().st_mtime_ns
            fsync_file(self.path)
        except OSError:  # gone (a failed copy): synced() says why, if it is asked
            return None
        return before, now()

    async def synced(self) -> datetime:
        """Disk mode, once the copy has ended: the file is fsynced (always once more here: the server may have
        written after the early fsync began), and the time its bytes were on the device is returned: the early
        fsync's end when the file was not modified after it began (same mtime), else now. OSError when it cannot
        be synced."""
        early = await self._early if self._early is not None else None
        await asyncio.to_thread(fsync_file, self.path)
        done = now()
        if early is not None and self.path.stat().st_mtime_ns == early[0]:
            return early[1]
        return done

    def peak_bps(self) -> float | None:
        """The file's fastest growth over a window of at least 1 s (None when it grew for less than that)."""
        return peak_from_samples(self.samples, short_span=False)

    def settle(self, result: FileResult, start: datetime) -> None:
        """Use the file's growth for the timing when it was seen (else keep the client's timing)."""
        result.started_at = start
        if self.complete is not None and result.finished_at is not None and self.complete < result.finished_at:
            result.finished_at = self.complete
        result.peak_bps = self.peak_bps()


# XRootD 5.5's client can die of SIGSEGV while it sets up OpenSSL under TLS (a race fixed in 5.6: xrootd/xrootd
# issue 2164); seen about once in ten TLS copies here. Such a run is tried again, once, and the log says so.
CRASH_RETRIES = 1
# Reading a copy back from the endpoint that just received it: XRootD 5.5 may answer a server error while it still
# closes the file (HTTP 500 to a HEAD; "[3012] Program failed" to a root:// checksum query), so such answers are
# asked again, READBACK_ATTEMPTS times in all, READBACK_PAUSE x the attempt's number apart.
READBACK_ATTEMPTS = 5
READBACK_PAUSE = 0.2
Answer = TypeVar("Answer")


async def read_back(ask: Callable[[], Awaitable[Answer]], busy: Callable[[Answer], bool]) -> Answer:
    """``ask()`` again while its answer is ``busy`` (a server error), at most READBACK_ATTEMPTS times in all; the
    last answer whatever it is."""
    for attempt in range(READBACK_ATTEMPTS):
        answer = await ask()
        if not busy(answer) or attempt + 1 == READBACK_ATTEMPTS:
            break
        await asyncio.sleep(READBACK_PAUSE * (attempt + 1))
    return answer


async def run_client(argv: list[str], deadline: float, env: dict[str, str] | None = None) -> ProcessResult:
    """``run_program`` for a client that may crash on start (see CRASH_RETRIES): tried again after a SIGSEGV."""
    proc = await run_program(argv, deadline, env=env)
    for _ in range(CRASH_RETRIES):
        if proc.returncode != -signal.SIGSEGV or time.monotonic() >= deadline:
            break
        log.warning("%s died of SIGSEGV (a known XRootD 5.5 client crash under TLS); trying it again once", argv[0])
        proc = await run_program(argv, deadline, env=env)
    return proc


async def copy_one_file(argv: list[str], job: TransferJob, spec: FileSpec, deadline: float, progress: Any,
                        env: dict[str, str] | None = None, retry_crash: bool = False) -> FileResult:
    """Store one file with a client program (xrdcp, globus-url-copy), timed by the stored file's growth (and, on
    disk, until it is fsynced)."""
    assert job.destination_dir is not None
    start = now()
    result = FileResult(name=spec.name, size=spec.size, started_at=start)
    disk = job.storage.destination == "disk"
    with FileWatch(job.destination_dir / spec.name, spec.size, progress, sync=disk) as watch:
        proc = await (run_client if retry_crash else run_program)(argv, deadline, env=env)
    result.finished_at = now()
    watch.settle(result, start)
    if proc.timed_out:
        error: str | None = f"timed out after {job.timeout:g} s"
    elif proc.returncode != 0:
        error = f"{argv[0]} exited with {proc.returncode}: {short(proc.stderr or proc.stdout)}"
    else:
        error = None
    if disk:
        error = await land_on_disk(watch, result, error, job.protocol)
    await asyncio.to_thread(finish_file, result, spec, job, error)
    progress.files_done += 1
    return result


async def pull_external(job: TransferJob, deadline: float, progress: Any, env: dict[str, str],
                        command: Callable[[FileSpec, Path], tuple[str, list[str]]],
                        retry_crash: bool = False) -> list[FileResult]:
    """A plain pull of each file from an external endpoint into the incoming area: ``command(spec, target)`` gives
    the source URL and the client's argv; a failure names the source URL."""
    assert job.destination_dir is not None
    directory = job.destination_dir

    async def pull(spec: FileSpec) -> FileResult:
        src, argv = command(spec, directory / spec.name)
        result = await copy_one_file(argv, job, spec, deadline, progress, env=env, retry_crash=retry_crash)
        if result.error and not result.error.startswith("timed out"):
            result.error = f"source {src}: {result.error}"
        return result

    return await run_files_concurrently(job, pull)


def private_file(path: Path, text: str) -> str:
    """A credential written to a file only this user reads (never a command line, which any local user can see)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    return str(path)

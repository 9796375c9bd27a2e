"""Runs transfer tests one at a time: validation, idempotency by test_id, 409, timeout, cancellation, records."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import shutil
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import congestion, hosttelemetry, memory, records, versions
from .config import ALL_PROTOCOLS, Settings
from .files import MAX_FILE_SIZE, FileSetError, FileSets, spec_from_request, validate_name
from .metrics import AgentMetrics
from .movers.base import (
    BearerTokens,
    Endpoint,
    FileResult,
    FileSpec,
    Mover,
    MoverUnavailable,
    Progress,
    RemoteDestination,
    TransferJob,
    X509Credential,
)
from .movers.external import run_user_ids
from .ssview import PeerSockets
from .storage import DISK_PROTOCOLS, Storage, disk_problem, entry_problem, parse_storage, space_problem

log = logging.getLogger(__name__)

CHECKSUM_RE = re.compile(r"^adler32:[0-9a-f]{8}$")
HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")
MAX_TIMEOUT = 24 * 3600
MAX_IPERF3_SECONDS = 300  # iperf3 -t: long enough for a slow-start over any WAN, short enough not to hog the pair
KEEP_RECORDS = 1000
SAMPLE_INTERVAL = 0.25
# protocols whose sockets belong to other programs (XRootD, GridFTP): the kernel's view of them comes from ss
KERNEL_VIEW_PROTOCOLS = ("xrootd-https", "xrootd-root", "gridftp")
MAX_WAIT = 30.0  # seconds GET /api/v1/transfers/{id}?wait= may hold an answer (the operator waits its poll interval)
TIMEOUT_GRACE = 2.0  # seconds a mover gets past the job timeout to end its files itself (with partial bytes)


class ApiError(Exception):
    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": message, **extra}


def _int(body: dict, key: str, default: int, lo: int, hi: int) -> int:
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(422, f"{key} must be an integer, got {v!r}")
    if not lo <= v <= hi:
        raise ApiError(422, f"{key} {v} is out of range ({lo}..{hi})")
    return v


@dataclass
class Run:
    job: TransferJob
    started_at: datetime
    progress: Progress = field(default_factory=Progress)
    samples: list[tuple[float, int]] = field(default_factory=list)
    task: asyncio.Task | None = None
    record: dict | None = None  # set when finished
    cancel_requested: bool = False

    def view(self) -> dict:
        if self.record is not None:
            return self.record
        p = self.progress
        elapsed = max(time.monotonic() - self.samples[0][0], 1e-9) if self.samples else None
        return {
            "test_id": self.job.test_id,
            "protocol": self.job.protocol,
            "streams": self.job.streams,
            "concurrency": self.job.concurrency,
            "status": "running",
            "error": None,
            "file_set": self.job.file_set,
            "file_count": len(self.job.files),
            "destination_kind": "sink" if self.job.destination_dir is None and self.job.remote is None else "store",
            "total_bytes": p.bytes_done,
            "started_at": records.iso(self.started_at),
            "finished_at": None,
            "files": [],
            "progress": {
                "bytes_done": p.bytes_done,
                "files_done": p.files_done,
                "files_total": p.files_total or len(self.job.files),
                "gbps": records.gbps(p.bytes_done, elapsed) if elapsed else None,
            },
        }


def memory_shortfall(job: TransferJob, mover: Mover, incoming_dir: Path) -> str | None:
    """Why ``job`` would run the node out of memory (the OOM killer would end it, or a neighbour), or None.
    Stored files count when the destination directory is memory-backed, plus what the protocol's own programs
    buffer (Mover.memory_needed)."""
    parts: list[str] = []
    need = 0
    if job.destination_dir is not None and memory.memory_backed(incoming_dir):
        stored = sum(f.size for f in job.files)
        need += stored
        parts.append(f"{memory.gigabytes(stored)} stored in the memory-backed {incoming_dir}")
    buffers = mover.memory_needed(job)
    if buffers is not None:
        need += buffers[0]
        parts.append(f"up to {memory.gigabytes(buffers[0])} because {buffers[1]}")
    room = memory.available_bytes()
    if room is None or need <= room:
        return None
    return (f"this test needs up to {memory.gigabytes(need)} of memory ({'; '.join(parts)}) but the node has "
            f"{memory.gigabytes(room)} available: lower concurrency or streams, use smaller files or destination "
            "'sink', or give the node more memory")


class TransferRunner:
    def __init__(self, settings: Settings, movers: dict[str, Mover], problems: dict[str, str], filesets: FileSets,
                 metrics: AgentMetrics, host: hosttelemetry.Sampler | None = None) -> None:
        self.settings = settings
        self.host = host  # this node's host telemetry: the record carries the destination's summary
        self.movers = movers
        self.problems = problems
        self.filesets = filesets
        self.metrics = metrics
        self.runs: OrderedDict[str, Run] = OrderedDict()
        self.running: Run | None = None
        # the protocol servers' status (Supervisor.status), set once they run: a failed test then says when the
        # local server died under it, which the client side only sees as a cut connection
        self.server_status: Callable[[], dict[str, dict]] | None = None
        # this node's implementations' versions (versions.local_versions), found when the agent starts
        self.versions: dict[str, str | None] = {versions.PACKAGE: versions.agent_version()}

    # ---- validation --------------------------------------------------------------------------------------
    def parse(self, body: Any) -> TransferJob:
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        test_id = body.get("test_id")
        try:
            test_id = str(uuid.UUID(str(test_id)))
        except ValueError as e:
            raise ApiError(422, f"test_id must be a UUID, got {test_id!r}") from e
        protocol = body.get("protocol")
        if protocol not in ALL_PROTOCOLS:
            raise ApiError(422, f"protocol {protocol!r} is unknown (known: {', '.join(ALL_PROTOCOLS)})")
        src = body.get("source")
        if not isinstance(src, dict):
            raise ApiError(422, "source must be an object {host, port}")
        host = src.get("host")
        if not isinstance(host, str) or not host:
            raise ApiError(422, "source.host must be a host name or IP address")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not HOST_RE.match(host):
                raise ApiError(422, f"source.host {host!r} is not a valid host name or IP address") from None
        default_port = self.settings.port_of(protocol) or 0
        port = _int(src, "port", default_port, 1, 65535)
        source_path = _source_path(src.get("path", "/sets"), protocol)
        remote = _remote_destination(body.get("remote_destination"), protocol)
        try:
            spec = spec_from_request(body.get("file_set"))
        except FileSetError as e:
            raise ApiError(422, str(e)) from e
        files = self._files(body.get("files"), spec)
        concurrency = _int(body, "concurrency", 1, 1, 1000)
        streams = _int(body, "streams", 1, 1, 100)
        if streams * concurrency > self.settings.max_streams_x_concurrency:
            raise ApiError(422, f"streams*concurrency {streams * concurrency} exceeds "
                                f"{self.settings.max_streams_x_concurrency}")
        timeout = body.get("timeout_seconds", 3600)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT:
            raise ApiError(422, f"timeout_seconds must be a number in (0, {MAX_TIMEOUT}], got {timeout!r}")
        duration = body.get("duration_seconds")
        if duration is not None:
            if protocol != "iperf3":
                raise ApiError(422, f"duration_seconds applies to iperf3 only, not {protocol!r}")
            duration = _int(body, "duration_seconds", 0, 1, MAX_IPERF3_SECONDS)
            if duration >= timeout:
                raise ApiError(422, f"duration_seconds {duration} must be shorter than timeout_seconds {timeout:g}")
        destination = body.get("destination", "store")
        if destination not in ("store", "sink"):
            raise ApiError(422, f"destination must be 'store' or 'sink', got {destination!r}")
        if protocol == "iperf3":  # moves no file: nothing is stored, so no budget or memory for a file set
            destination = "sink"
        storage = self._storage(body.get("storage"), protocol, destination, remote is not None or
                                source_path != "/sets")
        incoming = self.settings.storage_dir(storage.destination) / "incoming"
        dest_dir = incoming / test_id if destination == "store" and remote is None else None
        if dest_dir is not None and storage.destination == "disk":
            assert self.settings.disk_dir is not None
            short = space_problem(self.settings.node_name, self.settings.disk_dir, sum(f.size for f in files),
                                  self.settings.disk_reserve_bytes)
            if short:
                raise ApiError(422, short)
        elif dest_dir is not None:
            total = sum(f.size for f in files)
            used = self.filesets.held_bytes()
            if used + total > self.settings.budget_bytes:
                raise ApiError(422, f"storing {total} bytes does not fit the budget of {self.settings.budget_bytes} "
                                    f"bytes ({used} held by file sets); use destination 'sink' or a smaller set")
        verify = body.get("verify_checksums", True)
        if not isinstance(verify, bool):
            raise ApiError(422, "verify_checksums must be true or false")
        tokens = _tokens(body.get("tokens"), protocol)
        if tokens is not None and storage.disk and protocol != "builtin":
            raise ApiError(422, f"storage disk with tokens is built for builtin only (the {protocol} servers' token "
                                "scopes name /sets and /incoming, not the disk path's /disk/...)")
        if protocol == "xrootd-root" and tokens is not None and (tokens.create or source_path == "/sets"):
            raise ApiError(422, "tokens apply to xrootd-root only as an external source's read token (tokens.read, "
                                "with source.path; tokens.create null)")
        return TransferJob(test_id=test_id, protocol=protocol, source=Endpoint(host, port, source_path), files=files,
                           file_set=spec.name, concurrency=concurrency, streams=streams, timeout=float(timeout),
                           destination_dir=dest_dir, verify_checksums=verify,
                           duration=float(duration) if duration is not None else None,
                           tokens=tokens,
                           congestion=_congestion(body.get("congestion_control"), protocol),
                           remote=remote,
                           x509=_x509(body.get("x509"), protocol, remote is not None or source_path != "/sets"),
                           storage=storage)

    def _storage(self, given: Any, protocol: str, destination: str, external: bool) -> Storage:
        """``storage`` (storage.py), refused with the reason where this agent or this test cannot do disk mode."""
        try:
            storage = parse_storage(given)
        except ValueError as e:
            raise ApiError(422, str(e)) from e
        if not storage.disk:
            return storage
        if protocol not in DISK_PROTOCOLS:
            raise ApiError(422, f"storage disk is not built for {protocol} (it moves no file; disk mode: "
                                f"{', '.join(DISK_PROTOCOLS)})")
        if external:
            raise ApiError(422, "storage disk applies between agents only (no source.path or remote_destination)")
        if storage.destination == "disk":
            if destination != "store":
                raise ApiError(422, "storage.destination disk needs destination 'store' (a sink writes nothing)")
            why = disk_problem(self.settings.node_name, self.settings.disk_dir)
            if why:
                raise ApiError(422, why)
        ids = None  # the servers' user when it is not the agent's own (root drops to run_user)
        if protocol != "builtin":
            with contextlib.suppress(MoverUnavailable):  # no such user: the protocol is unavailable anyway
                ids = run_user_ids(self.settings)
        if ids is not None:
            assert self.settings.disk_dir is not None
            why = entry_problem(self.settings.node_name, self.settings.disk_dir, *ids)
            if why:
                raise ApiError(422, why)
        return storage

    def _files(self, given: Any, spec: Any) -> tuple[FileSpec, ...]:
        if given is None:
            local = {e.name: e for e in self.filesets.manifest(spec.name) or []}
            return tuple(FileSpec(n, s, local[n].checksum if n in local and local[n].size == s else None)
                         for n, s in spec.files)
        if not isinstance(given, list) or not given:
            raise ApiError(422, "files must be a non-empty list of {name, size, checksum}")
        out = []
        for i, f in enumerate(given):
            if not isinstance(f, dict):
                raise ApiError(422, f"files[{i}] must be an object {{name, size, checksum}}")
            try:
                name = validate_name(f.get("name"), f"files[{i}].name")
            except FileSetError as e:
                raise ApiError(422, str(e)) from e
            size = _int(f, "size", -1, 0, MAX_FILE_SIZE)
            ck = f.get("checksum")
            if ck is not None and (not isinstance(ck, str) or not CHECKSUM_RE.match(ck)):
                raise ApiError(422, f"files[{i}].checksum must look like adler32:0123abcd, got {ck!r}")
            out.append(FileSpec(name, size, ck))
        if len({f.name for f in out}) != len(out):
            raise ApiError(422, "files: names must be unique")
        return tuple(out)

    # ---- API operations ----------------------------------------------------------------------------------
    def submit(self, body: Any) -> tuple[int, dict]:
        if isinstance(body, dict) and isinstance(body.get("test_id"), str):
            with contextlib.suppress(ValueError):
                existing = self.runs.get(str(uuid.UUID(body["test_id"])))
                if existing is not None:
                    return 200, existing.view()
        job = self.parse(body)
        if self.running is not None:
            raise ApiError(409, f"test {self.running.job.test_id} is running; one test at a time",
                           running_test_id=self.running.job.test_id)
        mover = self.movers.get(job.protocol)
        if mover is None:
            raise ApiError(422, f"protocol {job.protocol} is unavailable on this agent: "
                                f"{self.problems.get(job.protocol, 'no mover')}")
        try:
            why = mover.available()
        except Exception as e:  # a broken availability check makes the protocol unavailable, not the API
            why = f"availability check failed: {type(e).__name__}: {e}"
        if why:
            raise ApiError(422, f"protocol {job.protocol} is unavailable on this agent: {why}")
        short = memory_shortfall(job, mover, job.destination_dir.parent if job.destination_dir is not None
                                 else self.settings.incoming_dir)
        if short:
            raise ApiError(422, short)
        run = Run(job=job, started_at=datetime.now(UTC))
        run.progress.files_total = len(job.files)
        self.runs[job.test_id] = run
        while len(self.runs) > KEEP_RECORDS:
            self.runs.popitem(last=False)
        self.running = run
        run.task = asyncio.create_task(self._execute(run, mover), name=f"transfer-{job.test_id}")
        log.info("Started transfer %s: %s from %s, %d files, streams %d, concurrency %d, %s, %s to %s",
                 job.test_id, job.protocol, job.source.hostport(), len(job.files), job.streams, job.concurrency,
                 "sink" if job.destination_dir is None else "store", job.storage.source, job.storage.destination)
        return 202, run.view()

    async def get(self, test_id: str, wait: float = 0.0) -> dict:
        """The test's record, once it ended or ``wait`` seconds passed, whichever is first."""
        run = self.runs.get(test_id)
        if run is None:
            raise ApiError(404, f"no transfer {test_id} on this agent")
        if wait > 0 and run.record is None and run.task is not None:
            await asyncio.wait([run.task], timeout=wait)  # the test goes on when the wait ends
        return run.view()

    async def cancel(self, test_id: str) -> dict:
        run = self.runs.get(test_id)
        if run is None:
            raise ApiError(404, f"no transfer {test_id} on this agent")
        if run.record is None and run.task is not None:
            run.cancel_requested = True
            stop = getattr(self.movers.get(run.job.protocol), "stop_test", None)
            if stop is not None:  # cooperative: the mover ends its files itself and reports the bytes they got
                stop(run.job.test_id, "cancelled by request")
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(run.task), TIMEOUT_GRACE)
            if run.record is None:
                run.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(run.task), 30)
        return run.view()

    async def shutdown(self) -> None:
        if self.running is not None:
            await self.cancel(self.running.job.test_id)

    # ---- execution ---------------------------------------------------------------------------------------
    async def _sample(self, run: Run) -> None:
        while True:
            run.samples.append((time.monotonic(), run.progress.bytes_done))
            await asyncio.sleep(SAMPLE_INTERVAL)

    async def _execute(self, run: Run, mover: Mover) -> None:
        job = run.job
        self.metrics.active.inc()
        sampler = asyncio.create_task(self._sample(run))
        sockets = PeerSockets(job.source.host).start() if job.protocol in KERNEL_VIEW_PROTOCOLS else None
        results: list[FileResult] | None = None
        status, error = "failed", None
        t0 = time.monotonic()
        restarts = self._restarts(job.protocol)
        try:
            results = await asyncio.wait_for(mover.run(job, run.progress), job.timeout + TIMEOUT_GRACE)
            error = records.failure_summary(results)
            status = "failed" if error else "succeeded"
            if error:
                error += await self._server_died(job.protocol, restarts)
            if run.cancel_requested:
                status = "cancelled"
                error = f"cancelled by request after {sum(r.bytes for r in results)} bytes"
            elif error and time.monotonic() - t0 >= job.timeout:
                error = f"timed out after {job.timeout:g} s: {error}"
        except TimeoutError:
            error = f"timed out after {job.timeout:g} s ({run.progress.bytes_done} bytes received)"
        except asyncio.CancelledError:
            if not run.cancel_requested:
                raise
            status, error = "cancelled", f"cancelled by request after {run.progress.bytes_done} bytes"
        except MoverUnavailable as e:
            error = f"protocol {job.protocol} is unavailable: {e}"
        except Exception as e:
            log.exception("Transfer %s failed in the mover", job.test_id)
            error = f"mover error: {type(e).__name__}: {e}"
        finally:
            sampler.cancel()
            finished = datetime.now(UTC)
            receiver_view = await sockets.stop() if sockets is not None else None
            run.samples.append((time.monotonic(), run.progress.bytes_done))
            if results is None:
                results = [FileResult(name=f.name, size=f.size, bytes=0, error=error) for f in job.files]
            try:
                if job.destination_dir is not None:  # free the memory before the record says "done"
                    await asyncio.to_thread(shutil.rmtree, job.destination_dir, True)
                samples = records.spread_samples(results) if run.progress.end_only else run.samples
                implementation = versions.implementation(mover.implementation, self.versions,
                                                         await self._peer_version(mover, job, results))
                host = await self._host_summary(job, run.started_at, finished)
                run.record = records.build_record(job, results, run.started_at, finished, status, error, samples,
                                                  receiver_view, implementation, host)
            except Exception as e:  # a malformed mover result must not leave the agent busy forever
                log.exception("Transfer %s: building the record failed", job.test_id)
                status, error = "failed", f"agent error building the record: {type(e).__name__}: {e}"
                run.record = records.build_record(
                    job, [FileResult(name=f.name, size=f.size, error=error) for f in job.files], run.started_at,
                    finished, status, error)
            finally:
                self.metrics.active.dec()
                if self.running is run:
                    self.running = None
            self.metrics.transfers.labels(job.protocol, status).inc()
            self.metrics.bytes.labels(job.protocol).inc(run.record["total_bytes"])
            log.info("Finished transfer %s: %s, %d bytes, throughput %s Gbit/s, aggregate %s Gbit/s%s",
                     job.test_id, status, run.record["total_bytes"], _fmt(run.record["throughput_gbps"]),
                     _fmt(run.record["aggregate_gbps"]), f" ({error})" if error else "")


    async def _host_summary(self, job: TransferJob, started: datetime, finished: datetime) -> dict | None:
        """``{"destination": this end's host summary}`` over the test (the operator adds the source's); None when
        this agent keeps no host telemetry."""
        if self.host is None:
            return None
        try:
            mine = await asyncio.to_thread(self.host.summary, started.timestamp(), finished.timestamp(),
                                           _ip_or_none(job.source.host))
        except Exception as e:  # telemetry is worth no failed record
            log.warning("Transfer %s: summarising the host telemetry failed: %s", job.test_id, e)
            return None
        return {"destination": mine} if mine is not None else None

    async def _peer_version(self, mover: Mover, job: TransferJob, results: list[FileResult]) -> str | None:
        """The other end's version (Mover.peer_version), asked only when data came (a source that sent nothing may
        be down: no wait for it); None when unknown."""
        if not any(r.bytes for r in results):
            return None
        try:
            return await asyncio.wait_for(mover.peer_version(job), versions.TIMEOUT + 1)
        except Exception as e:  # a version is worth no failed record
            log.info("Transfer %s: the source's %s version is unknown: %s", job.test_id, mover.implementation, e)
            return None

    def _local_server(self, protocol: str) -> str:
        """The server doing ``protocol``'s destination side here, whose death a failed test should name."""
        mover = self.movers.get(protocol)
        return (mover.local_server if mover is not None else None) or protocol

    def _restarts(self, protocol: str) -> int | None:
        status = self.server_status() if self.server_status is not None else {}
        server = self._local_server(protocol)
        return status[server]["restarts"] if server in status else None

    async def _server_died(self, protocol: str, before: int | None) -> str:
        """'; the local <protocol> server exited …' when it did during the test, else ''. The supervisor may
        learn of the exit a moment after the mover saw its connections cut: wait a little for it."""
        if before is None:
            return ""
        for _ in range(10):
            if (self._restarts(protocol) or 0) > before:
                assert self.server_status is not None
                message = self.server_status()[self._local_server(protocol)].get("last_exit") or "exited"
                hint = (" (killed by SIGKILL: often the kernel's OOM killer, see dmesg; lower concurrency or "
                        "streams)" if "status -9" in message else "")
                return f"; the local {protocol} server died during the test: {message}{hint}"
            await asyncio.sleep(0.1)
        return ""


def _ip_or_none(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None  # a name (an external endpoint): the interface is then the one that moved the most bytes


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


TOKEN_PROTOCOLS = ("xrootd-https", "builtin", "xrootd-root")  # xrootd-root: an external endpoint's token only
MAX_TOKEN_CHARS = 8192
_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def _congestion(given: Any, protocol: str) -> str | None:
    """``congestion_control``: an algorithm this node may send with, for a mover that sets it."""
    if given is None:
        return None
    if protocol not in congestion.PROTOCOLS:
        raise ApiError(422, f"congestion_control applies to {' and '.join(congestion.PROTOCOLS)} only "
                            f"({protocol} chooses its own)")
    why = congestion.problem(given)
    if why:
        raise ApiError(422, why)
    return str(given)


def _tokens(given: Any, protocol: str) -> BearerTokens | None:
    """``tokens: {read, create}`` of a token-authorized copy; errors name the field, never the token's text."""
    if given is None:
        return None
    if protocol not in TOKEN_PROTOCOLS:
        raise ApiError(422, f"tokens apply to {', '.join(TOKEN_PROTOCOLS)} only, not {protocol!r}")
    if not isinstance(given, dict) or set(given) != {"read", "create"}:
        raise ApiError(422, "tokens must be an object {read, create}: the source's read token and the landing's "
                            "create token")
    for name in ("read", "create"):
        value = given[name]
        if value is None:  # a side without a token: an external endpoint's anonymous read, an x509 landing
            continue
        if not isinstance(value, str) or len(value) > MAX_TOKEN_CHARS or not _TOKEN_RE.fullmatch(value):
            raise ApiError(422, f"tokens.{name} must be a compact JWT (three base64url parts, at most "
                                f"{MAX_TOKEN_CHARS} characters) or null")
    return BearerTokens(read=given["read"], create=given["create"])


# protocols that can copy to or from an external endpoint (HTTP-TPC: a COPY the remote or local XRootD runs; root://:
# xrdcp, with the site's token over ztn; gsiftp://: globus-url-copy with the site's X509 credential)
EXTERNAL_PROTOCOLS = ("xrootd-https", "xrootd-root", "gridftp")
_PEM_RE = re.compile(r"^[\x20-\x7e\r\n]{1,65536}$")
_PATH_RE = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
_BEARER_RE = re.compile(r"^[\x21-\x7e]{1,8192}$")  # a header-safe bearer token (a site's may not be a JWT)
_REMOTE_URL_RE = {"xrootd-https": re.compile(r"^(https|davs)://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._-]+)+$"),
                  "xrootd-root": re.compile(r"^root://[A-Za-z0-9.:\[\]-]+/(/[A-Za-z0-9._-]+)+$"),
                  "gridftp": re.compile(r"^gsiftp://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._-]+)+$")}
_REMOTE_SCHEMES = {"xrootd-https": "an https:// or davs://", "xrootd-root": "a root://host:port//",
                   "gridftp": "a gsiftp://"}


def _x509(given: Any, protocol: str, external: bool) -> X509Credential | None:
    """``x509: {proxy} | {cert, key}``: an external GridFTP endpoint's credential; errors never quote it."""
    if given is None:
        return None
    if protocol != "gridftp" or not external:
        raise ApiError(422, "x509 applies to gridftp with an external source (source.path) or a remote_destination "
                            "only")
    if not isinstance(given, dict) or set(given) not in ({"proxy"}, {"cert", "key"}):
        raise ApiError(422, "x509 must be an object {proxy} or {cert, key} (PEM)")
    for name, value in given.items():
        if not isinstance(value, str) or not _PEM_RE.match(value) or "-----BEGIN" not in value:
            raise ApiError(422, f"x509.{name} must be PEM text")
    return X509Credential(**given)


def _plain_path(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _PATH_RE.match(value) or any(p in (".", "..") for p in value.split("/")):
        raise ApiError(422, f"{what} must be an absolute path of plain names (no . or ..), got {value!r}")
    return value


def _source_path(value: Any, protocol: str) -> str:
    """source.path: where the source keeps its file sets (an agent's /sets; an external endpoint's own)."""
    path = _plain_path(value, "source.path")
    if path != "/sets" and protocol not in EXTERNAL_PROTOCOLS:
        raise ApiError(422, f"source.path applies to {', '.join(EXTERNAL_PROTOCOLS)} only, not {protocol!r}")
    return path


def _remote_destination(given: Any, protocol: str) -> RemoteDestination | None:
    """remote_destination {url, token, remove}: push the set into an external endpoint's directory ``url``."""
    if given is None:
        return None
    if protocol not in EXTERNAL_PROTOCOLS:
        raise ApiError(422, f"remote_destination applies to {', '.join(EXTERNAL_PROTOCOLS)} only, not {protocol!r}")
    if not isinstance(given, dict) or not set(given) <= {"url", "token", "remove"}:
        raise ApiError(422, "remote_destination must be an object {url, token, remove}")
    url = given.get("url")
    if not isinstance(url, str) or not _REMOTE_URL_RE[protocol].match(url) or "/../" in url + "/" or \
            "/./" in url + "/":
        raise ApiError(422, f"remote_destination.url must be {_REMOTE_SCHEMES[protocol]} directory URL of plain "
                            f"names for {protocol}, got {url!r}")
    token = given.get("token")
    if token is not None and (not isinstance(token, str) or not _BEARER_RE.match(token)):
        raise ApiError(422, "remote_destination.token must be a bearer token (printable, no spaces) or null")
    remove = given.get("remove", True)
    if not isinstance(remove, bool):
        raise ApiError(422, "remote_destination.remove must be true or false")
    return RemoteDestination(url.replace("davs://", "https://", 1), token, remove)

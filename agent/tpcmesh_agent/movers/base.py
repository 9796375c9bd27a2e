"""The one interface every mover implements.

A mover performs one pull-mode test as the destination: it fetches ``job.files`` from the source
endpoint, at most ``job.concurrency`` files in flight, ``job.streams`` TCP streams per file, and
reports each file's outcome. Statistics (throughput, aggregate, peak) are computed once, from the
FileResults, by the transfer runner, never by a mover.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..storage import Storage


@dataclass(frozen=True)
class FileSpec:
    """One file of a file set, as the source holds it."""

    name: str  # a plain file name: no '/', no '..' (validated at the API edge)
    size: int  # bytes
    checksum: str | None = None  # "adler32:<8 hex>" when the source published it


def url_host(host: str) -> str:
    """A host as URLs and Host headers write it: an IPv6 literal in brackets (RFC 3986), else as it is."""
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class Endpoint:
    """Where the source serves the protocol: host (an IP address or name), port, and the directory holding the
    file sets (an agent's /sets; an external endpoint's <path>/.../sets)."""

    host: str
    port: int
    path: str = "/sets"

    @property
    def is_agent(self) -> bool:
        """A peer agent's public instance (its tokens come from the agents' issuer), not an external endpoint."""
        return self.path == "/sets"

    def hostport(self) -> str:
        return f"{url_host(self.host)}:{self.port}"


@dataclass(frozen=True)
class BearerTokens:
    """Tokens of a token-authorized third-party copy: ``read`` is forwarded to the source (storage.read:/sets),
    ``create`` authorizes the landing (storage.create:/incoming). Secrets: never in a repr, a log or a record."""

    read: str | None = field(repr=False)
    create: str | None = field(repr=False)  # None: the landing takes the agent's certificate (x509 mode)


@dataclass(frozen=True)
class RemoteDestination:
    """A third-party copy INTO storage outside the mesh (an external endpoint): the remote pulls the files from
    this agent's public instance (HTTP-TPC COPY sent to it). ``url`` is the directory the files land in; ``token``
    authorizes the COPY there (the site's credential, never logged); ``remove`` deletes each copy after its
    checksum was read (a benchmark leaves nothing behind)."""

    url: str
    token: str | None = field(default=None, repr=False)
    remove: bool = True


@dataclass(frozen=True)
class X509Credential:
    """An external endpoint's X509 credential for GridFTP (gsiftp://): a proxy (PEM: certificate, key, chain), or a
    certificate and its key. Secrets: never in a repr, a log or a record; written only to a private file."""

    proxy: str | None = field(default=None, repr=False)
    cert: str | None = field(default=None, repr=False)
    key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class TransferJob:
    test_id: str
    protocol: str
    source: Endpoint
    files: tuple[FileSpec, ...]
    file_set: str  # the source-side directory name of the set (e.g. "11x1000000000" or "small")
    concurrency: int
    streams: int
    timeout: float  # seconds for the whole test
    destination_dir: Path | None  # None: sink (discard the bytes)
    verify_checksums: bool = True
    duration: float | None = None  # seconds a timed test (iperf3) runs; None: the mover's default
    tokens: BearerTokens | None = None  # token mode (xrootd-https); None: the protocol's usual authorization
    congestion: str | None = None  # TCP congestion control the sender uses (builtin, iperf3); None: the default
    remote: RemoteDestination | None = None  # push into an external endpoint instead of pulling into this agent
    x509: X509Credential | None = None  # the external endpoint's credential (gridftp), None: this agent's own
    storage: Storage = Storage()  # where the source reads and this destination writes (disk mode: storage.py)


@dataclass
class FileResult:
    name: str
    size: int
    bytes: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    checksum_ok: bool | None = None
    peak_bps: float | None = None  # this file's fastest >= 1 s window (file growth, iperf3 intervals), bit/s
    # the kernel's view of the file's connections: {"sender": summary, "receiver": summary} (tcpinfo.py), either
    # side None when unknown; None when the mover has no TCP view
    tcp: dict[str, Any] | None = None
    # disk mode: why the file was written through the page cache instead of O_DIRECT (None: direct, or memory)
    write_fallback: str | None = None


@dataclass
class Progress:
    """Live counters a mover updates; GET /api/v1/transfers/{id} reads them."""

    bytes_done: int = 0
    files_done: int = 0
    files_total: int = 0
    # True when the counters move only as a whole file (or iperf3's whole run) ends: sampled, they would show one
    # jump per file, not a rate, so the record's peak then comes from the files' own times (records.spread_samples)
    end_only: bool = False

    def add_bytes(self, n: int) -> None:
        self.bytes_done += n


ProgressCallback = Callable[[int], None]


class MoverUnavailable(RuntimeError):
    """The mover cannot run here (program missing, server down); the message names the fix."""


class Mover(abc.ABC):
    """A protocol's destination-side client."""

    protocol: str
    local_server: str | None = None  # the local server doing the destination side, when not named ``protocol``
    # the implementation doing this end's part, as versions.local_versions names it (its version goes in the record)
    implementation: str = "tpcmesh-agent"

    def __init__(self, settings: Any = None) -> None:
        self.settings = settings  # the agent's Settings (config.py)

    @abc.abstractmethod
    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
        """Pull every file of the job; never raise for a per-file failure (record it in FileResult.error).

        Raise MoverUnavailable when the protocol cannot run at all. Cancellation (asyncio.CancelledError)
        must stop all child processes and sockets before propagating.
        """

    def available(self) -> str | None:
        """None when usable, else a message naming what is missing (e.g. the Debian package)."""
        return None

    def refusal(self, job: TransferJob) -> str | None:
        """None when this mover can run ``job``, else why not (e.g. more streams than its program takes)."""
        return None

    def ensure_available(self, job: TransferJob) -> None:
        """Raise MoverUnavailable, with the reason, when the mover cannot run here or cannot run ``job``."""
        why = self.available() or self.refusal(job)
        if why:
            raise MoverUnavailable(why)

    def begin(self, job: TransferJob, progress: Progress) -> float:
        """A run's first steps: ensure_available, count the job's files in ``progress``; the job's deadline
        (``time.monotonic()`` seconds) returned."""
        self.ensure_available(job)
        progress.files_total = len(job.files)
        return time.monotonic() + job.timeout

    def memory_needed(self, job: TransferJob) -> tuple[int, str] | None:
        """Worst-case RAM this protocol's programs take for ``job`` beyond the stored files, and why; None: small."""
        return None

    async def peer_version(self, job: TransferJob) -> str | None:
        """The other end's version of the implementation, asked over the protocol once the job's data has moved
        (versions.py); None when unknown. Never raises."""
        return None

    def close(self) -> None:
        """Remove what the mover keeps on disk (e.g. a private credential copy); called when the agent stops."""
        return None


async def run_files_concurrently(
    job: TransferJob, pull_one: Callable[[FileSpec], Awaitable[FileResult]]
) -> list[FileResult]:
    """Run ``pull_one`` for every file with at most ``job.concurrency`` in flight, results in job order."""
    limit = asyncio.Semaphore(job.concurrency)

    async def guarded(spec: FileSpec) -> FileResult:
        async with limit:
            return await pull_one(spec)

    return list(await asyncio.gather(*(guarded(f) for f in job.files)))

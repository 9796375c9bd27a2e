"""``BuiltinMover``: the destination agent's side of a builtin test: every file of the set pulled by client.pull,
``concurrency`` at a time in threads, checksums verified, the job's timeout and cancellation shut the sockets.
With tokens, the read token goes to the source (Authorization) and the create token is checked here as the
built-in COPY checks it (token mode), so a built-in row pays the same token checks as an XRootD one. Each file's TCP
view: this side's samples of its connections, and the source's (fetched once the files are in)."""

from __future__ import annotations

import asyncio
import http.client
import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ... import tcpinfo
from ...directio import BLOCK, DEPTH
from ...files import adler32_of
from ...token_check import TokenRefused, builtin_validator
from ...versions import TIMEOUT, parse_agent_server
from ..base import FileResult, FileSpec, Mover, Progress, TransferJob
from .client import (
    IDLE_TIMEOUT,
    Counter,
    PullError,
    SocketRegistry,
    TcpTelemetry,
    _now,
    client_ssl_context,
    digest_checksum,
    pull,
)
from .telemetry import FETCH_TIMEOUT, fetch_sender_views


class BuiltinMover(Mover):
    protocol = "builtin"  # its implementation is the agent itself (Mover's default)

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.idle_timeout = float(getattr(settings, "idle_timeout", IDLE_TIMEOUT))
        self._registries: dict[str, SocketRegistry] = {}

    async def peer_version(self, job: TransferJob) -> str | None:
        """The source agent's version from its data server's ``Server`` header (any answer carries it)."""
        ssl_ctx = client_ssl_context(self.settings) if self.settings.builtin_tls else None
        return await asyncio.to_thread(server_header_version, job.source.host, job.source.port, ssl_ctx)

    def memory_needed(self, job: TransferJob) -> tuple[int, str] | None:
        """Disk mode: every connection writes through its own aligned buffers (directio.WriteBehind); memory mode's
        splice pipes are small."""
        if job.storage.destination != "disk":
            return None
        connections = min(job.concurrency, len(job.files)) * max(1, job.streams)
        return (connections * DEPTH * BLOCK, f"disk writes go through {DEPTH} aligned buffers of {BLOCK >> 20} MiB "
                f"per connection ({connections} connections)")

    def stop_test(self, test_id: str, reason: str) -> None:
        """End a running test now: every file stops with ``reason`` and keeps the bytes it received."""
        registry = self._registries.get(test_id)
        if registry is not None:
            registry.cancel(reason)

    def _pull_one(self, job: TransferJob, spec: FileSpec, registry: SocketRegistry, progress: Progress,
                  ssl_ctx: ssl.SSLContext | None) -> FileResult:
        res = FileResult(name=spec.name, size=spec.size, started_at=_now())
        counter = Counter(progress)
        dest = job.destination_dir / spec.name if job.destination_dir is not None else None
        meta: dict[str, str] = {}
        want_digest = dest is not None and job.verify_checksums and not spec.checksum
        auth = f"Bearer {job.tokens.read}" if job.tokens is not None else None
        telemetry = TcpTelemetry(key=f"{job.test_id}/{spec.name}", congestion=job.congestion)
        # disk mode: the source serves its disk copy under /disk/ (read with O_DIRECT), and this end writes with
        # O_DIRECT and fsyncs before the file's end time
        root = "disk" if job.storage.source == "disk" else "files"
        direct: list[str | None] | None = [] if job.storage.destination == "disk" else None
        try:
            pull(job.source.host, job.source.port, f"/{root}/{job.file_set}/{spec.name}", spec.size, dest,
                 job.streams, registry, counter, ssl_ctx, self.idle_timeout, meta if want_digest else None, auth,
                 telemetry=telemetry, direct=direct)
        except PullError as e:
            res.error = f"read token: {e}" if auth and "token refused" in str(e) else str(e)
        except OSError as e:
            res.error = f"{spec.name}: {e.strerror or e}"
        res.bytes = counter.value
        res.finished_at = _now()
        res.write_fallback = next((why for why in direct or [] if why), None)
        res.tcp = {"sender": None, "receiver": tcpinfo.combine(telemetry.receiver)}
        expected = spec.checksum or digest_checksum(meta.get("digest"))
        if res.error is None and dest is not None and job.verify_checksums and expected:
            got = adler32_of(dest)
            res.checksum_ok = got == expected
            if not res.checksum_ok:
                res.error = f"checksum mismatch: expected {expected}, received {got}"
        progress.files_done += 1
        return res

    def _landing_refusal(self, job: TransferJob) -> str | None:
        """Why the create token does not allow landing the job's files here (token mode); None when it does."""
        validator = builtin_validator(self.settings)
        if job.tokens is None or validator is None or job.destination_dir is None:
            return None
        try:
            where = job.destination_dir.relative_to(self.settings.incoming_dir).as_posix()
        except ValueError:
            where = "."
        try:
            validator.check(job.tokens.create, "create", "/incoming" + ("" if where == "." else f"/{where}"))
        except TokenRefused as e:
            return f"create token: {e}"
        return None

    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
        # token mode only (the check may fetch the issuer's keys: in a thread, which otherwise is not started)
        refused = await asyncio.to_thread(self._landing_refusal, job) if job.tokens is not None else None
        if refused is not None:
            progress.files_total = len(job.files)
            return [FileResult(name=f.name, size=f.size, started_at=_now(), finished_at=_now(), error=refused)
                    for f in job.files]
        registry = SocketRegistry()
        self._registries[job.test_id] = registry
        ssl_ctx = client_ssl_context(self.settings) if self.settings.builtin_tls else None
        progress.files_total = len(job.files)
        if job.destination_dir is not None:
            job.destination_dir.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(max_workers=max(1, min(job.concurrency, len(job.files))),
                                      thread_name_prefix=f"builtin-{job.test_id[:8]}")
        futures = [loop.run_in_executor(executor, self._pull_one, job, f, registry, progress, ssl_ctx)
                   for f in job.files]
        # the job's own timeout: shut the sockets so every file ends with the reason and the bytes it got
        deadline = loop.time() + job.timeout
        timer = loop.call_later(job.timeout, registry.cancel, f"timed out after {job.timeout:g} s")
        try:
            results = list(await asyncio.gather(*futures))
            # the source's view fits in what is left of the job's time; a test that timed out, was cancelled or
            # got no byte does not wait for it (the source may be the reason)
            left = deadline - loop.time()
            asked = not registry.cancelled and left >= 0.5 and any(r.bytes for r in results)
            views = await loop.run_in_executor(
                executor, fetch_sender_views, job.source.host, job.source.port, job.test_id, ssl_ctx,
                min(FETCH_TIMEOUT, left)) if asked else None
            for r in results:
                if views is not None and r.tcp is not None:
                    r.tcp["sender"] = tcpinfo.combine(views.get(r.name, []))
            return results
        except asyncio.CancelledError:
            registry.cancel("cancelled")
            raise
        finally:
            timer.cancel()
            self._registries.pop(job.test_id, None)
            registry.cancel("cancelled")
            executor.shutdown(wait=False, cancel_futures=True)


def server_header_version(host: str, port: int, ssl_ctx: ssl.SSLContext | None) -> str | None:
    """The agent version a built-in data server names in its ``Server`` header (a HEAD of /files/: refused or not,
    the answer carries it); None when it cannot be asked or names none."""
    conn: http.client.HTTPConnection = (http.client.HTTPSConnection(host, port, timeout=TIMEOUT, context=ssl_ctx)
                                        if ssl_ctx is not None else http.client.HTTPConnection(host, port,
                                                                                               timeout=TIMEOUT))
    try:
        conn.request("HEAD", "/files/", headers={"User-Agent": "tpcmesh-agent"})
        return parse_agent_server(conn.getresponse().getheader("Server"))
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()

"""XRootD HTTP-TPC, pull mode: the agent asks its LOCAL XRootD server to pull each file from the source's XRootD.

For each file: ``COPY https://<local>:<xrootd_tpc_port>/incoming/<test>/<name>`` (the local TPC instance, which
only this agent's host certificate may use) with
``Source: https://<source>/sets/<set>/<name>``, ``Credential: none`` and ``X-Number-Of-Streams: <streams>``; the
answer is a ``text/perf-marker-stream``. XRootD answers 201 even when the copy failed: only the final body line
(``success: …`` / ``failure: …``) tells, so the body is always read to its end.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import time

import aiohttp

from ..daemons.configs import TPC_SERVERS
from ..markers import MarkerParser
from ..tokens import Expectation, refusal_reason
from .base import BearerTokens, FileResult, FileSpec, Progress, TransferJob, run_files_concurrently, url_host
from .external import FileWatch, finish_file, land_on_disk, now, prepare_destination, short, source_sets
from .remote_push import COPY_ERRORS, copy_error, push_file
from .xrootd import XrootdMover

MAX_STREAMS = 100  # XRootD answers 500 above this
# XrdHttpTPC (Debian's 5.5 build, with pipelining) reorders a multi-stream pull through up to 16 blocks of 16 MiB
# per stream per file, 16 blocks of 1 MiB for one stream: measured 840 MB resident for one 1 GB file x 8 streams
BLOCKS_PER_STREAM = 16
BLOCK = 16 * 2**20
SMALL_BLOCK = 2**20


class XrootdHttpsMover(XrootdMover):
    protocol = "xrootd-https"
    local_server = TPC_SERVERS["xrootd-https"]
    source_scheme = "https"  # the URL scheme the local XRootD uses to reach the source

    def available(self) -> str | None:
        if not shutil.which("xrootd"):
            return "xrootd is not installed: install the Debian package xrootd-server"
        s = self.settings
        if s.tls_cert is None or s.ca_file is None:
            return "needs tls_cert, tls_key and ca_file: XRootD's HTTP-TPC handler loads only with TLS"
        return None

    def refusal(self, job: TransferJob) -> str | None:
        if job.streams > MAX_STREAMS:
            return f"XRootD accepts at most {MAX_STREAMS} streams, the test asked for {job.streams}"
        return None

    def memory_needed(self, job: TransferJob) -> tuple[int, str] | None:
        in_flight = sorted((f.size for f in job.files), reverse=True)[:job.concurrency]
        if job.streams > 1:
            need = sum(min(job.streams * BLOCKS_PER_STREAM, -(-size // BLOCK)) * BLOCK for size in in_flight)
            why = (f"XRootD's multi-stream HTTP-TPC buffers up to {BLOCKS_PER_STREAM} blocks of 16 MiB per stream "
                   f"for each of the {len(in_flight)} files in flight")
        else:
            need = len(in_flight) * BLOCKS_PER_STREAM * SMALL_BLOCK
            why = f"XRootD's HTTP-TPC buffers up to {BLOCKS_PER_STREAM} MiB per file in flight"
        return need, why

    def _ssl(self) -> ssl.SSLContext:
        """Trusts the agents' CA and presents this agent's host certificate: the local XRootD lets only that
        identity write into /incoming (see daemons.configs.xrootd_tpc_config)."""
        ctx = ssl.create_default_context(cafile=str(self.settings.ca_file))
        ctx.load_cert_chain(str(self.settings.tls_cert), str(self.settings.tls_key))
        return ctx

    def local_url(self, path: str) -> str:
        return f"https://{url_host(self.settings.address)}:{self.settings.xrootd_tpc_port}{path}"

    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
        deadline = self.begin(job, progress)
        if job.remote is not None:
            return await self._push(job, deadline, progress)
        dest = prepare_destination(self.settings, job, self.protocol)
        # from the agent's own address: the local TPC instance accepts no other (on loopback the kernel would
        # pick 127.0.0.1 otherwise)
        conn = aiohttp.TCPConnector(limit=0, ssl=self._ssl(), local_addr=(self.settings.address, 0))
        async with aiohttp.ClientSession(connector=conn) as session:
            async def pull(spec: FileSpec) -> FileResult:
                result = await self._copy(session, job, spec, dest, deadline, progress)
                progress.files_done += 1
                return result

            return await run_files_concurrently(job, pull)

    async def _push(self, job: TransferJob, deadline: float, progress: Progress) -> list[FileResult]:
        """Into an external endpoint (job.remote): it pulls from this agent's public instance (remote_push.py)."""
        # trusts the agents' CA bundle, which a site adds the external endpoints' CAs to (as grid sites install the
        # IGTF bundle); presents the host certificate in case the remote wants one
        conn = aiohttp.TCPConnector(limit=0, ssl=self._ssl())
        async with aiohttp.ClientSession(connector=conn) as session:
            async def push(spec: FileSpec) -> FileResult:
                read = {"TransferHeaderAuthorization": f"Bearer {job.tokens.read}"} if job.tokens and \
                    job.tokens.read else {}
                result = await push_file(session, job, spec, self.source_url(job, spec), read, deadline, progress)
                progress.files_done += 1
                return result

            return await run_files_concurrently(job, push)

    def source_url(self, job: TransferJob, spec: FileSpec) -> str:
        return f"{self.source_scheme}://{job.source.hostport()}{source_sets(job)}/{job.file_set}/{spec.name}"

    async def _copy(self, session: aiohttp.ClientSession, job: TransferJob, spec: FileSpec, dest: str,
                    deadline: float, progress: Progress) -> FileResult:
        result = FileResult(name=spec.name, size=spec.size, started_at=now())
        source = self.source_url(job, spec)
        headers = {"Source": source, "Credential": "none", "X-Number-Of-Streams": str(job.streams),
                   "Overwrite": "T", **token_headers(job.tokens)}
        parser = MarkerParser()
        error: str | None = None
        assert job.destination_dir is not None
        # progress and peak from the file's growth: markers come every 5 s and, with several streams, count bytes
        # assigned to workers rather than received (XRootD writes the file in order, through its reorder buffer)
        disk = job.storage.destination == "disk"
        watch = FileWatch(job.destination_dir / spec.name, spec.size, progress, sync=disk)
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            timeout = aiohttp.ClientTimeout(total=remaining)
            with watch:
                async with session.request("COPY", self.local_url(f"{dest}/{spec.name}"), headers=headers,
                                           timeout=timeout) as resp:
                    if resp.status not in (200, 201, 202):
                        body = await resp.text(errors="replace")
                        if not failed_before_first_byte(resp.status, body):
                            # XrdHttpTPC answers a refused COPY with 401, the data path a refused request with 403
                            why = self._landing_refusal(job, f"{dest}/{spec.name}") if resp.status in (401, 403) \
                                else ""
                            raise RuntimeError(f"local XRootD answered {resp.status} {resp.reason}: {short(body)}{why}")
                        parser.feed(body)
                    else:
                        async for chunk in resp.content.iter_any():
                            parser.feed(chunk)
            outcome = parser.close()
            if not outcome.ok:
                error = f"XRootD HTTP-TPC failed: {outcome.message}" + self._source_refusal(job, spec, outcome.message)
                if not job.source.is_agent:
                    error += f" (source {source})"
        except COPY_ERRORS as e:
            error = copy_error(e, job, "COPY to the local XRootD")
        result.finished_at = now()
        result.peak_bps = watch.peak_bps()
        if disk:
            error = await land_on_disk(watch, result, error, job.protocol)
        await asyncio.to_thread(finish_file, result, spec, job, error)
        if result.bytes > watch.reported:
            progress.add_bytes(result.bytes - watch.reported)
        return result


    def _landing_refusal(self, job: TransferJob, path: str) -> str:
        """Why the local instance refused the create token (token mode), else nothing."""
        if job.tokens is None or job.tokens.create is None or not self.settings.xrootd_token_issuer:
            return ""
        want = Expectation(self.settings.xrootd_token_issuer, self.settings.xrootd_audience(), "create", path)
        return f" (create token: {refusal_reason(job.tokens.create, want, time.time())})"

    def _source_refusal(self, job: TransferJob, spec: FileSpec, message: str) -> str:
        """Why the source refused the forwarded read token, when it answered 403 (its audience by the agents'
        convention: https://<host>:<port>, the issuer this agent trusts)."""
        if job.tokens is None or "403" not in message or not self.settings.xrootd_token_issuer or \
                not job.source.is_agent:
            return ""
        want = Expectation(self.settings.xrootd_token_issuer, f"https://{job.source.hostport()}", "read",
                           f"/sets/{job.file_set}/{spec.name}")
        return f" (read token: {refusal_reason(job.tokens.read, want, time.time())})"


def failed_before_first_byte(status: int, body: str) -> bool:
    """Whether a COPY's non-2xx answer is a copy that failed, not a refused request: XRootD 5.5 answers every COPY
    it starts 201 and ends the body with ``failure: <why>``; 5.6 and later (5.8.1 in the images) answer one that
    fails before its first byte (the Source answered the size request 404 or 403, was unreachable) 500 with that
    same line. Both then read as the copy's failure (``XRootD HTTP-TPC failed: ...``, with why a forwarded token was
    refused)."""
    return status == 500 and any(line.strip().startswith("failure:") for line in body.splitlines())


def token_headers(tokens: BearerTokens | None) -> dict[str, str]:
    """The COPY's own authorization (the create token, checked by the local instance) and the one XRootD forwards
    to the source (TransferHeader<name>: sent to the source as <name>)."""
    if tokens is None:
        return {}
    out = {"Authorization": f"Bearer {tokens.create}"} if tokens.create else {}
    if tokens.read:
        out["TransferHeaderAuthorization"] = f"Bearer {tokens.read}"
    return out


class XrootdHttpMover(XrootdHttpsMover):
    """The same, with the source read over plain HTTP (same port: XrdHttp with TLS serves both). Benchmarks only."""

    protocol = "xrootd-http"
    source_scheme = "http"

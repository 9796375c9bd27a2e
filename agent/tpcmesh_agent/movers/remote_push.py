"""HTTP-TPC into an external endpoint: the remote storage pulls each file from this agent's public instance.

The way FTS drives a copy: ``COPY <remote dir>/<name>`` is sent to the REMOTE endpoint with
``Source: https://<this agent's public instance>/sets/<set>/<name>``, ``Authorization: Bearer <the site's token>``
(its own authorization), ``TransferHeaderAuthorization: Bearer <read token>`` (forwarded to this agent in token
mode) and ``Credential: none``. The answer is a perf-marker stream; like XRootD, a remote may answer 201 and still
fail, so only the final body line counts. Then the copy's adler32 is asked for (``Want-Digest: adler32``) and
compared with the set's, and the copy is deleted (``remove``), so a benchmark leaves nothing at the remote.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import aiohttp

from ..markers import MarkerParser, MarkerResult, MarkerStreamError
from .base import FileResult, FileSpec, Progress, TransferJob
from .external import now, read_back, short

# what sending a COPY and reading its marker stream may raise: copy_error tells each as the file's error
COPY_ERRORS = (TimeoutError, MarkerStreamError, aiohttp.ClientError, RuntimeError)


def copy_error(e: Exception, job: TransferJob, copy: str) -> str:
    """A file's error for one of COPY_ERRORS raised by its COPY (``copy`` names that COPY: "COPY", "COPY to
    the local XRootD"); a RuntimeError already says it all."""
    if isinstance(e, TimeoutError):
        return f"timed out after {job.timeout:g} s"
    if isinstance(e, MarkerStreamError):
        return f"unreadable marker stream: {e}"
    if isinstance(e, aiohttp.ClientError):
        return f"{copy} failed: {type(e).__name__}: {e}"
    return str(e)


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def digest_of(header: str) -> str | None:
    """'adler32:<8 hex>' from an RFC 3230 Digest header (``adler32=0a1b2c3d``), or None."""
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name.lower() == "adler32" and value:
            return "adler32:" + value.strip().lower().zfill(8)
    return None


async def push_file(session: aiohttp.ClientSession, job: TransferJob, spec: FileSpec, source_url: str,
                    extra_headers: dict[str, str], deadline: float, progress: Progress) -> FileResult:
    """One file: COPY at the remote, then its checksum, then (``remove``) its deletion. Never raises."""
    remote = job.remote
    assert remote is not None
    url = f"{remote.url}/{spec.name}"
    result = FileResult(name=spec.name, size=spec.size, started_at=now())
    headers = {"Source": source_url, "Credential": "none", "X-Number-Of-Streams": str(job.streams),
               "Overwrite": "T", **_auth(remote.token), **extra_headers}
    parser = MarkerParser()
    reported = 0
    error: str | None = None
    try:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        async with session.request("COPY", url, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=remaining)) as resp:
            if resp.status not in (200, 201, 202):
                raise RuntimeError(f"answered the COPY with {resp.status} {resp.reason}: "
                                   f"{short(await resp.text(errors='replace'))}")
            async for chunk in resp.content.iter_any():
                if parser.feed(chunk):
                    moved = MarkerResult(True, "", parser.markers).bytes_transferred
                    if moved > reported:
                        progress.add_bytes(moved - reported)
                        reported = moved
        outcome = parser.close()
        result.finished_at = now()
        if not outcome.ok:
            raise RuntimeError(f"HTTP-TPC failed: {outcome.message}")
        error = await _check(session, job, spec, url, result)
    except COPY_ERRORS as e:
        error = copy_error(e, job, "COPY")
    result.finished_at = result.finished_at or now()
    if error is None and remote.remove:
        error = await _remove(session, url, remote.token)
    if error is not None:
        result.error = f"remote {remote.url}: {error}"
    if result.bytes > reported:
        progress.add_bytes(result.bytes - reported)
    return result


async def _check(session: aiohttp.ClientSession, job: TransferJob, spec: FileSpec, url: str,
                 result: FileResult) -> str | None:
    """The copy's size and adler32 as the remote reports them (HEAD with Want-Digest)."""
    assert job.remote is not None
    token = job.remote.token

    async def head() -> tuple[int, str, Mapping[str, str]]:
        async with session.head(url, headers={"Want-Digest": "adler32", **_auth(token)},
                                timeout=aiohttp.ClientTimeout(total=60)) as resp:
            return resp.status, resp.reason or "", resp.headers

    status, reason, headers = await read_back(head, lambda answer: answer[0] >= 500)
    if status != 200:
        return f"the copy cannot be read back: HEAD answered {status} {reason}"
    result.bytes = int(headers.get("Content-Length") or 0)
    got = digest_of(headers.get("Digest", ""))
    if result.bytes != spec.size:
        return f"received {result.bytes} of {spec.size} bytes"
    if job.verify_checksums and spec.checksum:
        if got is None:
            return "the remote reports no adler32 (Want-Digest not answered)"
        result.checksum_ok = got == spec.checksum
        if not result.checksum_ok:
            return f"checksum mismatch: the remote has {got}, the source published {spec.checksum}"
    return None


async def _remove(session: aiohttp.ClientSession, url: str, token: str | None) -> str | None:
    try:
        async with session.delete(url, headers=_auth(token), timeout=aiohttp.ClientTimeout(total=60)) as resp:
            if resp.status in (200, 202, 204, 404):
                return None
            return f"the copy was made but could not be removed: DELETE answered {resp.status} {resp.reason}"
    except aiohttp.ClientError as e:
        return f"the copy was made but could not be removed: {type(e).__name__}: {e}"

"""The built-in reference mover: a zero-copy HTTP data server plus a pull-mode HTTP-TPC client.

Server (the builtin port, plain HTTP by default, TLS optional):
- ``GET|HEAD /files/<set>/<file>`` (and ``/files/incoming/<file>``, with the agent's bearer token): standard
  HTTP/1.1, ``Range: bytes=a-b`` gives 206, body sent with ``os.sendfile`` (plain TCP) so Python never touches the
  bytes. A connection idle for ``idle_timeout`` seconds is closed.
- ``COPY /files/incoming/<name>`` with ``Source: <http(s) url>``, ``X-Number-Of-Streams``, ``Credential: none`` and
  the agent's bearer token: the WLCG HTTP-TPC pull. Answers ``202`` with a ``text/perf-marker-stream`` body of
  ``Perf Marker`` ... ``End`` blocks every ``marker_interval`` seconds and a final ``success: Created`` or
  ``failure: <reason>`` line.
- ``DELETE /files/incoming/<name>`` (token) removes a pulled file.

Client (``BuiltinMover.run`` and the COPY handler): raw sockets; socket -> pipe -> file with ``os.splice`` (store)
or socket -> pipe -> /dev/null (sink); over TLS, ``recv_into`` a reused buffer. ``streams`` > 1 means that many
parallel Range requests per file. Blocking data paths run in threads; cancellation shuts the sockets down.
"""

from __future__ import annotations

import asyncio
import email.utils
import errno
import fcntl
import hmac
import json
import logging
import os
import re
import socket
import socketserver
import ssl
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

from ..files import MANIFEST, FileSetError, adler32_of, validate_name
from .base import FileResult, FileSpec, Mover, Progress, TransferJob

log = logging.getLogger(__name__)

PIPE_SIZE = 1 << 20
CHUNK = 1 << 20
CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 60.0  # default of settings.idle_timeout: a source that sends nothing for this long fails the file
MAX_HEADER = 64 * 1024
COPY_GRACE = 5.0  # seconds a cancelled COPY pull gets to stop before the caller is answered anyway
HEAD_CHUNK = 16 * 1024  # bytes past the header read here are written before the zero-copy body path starts
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class PullError(Exception):
    """One file (or range) could not be pulled; the message says why and from where."""


class Cancelled(PullError):
    pass


class HeadTimeout(PullError):
    """The response header did not arrive complete within the idle timeout."""


class DigestRefused(PullError):
    """The source answered 405 to a GET with Want-Digest (XRootD without a checksum configured does)."""


class SocketRegistry:
    """Sockets of one test; ``cancel()`` shuts them all down so blocked threads return at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self.cancelled = False
        self.reason = "cancelled"

    def add(self, s: socket.socket) -> None:
        with self._lock:
            if self.cancelled:
                raise Cancelled(self.reason)
            self._socks.add(s)

    def discard(self, s: socket.socket) -> None:
        with self._lock:
            self._socks.discard(s)

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            self.cancelled = True
            self.reason = reason
            socks = list(self._socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Counter:
    """Thread-safe byte counter feeding a Progress (and the COPY handler's markers)."""

    def __init__(self, progress: Progress | None = None) -> None:
        self._lock = threading.Lock()
        self.value = 0
        self.progress = progress

    def add(self, n: int) -> None:
        with self._lock:
            self.value += n
            if self.progress is not None:
                self.progress.add_bytes(n)


# ------------------------------------------------------------------------------------------------ client side
def _connect(host: str, port: int, registry: SocketRegistry, ssl_ctx: ssl.SSLContext | None,
             idle_timeout: float) -> socket.socket:
    try:
        raw = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    except OSError as e:
        raise PullError(f"cannot connect to {host}:{port}: {e.strerror or e}") from e
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock = raw
    if ssl_ctx is not None:
        try:
            sock = ssl_ctx.wrap_socket(raw, server_hostname=host)
        except (OSError, ssl.SSLError) as e:
            raw.close()
            raise PullError(f"TLS handshake with {host}:{port} failed: {e}") from e
    _set_read_timeout(sock, idle_timeout)
    try:
        registry.add(sock)
    except Cancelled:
        sock.close()
        raise
    return sock


def _set_read_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound each receive on ``sock`` to ``seconds``. Plain TCP stays a blocking fd (splice needs one) with
    SO_RCVTIMEO, which splice and recv honour; a TLS socket uses Python's timeout, which also covers the partial
    records SSL_read waits for."""
    seconds = max(seconds, 0.001)  # SO_RCVTIMEO 0 would mean "wait forever"
    if isinstance(sock, ssl.SSLSocket):
        sock.settimeout(seconds)
        return
    sock.settimeout(None)
    sec = int(seconds)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", sec, int((seconds - sec) * 1e6)))


def _read_head(sock: socket.socket, head_timeout: float) -> tuple[int, str, dict[str, str], bytes]:
    """Status, reason, lower-cased headers and the body bytes read past the header (the caller stores them first).

    Reads with plain ``recv`` into a bounded buffer; the whole header must arrive within ``head_timeout`` seconds.
    (A ``MSG_PEEK`` loop here once spun forever on a source that sent half a header and stalled: SO_RCVTIMEO does
    not bound a peek of bytes already buffered, and a shut-down socket still peeks them.) A cancel shuts the
    socket down, which ends the ``recv`` with EOF."""
    buf = bytearray()
    deadline = time.monotonic() + head_timeout
    while (end := buf.find(b"\r\n\r\n")) < 0:
        if len(buf) > MAX_HEADER:
            raise PullError("response header larger than 64 KiB")
        left = deadline - time.monotonic()
        if left <= 0:
            raise HeadTimeout(f"no complete response header within {head_timeout:g} s "
                              f"({len(buf)} bytes of it received)")
        _set_read_timeout(sock, left)
        try:
            chunk = sock.recv(HEAD_CHUNK)
        except (BlockingIOError, TimeoutError):
            continue  # the deadline passed: named above
        if not chunk:
            raise PullError("source closed the connection before sending a response" if not buf else
                            f"source closed the connection after {len(buf)} bytes of the response header")
        buf += chunk
    _set_read_timeout(sock, head_timeout)  # the body: each receive again bounded by the idle timeout
    head, rest = buf[:end].decode("latin-1"), bytes(buf[end + 4:])
    lines = head.split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3}) ?(.*)", lines[0])
    if not m:
        raise PullError(f"not an HTTP response: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(m.group(1)), m.group(2), headers, rest


def _raise_blocking(e: OSError, host: str, port: int, idle_timeout: float, registry: SocketRegistry) -> NoReturn:
    if registry.cancelled:
        raise Cancelled(registry.reason) from e
    if isinstance(e, BlockingIOError | TimeoutError) or e.errno == errno.EAGAIN:
        raise PullError(f"source {host}:{port} stalled: no data for {idle_timeout:g} s") from e
    raise PullError(f"receiving from {host}:{port} failed: {e.strerror or e}") from e


def fetch(
    host: str,
    port: int,
    path: str,
    fd: int | None,
    registry: SocketRegistry,
    counter: Counter,
    *,
    start: int = 0,
    end: int | None = None,
    expect_total: int | None = None,
    ssl_ctx: ssl.SSLContext | None = None,
    idle_timeout: float = IDLE_TIMEOUT,
    method: str = "GET",
    meta: dict[str, str] | None = None,
    want_digest: bool = False,
) -> int:
    """GET ``path`` (bytes [start, end) when ``end`` is given) into ``fd`` at offset ``start``, or discard it when
    ``fd`` is None. Returns the bytes received; raises PullError when short, refused or wrong. For HEAD, returns
    the Content-Length."""
    sock = _connect(host, port, registry, ssl_ctx, idle_timeout)
    what = f"{'https' if ssl_ctx else 'http'}://{host}:{port}{path}"
    try:
        hosthdr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        req = f"{method} {path} HTTP/1.1\r\nHost: {hosthdr}\r\nUser-Agent: tpcmesh-agent\r\nConnection: close\r\n"
        if want_digest:
            req += "Want-Digest: adler32\r\n"
        if end is not None:
            req += f"Range: bytes={start}-{end - 1}\r\n"
        try:
            sock.sendall((req + "\r\n").encode())
            status, reason, headers, rest = _read_head(sock, idle_timeout)
        except OSError as e:
            _raise_blocking(e, host, port, idle_timeout, registry)
        except PullError as e:
            if registry.cancelled:
                raise Cancelled(registry.reason) from e
            raise
        if meta is not None:
            meta.update(headers)
        if status == 405 and want_digest:
            raise DigestRefused(f"{what} answered 405 to Want-Digest")
        want_status = 206 if end is not None else 200
        if status != want_status and not (end is not None and status == 200 and start == 0 and end == expect_total):
            raise PullError(f"{what} answered {status} {reason}".rstrip())
        try:
            length = int(headers["content-length"])
        except (KeyError, ValueError) as e:
            raise PullError(f"{what} sent no valid Content-Length") from e
        if method == "HEAD":
            return length
        want = (end - start) if end is not None else expect_total
        if want is not None and length != want:
            raise PullError(f"{what} announced {length} bytes, expected {want}")
        return _receive(sock, fd, start, length, rest, counter, registry, host, port, idle_timeout, what)
    finally:
        registry.discard(sock)
        sock.close()


def _receive(sock: socket.socket, fd: int | None, offset: int, length: int, rest: bytes, counter: Counter,
             registry: SocketRegistry, host: str, port: int, idle_timeout: float, what: str) -> int:
    got = 0
    if rest:
        rest = rest[:length]
        if fd is not None:
            os.pwrite(fd, rest, offset)
        got += len(rest)
        counter.add(len(rest))
    if isinstance(sock, ssl.SSLSocket):
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while got < length:
            try:
                n = sock.recv_into(buf, min(CHUNK, length - got))
            except OSError as e:
                _raise_blocking(e, host, port, idle_timeout, registry)
            if n == 0:
                break
            if fd is not None:
                os.pwrite(fd, view[:n], offset + got)
            got += n
            counter.add(n)
    else:
        pr, pw = os.pipe()
        sink = os.open(os.devnull, os.O_WRONLY) if fd is None else -1
        try:
            try:
                fcntl.fcntl(pw, F_SETPIPE_SZ, PIPE_SIZE)
            except OSError:
                pass
            out = fd if fd is not None else sink
            sfd = sock.fileno()
            while got < length:
                try:
                    n = os.splice(sfd, pw, min(PIPE_SIZE, length - got))
                except OSError as e:
                    _raise_blocking(e, host, port, idle_timeout, registry)
                if n == 0:
                    break
                left = n
                while left:
                    if fd is not None:
                        left -= os.splice(pr, out, left, offset_dst=offset + got + (n - left))
                    else:
                        left -= os.splice(pr, out, left)
                got += n
                counter.add(n)
        finally:
            os.close(pr)
            os.close(pw)
            if sink >= 0:
                os.close(sink)
    if got < length:
        if registry.cancelled:
            raise Cancelled(registry.reason)
        raise PullError(f"{what}: connection closed after {got} of {length} bytes")
    return got


def split_ranges(size: int, streams: int) -> list[tuple[int, int]]:
    n = max(1, min(streams, size)) if size else 1
    step = -(-size // n) if size else 0
    return [(i * step, min(size, (i + 1) * step)) for i in range(n) if i * step < size] or [(0, 0)]


def pull(host: str, port: int, path: str, size: int | None, dest: Path | None, streams: int,
         registry: SocketRegistry, counter: Counter, ssl_ctx: ssl.SSLContext | None = None,
         idle_timeout: float = IDLE_TIMEOUT, meta: dict[str, str] | None = None) -> int:
    """Pull one file with ``streams`` parallel ranges into ``dest`` (None: discard). Blocking; returns bytes.
    With ``meta``, asks for an adler32 ``Digest`` (asking again without when the source refuses, as XRootD
    without a checksum configured does) and fills ``meta`` with the first response's lower-cased headers."""
    if meta is not None:
        try:
            return _pull(host, port, path, size, dest, streams, registry, counter, ssl_ctx, idle_timeout, meta)
        except DigestRefused:
            log.debug("Source %s:%d refused Want-Digest; pulling without", host, port)
    return _pull(host, port, path, size, dest, streams, registry, counter, ssl_ctx, idle_timeout, None)


def _preallocate(fd: int, size: int) -> None:
    """Give ``fd`` its final size with the blocks allocated up front: on tmpfs, allocating the pages in one call
    costs less CPU than one page at a time inside the splice writes (measured: 20-30 % less per GB stored, see
    BENCHMARKS.md). Where that fails (no room, or no fallocate), only set the size, as before."""
    if size > 0:
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError:
            pass
    os.ftruncate(fd, size)


def _pull(host: str, port: int, path: str, size: int | None, dest: Path | None, streams: int,
          registry: SocketRegistry, counter: Counter, ssl_ctx: ssl.SSLContext | None,
          idle_timeout: float, meta: dict[str, str] | None) -> int:
    if streams > 1 and (size is None or meta is not None):
        # a HEAD learns the size (and the digest) before any byte moves, so a refused Want-Digest costs nothing
        size = fetch(host, port, path, None, registry, counter, ssl_ctx=ssl_ctx, method="HEAD",
                     idle_timeout=idle_timeout, meta=meta, want_digest=meta is not None)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if dest is not None else None
    try:
        if size is not None and fd is not None:
            _preallocate(fd, size)
        if streams <= 1 or not size:
            return fetch(host, port, path, fd, registry, counter, expect_total=size, ssl_ctx=ssl_ctx,
                         idle_timeout=idle_timeout, meta=meta, want_digest=meta is not None)
        ranges = split_ranges(size, streams)
        results: list[int | BaseException] = [0] * len(ranges)

        def one(i: int, a: int, b: int) -> None:
            try:
                results[i] = fetch(host, port, path, fd, registry, counter, start=a, end=b, expect_total=size,
                                   ssl_ctx=ssl_ctx, idle_timeout=idle_timeout)
            except BaseException as e:  # reported below
                results[i] = e

        threads = [threading.Thread(target=one, args=(i, a, b), daemon=True) for i, (a, b) in enumerate(ranges)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise next((e for e in errors if isinstance(e, PullError) and not isinstance(e, Cancelled)), errors[0])
        return sum(r for r in results if isinstance(r, int))
    finally:
        if fd is not None:
            os.close(fd)


def digest_checksum(header: str | None) -> str | None:
    """"adler32:xxxxxxxx" from an RFC 3230 ``Digest: adler32=xxxxxxxx`` header (XRootD sends the same)."""
    for part in (header or "").split(","):
        algo, _, value = part.strip().partition("=")
        if algo.lower() == "adler32" and re.fullmatch(r"[0-9a-fA-F]{1,8}", value.strip()):
            return f"adler32:{int(value.strip(), 16):08x}"
    return None


def client_ssl_context(settings: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(settings.ca_file) if settings.ca_file else None)
    if settings.tls_cert is not None:
        ctx.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
    return ctx


def _now() -> datetime:
    return datetime.now(UTC)


class BuiltinMover(Mover):
    protocol = "builtin"

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.idle_timeout = float(getattr(settings, "idle_timeout", IDLE_TIMEOUT))
        self._registries: dict[str, SocketRegistry] = {}

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
        try:
            pull(job.source.host, job.source.port, f"/files/{job.file_set}/{spec.name}", spec.size, dest,
                 job.streams, registry, counter, ssl_ctx, self.idle_timeout, meta if want_digest else None)
        except PullError as e:
            res.error = str(e)
        except OSError as e:
            res.error = f"{spec.name}: {e.strerror or e}"
        res.bytes = counter.value
        res.finished_at = _now()
        expected = spec.checksum or digest_checksum(meta.get("digest"))
        if res.error is None and dest is not None and job.verify_checksums and expected:
            got = adler32_of(dest)
            res.checksum_ok = got == expected
            if not res.checksum_ok:
                res.error = f"checksum mismatch: expected {expected}, received {got}"
        progress.files_done += 1
        return res

    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
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
        timer = loop.call_later(job.timeout, registry.cancel, f"timed out after {job.timeout:g} s")
        try:
            return list(await asyncio.gather(*futures))
        except asyncio.CancelledError:
            registry.cancel("cancelled")
            raise
        finally:
            timer.cancel()
            self._registries.pop(job.test_id, None)
            registry.cancel("cancelled")
            executor.shutdown(wait=False, cancel_futures=True)


# ------------------------------------------------------------------------------------------------ server side
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tpcmesh-builtin"
    server: DataServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("builtin %s: " + format, self.client_address[0], *args)

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(CONNECT_TIMEOUT)
            self.request.do_handshake()
        super().setup()
        # a client that sends no request (or nothing more on a kept-alive connection) for this long is dropped
        # (BaseHTTPRequestHandler ends on the timeout), so idle connections cannot pile up threads
        self.connection.settimeout(self.server.settings.idle_timeout)

    # -- helpers
    def _error(self, code: int, message: str) -> None:
        body = (message + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _resolve(self) -> tuple[Path, str, str] | None:
        parts = urllib.parse.urlsplit(self.path).path.split("/")
        if len(parts) != 4 or parts[0] != "" or parts[1] != "files":
            self._error(404, f"no such resource {self.path!r}: use /files/<set>/<file>")
            return None
        try:
            set_name = validate_name(urllib.parse.unquote(parts[2]), "set name")
            name = validate_name(urllib.parse.unquote(parts[3]), "file name")
        except FileSetError as e:
            self._error(400, str(e))
            return None
        base = self.server.settings.incoming_dir if set_name == "incoming" else self.server.settings.sets_dir / set_name
        return base / name, set_name, name

    def _authorized(self) -> bool:
        got = self.headers.get("Authorization", "")
        want = "Bearer " + self.server.token()
        if hmac.compare_digest(got.encode(), want.encode()):
            return True
        self._error(401, "missing or wrong bearer token (Authorization: Bearer <agent token>)")
        return False

    # -- GET / HEAD
    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        r = self._resolve()
        if r is None:
            return
        if r[1] == "incoming" and not self._authorized():  # what peers sent here is not for everyone to read
            return
        path = r[0]
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self._error(404, f"{r[1]}/{r[2]} does not exist on this agent")
            return
        try:
            size = os.fstat(fd).st_size
            start, end, code = 0, size, 200
            rng = self.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
                if not m or (m.group(1) == "" and m.group(2) == ""):
                    self._error(416, f"unsupported Range {rng!r}: one bytes=a-b range only")
                    return
                if m.group(1) == "":
                    start, end = max(0, size - int(m.group(2))), size
                else:
                    start = int(m.group(1))
                    end = min(size, int(m.group(2)) + 1) if m.group(2) else size
                if start >= size or start >= end:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                code = 206
            self.send_response(code)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Last-Modified", email.utils.formatdate(os.fstat(fd).st_mtime, usegmt=True))
            if code == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            if "adler32" in self.headers.get("Want-Digest", "").lower():
                ck = self.server.checksum(r[1], r[2], size)
                if ck:
                    self.send_header("Digest", "adler32=" + ck.split(":", 1)[1])
            self.end_headers()
            if self.command == "HEAD":
                return
            self.wfile.flush()
            self._send_body(fd, start, end - start)
        finally:
            os.close(fd)

    def _send_body(self, fd: int, offset: int, count: int) -> None:
        rate = self.server.settings.builtin_max_rate
        sock = self.connection
        if isinstance(sock, ssl.SSLSocket):
            buf = bytearray(CHUNK)
            while count > 0:
                n = os.preadv(fd, [memoryview(buf)[: min(CHUNK, count)]], offset)
                if n <= 0:
                    raise OSError("file shrank while being sent")
                sock.sendall(memoryview(buf)[:n])
                offset += n
                count -= n
            return
        out = sock.fileno()
        t0, sent = time.monotonic(), 0
        step = max(1, rate // 20) if rate else 1 << 30
        # sendfile needs a blocking fd (Python's socket timeout makes it non-blocking): bound a client that stops
        # reading with SO_SNDTIMEO instead, and restore the idle timeout for the next request
        idle = self.server.settings.idle_timeout
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(idle), int(idle % 1 * 1e6)))
        try:
            while count > 0:
                n = os.sendfile(out, fd, offset, min(count, step))
                if n == 0:
                    raise OSError("file shrank while being sent")
                offset += n
                count -= n
                sent += n
                if rate:
                    ahead = sent / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        finally:
            sock.settimeout(idle)

    # -- WLCG HTTP-TPC pull
    def do_COPY(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        r = self._resolve()
        if r is None:
            return
        dest, set_name, name = r
        if set_name != "incoming":
            self._error(403, "COPY may only write to /files/incoming/<name>")
            return
        source = self.headers.get("Source")
        if not source:
            self._error(400, "COPY needs a Source: <url> header (pull mode); push mode is not supported")
            return
        cred = self.headers.get("Credential", "none")
        if cred.lower() != "none":
            self._error(400, f"Credential: {cred!r} is not supported; use Credential: none")
            return
        try:
            streams = int(self.headers.get("X-Number-Of-Streams", "1"))
            if not 0 <= streams <= 100:
                raise ValueError
        except ValueError:
            self._error(400, "X-Number-Of-Streams must be an integer 0-100")
            return
        u = urllib.parse.urlsplit(source)
        if u.scheme not in ("http", "https") or not u.hostname:
            self._error(400, f"Source {source!r} must be an http:// or https:// URL")
            return
        port = u.port or (443 if u.scheme == "https" else 80)
        ssl_ctx = client_ssl_context(self.server.settings) if u.scheme == "https" else None
        dest.parent.mkdir(parents=True, exist_ok=True)

        self.send_response(202)
        self.send_header("Content-Type", "text/perf-marker-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        registry = SocketRegistry()
        counter = Counter()
        outcome: dict[str, BaseException | int] = {}

        verify = self.headers.get("RequireChecksumVerification", "false").lower() == "true"

        settings = self.server.settings

        def work() -> None:
            meta: dict[str, str] = {}
            try:
                outcome["bytes"] = pull(u.hostname or "", port, u.path or "/", None, dest, max(1, streams), registry,
                                        counter, ssl_ctx, settings.idle_timeout, meta=meta if verify else None)
                if verify:
                    expected = digest_checksum(meta.get("digest"))
                    if expected is None:
                        raise PullError("checksum verification asked for, but the source sent no adler32 Digest")
                    got = adler32_of(dest)
                    if got != expected:
                        raise PullError(f"checksum mismatch: source says {expected}, received {got}")
            except BaseException as e:  # reported in the final line
                outcome["error"] = e

        worker = threading.Thread(target=work, daemon=True, name=f"copy-{name}")
        worker.start()
        # the whole COPY has a deadline, so an XRootD or curl caller always gets its final line
        deadline = time.monotonic() + settings.copy_timeout
        try:
            self._chunk(self._marker(counter.value, streams))
            while worker.is_alive():
                now = time.monotonic()
                worker.join(max(0.0, min(settings.marker_interval, deadline - now)) or COPY_GRACE)
                if not worker.is_alive():
                    break
                if time.monotonic() >= deadline:
                    if not registry.cancelled:
                        registry.cancel(f"timed out after {settings.copy_timeout:g} s")
                        continue  # the shut-down sockets end the pull at once
                    # the pull did not stop within the grace: answer anyway (the daemon thread is abandoned)
                    outcome.setdefault("error", PullError(f"timed out after {settings.copy_timeout:g} s"))
                    log.warning("COPY to %s: the pull did not stop %g s after its deadline", name, COPY_GRACE)
                    break
                self._chunk(self._marker(counter.value, streams))
            err = outcome.get("error")
            if err is None:
                self._chunk(self._marker(counter.value, streams) + "success: Created\n")
            else:
                dest.unlink(missing_ok=True)
                msg = str(err).replace("\n", " ")
                self._chunk(f"failure: {msg}\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client went away: stop pulling
            registry.cancel("client disconnected")
            worker.join(5)
            dest.unlink(missing_ok=True)

    def _marker(self, nbytes: int, streams: int) -> str:
        return (f"Perf Marker\nTimestamp: {int(time.time())}\nStripe Index: 0\n"
                f"Stripe Bytes Transferred: {nbytes}\nTotal Stripe Count: 1\nEnd\n")

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_DELETE(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        r = self._resolve()
        if r is None:
            return
        if r[1] != "incoming":
            self._error(403, "DELETE may only remove /files/incoming/<name>")
            return
        try:
            r[0].unlink()
        except FileNotFoundError:
            self._error(404, f"incoming/{r[2]} does not exist")
            return
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()


class DataServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, settings: Any, token: Callable[[], str]) -> None:
        self.settings = settings
        self.token = token
        family = socket.AF_INET6 if ":" in settings.address else socket.AF_INET
        self.address_family = family
        super().__init__((settings.address, settings.builtin_port), _Handler)
        if settings.builtin_tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
            self.socket = ctx.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self._thread: threading.Thread | None = None
        self._manifest_lock = threading.Lock()
        self._manifests: dict[str, tuple[int, dict[str, tuple[int, str | None]]]] = {}

    def checksum(self, set_name: str, name: str, size: int) -> str | None:
        """The published checksum of a set's file, from the set's manifest (cached by its mtime)."""
        if set_name == "incoming":
            return None
        path = self.settings.sets_dir / set_name / MANIFEST
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return None
        with self._manifest_lock:
            cached = self._manifests.get(set_name)
            if cached is None or cached[0] != mtime:
                try:
                    entries = {f["name"]: (int(f["size"]), f.get("checksum"))
                               for f in json.loads(path.read_text())["files"]}
                except (OSError, ValueError, KeyError, TypeError):
                    return None
                cached = (mtime, entries)
                self._manifests[set_name] = cached
        entry = cached[1].get(name)
        return entry[1] if entry and entry[0] == size else None

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a peer that goes away mid-body (cancelled or killed test) is routine, not a traceback on stderr
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError | ssl.SSLError | BrokenPipeError):
            log.info("Built-in data connection from %s ended: %s", client_address[0], exc)
        else:
            log.exception("Built-in data request from %s failed", client_address[0])

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the FQDN of the address (a DNS query); not needed here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.settings.address, self.settings.builtin_port

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
                                        name="builtin-data")
        self._thread.start()
        log.info("Started built-in data server on %s:%d (%s)", self.settings.address, self.settings.builtin_port,
                 "TLS" if self.settings.builtin_tls else "plain TCP")

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

"""The built-in mover's client: pulls one file over raw sockets, socket -> pipe -> file with ``os.splice`` (store)
or socket -> pipe -> /dev/null (sink); over TLS, ``recv_into`` a reused buffer; ``streams`` > 1 means that many
parallel Range requests. Blocking; cancellation (``SocketRegistry.cancel``) shuts the sockets down."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from ... import congestion
from ...directio import ALIGN, DirectFile, WriteBehind
from ...tcpsampler import SAMPLER
from ..base import Progress, url_host

log = logging.getLogger(__name__)

PIPE_SIZE = 1 << 20
CHUNK = 1 << 20
CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 60.0  # default of settings.idle_timeout: a source that sends nothing for this long fails the file
MAX_HEADER = 64 * 1024
COPY_GRACE = 5.0  # seconds a cancelled COPY pull gets to stop before the caller is answered anyway
HEAD_CHUNK = 16 * 1024  # bytes past the header read here are written before the zero-copy body path starts
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
TELEMETRY_HEADER = "X-Tpcmesh-Telemetry"  # "<test id>/<file name>": the source files its sender-side view under it


@dataclass
class TcpTelemetry:
    """One file's TCP settings and view: ``key`` asks the source to keep its sender-side view of the file's
    connections (fetched once the test ends), ``receiver`` collects this side's summary of each data connection,
    ``congestion`` asks the source to send with that algorithm."""

    key: str | None = None
    receiver: list[dict[str, Any]] = field(default_factory=list)
    congestion: str | None = None  # the algorithm the source is asked to send with (and this side sets too)


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
    auth: str | None = None,
    telemetry: TcpTelemetry | None = None,
    direct: DirectFile | None = None,
) -> int:
    """GET ``path`` (bytes [start, end) when ``end`` is given) into ``fd`` at offset ``start``, or discard it when
    ``fd`` is None, sending ``auth`` as the Authorization header. Returns the bytes received; raises PullError when
    short, refused or wrong (with the source's reason phrase, where the built-in endpoint says which token check
    failed). For HEAD, returns the Content-Length. With ``telemetry``, the connection's TCP_INFO is sampled and its
    summary kept there. With ``direct`` (disk mode), the body goes into that O_DIRECT file instead of ``fd``."""
    sock = _connect(host, port, registry, ssl_ctx, idle_timeout)
    watch = SAMPLER.watch(sock) if telemetry is not None and method != "HEAD" else None
    what = f"{'https' if ssl_ctx else 'http'}://{url_host(host)}:{port}{path}"
    try:
        hosthdr = f"{url_host(host)}:{port}"
        req = f"{method} {path} HTTP/1.1\r\nHost: {hosthdr}\r\nUser-Agent: tpcmesh-agent\r\nConnection: close\r\n"
        if want_digest:
            req += "Want-Digest: adler32\r\n"
        if auth:
            req += f"Authorization: {auth}\r\n"
        if watch is not None and telemetry is not None and telemetry.key:
            req += f"{TELEMETRY_HEADER}: {telemetry.key}\r\n"
        if telemetry is not None and telemetry.congestion:
            congestion.apply(sock, telemetry.congestion)
            req += f"{congestion.HEADER}: {telemetry.congestion}\r\n"
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
        if direct is not None:
            return _receive_direct(sock, direct, start, length, rest, counter, registry, host, port, idle_timeout,
                                   what)
        return _receive(sock, fd, start, length, rest, counter, registry, host, port, idle_timeout, what)
    finally:
        if watch is not None and telemetry is not None and (summary := watch.finish()) is not None:
            telemetry.receiver.append(summary)
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


def _receive_direct(sock: socket.socket, out: DirectFile, offset: int, length: int, rest: bytes, counter: Counter,
                    registry: SocketRegistry, host: str, port: int, idle_timeout: float, what: str) -> int:
    """Disk mode: the body into aligned buffers (no splice: O_DIRECT wants aligned user memory), each full block
    written to ``out`` by a writer thread while the next ones are received (WriteBehind: receiving and writing
    overlap, as splice's page cache let them). Writes stay aligned (the range starts aligned: split_ranges(align=))."""
    behind = WriteBehind(out, offset)
    rest = rest[:length]
    got, fill = len(rest), len(rest)
    try:
        view = behind.buffer()
        view[:fill] = rest
        counter.add(fill)
        while got < length:
            if fill == len(view):
                behind.submit(fill)
                view, fill = behind.buffer(), 0
            try:
                n = sock.recv_into(view[fill:], min(len(view) - fill, length - got))
            except OSError as e:
                _raise_blocking(e, host, port, idle_timeout, registry)
            if n == 0:
                break
            fill += n
            got += n
            counter.add(n)
        behind.submit(fill)
    except BaseException:
        with contextlib.suppress(Exception):  # the receiving side's error is the one to report
            behind.finish()
        raise
    behind.finish()
    if got < length:
        if registry.cancelled:
            raise Cancelled(registry.reason)
        raise PullError(f"{what}: connection closed after {got} of {length} bytes")
    return got


def split_ranges(size: int, streams: int, align: int = 1) -> list[tuple[int, int]]:
    """``streams`` ranges covering ``size`` bytes; each starts at a multiple of ``align`` (O_DIRECT: ALIGN)."""
    n = max(1, min(streams, size)) if size else 1
    step = -(-size // n) if size else 0
    step = -(-step // align) * align
    return [(i * step, min(size, (i + 1) * step)) for i in range(n) if i * step < size] or [(0, 0)]


def pull(host: str, port: int, path: str, size: int | None, dest: Path | None, streams: int,
         registry: SocketRegistry, counter: Counter, ssl_ctx: ssl.SSLContext | None = None,
         idle_timeout: float = IDLE_TIMEOUT, meta: dict[str, str] | None = None, auth: str | None = None,
         telemetry: TcpTelemetry | None = None, direct: list[str | None] | None = None) -> int:
    """Pull one file with ``streams`` parallel ranges into ``dest`` (None: discard). Blocking; returns bytes.
    With ``meta``, asks for an adler32 ``Digest`` (asking again without when the source refuses, as XRootD
    without a checksum configured does) and fills ``meta`` with the first response's lower-cased headers.
    With ``telemetry``, each data connection's TCP view is kept there (TcpTelemetry). With ``direct`` (disk mode, a
    list), ``dest`` is written with O_DIRECT and fsynced before this returns; the list gets why the filesystem
    refused O_DIRECT (None when it did not)."""
    if meta is not None:
        try:
            return _pull(host, port, path, size, dest, streams, registry, counter, ssl_ctx, idle_timeout, meta, auth,
                         telemetry, direct)
        except DigestRefused:
            log.debug("Source %s:%d refused Want-Digest; pulling without", host, port)
    return _pull(host, port, path, size, dest, streams, registry, counter, ssl_ctx, idle_timeout, None, auth,
                 telemetry, direct)


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
          idle_timeout: float, meta: dict[str, str] | None, auth: str | None,
          telemetry: TcpTelemetry | None, direct: list[str | None] | None = None) -> int:
    if dest is not None and direct is not None:
        if size is None or (streams > 1 and meta is not None):  # aligned ranges need the size; a HEAD the digest
            size = fetch(host, port, path, None, registry, counter, ssl_ctx=ssl_ctx, method="HEAD",
                         idle_timeout=idle_timeout, meta=meta, want_digest=meta is not None, auth=auth)
        out = DirectFile(dest, size)
        direct.append(out.fallback)
        try:
            got = _pull_ranges(host, port, path, size, None, streams, registry, counter, ssl_ctx, idle_timeout,
                               meta, auth, telemetry, out)
            out.sync()  # the bytes are on the device before the file's end time is taken
            return got
        finally:
            out.close()
    if streams > 1 and (size is None or meta is not None):
        # a HEAD learns the size (and the digest) before any byte moves, so a refused Want-Digest costs nothing
        size = fetch(host, port, path, None, registry, counter, ssl_ctx=ssl_ctx, method="HEAD",
                     idle_timeout=idle_timeout, meta=meta, want_digest=meta is not None, auth=auth)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if dest is not None else None
    try:
        if size is not None and fd is not None:
            _preallocate(fd, size)
        return _pull_ranges(host, port, path, size, fd, streams, registry, counter, ssl_ctx, idle_timeout, meta,
                            auth, telemetry, None)
    finally:
        if fd is not None:
            os.close(fd)


def _pull_ranges(host: str, port: int, path: str, size: int | None, fd: int | None, streams: int,
                 registry: SocketRegistry, counter: Counter, ssl_ctx: ssl.SSLContext | None, idle_timeout: float,
                 meta: dict[str, str] | None, auth: str | None, telemetry: TcpTelemetry | None,
                 direct: DirectFile | None) -> int:
    """One GET, or ``streams`` parallel Range GETs in threads, into ``fd`` (or ``direct``)."""
    if streams <= 1 or not size:
        return fetch(host, port, path, fd, registry, counter, expect_total=size, ssl_ctx=ssl_ctx,
                     idle_timeout=idle_timeout, meta=meta, want_digest=meta is not None, auth=auth,
                     telemetry=telemetry, direct=direct)
    ranges = split_ranges(size, streams, ALIGN if direct is not None else 1)
    results: list[int | BaseException] = [0] * len(ranges)

    def one(i: int, a: int, b: int) -> None:
        try:
            results[i] = fetch(host, port, path, fd, registry, counter, start=a, end=b, expect_total=size,
                               ssl_ctx=ssl_ctx, idle_timeout=idle_timeout, auth=auth, telemetry=telemetry,
                               direct=direct)
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


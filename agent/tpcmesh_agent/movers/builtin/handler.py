"""The data server's requests on files: ``GET|HEAD /files/<set>/<file>`` (``/disk/<set>/<file>``: the disk copy,
read with O_DIRECT; and ``/files/incoming/<file>`` with the
agent's API token; ``Range: bytes=a-b`` gives 206; the body goes out with ``os.sendfile`` on plain TCP) and
``DELETE /files/incoming/<name>``; ``GET /tcp-info/<test id>`` hands over the sender-side TCP view of a test's
files (telemetry.py). A connection idle for ``idle_timeout`` seconds is closed.

In token mode (the server has a TokenValidator) a set's file is served only to a bearer token granting read on
``/sets/<set>/<file>`` (an incoming file: the API token or read on ``/incoming/<name>``); a refusal answers 401
(no token) or 403 with the failed check as the reason phrase and the text, never the token."""

from __future__ import annotations

import email.utils
import hmac
import json
import logging
import os
import re
import socket
import ssl
import struct
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Protocol

from ... import congestion, directio
from ...directio import open_direct, read_range
from ...files import FileSetError, validate_name
from ...tcpsampler import SAMPLER, wait_drained
from ...token_check import TokenRefused, TokenValidator, bearer
from ...versions import agent_version
from .client import CHUNK, CONNECT_TIMEOUT, TELEMETRY_HEADER
from .landed import LandedChecksums
from .telemetry import DRAIN_TIMEOUT, PATH_RE, SenderViews, parse_key

log = logging.getLogger(__name__)


class FileServer(Protocol):
    """What the handlers read of the server that runs them (dataserver.DataServer)."""

    settings: Any
    token: Callable[[], str]  # the agents' shared bearer token, as it is now
    validator: TokenValidator | None
    sender_views: SenderViews
    landed: LandedChecksums  # received files' checksums (the COPY handler's)

    def checksum(self, set_name: str, name: str, size: int, disk: bool = False) -> str | None: ...


class FilesHandler(BaseHTTPRequestHandler):
    """GET/HEAD of set and incoming files (zero-copy), DELETE of incoming ones, and the helpers COPY shares."""

    protocol_version = "HTTP/1.1"
    server_version = f"tpcmesh-agent/{agent_version()}"  # the peer's version for a record (versions.py)
    server: FileServer  # type: ignore[assignment]  # BaseHTTPRequestHandler's is the socketserver base

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
    def _error(self, code: int, message: str, reason: str | None = None) -> None:
        """Answer ``code`` with ``message`` as the text; ``reason`` (ASCII-escaped) replaces the reason phrase, so
        a HEAD's refusal says why too."""
        body = (message + "\n").encode()
        self.send_response(code, reason and reason.encode("ascii", "backslashreplace").decode())
        if code == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _resolve(self) -> tuple[Path, str, str, bool] | None:
        """(path, set name, file name, disk): /files/<set>/<file> in memory, /disk/<set>/<file> on the disk path."""
        parts = urllib.parse.urlsplit(self.path).path.split("/")
        if len(parts) != 4 or parts[0] != "" or parts[1] not in ("files", "disk"):
            self._error(404, f"no such resource {self.path!r}: use /files/<set>/<file> or /disk/<set>/<file>")
            return None
        try:
            set_name = validate_name(urllib.parse.unquote(parts[2]), "set name")
            name = validate_name(urllib.parse.unquote(parts[3]), "file name")
        except FileSetError as e:
            self._error(400, str(e))
            return None
        settings = self.server.settings
        if parts[1] == "disk":
            if set_name == "incoming" or settings.disk_dir is None:
                self._error(404, f"no disk set {set_name} on this agent" + (" (it has no disk path)"
                                                                             if settings.disk_dir is None else ""))
                return None
            return settings.disk_dir / "sets" / set_name / name, set_name, name, True
        base = settings.incoming_dir if set_name == "incoming" else settings.sets_dir / set_name
        return base / name, set_name, name, False

    def _agent_token(self) -> bool:
        got = self.headers.get("Authorization", "")
        return hmac.compare_digest(got.encode(), ("Bearer " + self.server.token()).encode())

    def _authorized(self) -> bool:
        if self._agent_token():
            return True
        self._error(401, "missing or wrong bearer token (Authorization: Bearer <agent token>)")
        return False

    def _allowed(self, operation: str, path: str, agent_token: bool) -> bool:
        """Whether the request may ``operation`` ("read" or "create") ``path`` (its /sets or /incoming name): with
        the agent's API token where ``agent_token``, else (token mode) with a valid bearer token granting it;
        without token mode, reads of the sets are open. Answers the refusal itself."""
        if agent_token and self._agent_token():
            return True
        validator = self.server.validator
        if validator is None:
            return not agent_token or self._authorized()
        try:
            validator.check(bearer(self.headers.get("Authorization")), operation, path)
            return True
        except TokenRefused as e:
            log.info("Built-in %s %s from %s: %s", self.command, path, self.client_address[0], e)
            self._error(401 if e.check == "missing" else 403, str(e), reason=str(e))
            return False

    # -- GET / HEAD
    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/tcp-info/"):
            self._tcp_info()
            return
        if not self._apply_congestion():
            return
        r = self._resolve()
        if r is None:
            return
        incoming = r[1] == "incoming"  # what peers sent here is not for everyone to read
        if not self._allowed("read", f"/incoming/{r[2]}" if incoming else f"/sets/{r[1]}/{r[2]}", incoming):
            return
        path, disk = r[0], r[3]
        fallback = None
        try:
            if disk:  # cold reads: O_DIRECT bypasses the page cache (buffered where the filesystem refuses it)
                fd, fallback = open_direct(path, os.O_RDONLY)
                if fallback:
                    log.warning("Built-in GET %s: reading buffered: %s", self.path, fallback)
            else:
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
                ck = self.server.checksum(r[1], r[2], size, disk)
                if ck:
                    self.send_header("Digest", "adler32=" + ck.split(":", 1)[1])
            self.end_headers()
            if self.command == "HEAD":
                return
            self.wfile.flush()
            self._send_body_watched(fd, start, end - start, disk and fallback is None)
        finally:
            os.close(fd)

    def _send_body_watched(self, fd: int, offset: int, count: int, direct: bool = False) -> None:
        """_send_body; when the client asked for telemetry, with the connection's TCP view kept for it."""
        key = parse_key(self.headers.get(TELEMETRY_HEADER))
        send = self._send_direct if direct else self._send_body
        if key is None:
            send(fd, offset, count)
            return
        views = self.server.sender_views
        views.begin(key[0])
        watch = SAMPLER.watch(self.connection)
        try:
            send(fd, offset, count)
            # the last bytes' retransmits belong to the file too: summarise once they are acknowledged
            if not wait_drained(self.connection, min(DRAIN_TIMEOUT, self.server.settings.idle_timeout)):
                log.debug("builtin %s: %s/%s not acknowledged in time; its TCP view may miss the last retransmits",
                          self.client_address[0], *key)
        finally:
            views.end(key[0], key[1], watch.finish())

    def _apply_congestion(self) -> bool:
        """Send with the congestion control the client asked for (X-Tpcmesh-Congestion); False when refused."""
        name = self.headers.get(congestion.HEADER)
        if name is None:
            return True
        why = None if congestion.NAME_RE.match(name) else f"{congestion.HEADER} {name!r} is not an algorithm name"
        if why is None:
            try:
                congestion.apply(self.connection, name)
            except OSError as e:
                why = f"congestion control {name!r} is not usable on this node: {e.strerror or e}"
        if why:
            self._error(400, why)
            return False
        return True

    def _tcp_info(self) -> None:
        m = PATH_RE.match(urllib.parse.urlsplit(self.path).path)
        if not m:
            self._error(404, f"no such resource {self.path!r}: use /tcp-info/<test id>")
            return
        body = json.dumps({"files": self.server.sender_views.take(m.group(1))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_direct(self, fd: int, offset: int, count: int) -> None:
        """Disk mode: the body read with O_DIRECT into aligned buffers and sent from them (sendfile would read
        through the page cache), paced to builtin_max_rate like _send_body.

        The whole file (a single-stream pull) is read ahead of the socket, or the device would idle while each
        block is sent. A range of a multi-stream pull is read and then sent, block by block: the other streams'
        connections keep the device busy meanwhile, and reading ahead on each as well was slower here (8 streams,
        source and destination on one disk: 10-20 % less throughput, ~25 % more CPU at the source)."""
        ahead = offset == 0 and count >= os.fstat(fd).st_size
        depth, block = (directio.DEPTH, directio.BLOCK) if ahead else (1, directio.CHUNK)
        rate = self.server.settings.builtin_max_rate
        t0, sent = time.monotonic(), 0

        def out(piece: memoryview) -> None:
            nonlocal sent
            self.connection.sendall(piece)
            sent += len(piece)
            if rate and (ahead := sent / rate - (time.monotonic() - t0)) > 0:
                time.sleep(ahead)

        if read_range(fd, offset, count, out, depth, block) < count:
            raise OSError("file shrank while being sent")

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

    def _incoming(self, action: str, token_operation: str | None = None) -> tuple[Path, str] | None:
        """The path and name of an authorized request's /files/incoming/<name>; None when it was answered (refused).
        In token mode, a request for ``token_operation`` needs a bearer token granting it (not the API token)."""
        if token_operation is None or self.server.validator is None:
            if not self._authorized():
                return None
        r = self._resolve()
        if r is None:
            return None
        if r[1] != "incoming":
            self._error(403, f"{self.command} may only {action} /files/incoming/<name>")
            return None
        if token_operation is not None and not self._allowed(token_operation, f"/incoming/{r[2]}", False):
            return None
        return r[0], r[2]

    def do_DELETE(self) -> None:  # noqa: N802
        target = self._incoming("remove")
        if target is None:
            return
        try:
            target[0].unlink()
        except FileNotFoundError:
            self._error(404, f"incoming/{target[1]} does not exist")
            return
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()


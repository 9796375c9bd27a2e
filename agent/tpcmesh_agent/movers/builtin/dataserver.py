"""The built-in data server (the builtin port, plain HTTP by default, TLS optional): a threading HTTP/1.1 server
whose handler is copy.CopyHandler; set manifests' checksums are cached by mtime, received files' ones in
landed.LandedChecksums. In token mode (settings.xrootd_token_issuer) it holds the TokenValidator."""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any

from ...files import MANIFEST
from ...token_check import TokenValidator, builtin_validator
from ..base import url_host
from .copy import CopyHandler
from .landed import LandedChecksums
from .telemetry import SenderViews

log = logging.getLogger(__name__)


class DataServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, settings: Any, token: Callable[[], str], address: str | None = None) -> None:
        self.settings = settings
        self.address = address or settings.address  # dual stack: one server per address
        self.token = token
        self.validator: TokenValidator | None = builtin_validator(settings)
        self.landed = LandedChecksums()
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        self.address_family = family
        super().__init__((self.address, settings.builtin_port), CopyHandler)
        if settings.builtin_tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
            self.socket = ctx.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self._thread: threading.Thread | None = None
        self._manifest_lock = threading.Lock()
        self._manifests: dict[str, tuple[int, dict[str, tuple[int, str | None]]]] = {}
        self.sender_views = SenderViews()  # the TCP view of files sent to pulling agents that asked for it

    def checksum(self, set_name: str, name: str, size: int, disk: bool = False) -> str | None:
        """The published checksum of a set's file, from the set's manifest (cached by its mtime; ``disk``: the disk
        copy's); a received file's from ``landed``."""
        if set_name == "incoming":
            try:
                return self.landed.checksum(self.settings.incoming_dir / name)
            except OSError:
                return None
        sets = self.settings.disk_dir / "sets" if disk and self.settings.disk_dir else self.settings.sets_dir
        path = sets / set_name / MANIFEST
        key = f"disk/{set_name}" if disk else set_name
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return None
        with self._manifest_lock:
            cached = self._manifests.get(key)
            if cached is None or cached[0] != mtime:
                try:
                    entries = {f["name"]: (int(f["size"]), f.get("checksum"))
                               for f in json.loads(path.read_text())["files"]}
                except (OSError, ValueError, KeyError, TypeError):
                    return None
                cached = (mtime, entries)
                self._manifests[key] = cached
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
        self.server_name, self.server_port = self.address, self.settings.builtin_port

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
                                        name="builtin-data")
        self._thread.start()
        log.info("Started built-in data server on %s:%d (%s%s)", url_host(self.address), self.settings.builtin_port,
                 "TLS" if self.settings.builtin_tls else "plain TCP",
                 f"; bearer tokens of {self.validator.issuer} for {self.validator.audience}" if self.validator else "")

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

"""Publishes the issuer's OpenID discovery document and JWKS over HTTPS.

Two read-only paths, from a thread (the operator's event loop stays free): ``/.well-known/openid-configuration`` and
``/jwks``. The TLS certificate is a host certificate of the project's CA (``pki.issue_host_cert``), so the validators
trust it through the same CA bundle as every other tpcmesh endpoint.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .issuer import TokenIssuer

log = logging.getLogger(__name__)

DISCOVERY_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/jwks"
CACHE_SECONDS = 60  # validators refetch the JWKS at least this often, so a rotated key is seen soon


def _handler(issuer: TokenIssuer) -> type[BaseHTTPRequestHandler]:
    prefix = urlsplit(issuer.issuer).path.rstrip("/")
    routes = {prefix + DISCOVERY_PATH: issuer.discovery, prefix + JWKS_PATH: issuer.jwks}

    class Handler(BaseHTTPRequestHandler):
        server_version = "tpcmesh-issuer"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            route = routes.get(urlsplit(self.path).path)
            if route is None:
                self._send(404, {"error": f"no such path {urlsplit(self.path).path}; try {prefix + DISCOVERY_PATH}"})
                return
            self._send(200, route())

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", f"max-age={CACHE_SECONDS}")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            log.debug("Issuer served " + format, *args)

    return Handler


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    ssl_context: ssl.SSLContext

    def get_request(self) -> tuple[Any, Any]:
        # the handshake happens in the request's thread (on first read), so a slow client cannot stall accept()
        sock, addr = self.socket.accept()
        return self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


class IssuerServer:
    """The HTTPS server of an issuer. It binds when made (port 0: any free port, so the issuer URL can name the port
    it got), and ``serve(issuer)`` answers from a thread."""

    def __init__(self, host: str, port: int, cert: Path, key: Path) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert, key)
        self._httpd = _TLSServer((host, port), BaseHTTPRequestHandler)
        self._httpd.ssl_context = ctx
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def serve(self, issuer: TokenIssuer) -> IssuerServer:
        self._httpd.RequestHandlerClass = _handler(issuer)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="tpcmesh-issuer", daemon=True)
        self._thread.start()
        log.info("Started token issuer %s on port %d", issuer.issuer, self.port)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> IssuerServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""A real token issuer on loopback for the tests: the operator's issuer, its HTTPS endpoint with a host certificate
of the test CA."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tpcmesh_operator.credentials.tokens.claims import CREATE_INCOMING, READ_SETS, TokenRequest
from tpcmesh_operator.credentials.tokens.issuer import TokenIssuer
from tpcmesh_operator.credentials.tokens.server import IssuerServer

ISSUER_HOST = "127.0.0.1"


@contextlib.contextmanager
def running_issuer(pki_: Any, name: str = "issuer", path: str = "", **issuer_kw: Any) -> Iterator[TokenIssuer]:
    """An issuer serving its discovery document and JWKS at https://127.0.0.1:<free port><path>."""
    cert, key = pki_.host_cert(name, [ISSUER_HOST])
    with IssuerServer(ISSUER_HOST, 0, cert, key) as server:
        issuer = TokenIssuer(f"https://{ISSUER_HOST}:{server.port}{path}", **issuer_kw)
        server.serve(issuer)
        yield issuer


@contextlib.contextmanager
def two_issuers(pki_: Any) -> Iterator[tuple[TokenIssuer, TokenIssuer, list[float]]]:
    """The agents' issuer, whose clock the test can set back (``skew[0]`` seconds) to sign an already expired
    token, and another issuer (its tokens must be refused as "other issuer")."""
    skew = [0.0]
    with running_issuer(pki_, "issuer", clock=lambda: time.time() + skew[0]) as ours, \
            running_issuer(pki_, "other-issuer") as other:
        yield ours, other, skew


@pytest.fixture(scope="module")
def token_issuers(tpcmesh_pki: Any) -> Iterator[tuple[TokenIssuer, TokenIssuer, list[float]]]:
    """``two_issuers`` for a test module's agents."""
    with two_issuers(tpcmesh_pki) as both:
        yield both


def token_for(issuers: tuple[TokenIssuer, TokenIssuer, list[float]], audience: str, case: str,
              scope: str) -> str | None:
    """A token of ``two_issuers`` for ``audience`` and ``scope``: "valid", or wrong the way ``case`` says
    ("missing": None, "expired", "wrong audience", "wrong scope", "other issuer")."""
    ours, other, skew = issuers
    req = TokenRequest("test-client", audience, (scope,), 300)
    if case == "valid":
        return ours.issue(req)
    if case == "missing":
        return None
    if case == "expired":
        skew[0] = -3600.0
        try:
            return ours.issue(req)
        finally:
            skew[0] = 0.0
    if case == "wrong audience":
        return ours.issue(TokenRequest("test-client", "https://elsewhere.example:1094", (scope,), 300))
    if case == "wrong scope":
        wrong = READ_SETS if scope == CREATE_INCOMING else CREATE_INCOMING
        return ours.issue(TokenRequest("test-client", audience, (wrong,), 300))
    if case in ("other issuer", "another issuer"):
        return other.issue(req)
    raise AssertionError(f"no token case {case!r}")


@contextlib.contextmanager
def running_site_issuer(pki_: Any, clients: dict[str, str]) -> Iterator[TokenIssuer]:
    """A site's own issuer as the operator meets it in token mode "external": an OAuth 2.0 token endpoint (client
    credentials grant, HTTP Basic client authentication, ``scope`` and ``audience`` form fields the way WLCG IAM
    takes them) next to the discovery document and JWKS. No IAM product runs here, so this stand-in speaks the
    protocol with the project's signer; the agents' validators (XRootD's SciTokens plugin, the built-in mover) and
    the operator's client are the real ones."""
    import base64
    import json
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs

    cert, key = pki_.host_cert("site-issuer", [ISSUER_HOST])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    holder: dict[str, TokenIssuer] = {}

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            issuer = holder["issuer"]
            if self.path == "/.well-known/openid-configuration":
                self._send(200, {**issuer.discovery(), "token_endpoint": issuer.issuer + "/token",
                                 "grant_types_supported": ["client_credentials"]})
            elif self.path == "/jwks":
                self._send(200, issuer.jwks())
            else:
                self._send(404, {"error": "not_found"})

        def do_POST(self) -> None:  # noqa: N802
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()}
            who, _, secret = base64.b64decode(self.headers.get("Authorization", "Basic ")[6:]).decode().partition(":")
            if clients.get(who) != secret or not who:
                self._send(401, {"error": "invalid_client", "error_description": "Bad client credentials"})
                return
            if form.get("grant_type") != "client_credentials":
                self._send(400, {"error": "unsupported_grant_type"})
                return
            try:
                token = holder["issuer"].issue(TokenRequest(who, form["audience"], tuple(form["scope"].split()), 900))
            except (KeyError, ValueError) as e:
                self._send(400, {"error": "invalid_scope", "error_description": str(e)})
                return
            self._send(200, {"access_token": token, "token_type": "Bearer", "expires_in": 900})

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer((ISSUER_HOST, 0), Handler)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    holder["issuer"] = TokenIssuer(f"https://{ISSUER_HOST}:{httpd.server_address[1]}")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder["issuer"]
    finally:
        httpd.shutdown()
        httpd.server_close()

"""A real token issuer on loopback for the tests: the operator's issuer, its HTTPS endpoint with a host certificate
of the test CA."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tpcmesh_operator.tokens.claims import CREATE_INCOMING, READ_SETS, TokenRequest
from tpcmesh_operator.tokens.issuer import TokenIssuer
from tpcmesh_operator.tokens.server import IssuerServer

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

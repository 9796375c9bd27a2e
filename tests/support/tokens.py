"""A real token issuer on loopback for the tests: the operator's issuer, its HTTPS endpoint with a host certificate
of the test CA."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

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

"""WLCG JWT profile claims (profile 1.0): what a tpcmesh token says, built and checked without I/O.

A pull needs ``storage.read:/sets`` at the source; the landing needs ``storage.create:/incoming`` at the
destination. Tokens are short: a transfer gets one just before it starts.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

WLCG_VERSION = "1.0"
READ_SETS = "storage.read:/sets"
CREATE_INCOMING = "storage.create:/incoming"
MAX_LIFETIME = 6 * 3600  # seconds; the WLCG profile recommends hours at most for access tokens
# storage.<op>:<absolute path>, as the WLCG profile spells storage scopes (no '..', no '//')
_STORAGE_SCOPE = re.compile(r"^storage\.(read|create|modify|stage):(/[A-Za-z0-9._~-]+)*/?$")
_ISSUER = re.compile(r"^https://[^/?#\s]+(/[^?#\s]*)?$")


class ClaimsError(ValueError):
    """A token request that cannot be honoured; the message names the field."""


@dataclass(frozen=True)
class TokenRequest:
    subject: str  # who the token is for, e.g. the agent's node name
    audience: str  # the storage endpoint that must accept it (its https://host:port), or the WLCG "any" audience
    scopes: tuple[str, ...]
    lifetime: int  # seconds


def check_issuer(issuer: str) -> str:
    """An issuer URL as token validators require: https, no query or fragment, no trailing slash (the discovery
    document is found at <issuer>/.well-known/openid-configuration)."""
    if not _ISSUER.match(issuer) or issuer.endswith("/"):
        raise ClaimsError(f"issuer {issuer!r}: expected https://host[:port][/path] without a trailing slash")
    return issuer


def check_request(req: TokenRequest) -> TokenRequest:
    if not req.subject or len(req.subject) > 256:
        raise ClaimsError("subject: expected 1 to 256 characters")
    if not req.audience or " " in req.audience:
        raise ClaimsError(f"audience {req.audience!r}: expected one audience without spaces")
    if not req.scopes:
        raise ClaimsError("scopes: expected at least one scope, e.g. " + READ_SETS)
    for s in req.scopes:
        if not _STORAGE_SCOPE.match(s) or "/../" in s + "/" or "/./" in s + "/":
            raise ClaimsError(f"scope {s!r}: expected storage.<read|create|modify|stage>:/<path>")
    if not 0 < req.lifetime <= MAX_LIFETIME:
        raise ClaimsError(f"lifetime {req.lifetime}: expected 1 to {MAX_LIFETIME} seconds")
    return req


def build_claims(issuer: str, req: TokenRequest, now: int, jti: str | None = None) -> dict[str, object]:
    """The claims of one access token issued at ``now`` (Unix seconds)."""
    check_issuer(issuer)
    check_request(req)
    return {
        "wlcg.ver": WLCG_VERSION,
        "iss": issuer,
        "sub": req.subject,
        "aud": req.audience,
        "scope": " ".join(req.scopes),
        "iat": now,
        "nbf": now,
        "exp": now + req.lifetime,
        "jti": jti or str(uuid.uuid4()),
    }


def discovery_document(issuer: str) -> dict[str, object]:
    """The OpenID discovery document validators read to find the JWKS (only what a token validator needs:
    tpcmesh's issuer has no authorization or token endpoint for clients)."""
    check_issuer(issuer)
    return {"issuer": issuer, "jwks_uri": issuer + "/jwks", "id_token_signing_alg_values_supported": ["ES256"],
            "scopes_supported": ["storage.read:/", "storage.create:/", "wlcg"]}

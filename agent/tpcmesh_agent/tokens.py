"""Why a storage endpoint refused a bearer token, from the token's own claims (pure, no signature check).

XRootD answers every token refusal with the same 403 ("permission denied") and writes the reason only into its own
log; the agent names the likely reason from what the token says against what the endpoint expects, so a failed
transfer says "expired" or "wrong audience" rather than only 403. The token itself never appears in a reason.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

# which scopes grant an operation: the WLCG JWT profile 1.0's (storage.modify implies create) and SciTokens' ones
GRANTING = {"read": ("storage.read", "read"), "create": ("storage.create", "storage.modify", "write")}


@dataclass(frozen=True)
class Expectation:
    """What an endpoint requires of a token for one request."""

    issuer: str
    audience: str
    operation: str  # "read" or "create"
    path: str


def unverified_claims(token: str) -> dict[str, Any]:
    """The payload of a compact JWS, not verified (only for naming a refusal)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error) as e:
        raise ValueError("the token is not a JWT (three base64url parts, a JSON payload)") from e
    if not isinstance(claims, dict):
        raise ValueError("the token's payload is not a JSON object")
    return claims


def grants(scopes: str, operation: str, path: str) -> bool:
    """Whether a space-separated ``scope`` claim grants ``operation`` on ``path`` (a scope's path is a prefix of
    whole path components: storage.read:/sets grants /sets/a/b, not /setsx)."""
    for scope in scopes.split():
        kind, _, prefix = scope.partition(":")
        if kind in GRANTING[operation] and prefix.startswith("/"):
            prefix = prefix.rstrip("/")
            if prefix == "" or path == prefix or path.startswith(prefix + "/"):
                return True
    return False


def refusal_reason(token: str | None, want: Expectation, now: float) -> str:
    """The first thing about ``token`` that ``want`` rejects, in words; a claims-level explanation when the claims
    look right (then the signature or the key was refused)."""
    if not token:
        return "no bearer token was sent"
    try:
        c = unverified_claims(token)
    except ValueError as e:
        return str(e)
    if c.get("iss") != want.issuer:
        return f"the token was issued by {c.get('iss')!r}, the endpoint trusts {want.issuer!r}"
    exp, nbf = c.get("exp"), c.get("nbf")
    if not isinstance(exp, int | float) or now >= exp:
        return f"the token expired {int(now - exp)} s ago" if isinstance(exp, int | float) else "the token has no exp"
    if isinstance(nbf, int | float) and now < nbf:
        return f"the token is not valid for another {int(nbf - now)} s (nbf)"
    aud = c.get("aud")
    audiences = aud if isinstance(aud, list) else [aud]
    if want.audience not in audiences:
        return f"the token is for audience {aud!r}, the endpoint is {want.audience!r}"
    scopes = str(c.get("scope", ""))
    if not grants(scopes, want.operation, want.path):
        return (f"the token's scope {scopes!r} does not grant {want.operation} on {want.path} "
                f"(needs {GRANTING[want.operation][0]}:<a prefix of it>)")
    return "the token's claims match: its signature or signing key was refused (a key the endpoint has not seen?)"

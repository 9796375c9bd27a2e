"""Checking bearer tokens where the agent itself is the storage endpoint (the built-in mover's data port and COPY).

``TokenValidator`` verifies a WLCG JWT profile (or SciTokens) token with PyJWT against the issuer's keys: the JWKS
found through the issuer's OpenID discovery document, fetched over HTTPS with the CA the agent is given, cached, and
fetched again when a token names a key id the cache does not hold (the issuer publishes its next key before signing
with it; a refetch per unknown kid is rate-limited so bogus kids cannot turn the agent into a load on the issuer).
It checks, in this order: a token at all, the issuer, the signature, exp/nbf, the audience, the scope; a refusal
says which check failed and never contains the token.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jwt

from .tokens import GRANTING, grants, unverified_claims

log = logging.getLogger(__name__)

DISCOVERY_PATH = "/.well-known/openid-configuration"
FETCH_TIMEOUT = 10.0
REFETCH_INTERVAL = 5.0  # seconds between two JWKS fetches caused by unknown key ids
JWKS_LIFETIME = 600.0  # seconds a fetched JWKS is used before it is fetched again (retired keys drop out)
LEEWAY = 5  # seconds of clock difference tolerated on exp/nbf
ALGORITHMS = ["ES256", "RS256"]  # the WLCG profile's algorithms (tpcmesh's issuer signs ES256)

class TokenRefused(Exception):
    """A request's token was refused; ``check`` is the failed check ("missing", "other issuer", "expired",
    "wrong audience", "wrong scope", ...), the message says why in words without the token."""

    def __init__(self, check: str, detail: str) -> None:
        super().__init__(f"token refused ({check}): {detail}")
        self.check = check


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None when there is none."""
    scheme, _, value = (header or "").strip().partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


@dataclass(frozen=True)
class Grant:
    """What a verified token said (for logs: no token text)."""

    subject: str
    scope: str


class TokenValidator:
    """Verifies tokens of one issuer for one audience (thread-safe: the data server's handlers run in threads)."""

    def __init__(self, issuer: str, audience: str, ca_file: str | None = None) -> None:
        self.issuer = issuer
        self.audience = audience
        self._ssl = ssl.create_default_context(cafile=ca_file)
        self._lock = threading.Lock()
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = float("-inf")

    # -- the issuer's keys
    def _get_json(self, url: str) -> Any:
        if not url.startswith("https://"):
            raise TokenRefused("issuer unreachable", f"{url!r} is not an https:// URL")
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT, context=self._ssl) as resp:  # noqa: S310
                return json.loads(resp.read(1 << 20))
        except (OSError, ValueError) as e:
            raise TokenRefused("issuer unreachable", f"fetching {url} failed: {e}") from e

    def _fetch_keys(self) -> None:
        doc = self._get_json(self.issuer + DISCOVERY_PATH)
        if not isinstance(doc, dict) or doc.get("issuer") != self.issuer or not isinstance(doc.get("jwks_uri"), str):
            raise TokenRefused("issuer unreachable", f"the discovery document of {self.issuer} does not name this "
                                                     "issuer and a jwks_uri")
        try:
            keyset = jwt.PyJWKSet.from_dict(self._get_json(doc["jwks_uri"]))
        except jwt.PyJWTError as e:
            raise TokenRefused("issuer unreachable", f"the JWKS of {self.issuer} is unusable: {e}") from e
        self._keys = {k.key_id: k for k in keyset.keys if k.key_id}
        self._fetched_at = time.monotonic()
        log.info("Fetched %d signing key(s) of token issuer %s", len(self._keys), self.issuer)

    def _key(self, kid: str) -> jwt.PyJWK:
        with self._lock:
            age = time.monotonic() - self._fetched_at
            if age > JWKS_LIFETIME or (kid not in self._keys and age > REFETCH_INTERVAL):
                self._fetch_keys()
            key = self._keys.get(kid)
        if key is None:
            raise TokenRefused("unknown key", f"the issuer {self.issuer} publishes no key {kid!r}")
        return key

    # -- one token
    def check(self, token: str | None, operation: str, path: str) -> Grant:
        """The grant of a valid ``token`` for ``operation`` ("read" or "create") on ``path``; else TokenRefused."""
        if not token:
            raise TokenRefused("missing", "no bearer token was sent (Authorization: Bearer <token>)")
        try:
            claims = unverified_claims(token)
            header = jwt.get_unverified_header(token)
        except (ValueError, jwt.PyJWTError) as e:
            raise TokenRefused("malformed", "the token is not a JWT") from e
        if claims.get("iss") != self.issuer:
            raise TokenRefused("other issuer", f"the token was issued by {claims.get('iss')!r}, this endpoint "
                                               f"trusts {self.issuer!r}")
        key = self._key(str(header.get("kid", "")))
        try:
            verified = jwt.decode(token, key.key, algorithms=ALGORITHMS, audience=self.audience, issuer=self.issuer,
                                  leeway=LEEWAY, options={"require": ["exp", "iss", "aud"]})
        except jwt.ExpiredSignatureError as e:
            raise TokenRefused("expired", f"the token expired {int(time.time() - claims.get('exp', 0))} s ago") from e
        except jwt.ImmatureSignatureError as e:
            raise TokenRefused("not yet valid", "the token's nbf/iat is in the future") from e
        except jwt.InvalidAudienceError as e:
            raise TokenRefused("wrong audience", f"the token is for audience {claims.get('aud')!r}, this endpoint "
                                                 f"is {self.audience!r}") from e
        except jwt.InvalidSignatureError as e:
            raise TokenRefused("bad signature", "the token's signature does not verify with the issuer's key") from e
        except jwt.PyJWTError as e:
            raise TokenRefused("invalid", f"{type(e).__name__}: {e}") from e
        scope = str(verified.get("scope", ""))
        if not grants(scope, operation, path):
            raise TokenRefused("wrong scope", f"the token's scope {scope!r} does not grant {operation} on {path} "
                                              f"(needs {GRANTING[operation][0]}:<a prefix of it>)")
        return Grant(subject=str(verified.get("sub", "")), scope=scope)


@lru_cache(maxsize=8)
def shared_validator(issuer: str, audience: str, ca_file: str | None) -> TokenValidator:
    """One validator (one key cache) per issuer and audience in the process: the data server and the mover share
    it."""
    return TokenValidator(issuer, audience, ca_file)


def builtin_validator(settings: Any) -> TokenValidator | None:
    """The built-in endpoint's validator in token mode (settings.xrootd_token_issuer set); None otherwise."""
    if not getattr(settings, "xrootd_token_issuer", ""):
        return None
    ca = settings.token_issuer_ca()
    return shared_validator(settings.xrootd_token_issuer, settings.builtin_audience(), str(ca) if ca else None)

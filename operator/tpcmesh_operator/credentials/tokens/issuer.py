"""Signs access tokens with the keyring's active key (PyJWT) and renders the JWKS.

Holds the keyring and the clock; everything it decides comes from ``claims`` and ``keyring``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import jwt
from jwt.algorithms import ECAlgorithm

from .claims import ClaimsError, TokenRequest, build_claims, check_issuer, discovery_document
from .keyring import ALGORITHM, Keyring

DEFAULT_ROTATE_EVERY = 24 * 3600  # seconds a key signs before the next one takes over


class TokenIssuer:
    def __init__(self, issuer: str, keyring: Keyring | None = None, rotate_every: int = DEFAULT_ROTATE_EVERY,
                 clock: Callable[[], float] = time.time,
                 on_rotate: Callable[[Keyring], None] | None = None) -> None:
        self.issuer = check_issuer(issuer)
        self._clock = clock
        self._on_rotate = on_rotate  # keeps the new keyring (the operator: in its Secret) before it signs with it
        self._lock = threading.Lock()  # the HTTPS server reads the JWKS while the operator signs and rotates
        self._keyring = keyring or Keyring.fresh(self._now())
        if rotate_every <= 0:
            raise ClaimsError(f"rotate_every {rotate_every}: expected positive seconds")
        self.rotate_every = rotate_every

    def _now(self) -> int:
        return int(self._clock())

    @property
    def keyring(self) -> Keyring:
        return self._keyring

    def rotate(self) -> str:
        """Schedule a new signing key (published now, signing ``publish_ahead`` seconds later; the old one stays
        published until its tokens expired); returns the new kid."""
        with self._lock:
            self._keep(self._keyring.rotate(self._now()))
            return self._keyring.keys[-1].kid

    def adopt(self, keyring: Keyring) -> None:
        """Take a keyring another process rotated (a standby operator reloading the stored one)."""
        with self._lock:
            self._keyring = keyring

    def _keep(self, keyring: Keyring) -> None:
        # stored first: a key that signed must survive a restart, or its tokens would fail until they expire
        if self._on_rotate is not None:
            self._on_rotate(keyring)
        self._keyring = keyring

    def active_kid(self) -> str:
        with self._lock:
            return self._keyring.active(self._now()).kid

    def rotate_if_due(self) -> bool:
        with self._lock:
            now = self._now()
            if not self._keyring.due(now, self.rotate_every):
                return False
            self._keep(self._keyring.rotate(now))
            return True

    def issue(self, req: TokenRequest) -> str:
        """A signed token (compact JWS) for ``req``; its lifetime may not exceed what the keyring keeps keys for."""
        if req.lifetime > self._keyring.max_lifetime:
            raise ClaimsError(f"lifetime {req.lifetime}: this issuer signs tokens of at most "
                              f"{self._keyring.max_lifetime} seconds")
        self.rotate_if_due()
        with self._lock:
            key = self._keyring.active(self._now())
            claims = build_claims(self.issuer, req, self._now())
        return jwt.encode(claims, key.private_key, algorithm=ALGORITHM, headers={"kid": key.kid, "typ": "JWT"})

    def jwks(self) -> dict[str, Any]:
        """The public keys validators may need now, as a JWK Set."""
        with self._lock:
            keys = self._keyring.published(self._now())
        out = []
        for k in keys:
            jwk = json.loads(ECAlgorithm.to_jwk(k.private_key.public_key()))
            out.append({**jwk, "kid": k.kid, "alg": ALGORITHM, "use": "sig"})
        return {"keys": out}

    def discovery(self) -> dict[str, object]:
        return discovery_document(self.issuer)

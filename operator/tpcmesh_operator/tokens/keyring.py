"""Which key signs, and which public keys the JWKS still publishes, as a function of time (pure).

A rotation makes a new key the signer; the old one stays in the JWKS until every token it signed has expired (its
retirement time plus the longest lifetime it may have signed with), then it is dropped. Keys are ES256 (P-256):
small, fast to verify, accepted by scitokens-cpp and every WLCG validator.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace

from cryptography.hazmat.primitives.asymmetric import ec

from .claims import MAX_LIFETIME

ALGORITHM = "ES256"


def new_kid(created: int) -> str:
    """A key id that sorts by age and cannot collide: the creation time and random hex."""
    return f"tpcmesh-{created}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private_key: ec.EllipticCurvePrivateKey = field(repr=False)
    created: int
    retired: int | None = None  # when it stopped signing

    def published_until(self, max_lifetime: int) -> int | None:
        """Until when the JWKS must publish it: None while it signs."""
        return None if self.retired is None else self.retired + max_lifetime


def new_key(created: int) -> SigningKey:
    return SigningKey(new_kid(created), ec.generate_private_key(ec.SECP256R1()), created)


@dataclass(frozen=True)
class Keyring:
    keys: tuple[SigningKey, ...]  # the active one last
    max_lifetime: int = MAX_LIFETIME

    @classmethod
    def fresh(cls, now: int, max_lifetime: int = MAX_LIFETIME) -> Keyring:
        return cls((new_key(now),), max_lifetime)

    @property
    def active(self) -> SigningKey:
        return self.keys[-1]

    def due(self, now: int, rotate_every: int) -> bool:
        return now - self.active.created >= rotate_every

    def rotate(self, now: int, key: SigningKey | None = None) -> Keyring:
        """A new signing key; the old active one is retired at ``now``; keys whose tokens all expired are dropped."""
        retired = replace(self.active, retired=now)
        kept = tuple(k for k in (*self.keys[:-1], retired) if _still_needed(k, now, self.max_lifetime))
        return replace(self, keys=(*kept, key or new_key(now)))

    def published(self, now: int) -> tuple[SigningKey, ...]:
        """The keys whose public halves the JWKS carries at ``now``: the active one and every retired key that may
        still have signed a valid token."""
        return tuple(k for k in self.keys if _still_needed(k, now, self.max_lifetime))


def _still_needed(key: SigningKey, now: int, max_lifetime: int) -> bool:
    until = key.published_until(max_lifetime)
    return until is None or now < until

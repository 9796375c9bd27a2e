"""Which key signs, and which public keys the JWKS publishes, as a function of time (pure).

A rotation schedules a new key: it is published at once but signs only ``publish_ahead`` seconds later, because
validators cache the JWKS and do not refetch it for an unknown key id (scitokens-cpp 0.7, which XRootD's token plugin
uses, refetches every 600 s at most and refuses a token whose kid it has not seen yet). When the new key starts
signing, the old one stops; the old one stays published until every token it signed has expired (the switch plus
the longest lifetime it may have signed with), then it is dropped. Keys are ES256 (P-256): small, fast to verify,
accepted by scitokens-cpp and every WLCG validator.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field, replace

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from .claims import MAX_LIFETIME

ALGORITHM = "ES256"
# scitokens-cpp 0.7 refetches a cached JWKS after 600 s; a new key is published this long before it signs
PUBLISH_AHEAD = 900


def new_kid(created: int) -> str:
    """A key id that sorts by age and cannot collide: the creation time and random hex."""
    return f"tpcmesh-{created}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private_key: ec.EllipticCurvePrivateKey = field(repr=False)
    signs_from: int  # until the next key's signs_from


def new_key(signs_from: int, created: int | None = None) -> SigningKey:
    return SigningKey(new_kid(signs_from if created is None else created), ec.generate_private_key(ec.SECP256R1()),
                      signs_from)


@dataclass(frozen=True)
class Keyring:
    keys: tuple[SigningKey, ...]  # by signs_from, oldest first
    max_lifetime: int = MAX_LIFETIME
    publish_ahead: int = PUBLISH_AHEAD

    @classmethod
    def fresh(cls, now: int, max_lifetime: int = MAX_LIFETIME, publish_ahead: int = PUBLISH_AHEAD) -> Keyring:
        return cls((new_key(now),), max_lifetime, publish_ahead)

    def active(self, now: int) -> SigningKey:
        """The key that signs at ``now``: the newest one whose time has come."""
        started = [k for k in self.keys if k.signs_from <= now]
        return started[-1] if started else self.keys[0]

    def due(self, now: int, rotate_every: int) -> bool:
        """Time to schedule the next key, so that it signs ``rotate_every`` after the newest one started."""
        return now >= self.keys[-1].signs_from + rotate_every - self.publish_ahead

    def rotate(self, now: int) -> Keyring:
        """Schedule a new key: published from now on, signing from ``now + publish_ahead`` (and not before the newest
        scheduled key). Keys whose tokens have all expired are dropped."""
        signs_from = max(now + self.publish_ahead, self.keys[-1].signs_from + 1)
        kept = self._needed(now)
        return replace(self, keys=(*kept, new_key(signs_from, created=now)))

    def published(self, now: int) -> tuple[SigningKey, ...]:
        """The keys whose public halves the JWKS carries at ``now``: every scheduled key, the active one, and every
        older key that may still have signed a valid token."""
        return self._needed(now)

    def _needed(self, now: int) -> tuple[SigningKey, ...]:
        out = []
        for key, successor in zip(self.keys, (*self.keys[1:], None), strict=True):
            # a key signs until its successor starts; its last token expires max_lifetime later
            if successor is None or now < successor.signs_from + self.max_lifetime:
                out.append(key)
        return tuple(out)


class KeyringFormatError(ValueError):
    """A stored keyring that cannot be read back; the message says which part."""


def dump(keyring: Keyring) -> str:
    """The keyring as JSON (private keys as PKCS#8 PEM): what the operator keeps in its Secret, so a restarted or
    standby operator signs and publishes the same keys."""
    keys = [{"kid": k.kid, "signsFrom": k.signs_from,
             "pem": k.private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()).decode()} for k in keyring.keys]
    return json.dumps({"version": 1, "maxLifetime": keyring.max_lifetime, "publishAhead": keyring.publish_ahead,
                       "keys": keys}, indent=1)


def load(text: str) -> Keyring:
    """The keyring ``dump`` wrote."""
    try:
        doc = json.loads(text)
        if doc.get("version") != 1:
            raise KeyringFormatError(f"keyring version {doc.get('version')!r}: this operator reads version 1")
        keys = []
        for i, k in enumerate(doc["keys"]):
            key = serialization.load_pem_private_key(k["pem"].encode(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise KeyringFormatError(f"keys[{i}] ({k.get('kid')}): expected an EC private key")
            keys.append(SigningKey(str(k["kid"]), key, int(k["signsFrom"])))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, KeyringFormatError):
            raise
        raise KeyringFormatError(f"stored keyring unreadable: {type(e).__name__}: {e}") from None
    if not keys:
        raise KeyringFormatError("stored keyring has no keys")
    keys.sort(key=lambda k: k.signs_from)
    return Keyring(tuple(keys), int(doc.get("maxLifetime", MAX_LIFETIME)), int(doc.get("publishAhead", PUBLISH_AHEAD)))

"""The token issuer's claims and key rotation: WLCG profile claims, refusals that name the field, and a rotated key
kept in the JWKS exactly until every token it signed has expired (verified with PyJWT against the JWKS)."""

from __future__ import annotations

import jwt
import pytest
from tpcmesh_operator.credentials.tokens import keyring
from tpcmesh_operator.credentials.tokens.claims import (
    CREATE_INCOMING,
    READ_SETS,
    ClaimsError,
    TokenRequest,
    build_claims,
    discovery_document,
)
from tpcmesh_operator.credentials.tokens.issuer import TokenIssuer
from tpcmesh_operator.credentials.tokens.keyring import Keyring

ISS = "https://issuer.example:8443"
AUD = "https://node-a:1094"


class Clock:
    def __init__(self, now: float = 1_800_000_000) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def verify(token: str, issuer: TokenIssuer, now: float, audience: str = AUD) -> dict:
    """PyJWT's own validation against the issuer's published JWKS, as a storage element would do it; the times are
    checked against the test's clock (PyJWT reads the machine's)."""
    kid = jwt.get_unverified_header(token)["kid"]
    keys = {k["kid"]: k for k in issuer.jwks()["keys"]}
    if kid not in keys:
        raise LookupError(f"kid {kid} is not published")
    claims = jwt.decode(token, jwt.PyJWK(keys[kid]).key, algorithms=["ES256"], audience=audience,
                        issuer=issuer.issuer, options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                                                       "require": ["exp", "nbf", "iat", "jti", "sub"]})
    if not claims["nbf"] <= now < claims["exp"]:
        raise jwt.ExpiredSignatureError(f"not valid at {now}")
    return claims


def test_claims_follow_the_wlcg_profile():
    c = build_claims(ISS, TokenRequest("node-a", AUD, (READ_SETS,), 600), now=1000, jti="j1")
    assert c == {"wlcg.ver": "1.0", "iss": ISS, "sub": "node-a", "aud": AUD, "scope": "storage.read:/sets",
                 "iat": 1000, "nbf": 1000, "exp": 1600, "jti": "j1"}
    two = build_claims(ISS, TokenRequest("n", AUD, (READ_SETS, CREATE_INCOMING), 60), now=0)
    assert two["scope"] == "storage.read:/sets storage.create:/incoming"
    assert two["jti"] != build_claims(ISS, TokenRequest("n", AUD, (READ_SETS,), 60), now=0)["jti"]


@pytest.mark.parametrize(("issuer", "req", "names"), [
    ("http://insecure", TokenRequest("n", AUD, (READ_SETS,), 60), "issuer"),
    (ISS + "/", TokenRequest("n", AUD, (READ_SETS,), 60), "issuer"),
    (ISS, TokenRequest("", AUD, (READ_SETS,), 60), "subject"),
    (ISS, TokenRequest("n", "a b", (READ_SETS,), 60), "audience"),
    (ISS, TokenRequest("n", AUD, (), 60), "scopes"),
    (ISS, TokenRequest("n", AUD, ("read:/sets",), 60), "scope 'read:/sets'"),
    (ISS, TokenRequest("n", AUD, ("storage.read:/sets/../etc",), 60), "scope"),
    (ISS, TokenRequest("n", AUD, ("storage.write:/x",), 60), "scope"),
    (ISS, TokenRequest("n", AUD, (READ_SETS,), 0), "lifetime 0"),
    (ISS, TokenRequest("n", AUD, (READ_SETS,), 10**6), "lifetime 1000000"),
])
def test_bad_requests_are_refused_naming_the_field(issuer, req, names):
    with pytest.raises(ClaimsError, match=names.replace("(", r"\(")):
        build_claims(issuer, req, now=0)


def test_discovery_document_points_at_the_jwks():
    d = discovery_document(ISS + "/tpcmesh")
    assert d["issuer"] == ISS + "/tpcmesh" and d["jwks_uri"] == ISS + "/tpcmesh/jwks"


def test_signed_token_verifies_with_the_published_key_and_names_its_kid():
    clock = Clock()
    issuer = TokenIssuer(ISS, clock=clock)
    token = issuer.issue(TokenRequest("node-a", AUD, (CREATE_INCOMING,), 300))
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "ES256" and header["kid"] == issuer.active_kid()
    claims = verify(token, issuer, clock.now)
    assert claims["scope"] == CREATE_INCOMING and claims["wlcg.ver"] == "1.0"
    with pytest.raises(jwt.InvalidAudienceError):
        verify(token, issuer, clock.now, audience="https://other:1094")
    other = TokenIssuer(ISS, clock=clock)  # same URL, another key: its tokens do not verify with ours
    foreign = other.issue(TokenRequest("node-a", AUD, (CREATE_INCOMING,), 300))
    with pytest.raises(LookupError):
        verify(foreign, issuer, clock.now)


def kids(issuer: TokenIssuer) -> set[str]:
    return {k["kid"] for k in issuer.jwks()["keys"]}


def signer(token: str) -> str:
    """The kid of the key that signed ``token``."""
    return jwt.get_unverified_header(token)["kid"]


def rotating(clock: Clock, max_lifetime: int, publish_ahead: int, rotate_every: int) -> TokenIssuer:
    """An issuer with a fresh keyring that rotates every ``rotate_every`` s, its next key published ahead."""
    return TokenIssuer(ISS, keyring=Keyring.fresh(int(clock.now), max_lifetime=max_lifetime,
                                                  publish_ahead=publish_ahead), rotate_every=rotate_every, clock=clock)


def test_rotation_publishes_the_next_key_ahead_and_keeps_the_old_one_until_its_last_token_expired():
    clock = Clock()
    issuer = rotating(clock, max_lifetime=3600, publish_ahead=900, rotate_every=86400)
    old_kid = issuer.active_kid()
    clock.now += 100
    new_kid = issuer.rotate()
    assert new_kid != old_kid and kids(issuer) == {old_kid, new_kid}  # published before it signs
    clock.now += 899
    old_token = issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 3600))  # the last one of the old key, longest
    assert signer(old_token) == old_kid
    clock.now += 1  # publish_ahead after the rotation: the new key signs
    new_token = issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 60))
    assert signer(new_token) == new_kid == issuer.active_kid()
    clock.now += 3599  # one second before the old key's last possible token expires
    assert kids(issuer) == {old_kid, new_kid}
    verify(old_token, issuer, clock.now - 1)  # its own last valid second
    clock.now += 1  # the switch + max lifetime: no token of the old key can be valid any more
    assert kids(issuer) == {new_kid}
    issuer.rotate()  # the next rotation drops it from the keyring itself
    assert old_kid not in {k.kid for k in issuer.keyring.keys}


def test_rotation_is_scheduled_when_due_and_lifetime_is_bounded_by_the_keyring():
    clock = Clock()
    issuer = rotating(clock, max_lifetime=600, publish_ahead=100, rotate_every=1000)
    first = issuer.active_kid()
    clock.now += 899
    issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 600))
    assert len(issuer.jwks()["keys"]) == 1
    clock.now += 1  # rotate_every - publish_ahead: the next key is scheduled (published), the first still signs
    t = issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 600))
    assert signer(t) == first and len(issuer.jwks()["keys"]) == 2
    clock.now += 100
    t = issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 600))
    assert signer(t) != first
    assert len(issuer.keyring.keys) == 2  # issuing again does not schedule yet another key
    with pytest.raises(ClaimsError, match="at most 600 seconds"):
        issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 601))


def test_jwks_carries_public_keys_only():
    issuer = TokenIssuer(ISS)
    (key,) = issuer.jwks()["keys"]
    assert key["kty"] == "EC" and key["crv"] == "P-256" and key["alg"] == "ES256" and key["use"] == "sig"
    assert "d" not in key


def test_a_stored_keyring_reads_back_with_the_same_keys_and_times() -> None:
    ring = Keyring.fresh(1_000, max_lifetime=3600, publish_ahead=900).rotate(2_000)
    back = keyring.load(keyring.dump(ring))
    assert [(k.kid, k.signs_from) for k in back.keys] == [(k.kid, k.signs_from) for k in ring.keys]
    assert (back.max_lifetime, back.publish_ahead) == (3600, 900)
    issuer_a = TokenIssuer(ISS, keyring=ring, clock=lambda: 1_500)
    issuer_b = TokenIssuer(ISS, keyring=back, clock=lambda: 1_500)
    assert issuer_a.jwks() == issuer_b.jwks()  # same public keys: tokens of one verify with the other's JWKS


@pytest.mark.parametrize(("text", "why"), [
    ("{}", "version None"),
    ('{"version": 1, "keys": []}', "no keys"),
    ('{"version": 1, "keys": [{"kid": "k", "signsFrom": 1, "pem": "junk"}]}', "unreadable"),
    ("not json", "unreadable"),
])
def test_a_damaged_keyring_is_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(keyring.KeyringFormatError, match=why):
        keyring.load(text)


def test_a_rotation_is_stored_before_the_new_key_is_used() -> None:
    stored: list[Keyring] = []
    issuer = TokenIssuer(ISS, keyring=Keyring.fresh(0, max_lifetime=600, publish_ahead=100), rotate_every=1000,
                         clock=lambda: 950, on_rotate=stored.append)
    assert issuer.rotate_if_due() and stored and stored[-1] is issuer.keyring

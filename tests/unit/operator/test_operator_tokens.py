"""The token issuer's claims and key rotation: WLCG profile claims, refusals that name the field, and a rotated key
kept in the JWKS exactly until every token it signed has expired (verified with PyJWT against the JWKS)."""

from __future__ import annotations

import jwt
import pytest
from tpcmesh_operator.tokens.claims import (
    CREATE_INCOMING,
    READ_SETS,
    ClaimsError,
    TokenRequest,
    build_claims,
    discovery_document,
)
from tpcmesh_operator.tokens.issuer import TokenIssuer
from tpcmesh_operator.tokens.keyring import Keyring

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
    assert header["alg"] == "ES256" and header["kid"] == issuer.keyring.active.kid
    claims = verify(token, issuer, clock.now)
    assert claims["scope"] == CREATE_INCOMING and claims["wlcg.ver"] == "1.0"
    with pytest.raises(jwt.InvalidAudienceError):
        verify(token, issuer, clock.now, audience="https://other:1094")
    other = TokenIssuer(ISS, clock=clock)  # same URL, another key: its tokens do not verify with ours
    foreign = other.issue(TokenRequest("node-a", AUD, (CREATE_INCOMING,), 300))
    with pytest.raises(LookupError):
        verify(foreign, issuer, clock.now)


def test_rotation_keeps_the_old_key_until_its_last_token_expired():
    clock = Clock()
    issuer = TokenIssuer(ISS, keyring=Keyring.fresh(int(clock.now), max_lifetime=3600), rotate_every=86400,
                         clock=clock)
    old_token = issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 3600))  # the longest lifetime allowed
    old_kid = issuer.keyring.active.kid
    clock.now += 100
    new_kid = issuer.rotate()
    assert new_kid != old_kid
    new_token = issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 60))
    assert jwt.get_unverified_header(new_token)["kid"] == new_kid
    assert {k["kid"] for k in issuer.jwks()["keys"]} == {old_kid, new_kid}
    clock.now += 3599  # the old token's exp is iat + 3600 = rotation + 3500: still published one second before
    assert old_kid in {k["kid"] for k in issuer.jwks()["keys"]}
    verify(old_token, issuer, clock.now - 100)
    clock.now += 1  # retirement + max lifetime: no token of the old key can be valid any more
    assert [k["kid"] for k in issuer.jwks()["keys"]] == [new_kid]
    clock.now += 1
    issuer.rotate()  # the next rotation drops it from the keyring itself
    assert old_kid not in {k.kid for k in issuer.keyring.keys}


def test_rotation_happens_when_due_and_lifetime_is_bounded_by_the_keyring():
    clock = Clock()
    issuer = TokenIssuer(ISS, keyring=Keyring.fresh(int(clock.now), max_lifetime=600), rotate_every=1000,
                         clock=clock)
    first = issuer.keyring.active.kid
    issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 600))
    clock.now += 999
    issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 600))
    assert issuer.keyring.active.kid == first
    clock.now += 1
    t = issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 600))
    assert jwt.get_unverified_header(t)["kid"] != first
    with pytest.raises(ClaimsError, match="at most 600 seconds"):
        issuer.issue(TokenRequest("n", AUD, (READ_SETS,), 601))


def test_jwks_carries_public_keys_only():
    issuer = TokenIssuer(ISS)
    (key,) = issuer.jwks()["keys"]
    assert key["kty"] == "EC" and key["crv"] == "P-256" and key["alg"] == "ES256" and key["use"] == "sig"
    assert "d" not in key

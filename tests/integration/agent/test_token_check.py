"""The agent's own token check (token_check.TokenValidator) against the operator's real issuer over HTTPS: the keys
come through the discovery document and the JWKS, trusting only the project's CA; each refusal names its check and
never contains the token; a key published after the first fetch is fetched when a token names it."""

from __future__ import annotations

import time

import jwt
import pytest
from tpcmesh_agent import token_check
from tpcmesh_agent.token_check import TokenRefused, TokenValidator, bearer
from tpcmesh_operator.credentials.tokens.claims import CREATE_INCOMING, READ_SETS, TokenRequest, build_claims
from tpcmesh_operator.credentials.tokens.keyring import Keyring

from tests.support.tokens import running_issuer

pytestmark = pytest.mark.integration

AUD = "http://127.0.0.1:9080"


@pytest.fixture(scope="module")
def issuers(token_issuers):
    return token_issuers


@pytest.fixture
def validator(issuers, tpcmesh_pki):
    return TokenValidator(issuers[0].issuer, AUD, str(tpcmesh_pki.ca_file))


def _refused(validator, token, operation="read", path="/sets/1x10/f0") -> TokenRefused:
    with pytest.raises(TokenRefused) as e:
        validator.check(token, operation, path)
    if token:
        assert token not in str(e.value) and token.split(".")[-1] not in str(e.value)
    return e.value


def test_a_valid_token_passes_for_its_operation_and_path_only(issuers, validator):
    ours = issuers[0]
    read = ours.issue(TokenRequest("b", AUD, (READ_SETS,), 60))
    assert validator.check(read, "read", "/sets/1x10/f0").scope == READ_SETS
    assert _refused(validator, read, "read", "/setsx/f0").check == "wrong scope"
    assert _refused(validator, read, "create", "/incoming/f0").check == "wrong scope"
    create = ours.issue(TokenRequest("b", AUD, (CREATE_INCOMING,), 60))
    assert validator.check(create, "create", "/incoming/f0").subject == "b"


def test_each_refusal_names_its_check(issuers, validator):
    ours, other, skew = issuers
    skew[0] = -3600.0
    try:
        expired = ours.issue(TokenRequest("b", AUD, (READ_SETS,), 60))
    finally:
        skew[0] = 0.0
    cases = {
        "missing": None,
        "expired": expired,
        "wrong audience": ours.issue(TokenRequest("b", "https://elsewhere.example:1094", (READ_SETS,), 60)),
        "wrong scope": ours.issue(TokenRequest("b", AUD, (CREATE_INCOMING,), 60)),
        "other issuer": other.issue(TokenRequest("b", AUD, (READ_SETS,), 60)),
        "malformed": "not-a-jwt",
    }
    for check, token in cases.items():
        e = _refused(validator, token)
        assert e.check == check, (check, str(e))
        assert str(e).startswith(f"token refused ({check}): "), str(e)


def test_scitokens_scopes_are_accepted(issuers, validator):
    """SciTokens' read:/write: scopes (signed with the issuer's real key: its API makes WLCG scopes only)."""
    ours = issuers[0]
    key = ours.keyring.active(int(time.time()))
    claims = build_claims(ours.issuer, TokenRequest("b", AUD, (READ_SETS,), 60), int(time.time()))
    for scope, operation, path in (("read:/sets", "read", "/sets/s/f"), ("write:/incoming", "create", "/incoming/f")):
        token = jwt.encode({**claims, "scope": scope}, key.private_key, algorithm="ES256", headers={"kid": key.kid})
        assert validator.check(token, operation, path).scope == scope


def test_a_key_published_later_is_fetched_when_a_token_names_it(tpcmesh_pki, monkeypatch):
    monkeypatch.setattr(token_check, "REFETCH_INTERVAL", 0.0)
    with running_issuer(tpcmesh_pki, keyring=Keyring.fresh(int(time.time()), publish_ahead=0)) as issuer:
        v = TokenValidator(issuer.issuer, AUD, str(tpcmesh_pki.ca_file))
        v.check(issuer.issue(TokenRequest("b", AUD, (READ_SETS,), 60)), "read", "/sets/f")
        kid = issuer.rotate()
        time.sleep(1.1)  # the new key signs from the next second
        token = issuer.issue(TokenRequest("b", AUD, (READ_SETS,), 60))
        assert jwt.get_unverified_header(token)["kid"] == kid
        v.check(token, "read", "/sets/f")


def test_an_unreachable_issuer_is_a_named_refusal(issuers, tpcmesh_pki):
    v = TokenValidator("https://127.0.0.1:1", AUD, str(tpcmesh_pki.ca_file))
    fake = issuers[0].issue(TokenRequest("b", AUD, (READ_SETS,), 60))
    # the token names another issuer than the validator's: refused before any fetch
    assert _refused(v, fake).check == "other issuer"
    v = TokenValidator(issuers[0].issuer, AUD, None)  # the system's CAs do not include the test CA
    assert _refused(v, fake).check == "issuer unreachable"


def test_bearer_header():
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    assert bearer(None) is None and bearer("Basic abc") is None and bearer("Bearer ") is None

"""Naming why an endpoint refused a bearer token, from its claims (pure)."""

from __future__ import annotations

import base64
import json

import pytest
from tpcmesh_agent.tokens import Expectation, refusal_reason, unverified_claims

ISS, AUD = "https://issuer:8443", "https://node-a:8444"
WANT = Expectation(ISS, AUD, "read", "/sets/1x10/file-0000.dat")


def token(**claims) -> str:
    base = {"iss": ISS, "aud": AUD, "scope": "storage.read:/sets", "nbf": 100, "exp": 1000, "sub": "n"}
    payload = base64.urlsafe_b64encode(json.dumps({**base, **claims}).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJFUzI1NiJ9.{payload}.c2ln"


@pytest.mark.parametrize(("tok", "want", "says"), [
    (None, WANT, "no bearer token"),
    ("abc", WANT, "not a JWT"),
    (token(iss="https://other"), WANT, "issued by 'https://other'"),
    (token(exp=400), WANT, "expired 100 s ago"),
    (token(nbf=600), WANT, "not valid for another 100 s"),
    (token(aud="https://elsewhere"), WANT, "audience 'https://elsewhere'"),
    (token(scope="storage.read:/setsx"), WANT, "does not grant read"),  # a prefix by path, not by characters
    (token(scope="storage.create:/incoming"), WANT, "does not grant read"),
    (token(scope="storage.read:/incoming"), Expectation(ISS, AUD, "create", "/incoming/t/f"), "does not grant create"),
    (token(), WANT, "signature or signing key"),
    (token(aud=["x", AUD]), WANT, "signature or signing key"),
    (token(scope="storage.modify:/incoming"), Expectation(ISS, AUD, "create", "/incoming/t/f"), "signature"),
    (token(scope="storage.read:/"), WANT, "signature"),
])
def test_refusal_reason_names_the_first_claim_that_is_wrong(tok, want, says):
    assert says in refusal_reason(tok, want, now=500)


def test_reason_never_contains_the_token():
    tok = token(exp=1)
    assert tok not in refusal_reason(tok, WANT, now=500)
    assert unverified_claims(tok)["exp"] == 1

"""The operator's token issuer over real HTTPS: a validator finds the JWKS through the discovery document, trusting
only the project's CA, and verifies a token with the published key; a rotated key is served beside the new one."""

from __future__ import annotations

import ssl
import time

import httpx
import jwt
import pytest
from tpcmesh_operator.credentials.tokens.claims import CREATE_INCOMING, READ_SETS, TokenRequest
from tpcmesh_operator.credentials.tokens.keyring import Keyring

from tests.support.tokens import running_issuer

AUD = "https://node-a:1094"


def fetch_key(issuer_url: str, ca_file, kid: str) -> jwt.PyJWK:
    with httpx.Client(verify=ssl.create_default_context(cafile=str(ca_file)), timeout=10) as c:
        discovery = c.get(issuer_url + "/.well-known/openid-configuration")
        assert discovery.status_code == 200, discovery.text
        assert discovery.json()["issuer"] == issuer_url
        jwks = c.get(discovery.json()["jwks_uri"])
        assert jwks.status_code == 200 and jwks.headers["content-type"] == "application/json"
    return jwt.PyJWKSet.from_dict(jwks.json())[kid]


@pytest.mark.parametrize("path", ["", "/tpcmesh"])
def test_token_verifies_with_the_key_published_over_https(tpcmesh_pki, path):
    with running_issuer(tpcmesh_pki, path=path) as issuer:
        token = issuer.issue(TokenRequest("node-b", AUD, (READ_SETS,), 120))
        key = fetch_key(issuer.issuer, tpcmesh_pki.ca_file, jwt.get_unverified_header(token)["kid"])
        claims = jwt.decode(token, key.key, algorithms=["ES256"], audience=AUD, issuer=issuer.issuer)
        assert claims["scope"] == READ_SETS and claims["sub"] == "node-b"
        with httpx.Client(verify=ssl.create_default_context(cafile=str(tpcmesh_pki.ca_file)), timeout=10) as c:
            missing = c.get(issuer.issuer + "/nothing")
        assert missing.status_code == 404 and "openid-configuration" in missing.json()["error"]


def test_endpoint_is_https_with_the_project_ca_only(tpcmesh_pki):
    with running_issuer(tpcmesh_pki) as issuer:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"), httpx.Client(timeout=10) as c:
            c.get(issuer.issuer + "/jwks")  # the system CAs do not know the project's CA
        plain = issuer.issuer.replace("https://", "http://")
        with pytest.raises(httpx.HTTPError), httpx.Client(timeout=10) as c:
            c.get(plain + "/jwks")


def test_rotated_key_is_published_beside_the_new_one(tpcmesh_pki):
    skew = [0.0]  # the issuer's clock runs ahead to the new key's first second (a new key signs from the next one)
    with running_issuer(tpcmesh_pki, keyring=Keyring.fresh(int(time.time()), publish_ahead=0),
                        clock=lambda: time.time() + skew[0]) as issuer:
        before = issuer.issue(TokenRequest("node-b", AUD, (CREATE_INCOMING,), 120))
        issuer.rotate()
        skew[0] = 1.0
        after = issuer.issue(TokenRequest("node-b", AUD, (CREATE_INCOMING,), 120))
        assert jwt.get_unverified_header(before)["kid"] != jwt.get_unverified_header(after)["kid"]
        for token in (before, after):
            key = fetch_key(issuer.issuer, tpcmesh_pki.ca_file, jwt.get_unverified_header(token)["kid"])
            # leeway: the second token's iat is the issuer's skewed second
            assert jwt.decode(token, key.key, algorithms=["ES256"], audience=AUD, leeway=2)["scope"] == CREATE_INCOMING

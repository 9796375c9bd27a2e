"""The built-in token issuer as the chart runs it: keys in a Secret under the operator's real RBAC, JWKS over HTTPS.

Two "replicas" (two issuers started on one Secret, the operator's ServiceAccount for both) sign and publish the same
key; a rotation by the active one is stored and the standby serves the new key after reloading. A token is verified
against the JWKS fetched over HTTPS with only the agents' CA trusted, as an agent's validator does.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.request

import jwt
import pytest
import yaml
from cryptography import x509
from kubernetes import client, dynamic
from tpcmesh_operator.credentials import pki
from tpcmesh_operator.credentials import signer as certs
from tpcmesh_operator.credentials.tokens import incluster
from tpcmesh_operator.credentials.tokens.claims import READ_SETS, TokenRequest
from tpcmesh_operator.credentials.tokens.keyring import load

from tests.support.paths import REPO

pytestmark = pytest.mark.cluster

NS = "tpcmesh-tokens"
RELEASE = "tok"
OPERATOR_SA = f"{RELEASE}-tpcmesh-operator"
KEYS = f"{RELEASE}-tpcmesh-token-keys"


@pytest.fixture(scope="module")
def operator_core(control_plane):
    """A CoreV1Api authenticated as the chart's operator ServiceAccount, with the chart's operator RBAC."""
    api = control_plane.client()
    control_plane.ensure_namespace(NS)
    args = ["template", RELEASE, str(REPO / "charts" / "tpcmesh"), "--namespace", NS]
    for t in ("operator-serviceaccount", "operator-role", "operator-rolebinding"):
        args += ["--show-only", f"templates/{t}.yaml"]
    dyn = dynamic.DynamicClient(api)
    for doc in (d for d in yaml.safe_load_all(control_plane.helm(*args).stdout) if d):
        res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        res.create(body=doc, namespace=NS)
    return client.CoreV1Api(control_plane.client(control_plane.kubeconfig_for(OPERATOR_SA, NS)))


def _get_json(url: str, ca_pem: bytes) -> dict:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    with urllib.request.urlopen(url, context=ctx, timeout=10) as r:  # noqa: S310 - https only
        return json.load(r)


def test_replicas_share_the_stored_keys_and_follow_a_rotation(operator_core, monkeypatch) -> None:
    ca = certs.ensure_ca(operator_core.api_client, certs.CertSettings(
        signer_name="tpcmesh.io/agent", agent_service_account=f"system:serviceaccount:{NS}:x", namespace=NS,
        ca_secret=f"{RELEASE}-tpcmesh-ca", ca_bundle_configmap=f"{RELEASE}-tpcmesh-ca-bundle"))
    monkeypatch.setattr(incluster, "RELOAD_SECONDS", 0.5)
    cfg = incluster.IssuerConfig("https://localhost:0", 0, NS, KEYS, rotate_every=3600)
    active = incluster.start(cfg, operator_core, ca)
    standby = incluster.start(cfg, operator_core, ca)
    try:
        stored = operator_core.read_namespaced_secret(KEYS, NS)
        assert stored.metadata.labels["app.kubernetes.io/part-of"] == "tpcmesh"
        assert active.issuer.active_kid() == standby.issuer.active_kid(), "the standby made keys of its own"

        token = active.issuer.issue(TokenRequest("node-a", "https://node-b:8444", (READ_SETS,), 600))
        jwks = _get_json(f"https://localhost:{standby.server.port}/jwks", ca.cert_pem)  # the CA alone is trusted
        key = jwt.PyJWKSet.from_dict(jwks)[jwt.get_unverified_header(token)["kid"]]
        claims = jwt.decode(token, key.key, algorithms=["ES256"], audience="https://node-b:8444")
        assert claims["scope"] == READ_SETS

        new_kid = active.issuer.rotate()
        assert load(base64.b64decode(operator_core.read_namespaced_secret(KEYS, NS).data[
            incluster.KEYRING_KEY]).decode()).keys[-1].kid == new_kid, "the rotated keyring was not stored"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            kids = {k["kid"] for k in _get_json(f"https://localhost:{standby.server.port}/jwks", ca.cert_pem)["keys"]}
            if new_kid in kids:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the standby never published the rotated key {new_kid}: {kids}")
        assert jwt.get_unverified_header(token)["kid"] in kids, "the old key left the JWKS while its token is valid"
    finally:
        active.stop()
        standby.stop()


def test_a_broken_keys_secret_says_what_to_do(operator_core) -> None:
    operator_core.create_namespaced_secret(NS, client.V1Secret(metadata=client.V1ObjectMeta(name="broken-keys"),
                                                               data={}))
    with pytest.raises(ValueError, match="delete it and the operator makes a new one"):
        incluster.KeySecret(operator_core, NS, "broken-keys").load_or_create(0)


def test_issuer_certificate_names_the_service(tmp_path) -> None:
    cfg = incluster.IssuerConfig("https://tpc-tpcmesh-operator.ns.svc:8443", 8443, "ns", KEYS, 3600)
    ca = pki.create_ca("test CA")
    cert, _ = incluster._tls_files(cfg, ca, tmp_path)
    san = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert {"tpc-tpcmesh-operator.ns.svc", "tpc-tpcmesh-operator.ns", "tpc-tpcmesh-operator"} <= set(san)

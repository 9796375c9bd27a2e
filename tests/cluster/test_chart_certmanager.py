"""certificates.mode=certManager: the chart's own cert-manager CA chain, trusted by agents and operator, and RBAC that
lets cert-manager sign exactly the agents' CSRs after the operator approved them.

cert-manager itself does not run here: the objects are dry-run against its released CRDs (test_chart.py) and the
authorisation checks cert-manager and the CSR API make are asked of the real apiserver with the chart's RBAC.
"""

from __future__ import annotations

import copy

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from tests.support.controlplane import K8S_VERSION
from tests.support.paths import REPO

pytestmark = pytest.mark.cluster

CHART = REPO / "charts" / "tpcmesh"
VALUES = CHART / "ci" / "certmanager-values.yaml"
RELEASE, NS = "cm", "tpcmesh-cm"
FULL = f"{RELEASE}-tpcmesh"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture(scope="module")
def docs(control_plane) -> list[dict]:
    out = control_plane.helm("template", RELEASE, str(CHART), "--namespace", NS, "-f", str(VALUES),
                             "--kube-version", K8S_VERSION.lstrip("v"))
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict], kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def pod_spec(docs: list[dict], kind: str, name: str) -> dict:
    return one(docs, kind, name)["spec"]["template"]["spec"]


def env_of(container: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_the_ca_chain_is_rendered_and_agents_and_operator_trust_its_ca(docs):
    selfsigned = one(docs, "Issuer", f"{FULL}-selfsigned")
    assert selfsigned["spec"] == {"selfSigned": {}}
    ca = one(docs, "Certificate", f"{FULL}-ca")["spec"]
    assert ca["isCA"] is True and ca["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer",
                                                      "name": f"{FULL}-selfsigned"}
    assert ca["privateKey"]["rotationPolicy"] == "Never"
    issuer = one(docs, "Issuer", f"{FULL}-ca-issuer")
    assert issuer["spec"] == {"ca": {"secretName": ca["secretName"]}}
    signer = f"issuers.cert-manager.io/{NS}.{FULL}-ca-issuer"

    agent = pod_spec(docs, "DaemonSet", f"{FULL}-agent")
    for c in [c for c in agent["initContainers"] + agent["containers"] if c["name"].startswith("certificate")]:
        assert env_of(c)["TPCMESH_CSR_SIGNER_NAME"] == signer, c["name"]
    operator = pod_spec(docs, "Deployment", f"{FULL}-operator")
    op_env = env_of(operator["containers"][0])
    assert op_env["TPCMESH_OPERATOR_SIGNER_NAME"] == signer and op_env["TPCMESH_OPERATOR_SIGN"] == "false"

    # Both trust the CA Secret's ca.crt (only that key: never the CA's private key), at the path their settings name.
    trust = {"secret": {"secretName": ca["secretName"], "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    for spec, cname, var in ((agent, "agent", "TPCMESH_AGENT_CA_FILE"),
                             (operator, "operator", "TPCMESH_OPERATOR_CA_FILE")):
        volume = next(v for v in spec["volumes"] if v["name"] == "ca")
        assert {k: v for k, v in volume.items() if k != "name"} == trust, cname
        container = next(c for c in spec["containers"] if c["name"] == cname)
        mount = next(m for m in container["volumeMounts"] if m["name"] == "ca")
        assert env_of(container)[var] == f"{mount['mountPath']}/ca.crt"
    assert not any("configMap" in v for s in (agent, operator) for v in s["volumes"]), "no ca-bundle ConfigMap here"

    # Token mode (the default): the issuer's HTTPS certificate from the same CA Issuer, mounted where the operator
    # reads it (it holds no CA key to sign one itself).
    issuer_cert = one(docs, "Certificate", f"{FULL}-token-issuer-tls")["spec"]
    assert issuer_cert["issuerRef"] == {"kind": "Issuer", "name": f"{FULL}-ca-issuer"}
    assert f"{FULL}-operator.{NS}.svc" in issuer_cert["dnsNames"]
    assert op_env["TPCMESH_OPERATOR_TOKEN_ISSUER"] == f"https://{FULL}-operator.{NS}.svc:8443"
    tls_volume = next(v for v in operator["volumes"] if v["name"] == "issuer-tls")
    assert tls_volume["secret"]["secretName"] == issuer_cert["secretName"]
    mount = next(m for m in operator["containers"][0]["volumeMounts"] if m["name"] == "issuer-tls")
    assert op_env["TPCMESH_OPERATOR_TOKEN_ISSUER_TLS_DIR"] == mount["mountPath"]


def _apply_rbac(control_plane, docs: list[dict]) -> None:
    api = control_plane.client()
    control_plane.ensure_namespace(NS)
    dyn = dynamic.DynamicClient(api)
    for doc in docs:
        if doc["kind"] in RBAC_KINDS:
            res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            try:
                res.create(body=doc, namespace=NS) if res.namespaced else res.create(body=doc)
            except ApiException as e:
                if e.status != 409:
                    raise
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_service_account(NS, client.V1ServiceAccount(metadata=client.V1ObjectMeta(
            name="intruder")))
    except ApiException as e:
        if e.status != 409:
            raise


def _may_reference(api, service_account: str, issuer: str) -> bool:
    """The SubjectAccessReview cert-manager makes before it signs a CSR for a namespaced Issuer (its
    certificatesigningrequests controller, userCanReferenceSigner), for the CSR's requester."""
    user = f"system:serviceaccount:{NS}:{service_account}"
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, groups=["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(group="cert-manager.io", resource="signers",
                                                        verb="reference", namespace=NS, name=issuer, version="*")))
    return bool(client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed)


def _can(api, verb: str, resource: str, name: str, subresource: str | None = None) -> bool:
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, group="certificates.k8s.io",
                                                        name=name, subresource=subresource)))
    return bool(client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed)


def test_cert_manager_signs_only_for_the_agents_and_the_operator_only_approves(control_plane, docs):
    _apply_rbac(control_plane, docs)
    api = control_plane.client()
    issuer = f"{FULL}-ca-issuer"
    assert _may_reference(api, f"{FULL}-agent", issuer)
    assert not _may_reference(api, "intruder", issuer)
    assert not _may_reference(api, f"{FULL}-agent", "some-other-issuer")
    operator = control_plane.client(control_plane.kubeconfig_for(f"{FULL}-operator", NS))
    signer = f"issuers.cert-manager.io/{NS}.{issuer}"
    assert _can(operator, "update", "certificatesigningrequests", "", subresource="approval")
    assert _can(operator, "approve", "signers", signer)
    assert not _can(operator, "sign", "signers", signer)  # cert-manager signs, with the CA the operator never sees
    assert not _can(operator, "approve", "signers", "tpcmesh.io/agent")


def test_the_real_crds_reject_a_malformed_certificate(control_plane, docs):
    """Dry-runs against cert-manager's released CRDs mean something: a field they do not allow is refused (the
    permissive stand-ins used before accepted anything)."""
    from tests.cluster.test_chart import _ensure_upstream_crds, _wait_for_kind

    api = control_plane.client()
    control_plane.ensure_namespace(NS)
    _ensure_upstream_crds(api, docs)
    res = _wait_for_kind(dynamic.DynamicClient(api), "cert-manager.io/v1", "Certificate")
    good = one(docs, "Certificate", f"{FULL}-ca")
    res.create(body=good, namespace=NS, dry_run="All")
    bad = copy.deepcopy(good)
    bad["spec"]["privateKey"]["algorithm"] = "DSA"
    with pytest.raises(ApiException) as refused:
        res.create(body=bad, namespace=NS, dry_run="All")
    assert refused.value.status == 422 and "privateKey.algorithm" in refused.value.body

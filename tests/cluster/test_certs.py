"""Agent host certificates through CertificateSigningRequests on the real control plane.

The agent side (tpcmesh_agent.csr) asks with a pod-bound ServiceAccount token; the operator side
(tpcmesh_operator.credentials.signer) runs with the chart's operator ServiceAccount and RBAC, so both are authorised
for real.
"""

from __future__ import annotations

import threading
import time

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes import client, dynamic
from tpcmesh_agent import csr as agent_csr
from tpcmesh_operator.credentials import signer as certs

from tests.support.paths import REPO

pytestmark = pytest.mark.cluster

NS = "tpcmesh-csr"
RELEASE = "csr"
AGENT_SA = f"{RELEASE}-tpcmesh-agent"
OPERATOR_SA = f"{RELEASE}-tpcmesh-operator"
RBAC_TEMPLATES = ["operator-serviceaccount", "operator-clusterrole", "operator-clusterrolebinding", "operator-role",
                  "operator-rolebinding", "agent-serviceaccount", "agent-clusterrole", "agent-clusterrolebinding"]


@pytest.fixture(scope="module")
def csr_cluster(control_plane, tmp_path_factory):
    """The chart's RBAC for release `csr`, two fake nodes, an agent pod on node 1 and an intruder ServiceAccount."""
    api = control_plane.client()
    core = client.CoreV1Api(api)
    control_plane.ensure_namespace(NS)
    args = ["template", RELEASE, str(REPO / "charts" / "tpcmesh"), "--namespace", NS]
    for t in RBAC_TEMPLATES:
        args += ["--show-only", f"templates/{t}.yaml"]
    out = control_plane.helm(*args)
    dyn = dynamic.DynamicClient(api)
    for doc in (d for d in yaml.safe_load_all(out.stdout) if d):
        res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        res.create(body=doc, namespace=NS) if res.namespaced else res.create(body=doc)
    core.create_namespaced_service_account(NS, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="intruder")))
    # The intruder may create CSRs too (same ClusterRole as the agent): the operator must tell them apart.
    client.RbacAuthorizationV1Api(api).create_cluster_role_binding({
        "metadata": {"name": "csr-test-intruder"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT_SA},
        "subjects": [{"kind": "ServiceAccount", "name": "intruder", "namespace": NS}]})
    control_plane.create_node("csr-node-1", "127.0.30.1", address6="2001:db8:30::1")  # dual stack
    control_plane.create_node("csr-node-2", "127.0.30.2")
    tokens = {}
    for sa in (AGENT_SA, "intruder"):
        pod = core.create_namespaced_pod(NS, client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"{sa}-pod"),
            spec=client.V1PodSpec(node_name="csr-node-1", service_account_name=sa,
                                  automount_service_account_token=False,
                                  containers=[client.V1Container(name="agent", image="example.invalid/agent:1")])))
        # The token the kubelet would project into that pod: bound to it, and so to its node.
        req = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=["https://kubernetes.default.svc"], expiration_seconds=3600,
            bound_object_ref=client.V1BoundObjectReference(kind="Pod", api_version="v1", name=pod.metadata.name,
                                                           uid=pod.metadata.uid)))
        token = core.create_namespaced_service_account_token(sa, NS, req).status.token
        path = tmp_path_factory.mktemp("tokens") / sa
        path.write_text(token)
        tokens[sa] = agent_csr.ApiServer(control_plane.server, path, control_plane.ca_cert)
    settings = certs.CertSettings(signer_name="tpcmesh.io/agent",
                                  agent_service_account=f"system:serviceaccount:{NS}:{AGENT_SA}", namespace=NS,
                                  ca_secret=f"{RELEASE}-tpcmesh-ca", ca_bundle_configmap=f"{RELEASE}-tpcmesh-ca-bundle")
    operator_api = control_plane.client(control_plane.kubeconfig_for(OPERATOR_SA, NS))
    ca = certs.ensure_ca(operator_api, settings)
    stop = threading.Event()
    done: dict[str, str] = {}
    errors: list[BaseException] = []

    def operator_loop() -> None:  # what the kopf event handler does, on every CSR, until stopped
        while not stop.wait(0.3):
            try:
                done.update(certs.process_all(operator_api, settings, ca))
            except BaseException as e:  # noqa: BLE001 - reported by the tests
                errors.append(e)
                return

    t = threading.Thread(target=operator_loop, daemon=True)
    t.start()
    yield {"agent": tokens[AGENT_SA], "intruder": tokens["intruder"], "ca": ca, "done": done, "errors": errors,
           "core": core}
    stop.set()
    t.join(5)
    control_plane.delete_nodes()


def test_ca_secret_and_bundle_are_created_once(csr_cluster, control_plane):
    core = csr_cluster["core"]
    bundle = core.read_namespaced_config_map(f"{RELEASE}-tpcmesh-ca-bundle", NS).data["ca.crt"]
    assert bundle.encode() == csr_cluster["ca"].cert_pem
    again = certs.ensure_ca(control_plane.client(control_plane.kubeconfig_for(OPERATOR_SA, NS)),
                            certs.CertSettings(signer_name="tpcmesh.io/agent",
                                               agent_service_account=f"system:serviceaccount:{NS}:{AGENT_SA}",
                                               namespace=NS, ca_secret=f"{RELEASE}-tpcmesh-ca",
                                               ca_bundle_configmap=f"{RELEASE}-tpcmesh-ca-bundle"))
    assert again.cert_pem == csr_cluster["ca"].cert_pem


def test_agent_on_its_node_gets_a_signed_certificate(csr_cluster, tmp_path):
    req = agent_csr.Request("csr-node-1", ("127.0.30.1",), lifetime_seconds=7200)
    cert_file = agent_csr.obtain(csr_cluster["agent"], req, tmp_path, timeout=30)
    assert not csr_cluster["errors"], csr_cluster["errors"]
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    ca = x509.load_pem_x509_certificate(csr_cluster["ca"].cert_pem)
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "csr-node-1"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.30.1"]
    assert certs.usages_ok(cert_file.read_bytes())
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert 7000 < lifetime.total_seconds() < 7200 + 400  # the requested 2 h (+5 min backdating), not 30 days
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    assert not agent_csr.needs_renewal(cert_file, agent_csr.dt.timedelta(minutes=30))
    assert agent_csr.needs_renewal(cert_file, agent_csr.dt.timedelta(hours=3))


def test_the_charts_init_container_command_obtains_once(csr_cluster, control_plane, tmp_path, monkeypatch):
    """`python -m tpcmesh_agent.csr --once` with the env the chart sets, the pod's token where kubelet puts it."""
    sa_dir = tmp_path / "serviceaccount"
    sa_dir.mkdir()
    (sa_dir / "token").write_text(csr_cluster["agent"].token_file.read_text())
    (sa_dir / "ca.crt").write_bytes(control_plane.ca_cert.read_bytes())
    monkeypatch.setattr(agent_csr, "SA_DIR", sa_dir)
    host, port = control_plane.server.removeprefix("https://").rsplit(":", 1)
    out = tmp_path / "tls"
    for k, v in {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
                 "TPCMESH_AGENT_NODE_NAME": "csr-node-1", "TPCMESH_AGENT_ADDRESS": "127.0.30.1",
                 "TPCMESH_AGENT_POD_IPS": "127.0.30.1,2001:db8:30::1",
                 "TPCMESH_CSR_SIGNER_NAME": "tpcmesh.io/agent", "TPCMESH_CSR_OUT_DIR": str(out),
                 "TPCMESH_CSR_LIFETIME_SECONDS": "7200", "TPCMESH_CSR_RENEW_BEFORE_SECONDS": "600"}.items():
        monkeypatch.setenv(k, v)
    assert agent_csr.main(["--once"]) == 0
    first = (out / "tls.crt").read_bytes()
    # dual stack: the node's IPv6 address (status.podIPs) is named too, so HTTPS over IPv6 verifies
    san = x509.load_pem_x509_certificate(first).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert [str(i) for i in san.value.get_values_for_type(x509.IPAddress)] == ["127.0.30.1", "2001:db8:30::1"]
    assert agent_csr.main(["--once"]) == 0  # still valid: kept, no new request
    assert (out / "tls.crt").read_bytes() == first
    monkeypatch.setenv("TPCMESH_CSR_RENEW_BEFORE_SECONDS", "10800")  # ends within 3 h: renewed
    assert agent_csr.main(["--once"]) == 0
    assert (out / "tls.crt").read_bytes() != first
    monkeypatch.setenv("TPCMESH_AGENT_NODE_NAME", "csr-node-2")
    monkeypatch.setenv("TPCMESH_CSR_OUT_DIR", str(tmp_path / "other"))
    assert agent_csr.main(["--once"]) == 1  # denied: a clear log line, a failing init container


def _denied(api: agent_csr.ApiServer, req: agent_csr.Request) -> str:
    key = agent_csr.new_key()
    name = agent_csr.submit(api, req, agent_csr.build_csr(req.node_name, req.addresses, key))
    with pytest.raises(agent_csr.CsrError) as e:
        agent_csr.wait_for_certificate(api, name, timeout=30, poll=0.3)
    return str(e.value)


def test_request_for_another_node_is_denied_with_a_reason(csr_cluster):
    msg = _denied(csr_cluster["agent"], agent_csr.Request("csr-node-2", ("127.0.30.2",)))
    assert "denied: NodeNameMismatch" in msg and "csr-node-1" in msg and "csr-node-2" in msg


def test_request_with_another_nodes_address_is_denied(csr_cluster):
    msg = _denied(csr_cluster["agent"], agent_csr.Request("csr-node-1", ("127.0.30.2",)))
    assert "denied: SANMismatch" in msg and "127.0.30.2" in msg


def test_request_from_another_service_account_is_denied_with_a_reason(csr_cluster):
    msg = _denied(csr_cluster["intruder"], agent_csr.Request("csr-node-1", ("127.0.30.1",)))
    assert "denied: RequesterNotAgent" in msg and f"system:serviceaccount:{NS}:intruder" in msg


def test_other_signers_requests_are_left_alone(csr_cluster, control_plane):
    api = csr_cluster["agent"]
    req = agent_csr.Request("csr-node-1", ("127.0.30.1",), signer_name="example.com/other")
    name = agent_csr.submit(api, req, agent_csr.build_csr(req.node_name, req.addresses, agent_csr.new_key()))
    time.sleep(1.0)
    obj = client.CertificatesV1Api(control_plane.client()).read_certificate_signing_request(name)
    assert not (obj.status and obj.status.conditions) and name not in csr_cluster["done"]


def test_ca_is_renewed_a_year_before_it_ends_and_the_old_one_stays_trusted(control_plane):
    from tpcmesh_operator.credentials import pki

    ns = "tpcmesh-ca-renew"
    control_plane.ensure_namespace(ns)
    api = control_plane.client()
    old = pki.create_ca("old tpcmesh CA", lifetime=certs.dt.timedelta(days=200))  # inside the 1-year margin
    client.CoreV1Api(api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="ca"), type="kubernetes.io/tls",
        data=certs._ca_data(old, b"")))
    settings = certs.CertSettings(signer_name="tpcmesh.io/agent", agent_service_account="system:serviceaccount:x:y",
                                  namespace=ns, ca_secret="ca", ca_bundle_configmap="ca-bundle")
    new = certs.ensure_ca(api, settings)
    assert new.cert_pem != old.cert_pem
    assert not pki.expires_within(new.cert_pem, certs.CA_RENEW_BEFORE)
    bundle = client.CoreV1Api(api).read_namespaced_config_map("ca-bundle", ns).data["ca.crt"].encode()
    assert new.cert_pem in bundle and old.cert_pem in bundle  # certificates signed by the old CA stay valid
    assert certs.ensure_ca(api, settings).cert_pem == new.cert_pem  # stable once renewed

"""The local cluster's PKI (tpcmesh_lab.controlplane.write_pki) and the operator's (pki.py) pass an
RFC 5280 verifier, as Python 3.13's default TLS context (VERIFY_X509_STRICT, the images' Python) wants: the
apiserver's serving certificate (what the operator and the agents' init container check) and the agents' host
certificates."""

from __future__ import annotations

import ipaddress

from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store
from tpcmesh_lab.controlplane import write_pki
from tpcmesh_operator.credentials import pki


def test_apiserver_serving_certificate_verifies_strictly(tmp_path):
    p = write_pki(tmp_path, ["198.19.96.1", "kubernetes.default.svc"])
    ca = x509.load_pem_x509_certificate(p.ca_cert.read_bytes())
    srv = x509.load_pem_x509_certificate(p.serving_cert.read_bytes())
    policy = PolicyBuilder().store(Store([ca]))
    policy.build_server_verifier(x509.IPAddress(ipaddress.ip_address("198.19.96.1"))).verify(srv, [])
    policy.build_server_verifier(x509.DNSName("kubernetes.default.svc")).verify(srv, [])


def test_agent_host_certificates_verify_strictly():
    ca = pki.create_ca("strict CA")
    host = pki.issue_host_cert(ca, "node-a", ["198.51.100.10"])
    store = Store([x509.load_pem_x509_certificate(ca.cert_pem)])
    PolicyBuilder().store(store).build_server_verifier(x509.IPAddress(ipaddress.ip_address("198.51.100.10"))).verify(
        x509.load_pem_x509_certificate(host.cert_pem), [])

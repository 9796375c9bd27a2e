"""The operator's CSR review (pure): every way a request is refused, with its reason."""

from __future__ import annotations

import base64

import pytest
from tpcmesh_agent import csr as agent_csr
from tpcmesh_operator.credentials import signer as certs

SA = "system:serviceaccount:tpcmesh:tpc-tpcmesh-agent"
NODES = {"dtn-1": {"10.0.0.1", "dtn-1", "2001:db8:0:0::1"}, "dtn-2": {"10.0.0.2", "2001:db8::2"}}
KEY = agent_csr.new_key()


def _csr(cn="dtn-1", addresses=("10.0.0.1",), user=SA, node="dtn-1", usages=("server auth", "client auth"),
         request=None):
    pem = request if request is not None else agent_csr.build_csr(cn, addresses, KEY)
    extra = {certs.NODE_NAME_EXTRA: [node]} if node else {}
    return {"spec": {"username": user, "extra": extra, "usages": list(usages),
                     "request": base64.b64encode(pem).decode(), "signerName": "tpcmesh.io/agent"}}


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({}, "AgentNodeMatches"),
    ({"user": "system:serviceaccount:tpcmesh:default"}, "RequesterNotAgent"),
    ({"node": None}, "TokenNotBoundToNode"),
    ({"cn": "dtn-2", "addresses": ("10.0.0.2",)}, "NodeNameMismatch"),
    ({"addresses": ("10.0.0.2",)}, "SANMismatch"),
    ({"addresses": ("other.example.org",)}, "SANMismatch"),
    # dual stack: the node's IPv6 address too (however the node spells it), not another node's
    ({"addresses": ("10.0.0.1", "2001:db8::1")}, "AgentNodeMatches"),
    ({"addresses": ("10.0.0.1", "2001:db8::2")}, "SANMismatch"),
    ({"usages": ("server auth", "code signing")}, "UsageNotAllowed"),
    ({"request": b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"},
     "InvalidRequest"),
])
def test_review(kwargs, reason):
    d = certs.review(_csr(**kwargs), SA, NODES)
    assert d.reason == reason
    assert d.approve is (reason == "AgentNodeMatches")
    assert d.message


def test_settings_need_a_service_account_with_a_signer():
    with pytest.raises(ValueError, match="AGENT_SERVICE_ACCOUNT"):
        certs.CertSettings.from_env({"TPCMESH_OPERATOR_SIGNER_NAME": "tpcmesh.io/agent"})
    s = certs.CertSettings.from_env({"TPCMESH_OPERATOR_SIGNER_NAME": "tpcmesh.io/agent", "TPCMESH_OPERATOR_SIGN":
                                     "false", "TPCMESH_OPERATOR_AGENT_SERVICE_ACCOUNT": SA,
                                     "TPCMESH_OPERATOR_AGENT_NAMESPACE": "tpcmesh"})
    assert (s.sign, s.namespace) == (False, "tpcmesh")


def test_the_ca_stays_in_the_operators_namespace_when_the_agents_run_apart():
    """agent.namespace: the CA Secret in the operator's own namespace (TPCMESH_OPERATOR_NAMESPACE), the bundle
    published in both; one namespace when only the agents' is given (charts before agent.namespace)."""
    from tpcmesh_operator.config import Settings, SettingsError

    env = {"TPCMESH_OPERATOR_SIGNER_NAME": "tpcmesh.io/agent", "TPCMESH_OPERATOR_AGENT_SERVICE_ACCOUNT": SA,
           "TPCMESH_OPERATOR_AGENT_NAMESPACE": "tpcmesh-agents", "TPCMESH_OPERATOR_NAMESPACE": "tpcmesh"}
    s = certs.CertSettings.from_env(env)
    assert (s.namespace, s.agent_namespace) == ("tpcmesh", "tpcmesh-agents")
    legacy = certs.CertSettings.from_env({k: v for k, v in env.items() if k != "TPCMESH_OPERATOR_NAMESPACE"})
    assert (legacy.namespace, legacy.agent_namespace) == ("tpcmesh-agents", "tpcmesh-agents")
    issuer = {"TPCMESH_OPERATOR_TOKEN_ISSUER": "https://op.tpcmesh.svc:8443"}
    assert Settings.from_env({**issuer, "TPCMESH_OPERATOR_AGENT_NAMESPACE": "a"}).namespace == ""
    with pytest.raises(SettingsError, match="needs TPCMESH_OPERATOR_NAMESPACE"):
        Settings.from_env(issuer)


def test_the_agents_request_names_every_pod_ip_once():
    env = {"TPCMESH_AGENT_ADDRESS": "10.0.0.1", "TPCMESH_AGENT_POD_IPS": "10.0.0.1,2001:db8::1"}
    assert agent_csr.addresses_from_env(env) == ["10.0.0.1", "2001:db8::1"]
    assert agent_csr.addresses_from_env({"TPCMESH_AGENT_ADDRESS": "10.0.0.1"}) == ["10.0.0.1"]
    assert certs.review(_csr(addresses=agent_csr.addresses_from_env(env)), SA, NODES).approve

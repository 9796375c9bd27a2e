"""The operator as the agents' CA: it approves and signs CertificateSigningRequests for signer `tpcmesh.io/agent`.

An agent (tpcmesh_agent.csr) asks for a host certificate for its node with its pod-bound ServiceAccount token.
A request is approved only when all of these hold, else it is denied with a CamelCase reason and a message:
  - the requester is the agent ServiceAccount (`system:serviceaccount:<ns>:<agent-sa>`);
  - its token is bound to a pod on a node (the apiserver records `authentication.kubernetes.io/node-name`);
  - the subject CN is that node's name, and every SAN is that name or one of the node's addresses;
  - only server/client auth usages are asked for.
The CA lives in a Secret (created on first start, renewed a year before it ends, the old CA kept in the bundle
until it expires) and is published in a ConfigMap (`ca.crt`) the agents and the operator trust. Host
certificates are short (30 days by default); the agents ask again before theirs end.

`review()` is pure; `process()` does the API calls; the kopf handlers at the bottom wire them up.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import pki

log = logging.getLogger(__name__)

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
ALLOWED_USAGES = {"digital signature", "key encipherment", "server auth", "client auth"}
CA_RENEW_BEFORE = dt.timedelta(days=365)


@dataclass(frozen=True)
class CertSettings:
    """From `TPCMESH_OPERATOR_<NAME>` (the chart sets them); no signer name: the CA is off."""

    signer_name: str = ""
    sign: bool = True  # False: only approve (another signer, e.g. cert-manager, issues)
    agent_service_account: str = ""  # system:serviceaccount:<namespace>:<name>
    namespace: str = ""  # the operator's own namespace: the CA Secret and the bundle ConfigMap live there
    agent_namespace: str = ""  # the agents' namespace, when another one: the bundle is published there too
    ca_secret: str = "tpcmesh-ca"
    ca_bundle_configmap: str = "tpcmesh-ca-bundle"
    host_cert_seconds: int = int(pki.HOST_LIFETIME.total_seconds())

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> CertSettings:
        e = dict(os.environ if env is None else env)

        def get(name: str, default: str) -> str:
            return e.get("TPCMESH_OPERATOR_" + name, default)

        try:
            seconds = int(get("HOST_CERT_SECONDS", str(cls.host_cert_seconds)))
        except ValueError:
            raise ValueError("TPCMESH_OPERATOR_HOST_CERT_SECONDS: expected whole seconds") from None
        s = cls(signer_name=get("SIGNER_NAME", ""), sign=get("SIGN", "true").lower() == "true",
                agent_service_account=get("AGENT_SERVICE_ACCOUNT", ""),
                namespace=get("NAMESPACE", "") or get("AGENT_NAMESPACE", ""),
                agent_namespace=get("AGENT_NAMESPACE", ""),
                ca_secret=get("CA_SECRET", cls.ca_secret), ca_bundle_configmap=get("CA_BUNDLE_CONFIGMAP",
                                                                                     cls.ca_bundle_configmap),
                host_cert_seconds=seconds)
        if s.signer_name and not s.agent_service_account.startswith("system:serviceaccount:"):
            raise ValueError("TPCMESH_OPERATOR_AGENT_SERVICE_ACCOUNT must be system:serviceaccount:<ns>:<name> "
                             "when TPCMESH_OPERATOR_SIGNER_NAME is set")
        return s


@dataclass(frozen=True)
class Decision:
    approve: bool
    reason: str
    message: str


def _state(csr: dict[str, Any]) -> str:
    """'' (pending), 'Approved', 'Denied' or 'Failed' from the CSR's conditions."""
    for c in (csr.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Denied", "Failed") and c.get("status", "True") == "True":
            return str(c["type"])
    for c in (csr.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Approved" and c.get("status", "True") == "True":
            return "Approved"
    return ""


def review(csr: dict[str, Any], agent_service_account: str, node_addresses: dict[str, set[str]]) -> Decision:
    """Approve or deny one CSR (a dict as the API returns it, camelCase keys). Pure.

    `node_addresses` maps node names to their addresses (InternalIP/ExternalIP/Hostname)."""
    spec = csr.get("spec") or {}
    user = spec.get("username", "")
    if user != agent_service_account:
        return Decision(False, "RequesterNotAgent",
                        f"requested by {user or 'an unknown user'}, only {agent_service_account} may ask for "
                        "agent certificates")
    node = ((spec.get("extra") or {}).get(NODE_NAME_EXTRA) or [""])[0]
    if not node:
        return Decision(False, "TokenNotBoundToNode",
                        "the requester's token is not bound to a pod on a node; agents must use their pod's token")
    try:
        req = x509.load_pem_x509_csr(base64.b64decode(spec.get("request", "")))
    except ValueError as e:
        return Decision(False, "InvalidRequest", f"spec.request is not a PEM certificate request: {e}")
    if not req.is_signature_valid:
        return Decision(False, "InvalidRequest", "spec.request has an invalid signature")
    cns = [a.value for a in req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if cns != [node]:
        return Decision(False, "NodeNameMismatch",
                        f"subject CN {', '.join(map(str, cns)) or '(none)'} is not the requester's node {node}")
    try:
        san = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n) for n in san.get_values_for_type(x509.DNSName)]
        ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
        others = [n for n in san if not isinstance(n, (x509.DNSName, x509.IPAddress))]
    except x509.ExtensionNotFound:
        names, ips, others = [], [], []
    allowed_ips = {_ip(a) for a in {node} | node_addresses.get(node, set())} - {None}
    bad = [n for n in names if n != node] + [ip for ip in ips if _ip(ip) not in allowed_ips] + [str(o) for o in others]
    if bad:
        return Decision(False, "SANMismatch",
                        f"subject alternative names {', '.join(bad)} are neither node {node} nor its addresses")
    usages = set(spec.get("usages") or [])
    if not usages <= ALLOWED_USAGES:
        return Decision(False, "UsageNotAllowed",
                        f"usages {', '.join(sorted(usages - ALLOWED_USAGES))} are not allowed for agent certificates")
    return Decision(True, "AgentNodeMatches", f"{agent_service_account} on node {node} asked for its host certificate")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An address to compare (IPv6 has many spellings); None for a host name."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def node_addresses(nodes: Iterable[Any]) -> dict[str, set[str]]:
    """{node name: {addresses}} from V1Node objects."""
    out: dict[str, set[str]] = {}
    for n in nodes:
        out[n.metadata.name] = {a.address for a in (n.status.addresses or [])} if n.status else set()
    return out


def _lifetime(csr: dict[str, Any], settings: CertSettings) -> dt.timedelta:
    asked = (csr.get("spec") or {}).get("expirationSeconds")
    seconds = min(int(asked), settings.host_cert_seconds) if asked else settings.host_cert_seconds
    return dt.timedelta(seconds=max(seconds, 600))


# --- the CA Secret and the bundle ConfigMap -------------------------------------------------------------


def ensure_ca(api_client: Any, settings: CertSettings, now: dt.datetime | None = None) -> pki.KeyPair:
    """The CA from its Secret, created when missing and replaced a year before it ends; publishes the bundle."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(api_client)
    ns, name = settings.namespace, settings.ca_secret
    previous: bytes = b""
    try:
        sec = core.read_namespaced_secret(name, ns)
        data = sec.data or {}
        ca = pki.KeyPair(base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"]))
        previous = base64.b64decode(data.get("previous.crt", "") or "")
        if pki.expires_within(ca.cert_pem, CA_RENEW_BEFORE):
            log.info("Renewed CA %s/%s: it ends within %s", ns, name, CA_RENEW_BEFORE)
            previous, ca = ca.cert_pem, pki.create_ca("tpcmesh agents CA")
            sec.data = _ca_data(ca, previous)
            core.replace_namespaced_secret(name, ns, sec)
    except ApiException as e:
        if e.status != 404:
            raise
        ca = pki.create_ca("tpcmesh agents CA")
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=name, namespace=ns,
                                                            labels={"app.kubernetes.io/part-of": "tpcmesh"}),
                               type="kubernetes.io/tls", data=_ca_data(ca, b""))
        try:
            core.create_namespaced_secret(ns, body)
            log.info("Created CA %s/%s", ns, name)
        except ApiException as e2:
            if e2.status != 409:
                raise
            return ensure_ca(api_client, settings, now)  # another replica won the race
    _publish_bundle(core, settings, ca.cert_pem + (previous if previous and not _expired(previous) else b""))
    return ca


def _ca_data(ca: pki.KeyPair, previous: bytes) -> dict[str, bytes | str]:
    d: dict[str, bytes | str] = {"tls.crt": base64.b64encode(ca.cert_pem).decode(),
                                 "tls.key": base64.b64encode(ca.key_pem).decode()}
    if previous:
        d["previous.crt"] = base64.b64encode(previous).decode()
    return d


def _expired(cert_pem: bytes) -> bool:
    return pki.expires_within(cert_pem, dt.timedelta(0))


def _publish_bundle(core: Any, settings: CertSettings, bundle: bytes) -> None:
    """The bundle ConfigMap in the operator's namespace and, when the agents live in another, in theirs (a pod
    mounts ConfigMaps of its own namespace only)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = settings.ca_bundle_configmap
    for ns in dict.fromkeys(n for n in (settings.namespace, settings.agent_namespace) if n):
        try:
            cm = core.read_namespaced_config_map(name, ns)
            if (cm.data or {}).get("ca.crt") != bundle.decode():
                cm.data = {"ca.crt": bundle.decode()}
                core.replace_namespaced_config_map(name, ns, cm)
        except ApiException as e:
            if e.status != 404:
                raise
            core.create_namespaced_config_map(ns, client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=name, namespace=ns,
                                             labels={"app.kubernetes.io/part-of": "tpcmesh"}),
                data={"ca.crt": bundle.decode()}))


# --- one CSR ---------------------------------------------------------------------------------------------


def process(api_client: Any, csr_name: str, settings: CertSettings, ca: pki.KeyPair | None) -> str:
    """Approve/deny and (when approved and `settings.sign`) sign one CSR. Idempotent.

    Returns what it did: "ignored", "denied", "approved", "signed", or "done" (nothing left to do)."""
    from kubernetes import client

    certs = client.CertificatesV1Api(api_client)
    obj = certs.read_certificate_signing_request(csr_name)
    csr = api_client.sanitize_for_serialization(obj)
    if (csr.get("spec") or {}).get("signerName") != settings.signer_name:
        return "ignored"
    state = _state(csr)
    if state in ("Denied", "Failed"):
        return "done"
    did = "done"
    if state == "":
        nodes = client.CoreV1Api(api_client).list_node().items
        decision = review(csr, settings.agent_service_account, node_addresses(nodes))
        now = dt.datetime.now(dt.UTC)
        obj.status = obj.status or client.V1CertificateSigningRequestStatus()
        obj.status.conditions = [*(obj.status.conditions or []), client.V1CertificateSigningRequestCondition(
            type="Approved" if decision.approve else "Denied", status="True", reason=decision.reason,
            message=decision.message, last_update_time=now, last_transition_time=now)]
        obj = certs.replace_certificate_signing_request_approval(csr_name, obj)
        log.info("%s CSR %s: %s (%s)", "Approved" if decision.approve else "Denied", csr_name, decision.reason,
                 decision.message)
        if not decision.approve:
            return "denied"
        did = "approved"
    status = obj.status or client.V1CertificateSigningRequestStatus()
    if settings.sign and not status.certificate:
        if ca is None:
            raise RuntimeError("cannot sign without the CA")
        request = base64.b64decode(obj.spec.request)
        cert = pki.sign_csr(ca, request, _lifetime(csr, settings))
        status.certificate = base64.b64encode(cert).decode()
        obj.status = status
        certs.replace_certificate_signing_request_status(csr_name, obj)
        log.info("Signed CSR %s for %s", csr_name, x509.load_pem_x509_csr(request).subject.rfc4514_string())
        did = "signed"
    return did


def process_all(api_client: Any, settings: CertSettings, ca: pki.KeyPair | None) -> dict[str, str]:
    """Every CSR for our signer: {name: what was done}."""
    from kubernetes import client

    out: dict[str, str] = {}
    for obj in client.CertificatesV1Api(api_client).list_certificate_signing_request().items:
        name = obj.metadata.name if obj.metadata else None
        if name and obj.spec.signer_name == settings.signer_name:
            out[name] = process(api_client, name, settings, ca)
    return out


def usages_ok(cert_pem: bytes) -> bool:
    """The issued certificate serves both ends of a TLS connection (used by the tests and the agent)."""
    eku = x509.load_pem_x509_certificate(cert_pem).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    return ExtendedKeyUsageOID.SERVER_AUTH in eku and ExtendedKeyUsageOID.CLIENT_AUTH in eku


# --- what the handlers do (main.py registers them) ------------------------------------------------------------

SETTINGS = CertSettings.from_env()
_CA: dict[str, pki.KeyPair] = {}
_API: dict[str, Any] = {}


def _api_client() -> Any:
    """Our own ApiClient (in-cluster, else $KUBECONFIG): independent of the order of startup handlers."""
    if "api" not in _API:
        from kubernetes import client, config

        try:
            config.load_incluster_config(client_configuration=(c := client.Configuration()))
        except config.ConfigException:
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=(
                c := client.Configuration()))
        _API["api"] = client.ApiClient(c)
    return _API["api"]


def start_ca(logger: logging.Logger | Any) -> None:
    """At start-up: load (or create) the CA the agents' certificates are signed with."""
    if SETTINGS.sign:
        _CA["ca"] = ensure_ca(_api_client(), SETTINGS)
        logger.info("Loaded CA %s/%s for signer %s", SETTINGS.namespace, SETTINGS.ca_secret, SETTINGS.signer_name)


def handle_csr(name: str) -> None:
    """A CertificateSigningRequest for our signer appeared or changed: approve and sign it, or say why not."""
    api = _api_client()
    ca = _CA.get("ca")
    if SETTINGS.sign and (ca is None or pki.expires_within(ca.cert_pem, CA_RENEW_BEFORE)):
        ca = _CA["ca"] = ensure_ca(api, SETTINGS)  # renews the CA a year before it ends
    process(api, name, SETTINGS, ca)

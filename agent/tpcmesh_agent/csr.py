"""The agent's host certificate from the cluster: a key, a CertificateSigningRequest, the signed certificate.

`python -m tpcmesh_agent.csr --once` (init container) obtains a certificate when there is none or it ends soon;
`--renew` (sidecar) keeps doing so before each expiry. The request carries CN = the node name and SANs = the
node name and the agent's addresses (its address and, dual stack, the pod's other ones: status.podIPs, which with
hostNetwork are the node's, so HTTPS over IPv6 verifies too), signer `tpcmesh.io/agent`; the operator
(tpcmesh_operator.credentials.signer) approves it only for the agent ServiceAccount on that very node. The agent's
pod-bound token authenticates the request.

Talks to the API server with the standard library (no Kubernetes client in the agent image); settings from
TPCMESH_AGENT_NODE_NAME, TPCMESH_AGENT_ADDRESS, TPCMESH_AGENT_POD_IPS (comma-separated) and
TPCMESH_CSR_{SIGNER_NAME,OUT_DIR,LIFETIME_SECONDS,RENEW_BEFORE_SECONDS}.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import ipaddress
import json
import logging
import os
import signal
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from .atomic import write_atomically

log = logging.getLogger("tpcmesh_agent.csr")

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


class CsrError(RuntimeError):
    """The request was denied or failed, or the API server refused it; the message says why."""


@dataclass(frozen=True)
class ApiServer:
    url: str
    token_file: Path
    ca_file: Path | None

    @classmethod
    def in_cluster(cls) -> ApiServer:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise CsrError("not in a pod: KUBERNETES_SERVICE_HOST is not set")
        if ":" in host:
            host = f"[{host}]"
        return cls(f"https://{host}:{port}", SA_DIR / "token", SA_DIR / "ca.crt")

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        ctx = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        token = self.token_file.read_text().strip()  # re-read: kubelet rotates projected tokens
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                payload = json.loads(e.read() or b"{}")
            except ValueError:
                payload = {}
            return e.code, payload


@dataclass(frozen=True)
class Request:
    node_name: str
    addresses: tuple[str, ...]
    signer_name: str = "tpcmesh.io/agent"
    lifetime_seconds: int = 30 * 24 * 3600


def new_key() -> rsa.RSAPrivateKey:
    # RSA like the operator's PKI: GridFTP's GSI and XRootD handle RSA host keys everywhere.
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def build_csr(node_name: str, addresses: tuple[str, ...] | list[str], key: rsa.RSAPrivateKey) -> bytes:
    """PEM CSR: CN = node name, SANs = node name (DNS) + addresses (IP, or DNS when not an IP)."""
    sans: list[x509.GeneralName] = [x509.DNSName(node_name)]
    for a in addresses:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(a)))
        except ValueError:
            if a != node_name:
                sans.append(x509.DNSName(a))
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tpcmesh"),
                                    x509.NameAttribute(NameOID.COMMON_NAME, node_name)]))
           .add_extension(x509.SubjectAlternativeName(sans), critical=False)
           .sign(key, hashes.SHA256()))
    return csr.public_bytes(serialization.Encoding.PEM)


def csr_name(node_name: str, csr_pem: bytes) -> str:
    """Unique per request, readable per node: tpcmesh-agent-<node>-<sha256 prefix>."""
    return f"tpcmesh-agent-{node_name[:200]}-{hashlib.sha256(csr_pem).hexdigest()[:10]}"


def submit(api: ApiServer, req: Request, csr_pem: bytes) -> str:
    """Create the CertificateSigningRequest; returns its name."""
    name = csr_name(req.node_name, csr_pem)
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "tpcmesh",
                                                  "tpcmesh.io/node": req.node_name[:63]}},
            "spec": {"request": base64.b64encode(csr_pem).decode(), "signerName": req.signer_name,
                     "expirationSeconds": req.lifetime_seconds,
                     "usages": ["digital signature", "key encipherment", "server auth", "client auth"]}}
    status, payload = api.call("POST", CSR_PATH, body)
    if status not in (201, 409):
        raise CsrError(f"creating CertificateSigningRequest {name} failed: {status} {payload.get('message', '')}")
    log.info("Created CertificateSigningRequest %s for node %s (signer %s)", name, req.node_name, req.signer_name)
    return name


def wait_for_certificate(api: ApiServer, name: str, timeout: float = 300.0, poll: float = 1.0) -> bytes:
    """Poll until the CSR carries a certificate; CsrError with the reason when denied or failed."""
    deadline = time.monotonic() + timeout
    while True:
        status, payload = api.call("GET", f"{CSR_PATH}/{name}")
        if status != 200:
            raise CsrError(f"reading CertificateSigningRequest {name} failed: {status} {payload.get('message', '')}")
        st = payload.get("status") or {}
        for c in st.get("conditions") or []:
            if c.get("type") in ("Denied", "Failed"):
                raise CsrError(f"CertificateSigningRequest {name} {c['type'].lower()}: {c.get('reason', '')}: "
                               f"{c.get('message', '')}")
        if st.get("certificate"):
            return base64.b64decode(st["certificate"])
        if time.monotonic() > deadline:
            raise CsrError(f"CertificateSigningRequest {name} not signed within {timeout:.0f}s; is the operator "
                           "running?")
        time.sleep(poll)


def write_pair(out_dir: Path, cert_pem: bytes, key: bytes) -> None:
    """Write tls.key (0600) then tls.crt, each atomically (rename), so readers never see half a pair."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for fname, data, mode in (("tls.key", key, 0o600), ("tls.crt", cert_pem, 0o644)):
        write_atomically(out_dir / fname, data, mode)


def obtain(api: ApiServer, req: Request, out_dir: Path, timeout: float = 300.0) -> Path:
    """New key + CSR, wait for the certificate, write out_dir/tls.{crt,key}; returns the certificate path."""
    key = new_key()
    csr_pem = build_csr(req.node_name, req.addresses, key)
    cert = wait_for_certificate(api, submit(api, req, csr_pem), timeout)
    write_pair(out_dir, cert, key_pem(key))
    log.info("Wrote host certificate for %s to %s (ends %s)", req.node_name, out_dir,
             x509.load_pem_x509_certificate(cert).not_valid_after_utc.isoformat())
    return out_dir / "tls.crt"


def needs_renewal(cert_file: Path, renew_before: dt.timedelta, now: dt.datetime | None = None) -> bool:
    """True when there is no certificate, it is unreadable, or it ends within `renew_before`."""
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except (OSError, ValueError):
        return True
    return cert.not_valid_after_utc - (now or dt.datetime.now(dt.UTC)) < renew_before


def seconds_until_renewal(cert_file: Path, renew_before: dt.timedelta) -> float:
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    return max(0.0, (cert.not_valid_after_utc - renew_before - dt.datetime.now(dt.UTC)).total_seconds())


def addresses_from_env(env: Mapping[str, str]) -> list[str]:
    """The addresses the certificate names: TPCMESH_AGENT_ADDRESS, then each of TPCMESH_AGENT_POD_IPS (the downward
    API's status.podIPs, comma-separated), once each."""
    found = [env.get("TPCMESH_AGENT_ADDRESS", ""), *env.get("TPCMESH_AGENT_POD_IPS", "").split(",")]
    return list(dict.fromkeys(a.strip() for a in found if a.strip()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tpcmesh_agent.csr", description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true", help="obtain a certificate if needed, then exit")
    mode.add_argument("--renew", action="store_true", help="keep renewing before expiry (runs forever)")
    env = os.environ.get
    p.add_argument("--node-name", default=env("TPCMESH_AGENT_NODE_NAME", ""))
    p.add_argument("--address", action="append", default=addresses_from_env(os.environ))
    p.add_argument("--signer-name", default=env("TPCMESH_CSR_SIGNER_NAME", "tpcmesh.io/agent"))
    p.add_argument("--out-dir", type=Path, default=Path(env("TPCMESH_CSR_OUT_DIR", "/var/run/tpcmesh/tls")))
    p.add_argument("--lifetime-seconds", type=int, default=int(env("TPCMESH_CSR_LIFETIME_SECONDS", "2592000")))
    p.add_argument("--renew-before-seconds", type=int,
                   default=int(env("TPCMESH_CSR_RENEW_BEFORE_SECONDS", "604800")))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.node_name:
        p.error("the node name is required (--node-name or TPCMESH_AGENT_NODE_NAME)")
    req = Request(args.node_name, tuple(args.address), args.signer_name, args.lifetime_seconds)
    renew_before = dt.timedelta(seconds=args.renew_before_seconds)
    cert_file = args.out_dir / "tls.crt"
    api = ApiServer.in_cluster()
    if args.renew:
        # The sidecar is its container's PID 1, to which the kernel delivers no signal it has no handler for:
        # without this, every agent pod waited out its whole grace period (30 s a node in a rolling upgrade).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            if needs_renewal(cert_file, renew_before):
                obtain(api, req, args.out_dir)
            if args.once:
                return 0
            time.sleep(min(seconds_until_renewal(cert_file, renew_before) + 1, 3600))
    except CsrError as e:
        log.error("%s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())

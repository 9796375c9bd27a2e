"""A real Kubernetes control plane on this machine: Debian etcd + kube-apiserver (+ controller-manager, scheduler)
built from the `k8s.io/kubernetes` Go module by `tests/cluster/build-control-plane.sh` into ~/.cache/tpcmesh.

Used by `tpcmesh-local cluster` (with real nodes) and by the test suite's `control_plane` fixture (without).
Authentication is real X509 (an admin client certificate in `system:masters`) and service-account tokens;
authorization is `Node,RBAC`.

    pki = write_pki(workdir / "pki", server_names=[...])
    cp = start_control_plane(workdir, pki, ControlPlaneOptions(bind_address="198.51.100.1", ...))
    cp.start_controller_manager(); cp.start_scheduler(); ...; cp.stop()
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from tpcmesh_operator.credentials.pki import CA_KEY_USAGE, cert_builder, subject_alt_names

from .netns import terminate_all

K8S_VERSION = os.environ.get("TPCMESH_K8S_VERSION", "v1.34.4")
CACHE = Path(os.environ.get("TPCMESH_CACHE", Path.home() / ".cache" / "tpcmesh"))
BIN = CACHE / f"k8s-{K8S_VERSION}" / "bin"
START_TIMEOUT = 60.0


class ControlPlaneError(RuntimeError):
    """A control-plane component did not start; the message carries the tail of its log."""


def binary(name: str) -> Path | None:
    """Path of a built binary (kube-apiserver, kubelet, kube-proxy, coredns, pause, helm, ...) or None."""
    p = BIN / name
    return p if p.is_file() and os.access(p, os.X_OK) else None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# --- X509: the cluster's own CA and the certificates of its components ---------------------------------------


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def issue(subject: x509.Name, key: rsa.RSAPrivateKey, issuer: x509.Name, issuer_key: rsa.RSAPrivateKey, *,
          ca: bool = False, server_names: list[str] | None = None, client: bool = False,
          days: int = 2) -> x509.Certificate:
    """A certificate for ``key``: a CA, a server (``server_names``: IPs and DNS names), a client, or both."""
    b = (
        cert_builder(subject, issuer, key.public_key(), dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # Key identifiers: Python 3.13's default TLS context (VERIFY_X509_STRICT; the images' Python) refuses a
        # certificate without an Authority Key Identifier ("Missing Authority Key Identifier"), as kubeadm's have
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    if ca:
        b = b.add_extension(CA_KEY_USAGE, critical=True)
    usages = []
    if server_names:
        b = b.add_extension(subject_alt_names(server_names), critical=False)
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    if usages:
        b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


@dataclass
class Pki:
    directory: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path

    def issue_pair(self, stem: str, subject: x509.Name, *, server_names: list[str] | None = None,
                   client: bool = False, directory: Path | None = None) -> tuple[Path, Path]:
        """Write ``<stem>.crt``/``<stem>.key`` signed by this CA (into ``directory``, default the CA's)."""
        ca = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), None)
        assert isinstance(ca_key, rsa.RSAPrivateKey)
        key = new_key()
        cert = issue(subject, key, ca.subject, ca_key, server_names=server_names, client=client)
        d = directory or self.directory
        crt_path, key_path = d / f"{stem}.crt", d / f"{stem}.key"
        crt_path.write_bytes(pem_cert(cert))
        key_path.write_bytes(pem_key(key))
        key_path.chmod(0o600)
        return crt_path, key_path


def write_pki(d: Path, server_names: list[str]) -> Pki:
    """A new CA, the apiserver's serving certificate for ``server_names``, an admin client and the SA key pair."""
    d.mkdir(parents=True, exist_ok=True)
    ca_key = new_key()
    ca_name = name("tpcmesh-local-kubernetes-ca")
    ca = issue(ca_name, ca_key, ca_name, ca_key, ca=True)
    srv_key = new_key()
    srv = issue(name("kube-apiserver"), srv_key, ca_name, ca_key, server_names=server_names)
    adm_key = new_key()
    adm = issue(name("tpcmesh-admin", "system:masters"), adm_key, ca_name, ca_key, client=True)
    sa_key = new_key()
    paths = Pki(d, d / "ca.crt", d / "ca.key", d / "apiserver.crt", d / "apiserver.key", d / "admin.crt",
                d / "admin.key", d / "sa.key", d / "sa.pub")
    paths.ca_cert.write_bytes(pem_cert(ca))
    paths.ca_key.write_bytes(pem_key(ca_key))
    paths.serving_cert.write_bytes(pem_cert(srv))
    paths.serving_key.write_bytes(pem_key(srv_key))
    paths.admin_cert.write_bytes(pem_cert(adm))
    paths.admin_key.write_bytes(pem_key(adm_key))
    paths.sa_key.write_bytes(pem_key(sa_key))
    paths.sa_pub.write_bytes(sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                              serialization.PublicFormat.SubjectPublicKeyInfo))
    for p in (paths.ca_key, paths.serving_key, paths.admin_key, paths.sa_key):
        p.chmod(0o600)
    return paths


def kubeconfig(server: str, ca_cert: Path, *, cert: Path | None = None, key: Path | None = None,
               token: str | None = None, user: str = "admin") -> dict:
    u: dict = {}
    if cert and key:
        u = {"client-certificate": str(cert), "client-key": str(key)}
    if token:
        u = {"token": token}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "tpcmesh", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}],
        "users": [{"name": user, "user": u}],
        "contexts": [{"name": "tpcmesh", "context": {"cluster": "tpcmesh", "user": user}}],
        "current-context": "tpcmesh",
    }


def write_kubeconfig(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


# --- processes ------------------------------------------------------------------------------------------------


def stop_process(popen: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM, ``grace`` seconds to exit, then SIGKILL; the process is reaped either way."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(grace)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(5)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def stop(self) -> None:
        stop_process(self.popen)

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def spawn(name: str, argv: list[str], logdir: Path, **kwargs) -> Proc:
    log = logdir / f"{name}.log"
    fh = open(log, "wb")  # noqa: SIM115 - closed with the process
    kwargs.setdefault("start_new_session", True)
    p = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kwargs)
    fh.close()
    return Proc(name, p, log)


@dataclass
class ControlPlaneOptions:
    bind_address: str = "127.0.0.1"
    api_port: int = 0  # 0: a free port
    service_cidr: str = "10.96.0.0/24"
    # "none" keeps the `kubernetes` Service without endpoints (nothing in the cluster calls it); "lease" gives it
    # the advertise address, for pods that reach the apiserver through the Service.
    endpoint_reconciler: str = "none"
    extra_args: list[str] = field(default_factory=list)
    controller_args: list[str] = field(default_factory=list)


@dataclass
class ControlPlaneProcesses:
    workdir: Path
    server: str
    kubeconfig: Path
    pki: Pki
    options: ControlPlaneOptions
    procs: dict[str, Proc] = field(default_factory=dict)

    def start_controller_manager(self) -> None:
        """kube-controller-manager (DaemonSets, ReplicaSets, node lifecycle, SA tokens, root CA publisher); CSRs
        are left to tpcmesh's operator (the agents' signer)."""
        if "kube-controller-manager" in self.procs:
            return
        argv = [str(binary("kube-controller-manager")), f"--kubeconfig={self.kubeconfig}", "--leader-elect=false",
                "--secure-port=0", f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca_cert}", f"--cluster-signing-cert-file={self.pki.ca_cert}",
                f"--cluster-signing-key-file={self.pki.ca_key}", "--controllers=*,-csrsigning,-csrapproving",
                "--concurrent-daemonset-syncs=2", *self.options.controller_args, "--v=1"]
        self.procs["kube-controller-manager"] = spawn("kube-controller-manager", argv, self.workdir)
        self._wait_alive("kube-controller-manager", 2.0)

    def start_scheduler(self) -> None:
        if "kube-scheduler" in self.procs:
            return
        argv = [str(binary("kube-scheduler")), f"--kubeconfig={self.kubeconfig}", "--leader-elect=false",
                "--secure-port=0", "--v=1"]
        self.procs["kube-scheduler"] = spawn("kube-scheduler", argv, self.workdir)
        self._wait_alive("kube-scheduler", 2.0)

    def _wait_alive(self, name: str, seconds: float) -> None:
        time.sleep(seconds)
        p = self.procs[name]
        if p.popen.poll() is not None:
            raise ControlPlaneError(f"{name} exited with {p.popen.returncode}:\n{p.tail()}")

    def stop(self) -> None:
        """All at once, one short grace: the kube-apiserver of a cluster with nodes hangs on in its shutdown after
        it stopped listening until it is killed (10 s each time), and nothing here is worth its graceful end (the
        state is etcd's, which exits at once)."""
        procs = [p.popen for p in (self.procs.pop(n, None) for n in ("kube-scheduler", "kube-controller-manager",
                                                                       "kube-apiserver", "etcd")) if p]
        terminate_all(procs, grace=2.0)


def _wait_ready(url: str, ctx: ssl.SSLContext, proc: Proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise ControlPlaneError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = str(e)
        time.sleep(0.2)
    raise ControlPlaneError(f"{proc.name} not ready at {url} within {timeout:.0f}s ({last}):\n{proc.tail()}")


def start_control_plane(workdir: Path, pki: Pki, options: ControlPlaneOptions | None = None) -> ControlPlaneProcesses:
    """Start etcd and kube-apiserver under ``workdir``; returns when /readyz answers ok."""
    options = options or ControlPlaneOptions()
    etcd_client, etcd_peer = free_port(), free_port()
    api_port = options.api_port or free_port(options.bind_address)
    etcd = spawn("etcd", [
        shutil.which("etcd") or "etcd", "--name=tpcmesh", f"--data-dir={workdir / 'etcd'}",
        f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
        f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
        f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
        f"--initial-cluster=tpcmesh=http://127.0.0.1:{etcd_peer}",
        "--log-level=warn", "--quota-backend-bytes=1073741824",
    ], workdir)
    server = f"https://{options.bind_address}:{api_port}"
    kc = write_kubeconfig(workdir / "kubeconfig", kubeconfig(server, pki.ca_cert, cert=pki.admin_cert,
                                                             key=pki.admin_key))
    cp = ControlPlaneProcesses(workdir=workdir, server=server, kubeconfig=kc, pki=pki, options=options)
    cp.procs["etcd"] = etcd
    apiserver = spawn("kube-apiserver", [
        str(binary("kube-apiserver")), f"--etcd-servers=http://127.0.0.1:{etcd_client}",
        f"--bind-address={options.bind_address}", f"--advertise-address={options.bind_address}",
        f"--secure-port={api_port}", f"--cert-dir={workdir / 'apiserver-certs'}",
        f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--service-account-key-file={pki.sa_pub}", f"--service-account-signing-key-file={pki.sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-cluster-ip-range={options.service_cidr}", "--authorization-mode=Node,RBAC",
        "--allow-privileged=true", "--enable-priority-and-fairness=false", "--profiling=false",
        # On by default since 1.25; named so a namespace's pod-security.kubernetes.io/enforce label is always
        # enforced here (tests/cluster/test_pod_security.py).
        "--enable-admission-plugins=PodSecurity",
        f"--endpoint-reconciler-type={options.endpoint_reconciler}", *options.extra_args, "--v=1",
    ], workdir)
    cp.procs["kube-apiserver"] = apiserver
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    ctx.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    try:
        _wait_ready(f"{server}/readyz", ctx, apiserver, START_TIMEOUT)
    except Exception:
        cp.stop()
        raise
    return cp

"""`tpcmesh-local cluster`: a real multi-node Kubernetes cluster on this machine, without Docker.

The control plane (etcd, kube-apiserver, controller-manager, scheduler; controlplane.py) runs in the root network
namespace on the WAN lab's host address. Each node is a network namespace of the lab (its own address, joined to
the others by the delay line with a WAN profile) holding one mount namespace shared by its own containerd, kubelet
and kube-proxy: hostNetwork pods get the node's address like on a DTN, pods get addresses from the node's pod /24,
Services work through kube-proxy and names through CoreDNS (a Deployment). Images are imported into every node's
containerd from OCI archives: the sandbox (pause) and CoreDNS images made here from the binaries
tests/cluster/build-control-plane.sh builds, and tpcmesh's own from `make images`.

    with Cluster(ClusterOptions(nodes=3)) as cluster:   # or cluster.up() ... cluster.close()
        cluster.kubeconfig, cluster.nodes, cluster.helm(...)

Everything is removed on close (also on Ctrl-C and SIGTERM); `tpcmesh-local cluster down` removes what a killed
`up` left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import clusterconfig as cfg
from .controlplane import (
    BIN,
    CACHE,
    ControlPlaneOptions,
    ControlPlaneProcesses,
    Pki,
    binary,
    kubeconfig,
    name,
    start_control_plane,
    write_kubeconfig,
    write_pki,
)
from .netns import Lab, LabError, remove_leftovers, used_networks
from .postgres import stop_leftover
from .profile import load_profile

log = logging.getLogger("tpcmesh.local.cluster")

IMAGE_CACHE = CACHE / "images"
# The Debian release of tpcmesh's images (hack/build-images.sh's DEBIAN_RELEASE): their archives are kept apart by
# release, so those of another release left in the cache (bookworm before) are never imported as these.
IMAGE_RELEASE = "trixie"
DEFAULT_STATE = CACHE / "cluster"
COREDNS_IMAGE = "localhost/tpcmesh-coredns:local"
BUSYBOX_IMAGE = "localhost/tpcmesh-busybox:local"
NETWORK_POLICY_IMAGE = "localhost/tpcmesh-kube-network-policies:local"
NODE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "pause",
                 "coredns", "helm")
NODE_PROGRAMS = ("containerd", "runc", "ctr", "buildah", "nsenter", "unshare", "iptables", "conntrack", "etcd")
API_PORT = 6443


class ClusterError(RuntimeError):
    """The cluster could not be started; the message names the step and, where there is one, the fix."""


def missing_parts(network_policies: bool = False) -> list[str]:
    """What this machine lacks for a real cluster (with NetworkPolicy enforcement), each with the fix."""
    missing = [f"{b} (make control-plane)" for b in NODE_BINARIES if binary(b) is None]
    if network_policies and binary("kube-network-policies") is None:
        missing.append("kube-network-policies (tests/cluster/build-network-policies.sh)")
    missing += [f"{p} (hack/setup.sh installs it as root)" for p in NODE_PROGRAMS if shutil.which(p) is None]
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("the CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)")
    if os.geteuid() != 0:
        missing.append("root (network namespaces, containerd, kubelet)")
    return missing


# --- images made here from single binaries -----------------------------------------------------------------------


def _buildah(*args: str) -> str:
    r = subprocess.run(["buildah", *args], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise ClusterError(f"`buildah {' '.join(args)}` failed: {r.stderr.strip()[-800:]}")
    return r.stdout.strip()


def binary_image(ref: str, root: dict[str, Path | str], entrypoint: list[str], archive: Path) -> Path:
    """An image of just these files (``root``: path in the image -> file here, or a symlink target string),
    exported as an OCI archive; kept while the files are unchanged."""
    digest = hashlib.sha256(ref.encode() + json.dumps(entrypoint).encode())
    for dest, src in sorted(root.items()):
        digest.update(dest.encode())
        digest.update(Path(src).read_bytes() if isinstance(src, Path) else f"-> {src}".encode())
    key = digest.hexdigest()[:16]
    stamp = archive.with_suffix(".key")
    if archive.exists() and stamp.exists() and stamp.read_text().strip() == key:
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        for dest, src in root.items():
            target = tree / dest.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, Path):
                shutil.copy2(src, target)
            else:
                target.symlink_to(src)
        ctr = _buildah("from", "scratch")
        try:
            _buildah("copy", ctr, f"{tree}/.", "/")
            _buildah("config", "--entrypoint", json.dumps(entrypoint), "--cmd", "", ctr)
            _buildah("commit", "--quiet", ctr, ref)
        finally:
            subprocess.run(["buildah", "rm", ctr], capture_output=True)
    archive.unlink(missing_ok=True)
    _buildah("push", "--quiet", ref, f"oci-archive:{archive}:{ref}")
    stamp.write_text(key)
    return archive


def support_images(network_policies: bool = False) -> list[Path]:
    """The sandbox image, CoreDNS and a busybox for tests (and kube-network-policies), as OCI archives (made on
    first use)."""
    pause, coredns = binary("pause"), binary("coredns")
    if pause is None or coredns is None:
        raise ClusterError("pause or coredns is not built: run `make control-plane`")
    out = [binary_image(cfg.SANDBOX_IMAGE, {"/pause": pause}, ["/pause"], IMAGE_CACHE / "pause.tar"),
           binary_image(COREDNS_IMAGE, {"/coredns": coredns}, ["/coredns"], IMAGE_CACHE / "coredns.tar")]
    busybox = Path("/bin/busybox")
    if busybox.exists():
        applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True).stdout.split()
        root: dict[str, Path | str] = {"/bin/busybox": busybox}
        root |= {f"/bin/{a}": "busybox" for a in applets if a != "busybox"}
        out.append(binary_image(BUSYBOX_IMAGE, root, ["/bin/sh"], IMAGE_CACHE / "busybox.tar"))
    if network_policies:
        engine = binary("kube-network-policies")
        if engine is None:
            raise ClusterError("kube-network-policies is not built: run tests/cluster/build-network-policies.sh")
        out.append(binary_image(NETWORK_POLICY_IMAGE, {"/kube-network-policies": engine},
                                ["/kube-network-policies"], IMAGE_CACHE / "kube-network-policies.tar"))
    return out


def tpcmesh_images() -> list[Path]:
    """The OCI archives `make images` left in the cache (agent, operator, dashboard), if any."""
    return sorted((IMAGE_CACHE / IMAGE_RELEASE).glob("tpcmesh-*.tar"))


# --- the cluster -----------------------------------------------------------------------------------------------


@dataclass
class ClusterOptions:
    nodes: int = 3
    profile: str | Path | None = None  # WAN profile file or shipped name (default: "cluster")
    state_dir: Path | None = None
    images: Iterable[Path] | None = None  # OCI archives to import on every node (default: support + tpcmesh)
    on_failure: Callable[[str], None] | None = None
    # Dual-stack nodes: each kubelet runs with --node-ip <IPv4>,<IPv6> (the lab gives every node both), so
    # hostNetwork pods (the agents) get both in status.podIPs. The pod network and Services stay IPv4.
    dual_stack: bool = True
    # NetworkPolicy enforcement: kube-network-policies on every node, and pods keep their own addresses between
    # nodes (no masquerading) so a policy sees which pod sent a packet. Off by default: the engine and its image
    # cost start-up time, and nothing but the NetworkPolicy tests needs it.
    network_policies: bool = False


@dataclass
class ClusterNode:
    name: str
    address: str
    netns: str
    pod_network: str
    directory: Path
    holder: subprocess.Popen | None = None
    address6: str | None = None  # dual stack: the node's IPv6 address (its second InternalIP)

    @property
    def addresses(self) -> list[str]:
        """Its InternalIPs, IPv4 first (the kubelet's --node-ip)."""
        return [self.address, *([self.address6] if self.address6 else [])]

    @property
    def socket(self) -> Path:
        return self.directory / "containerd.sock"

    def enter(self, argv: list[str]) -> list[str]:
        """``argv`` run in this node's network and mount namespaces."""
        assert self.holder is not None
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", "--", *argv]


@dataclass
class Cluster:
    options: ClusterOptions = field(default_factory=ClusterOptions)
    lab: Lab | None = None
    control_plane: ControlPlaneProcesses | None = None
    plan: cfg.AddressPlan | None = None
    nodes: list[ClusterNode] = field(default_factory=list)
    state: Path | None = None
    kubeconfig: Path | None = None
    _owned_state: bool = False

    def __enter__(self) -> Cluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- up --------------------------------------------------------------------------------------------------

    def up(self) -> Cluster:
        missing = missing_parts(self.options.network_policies)
        if missing:
            raise ClusterError("this machine lacks what a real cluster needs: " + "; ".join(missing))
        if self.options.nodes < 1:
            raise ClusterError("a cluster needs at least one node (--nodes)")
        started = time.monotonic()
        try:
            self._start_state()
            self._start_lab()
            self._start_control_plane()
            images = list(self.options.images) if self.options.images is not None else (
                support_images(self.options.network_policies) + tpcmesh_images())
            for node in self.nodes:
                self._start_node(node, images)
            self._wait_nodes_ready()
            self._start_dns()
            if self.options.network_policies:
                self._start_network_policies()
        except BaseException:
            self.close()
            raise
        log.info("Cluster up in %.0f s: %d nodes, kubeconfig %s", time.monotonic() - started, len(self.nodes),
                 self.kubeconfig)
        return self

    def _start_state(self) -> None:
        base = self.options.state_dir
        if base is None:
            DEFAULT_STATE.mkdir(parents=True, exist_ok=True)
            base = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=DEFAULT_STATE))
            self._owned_state = True
        base.mkdir(parents=True, exist_ok=True)
        (base / "pid").write_text(str(os.getpid()))
        self.state = base

    def _start_lab(self) -> None:
        profile = load_profile(self.options.profile or "cluster").with_nodes(self.options.nodes)
        self.plan = cfg.plan_addresses(used_networks())
        networks = {n: [str(self.plan.pod_network(i))] for i, n in enumerate(profile.nodes)}
        self.lab = Lab(profile, mode="netns", networks=networks, on_failure=self._lab_failed)
        try:
            self.lab.start()
        except LabError as e:
            raise ClusterError(f"the WAN lab (network namespaces + delay line) failed: {e}") from e
        assert self.state is not None
        for i, n in enumerate(self.lab.nodes):
            assert n.netns
            self.nodes.append(ClusterNode(name=n.name, address=n.address, netns=n.netns,
                                          pod_network=str(self.plan.pod_network(i)),
                                          directory=self.state / "nodes" / n.name,
                                          address6=n.address6 if self.options.dual_stack else None))
            for cidr in (self.plan.pod_supernet, self.plan.service_cidr):
                _run(["ip", "-n", n.netns, "route", "add", str(cidr), "dev", "wan0"])
            _run(["ip", "netns", "exec", n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        _run(["ip", "route", "add", str(self.plan.pod_supernet), "dev", str(self.lab.host_device)])

    def _lab_failed(self, message: str) -> None:
        if self.options.on_failure:
            self.options.on_failure(message)

    def _start_control_plane(self) -> None:
        assert self.lab and self.plan and self.state
        host = self.lab.host_address
        pki = write_pki(self.state / "pki", server_names=[
            host, "127.0.0.1", "localhost", self.plan.api_service_ip, "kubernetes", "kubernetes.default",
            "kubernetes.default.svc", f"kubernetes.default.svc.{cfg.CLUSTER_DOMAIN}"])
        kubelet_client = pki.issue_pair("apiserver-kubelet-client", name("kube-apiserver-kubelet-client",
                                                                         "system:masters"), client=True)
        options = ControlPlaneOptions(
            bind_address=host, api_port=API_PORT, service_cidr=str(self.plan.service_cidr),
            endpoint_reconciler="lease",
            extra_args=[f"--kubelet-client-certificate={kubelet_client[0]}",
                        f"--kubelet-client-key={kubelet_client[1]}",
                        f"--kubelet-certificate-authority={pki.ca_cert}",
                        "--kubelet-preferred-address-types=InternalIP"])
        self.control_plane = start_control_plane(self.state, pki, options)
        self.control_plane.start_controller_manager()
        self.control_plane.start_scheduler()
        self.kubeconfig = self.control_plane.kubeconfig

    def _start_node(self, node: ClusterNode, images: list[Path]) -> None:
        assert self.lab and self.plan and self.control_plane and self.state
        d = node.directory
        for sub in ("containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "pki"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        pki = self.control_plane.pki
        # The node's identity (Node authorizer: system:node:<name>), its serving certificate, kube-proxy's.
        node_pki = _NodePki(pki, d / "pki", node, self.control_plane.server)
        (d / "hosts").write_text(cfg.hosts_file(self.lab.host_address, self._node_hosts(), node.name,
                                                socket.gethostname()))
        (d / "resolv.conf").write_text("# tpcmesh-local cluster: no name servers outside the cluster\n"
                                       "options ndots:1\n")
        (d / "containerd.toml").write_text(cfg.containerd_config(
            str(d / "containerd/root"), str(d / "containerd/state"), str(node.socket), str(d / "cni/net.d")))
        enforce = self.options.network_policies
        (d / "cni/net.d/10-tpcmesh.conflist").write_text(json.dumps(cfg.cni_conflist(
            self.plan.pod_network(self.nodes.index(node)), str(d / "cni/ipam"), masquerade=not enforce), indent=1))
        (d / "kubelet.yaml").write_text(yaml.safe_dump(cfg.kubelet_config(
            address=node.address, runtime_socket=str(node.socket), ca_file=str(pki.ca_cert),
            tls_cert=str(node_pki.serving[0]), tls_key=str(node_pki.serving[1]), dns_ip=self.plan.dns_service_ip,
            resolv_conf=str(d / "resolv.conf"), pod_logs_dir=str(d / "pod-logs"))))
        (d / "kube-proxy.yaml").write_text(yaml.safe_dump(cfg.kube_proxy_config(
            kubeconfig=str(node_pki.proxy_kubeconfig), node_name=node.name, address=node.address,
            pod_supernet=str(self.plan.pod_supernet), masquerade_all=not enforce)))

        # One mount namespace per node, shared by containerd and the kubelet (secret volumes the kubelet mounts
        # must be visible to containerd), with the node's hosts file; mounts made in it die with it.
        holder_script = f"mount --bind {d / 'hosts'} /etc/hosts && echo ready && exec sleep infinity"
        node.holder = self.lab.popen(None, ["nsenter", f"--net=/run/netns/{node.netns}", "--", "unshare", "--mount",
                                            "--propagation", "slave", "--", "sh", "-c", holder_script],
                                     critical=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert node.holder.stdout is not None
        line = node.holder.stdout.readline()
        if line.strip() != b"ready":
            raise ClusterError(f"node {node.name}: its mount namespace could not be made: {line!r}")
        log.info("Starting containerd on %s (%s)", node.name, node.address)
        self._spawn(node, "containerd", ["containerd", "--config", str(d / "containerd.toml")])
        _wait_for(lambda: node.socket.exists(), 30, f"containerd on {node.name} to open {node.socket}",
                  lambda: _tail(d / "containerd.log"))
        self._import(node, images)
        self._spawn(node, "kubelet", [
            str(binary("kubelet")), f"--config={d / 'kubelet.yaml'}", f"--kubeconfig={node_pki.kubeconfig}",
            f"--hostname-override={node.name}", f"--node-ip={','.join(node.addresses)}",
            f"--root-dir={d / 'kubelet'}",
            f"--cert-dir={d / 'pki'}", "--v=1"])
        self._spawn(node, "kube-proxy", [str(binary("kube-proxy")), f"--config={d / 'kube-proxy.yaml'}", "--v=1"])

    def _import(self, node: ClusterNode, images: Iterable[Path]) -> None:
        """The archives' content into the node's containerd, unpacked later: containerd's CRI unpacks an image's
        layers when a container first needs them, so a node unpacks only the images it runs (an import that
        unpacks costs ~4x as long, on every node, for every image)."""
        for archive in images:
            log.info("Importing %s into %s", archive.name, node.name)
            r = subprocess.run(["ctr", "--address", str(node.socket), "-n", "k8s.io", "images", "import",
                                "--no-unpack", str(archive)], capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                raise ClusterError(f"node {node.name}: importing {archive} failed: {r.stderr.strip()[-800:]}")

    def import_images(self, images: Iterable[Path]) -> None:
        """Import more OCI archives into every running node's containerd (e.g. another release's images), the
        nodes at once."""
        archives = list(images)
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            for done in [pool.submit(self._import, node, archives) for node in self.nodes]:
                done.result()

    def _node_hosts(self) -> list[tuple[str, str]]:
        """(name, address) of every node address: a dual-stack node's name resolves to both (GridFTP on the IPv6
        address looks it up)."""
        return [(n.name, a) for n in self.nodes for a in n.addresses]

    def _spawn(self, node: ClusterNode, what: str, argv: list[str]) -> subprocess.Popen:
        assert self.lab
        fh = open(node.directory / f"{what}.log", "wb")  # noqa: SIM115 - the child keeps it
        try:
            return self.lab.popen(None, node.enter(argv), critical=True, stdout=fh, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        finally:
            fh.close()

    def _wait_nodes_ready(self, timeout: float = 180) -> None:
        from kubernetes import client

        def ready() -> bool:
            nodes = {n["metadata"]["name"]: n for n in self.plain(client.CoreV1Api(self.client()).list_node)["items"]}
            return all(n.name in nodes and any(c["type"] == "Ready" and c["status"] == "True"
                                               for c in nodes[n.name]["status"].get("conditions", []))
                       for n in self.nodes)

        _wait_for(ready, timeout, "every node to become Ready",
                  lambda: "\n".join(f"{n.name}: {_tail(n.directory / 'kubelet.log', 8)}" for n in self.nodes))

    def _start_dns(self, timeout: float = 120) -> None:
        from kubernetes import client, utils

        assert self.plan
        for doc in cfg.coredns_manifests(COREDNS_IMAGE, self.plan.dns_service_ip, self._node_hosts()):
            utils.create_from_dict(self.client(), doc)

        def available() -> bool:
            apps = client.AppsV1Api(self.client())
            return bool(self.plain(apps.read_namespaced_deployment, "coredns", "kube-system")["status"]
                        .get("availableReplicas"))

        _wait_for(available, timeout, "CoreDNS to become available", lambda: self.describe_pods("kube-system"))

    def _start_network_policies(self, timeout: float = 120) -> None:
        """kube-network-policies on every node (ClusterOptions.network_policies), Ready before any test pod."""
        from kubernetes import client, utils

        for doc in cfg.network_policy_manifests(NETWORK_POLICY_IMAGE):
            utils.create_from_dict(self.client(), doc)

        def ready() -> bool:
            ds = self.plain(client.AppsV1Api(self.client()).read_namespaced_daemon_set, "kube-network-policies",
                            "kube-system")["status"]
            return ds.get("numberReady", 0) == len(self.nodes)

        _wait_for(ready, timeout, "kube-network-policies to run on every node",
                  lambda: self.describe_pods("kube-system"))

    # -- use -------------------------------------------------------------------------------------------------

    def client(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def env(self) -> dict[str, str]:
        """Environment for helm/kubectl against this cluster (helm's own state in the cluster's state dir)."""
        assert self.state and self.kubeconfig
        e = dict(os.environ)
        e.pop("KUBERNETES_SERVICE_HOST", None)
        e |= {"KUBECONFIG": str(self.kubeconfig), "HELM_CACHE_HOME": str(self.state / "helm/cache"),
              "HELM_CONFIG_HOME": str(self.state / "helm/config"), "HELM_DATA_HOME": str(self.state / "helm/data")}
        return e

    def helm(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "helm"), *args], env=self.env(), capture_output=True, text=True,
                              timeout=timeout, check=check)

    def node(self, name_: str) -> ClusterNode:
        return next(n for n in self.nodes if n.name == name_)

    def plain(self, call: Callable[..., object], *args: object) -> dict:
        """A kubernetes client call's answer as plain JSON (camelCase keys), e.g. plain(core.list_node)."""
        return dict(self.client().sanitize_for_serialization(call(*args)))

    def describe_pods(self, namespace: str) -> str:
        """One line per pod: phase, node, and the reason of each waiting/terminated container (for errors)."""
        from kubernetes import client

        lines = []
        for p in self.plain(client.CoreV1Api(self.client()).list_namespaced_pod, namespace)["items"]:
            status = p.get("status", {})
            states = []
            for cs in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
                st = cs.get("state", {})
                if "waiting" in st:
                    states.append(f"{cs['name']}: waiting {st['waiting'].get('reason')} "
                                  f"{st['waiting'].get('message', '')}".strip())
                elif "terminated" in st:
                    states.append(f"{cs['name']}: terminated {st['terminated'].get('reason')} "
                                  f"({st['terminated'].get('exitCode')})")
            lines.append(f"{p['metadata']['name']} {status.get('phase')} on {p['spec'].get('nodeName')}: "
                         f"{'; '.join(states)}")
        return "\n".join(lines) or "(no pods)"

    # -- down ------------------------------------------------------------------------------------------------

    def close(self) -> None:
        for node in self.nodes:
            _kill_node_tasks(node)
        mount_namespaces = [_mount_namespace(node) for node in self.nodes]
        if self.lab is not None:
            self.lab.close()  # stops kubelets, kube-proxies, containerds, holders; removes namespaces
        _kill_in_mount_namespaces({m for m in mount_namespaces if m})
        if self.control_plane is not None:
            self.control_plane.stop()
        if self.lab is not None and self.plan is not None:
            subprocess.run(["ip", "route", "del", str(self.plan.pod_supernet)], capture_output=True)
        remove_pod_namespaces()
        if self.state is not None and self._owned_state:
            shutil.rmtree(self.state, ignore_errors=True)
        elif self.state is not None:
            (self.state / "pid").unlink(missing_ok=True)
        self.lab, self.control_plane = None, None


@dataclass
class _NodePki:
    """The node's kubelet client identity, kubelet serving certificate and kube-proxy's client identity."""

    kubeconfig: Path
    serving: tuple[Path, Path]
    proxy_kubeconfig: Path

    def __init__(self, pki: Pki, d: Path, node: ClusterNode, server: str) -> None:
        crt, key = pki.issue_pair("kubelet-client", name(f"system:node:{node.name}", "system:nodes"),
                                  client=True, directory=d)
        self.kubeconfig = write_kubeconfig(d / "kubelet.kubeconfig", kubeconfig(server, pki.ca_cert, cert=crt,
                                                                                key=key, user=node.name))
        self.serving = pki.issue_pair("kubelet-serving", name(node.name), server_names=[*node.addresses, node.name],
                                      directory=d)
        pcrt, pkey = pki.issue_pair("kube-proxy", name("system:kube-proxy"), client=True, directory=d)
        self.proxy_kubeconfig = write_kubeconfig(d / "kube-proxy.kubeconfig", kubeconfig(
            server, pki.ca_cert, cert=pcrt, key=pkey, user="kube-proxy"))


def _run(argv: list[str]) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise ClusterError(f"`{' '.join(argv)}` failed: {r.stderr.strip()}")


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _wait_for(check: Callable[[], object], timeout: float, what: str, detail: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - retried until the deadline, then reported
            last_error = f" (last error: {e})"
        time.sleep(1.0)
    raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}{last_error}:\n{detail()}")


def _kill_node_tasks(node: ClusterNode) -> None:
    """Ask the node's containerd to kill every container (sandboxes included) so no pod outlives the node."""
    if not node.socket.exists():
        return
    ctr = ["ctr", "--address", str(node.socket), "-n", "k8s.io"]
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        ids = subprocess.run([*ctr, "tasks", "ls", "-q"], capture_output=True, text=True, timeout=20).stdout.split()
        for cid in ids:
            subprocess.run([*ctr, "tasks", "kill", "-s", "SIGKILL", cid], capture_output=True, timeout=20)


def _mount_namespace(node: ClusterNode) -> int | None:
    """The inode of the node's mount namespace (while its holder runs)."""
    if node.holder is None or node.holder.poll() is not None:
        return None
    try:
        return os.stat(f"/proc/{node.holder.pid}/ns/mnt").st_ino
    except OSError:
        return None


def _kill_in_mount_namespaces(inodes: set[int]) -> None:
    """Kill every process left in these mount namespaces after the lab stopped its own (containerd's shims run in
    sessions of their own, outside the lab's process list)."""
    if not inodes:
        return
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{pid}/ns/mnt").st_ino in inodes:
                os.kill(pid, signal.SIGKILL)


def remove_pod_namespaces() -> list[str]:
    """Remove pod network namespaces (cni-*) no process uses any more (their pods' containers are gone)."""
    removed = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
        for ns in (line.split()[0] for line in out.splitlines() if line.startswith("cni-")):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10).stdout
            if not pids.strip():
                subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=10)
                removed.append(ns)
    return removed


def down(state_root: Path = DEFAULT_STATE) -> list[str]:
    """Stop a running `cluster up` (SIGTERM to the pid in its state dir) and remove what killed ones left."""
    removed = []
    if state_root.is_dir():
        for d in sorted(state_root.iterdir()):
            pid_file = d / "pid"
            pid = int(pid_file.read_text()) if pid_file.exists() and pid_file.read_text().strip().isdigit() else 0
            if pid and _alive(pid):
                os.kill(pid, signal.SIGTERM)
                _wait_for(_gone(pid), 60, f"cluster process {pid} to stop", lambda: "")
            if d.exists():
                stop_leftover(d / "postgres-dir")  # a killed `cluster demo`'s database
                _unmount_below(d)
                shutil.rmtree(d, ignore_errors=True)
                removed.append(str(d))
    removed += remove_leftovers() + remove_pod_namespaces()
    return removed


def _gone(pid: int) -> Callable[[], bool]:
    return lambda: not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _unmount_below(directory: Path) -> None:
    """Lazily unmount what a killed node left mounted below ``directory`` in this namespace (deepest first)."""
    prefix = str(directory.resolve()) + "/"
    with contextlib.suppress(OSError):
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)

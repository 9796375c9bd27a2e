"""A real Kubernetes control plane for the `cluster` tests: Debian etcd + kube-apiserver on loopback.

The binaries come from `tests/cluster/build-control-plane.sh` (k8s.io/kubernetes built from its Go module,
cached in ~/.cache/tpcmesh). One apiserver per test session (fixture `control_plane`); tests that need
workloads to move start kube-controller-manager and kube-scheduler on demand, create fake Nodes that are kept
Ready (status heartbeats and node Leases, the way kwok does) and "play kubelet" for the pods bound to them.

Authentication is real X509 (an admin client certificate in `system:masters`) and service-account tokens;
authorization is `Node,RBAC`, so a client built from a ServiceAccount token only gets what its Roles grant.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from tpcmesh_lab.controlplane import (
    BIN,  # noqa: F401 - re-exported for the tests
    CACHE,
    K8S_VERSION,
    ControlPlaneOptions,
    ControlPlaneProcesses,
    binary,
    free_port,  # noqa: F401 - re-exported for the tests
    kubeconfig,
    write_pki,
)
from tpcmesh_lab.controlplane import start_control_plane as launch

from tests.support.paths import ARTIFACTS, REPO

BUILD_SCRIPT = REPO / "tests" / "cluster" / "build-control-plane.sh"
SERVICE_CIDR = "10.96.0.0/24"
SERVICE_IP = "10.96.0.1"


def missing_binaries() -> list[str]:
    names = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "helm"]
    missing = [n for n in names if binary(n) is None]
    if shutil.which("etcd") is None:
        missing.append("etcd (Debian package etcd-server)")
    return missing


# --- other projects' CRDs, as released (fetched at test time, never committed) -----------------------------

# Kinds the chart renders from other projects: the CRDs come from those projects' Go module zips, which `go mod
# download` fetches from the module proxy, checks against the checksum database and keeps in the Go module cache.
UPSTREAM_CRDS = {
    "cert-manager.io": ("github.com/cert-manager/cert-manager", "v1.18.2",
                        ["deploy/crds/crd-issuers.yaml", "deploy/crds/crd-clusterissuers.yaml",
                         "deploy/crds/crd-certificates.yaml", "deploy/crds/crd-certificaterequests.yaml"]),
    "monitoring.coreos.com": ("github.com/prometheus-operator/prometheus-operator", "v0.85.0",
                              ["example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
                               "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"]),
}


def go_command() -> str | None:
    """The Go the control-plane build uses (hack/go-toolchain.py's cache first), else `go` on PATH."""
    for candidate in sorted((CACHE / "go").glob("go*/bin/go"), reverse=True):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("go")


def upstream_crds(group: str) -> list[dict]:
    """The released CustomResourceDefinitions of `group` (a key of UPSTREAM_CRDS). cert-manager ships them as Helm
    templates whose only template parts are labels and annotations: those are dropped."""
    module, version, files = UPSTREAM_CRDS[group]
    go = go_command()
    if go is None:
        pytest.skip(f"no Go to fetch {module}@{version}'s CRDs with (tests/cluster/build-control-plane.sh gets one)")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    out = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True,
                         env=env, cwd=tempfile.gettempdir(), timeout=300)
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"go mod download {module}@{version} failed: {info.get('Error') or out.stderr[-2000:]}")
    crds = []
    for f in files:
        for doc in yaml.safe_load_all((Path(info["Dir"]) / f).read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                doc["metadata"] = {"name": doc["metadata"]["name"]}
                crds.append(doc)
    assert crds and all(c["spec"]["group"] == group for c in crds), f"{module}@{version}: no {group} CRDs in {files}"
    return crds


@dataclass
class ControlPlane:
    """Handle on the running control plane. `client()` gives an admin `kubernetes.client.ApiClient`."""

    workdir: Path
    server: str
    kubeconfig: Path
    ca_cert: Path
    processes: ControlPlaneProcesses
    _nodes: dict[str, str] = field(default_factory=dict)  # name -> address
    _nodes6: dict[str, str] = field(default_factory=dict)  # name -> IPv6 address of a dual-stack node
    _heartbeat: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    # -- clients --
    def client(self, kubeconfig: Path | None = None):
        """A new `kubernetes.client.ApiClient` (admin unless another kubeconfig is given)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    def token_for(self, service_account: str, namespace: str, seconds: int = 3600) -> str:
        """A bound token for a ServiceAccount (TokenRequest API), as its pods would get."""
        from kubernetes import client

        api = client.CoreV1Api(self.client())
        req = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=["https://kubernetes.default.svc"], expiration_seconds=seconds))
        return api.create_namespaced_service_account_token(service_account, namespace, req).status.token

    def kubeconfig_for(self, service_account: str, namespace: str) -> Path:
        """A kubeconfig that authenticates as the ServiceAccount (so RBAC applies to the caller)."""
        path = self.workdir / f"kubeconfig-{namespace}-{service_account}"
        token = self.token_for(service_account, namespace)
        path.write_text(yaml.safe_dump(kubeconfig(self.server, self.ca_cert, token=token,
                                                   user=f"{namespace}-{service_account}")))
        path.chmod(0o600)
        return path

    def ensure_namespace(self, name: str) -> None:
        """Create the namespace (if missing) and its `default` ServiceAccount, which pods need and which only
        kube-controller-manager would create otherwise."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        core = client.CoreV1Api(self.client())
        for create in (lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name))),
                       lambda: core.create_namespaced_service_account(name, client.V1ServiceAccount(
                           metadata=client.V1ObjectMeta(name="default")))):
            try:
                create()
            except ApiException as e:
                if e.status != 409:
                    raise

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """Environment for a subprocess (helm, kubectl-like tools, the operator) that talks to this cluster."""
        e = dict(os.environ)
        e["KUBECONFIG"] = str(kubeconfig or self.kubeconfig)
        e["HELM_CACHE_HOME"] = str(self.workdir / "helm" / "cache")
        e["HELM_CONFIG_HOME"] = str(self.workdir / "helm" / "config")
        e["HELM_DATA_HOME"] = str(self.workdir / "helm" / "data")
        e.pop("KUBERNETES_SERVICE_HOST", None)
        return e

    def helm(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        helm = binary("helm")
        assert helm is not None
        return subprocess.run([str(helm), *args], env=self.env(), capture_output=True, text=True, check=check,
                              timeout=timeout)

    # -- controllers on demand --
    def start_controller_manager(self) -> None:
        """Start kube-controller-manager (DaemonSets, ReplicaSets, node lifecycle, SA tokens, root CA publisher)."""
        self.processes.start_controller_manager()

    def start_scheduler(self) -> None:
        self.processes.start_scheduler()

    # -- fake nodes (kwok-like) --
    def create_node(self, name: str, address: str, labels: dict[str, str] | None = None,
                    address6: str | None = None) -> None:
        """A Node that looks like a healthy kubelet runs on `address` (and, dual stack, `address6`: a second
        InternalIP, as `--node-ip <v4>,<v6>` gives); kept Ready by a heartbeat thread."""
        from kubernetes import client

        api = client.CoreV1Api(self.client())
        body = client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "type": "tpcmesh-fake", **(labels or {})}), spec=client.V1NodeSpec())
        api.create_node(body)
        self._nodes[name] = address
        if address6:
            self._nodes6[name] = address6
        self._node_heartbeat(api, name)
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="fake-kubelets", daemon=True)
            self._heartbeat.start()

    def _node_ips(self, name: str) -> list[str]:
        return [self._nodes[name], *([self._nodes6[name]] if name in self._nodes6 else [])]

    def _node_status(self, name: str) -> dict:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        cap = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"}

        def cond(t: str, s: str, reason: str) -> dict:
            return {"type": t, "status": s, "reason": reason, "message": reason, "lastHeartbeatTime": now,
                    "lastTransitionTime": now}

        return {"status": {
            "capacity": cap, "allocatable": cap,
            "addresses": [{"type": "InternalIP", "address": a} for a in self._node_ips(name)]
            + [{"type": "Hostname", "address": name}],
            "conditions": [cond("Ready", "True", "KubeletReady"),
                           cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                           cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                           cond("PIDPressure", "False", "KubeletHasSufficientPID"),
                           cond("NetworkUnavailable", "False", "RouteCreated")],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": K8S_VERSION,
                         "containerRuntimeVersion": "fake://0", "kernelVersion": "", "osImage": "tpcmesh fake node",
                         "machineID": name, "systemUUID": name, "bootID": name, "kubeProxyVersion": ""},
        }}

    def _node_heartbeat(self, api, name: str) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        api.patch_node_status(name, self._node_status(name))
        # Drop a not-ready taint the node lifecycle controller may have put on before the first heartbeat.
        node = api.read_node(name)
        taints = node.spec.taints or []
        kept = [t for t in taints if not t.key.startswith("node.kubernetes.io/not-ready")
                and not t.key.startswith("node.kubernetes.io/unreachable")]
        if len(kept) != len(taints):
            api.patch_node(name, {"spec": {"taints": [client.ApiClient().sanitize_for_serialization(t)
                                                      for t in kept] or None}})
        coord = client.CoordinationV1Api(api.api_client)
        now = dt.datetime.now(dt.UTC)
        lease = client.V1Lease(metadata=client.V1ObjectMeta(name=name, namespace="kube-node-lease"),
                               spec=client.V1LeaseSpec(holder_identity=name, lease_duration_seconds=40,
                                                       renew_time=now))
        try:
            coord.replace_namespaced_lease(name, "kube-node-lease", coord.read_namespaced_lease(
                name, "kube-node-lease").to_dict() | {"spec": lease.spec})
        except ApiException as e:
            if e.status != 404:
                raise
            coord.create_namespaced_lease("kube-node-lease", lease)

    def _heartbeat_loop(self) -> None:
        from kubernetes import client

        api = client.CoreV1Api(self.client())
        while not self._stop.wait(5.0):
            for name in list(self._nodes):
                with contextlib.suppress(Exception):
                    self._node_heartbeat(api, name)

    def delete_nodes(self) -> None:
        from kubernetes import client

        api = client.CoreV1Api(self.client())
        for name in list(self._nodes):
            self._nodes.pop(name, None)
            self._nodes6.pop(name, None)
            with contextlib.suppress(Exception):
                api.delete_node(name)

    # -- playing kubelet --
    def play_kubelet(self, namespace: str, label_selector: str = "") -> list:
        """Mark every pod bound to a fake node Running and Ready, podIP = hostIP = the node's address (podIPs =
        hostIPs = its addresses: both on a dual-stack node, as for a hostNetwork pod).

        Returns the pods it updated (kubernetes V1Pod objects, after the update)."""
        from kubernetes import client

        api = client.CoreV1Api(self.client())
        done = []
        for pod in api.list_namespaced_pod(namespace, label_selector=label_selector).items:
            node = pod.spec.node_name
            if not node or node not in self._nodes or pod.metadata.deletion_timestamp:
                continue
            addr = self._nodes[node]
            now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            conds = [{"type": t, "status": "True", "lastTransitionTime": now}
                     for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
            statuses = [{"name": c.name, "image": c.image, "imageID": c.image, "ready": True, "started": True,
                         "restartCount": 0, "containerID": f"fake://{pod.metadata.uid}-{c.name}",
                         "state": {"running": {"startedAt": now}}} for c in pod.spec.containers]
            ips = [{"ip": a} for a in self._node_ips(node)]
            body = {"status": {"phase": "Running", "conditions": conds, "hostIP": addr, "hostIPs": ips,
                               "podIP": addr, "podIPs": ips, "startTime": now,
                               "containerStatuses": statuses}}
            done.append(api.patch_namespaced_pod_status(pod.metadata.name, namespace, body))
        return done

    # -- lifecycle --
    def stop(self) -> None:
        self._stop.set()
        self.processes.stop()


def start_control_plane(workdir: Path) -> ControlPlane:
    """Start etcd and kube-apiserver on loopback under `workdir`; returns when /readyz answers ok."""
    pki = write_pki(workdir / "pki", server_names=["127.0.0.1", "localhost", SERVICE_IP, "kubernetes",
                                                   "kubernetes.default", "kubernetes.default.svc",
                                                   "kubernetes.default.svc.cluster.local"])
    procs = launch(workdir, pki, ControlPlaneOptions(service_cidr=SERVICE_CIDR))
    cp = ControlPlane(workdir=workdir, server=procs.server, kubeconfig=procs.kubeconfig, ca_cert=pki.ca_cert,
                      processes=procs)
    try:
        _wait_default_namespace(cp)
    except Exception:
        cp.stop()
        raise
    return cp


def _wait_default_namespace(cp: ControlPlane, timeout: float = 20) -> None:
    """The apiserver creates `default`, `kube-system`, `kube-node-lease` and the bootstrap RBAC shortly after."""
    from kubernetes import client

    api = client.CoreV1Api(cp.client())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        names = {n.metadata.name for n in api.list_namespace().items}
        sas = {"default", "kube-system", "kube-node-lease"}
        if sas <= names:
            try:
                api.read_namespaced_service_account("default", "default")
                return
            except Exception:  # noqa: BLE001 - the SA controller runs in kube-controller-manager; not needed here
                return
        time.sleep(0.2)
    raise RuntimeError("the apiserver did not create its system namespaces in time")


def b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """The session's real control plane (etcd + kube-apiserver). Skipped only when the binaries are not built."""
    missing = missing_binaries()
    if missing:
        pytest.skip(f"control-plane binaries not built ({', '.join(missing)}); run `make control-plane` "
                    f"({BUILD_SCRIPT.relative_to(REPO)})")
    base = Path(tempfile.mkdtemp(prefix="tpcmesh-cp-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    cp = start_control_plane(base)
    try:
        yield cp
    finally:
        cp.stop()
        logs = ARTIFACTS / "control-plane"
        with contextlib.suppress(OSError):
            logs.mkdir(parents=True, exist_ok=True)
            for log in base.glob("*.log"):
                shutil.copy(log, logs / log.name)
        shutil.rmtree(base, ignore_errors=True)

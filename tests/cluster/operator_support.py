"""Helpers of the operator's cluster tests: the CRDs (applied idempotently), namespaces, real agents behind fake
Nodes and Ready Pods (fixture `agent_pods`), the operator's environment, and waiting for a condition.

Agents are tpcmesh-agent processes; each gets a fake Node (its address as InternalIP) and a Pod bound to it that
the control-plane fixture marks Ready with podIP = the node address (hostNetwork), as a kubelet would.
"""

from __future__ import annotations

import time
import uuid

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.paths import REPO

CRDS = sorted((REPO / "manifests" / "crds").glob("*.yaml"))  # transferbenchmarks, transferruns, kopfpeerings
G, V = "tpcmesh.io", "v1alpha1"
AGENT_LABELS = {"app.kubernetes.io/name": "tpcmesh", "app.kubernetes.io/component": "agent"}
OPERATOR_ARGS = ["run", "--standalone", "-m", "tpcmesh_operator.main"]  # + ["--namespace", ns]


def apply_crds(api_client) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    for path in CRDS:
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as e:
            if e.status != 409:
                raise
            current = ext.read_custom_resource_definition(name)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, body)
        deadline = time.monotonic() + 30
        while True:
            crd = ext.read_custom_resource_definition(name)
            conds = {c.type: c.status for c in (crd.status.conditions or [])}
            if conds.get("Established") == "True":
                break
            assert time.monotonic() < deadline, f"CRD {name} not established: {conds}"
            time.sleep(0.2)
    time.sleep(1.0)  # discovery and the CEL compiler catch up


def ensure_namespace(api_client, name: str) -> None:
    """The namespace and its default ServiceAccount (no controller-manager needed to admit pods)."""
    core = client.CoreV1Api(api_client)
    for create in (lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name))),
                   lambda: core.create_namespaced_service_account(
                       name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))):
        try:
            create()
        except ApiException as e:
            if e.status != 409:
                raise


def wait_for(what: str, fn, timeout: float = 60.0, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except ApiException as e:
            last = e
        if last and not isinstance(last, ApiException):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def agent_pods(control_plane, agent_factory, tmp_path):
    """The body of a test module's `agent_pods` fixture: `start(namespace, n, pod_annotations, **agent settings)`
    starts n real agents (shared token: `start.token_file`), each with a fake Node and a Ready Pod, and returns their
    handles."""
    api = control_plane.client()
    core = client.CoreV1Api(api)
    token_file = tmp_path / "agent-token"
    token_file.write_text(f"tok-{uuid.uuid4().hex}\n")

    def start(namespace: str, n: int, pod_annotations: dict[str, str] | None = None, **settings) -> list:
        ensure_namespace(api, namespace)
        handles = []
        for _ in range(n):
            h = agent_factory(token_file=token_file, **settings)
            node = f"{namespace}-{h.address.replace('.', '-')}"
            control_plane.create_node(node, h.address, {"tpcmesh.io/site": f"site-{len(handles)}"})
            core.create_namespaced_pod(namespace, {
                "metadata": {"name": f"agent-{node}", "labels": AGENT_LABELS, "annotations": pod_annotations or {}},
                "spec": {"nodeName": node, "hostNetwork": True, "automountServiceAccountToken": False,
                         "containers": [{"name": "agent", "image": "example.invalid/tpcmesh-agent:0"}]}})
            h.node = node
            handles.append(h)
        control_plane.play_kubelet(namespace, "app.kubernetes.io/component=agent")
        return handles

    start.token_file = token_file
    return start


def operator_env(monkeypatch, control_plane, agent_token_file, ca_file, namespace: str, **settings: str) -> None:
    """The operator's settings (TPCMESH_OPERATOR_<NAME>) for a KopfRunner in this process: quick timers and polls,
    no metrics server, no peering, and the namespace the runner serves (`--namespace`): the handlers look for other
    active runs in the watched namespaces only, never in other tests' namespaces."""
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    base = {"AGENT_TOKEN_FILE": str(agent_token_file), "CA_FILE": str(ca_file), "TIMER_INTERVAL": "1",
            "POLL_INTERVAL": "0.2", "UNREACHABLE_GRACE": "2", "METRICS_PORT": "0", "PEERING": "",
            "NAMESPACES": namespace}
    for k, v in {**base, **settings}.items():
        monkeypatch.setenv(f"TPCMESH_OPERATOR_{k}", v)


def run_status(objs: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    return objs.get_namespaced_custom_object(G, V, namespace, "transferruns", name).get("status") or {}


def results_secret(api_client, namespace: str, token: str, name: str = "results-token") -> dict:
    """A Secret with the dashboard's write token; returns the spec's `results.tokenSecret`."""
    client.CoreV1Api(api_client).create_namespaced_secret(namespace, {"metadata": {"name": name},
                                                                      "stringData": {"token": token}})
    return {"name": name}

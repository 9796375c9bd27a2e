"""The chart's NetworkPolicies enforced (issue #30): the suite's real cluster runs kube-network-policies on every
node (ClusterOptions.network_policies; tests/cluster/build-network-policies.sh, built by `make control-plane`) and
its pods leave their nodes unmasqueraded, so a receiving node judges a packet by the sending pod's own address.
The admin turns `networkPolicy.enabled` on in the package's release (tests/support/realrelease.py) with `helm
upgrade`, and off again after. Allowed: the operator -> the dashboard's Service (its ingest) and the agents' control
API, a namespace the chart's `networkPolicy.ingressNamespaceSelector` names (the ingress controller's,
Prometheus's) -> the dashboard. Denied: a pod of another namespace, and a pod of the release's namespace that is not
the release's, -> the dashboard. What no engine here polices: the agents run with hostNetwork, and
kube-network-policies matches packets to pods by pod address, leaving hostNetwork pods out (its pod-IP index skips
them), so their ports stay reachable from anywhere; what protects them is their own authentication and the nodes'
firewall (README "Pod Security"). The bundled PostgreSQL's policy is not exercised: its image cannot be pulled here
(the lab runs the chart's external-database mode).

Each probe is a busybox pod on a node other than the dashboard's (the packet crosses the WAN lab) that tries a TCP
connection; a control probe of the same kind reaches CoreDNS's pod, which no policy selects, so a refused flow is
the policy's doing. A deliberately wrong dashboard policy (its port 8001) failed the first test (seen once, stop 35).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from kubernetes import client
from tpcmesh_lab import clusterinstall
from tpcmesh_lab.cluster import BUSYBOX_IMAGE
from tpcmesh_lab.clusterinstall import ready_pods
from tpcmesh_lab.controlplane import binary

from tests.support.realrelease import NS, RELEASE

pytestmark = [pytest.mark.cluster, pytest.mark.netns, pytest.mark.timeout(1200)]

OUTSIDE, INGRESS = "netpol-outside", "netpol-ingress"
INGRESS_LABEL = {"tpcmesh.test/ingress-controller": "true"}
DASHBOARD_PORT, AGENT_API_PORT = 8000, 9443  # the dashboard container's port, the chart's agent.ports.api


def set_policies(cluster, *values: str) -> None:
    out = cluster.helm("upgrade", RELEASE, str(clusterinstall.CHART), "--namespace", NS, "--reuse-values",
                       *values, "--wait", "--timeout", "300s", check=False, timeout=400)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def enforcing(real_cluster, installed):
    """The package's release with its NetworkPolicies on (off again after: the e2e reads the dashboard from the
    nodes, which the policies do not admit)."""
    assert real_cluster.options.network_policies, "the suite's cluster enforces NetworkPolicies (realcluster.py)"
    for ns, labels in ((OUTSIDE, {}), (INGRESS, INGRESS_LABEL)):
        installed.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, labels=labels)))
    try:
        set_policies(real_cluster, "--set", "networkPolicy.enabled=true", "--set-json",
                     f"networkPolicy.ingressNamespaceSelector={json.dumps({'matchLabels': INGRESS_LABEL})}")
        clusterinstall.wait_ready(real_cluster, NS)
        yield real_cluster
    finally:
        set_policies(real_cluster, "--set", "networkPolicy.enabled=false")
        for ns in (OUTSIDE, INGRESS):
            installed.delete_namespace(ns)


def probe_pod(name: str, node: str, target: str, port: int, labels: dict | None = None) -> dict:
    """A pod that tries one TCP connection and says OPEN, REFUSED or CLOSED (the SYN dropped: no answer in 3 s).
    busybox's nc has no -z: once connected it waits for the server, which the outer timeout ends."""
    command = (f"out=$(echo | timeout 6 nc -w 3 {target} {port} 2>&1); case \"$out\" in *'timed out'*) echo CLOSED;;"
               " *refused*) echo REFUSED;; *) echo OPEN;; esac")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "probe", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", command]}]}}


def probe(core: client.CoreV1Api, probes: dict[str, tuple[str, dict]], timeout: float = 90) -> dict[str, str]:
    """Run every probe at once ({name: (namespace, pod)}); OPEN or CLOSED for each."""
    for ns, pod in probes.values():
        core.create_namespaced_pod(ns, pod)
    deadline, out = time.monotonic() + timeout, {}
    try:
        while len(out) < len(probes) and time.monotonic() < deadline:
            for name, (ns, _) in probes.items():
                if name not in out and core.read_namespaced_pod(name, ns).status.phase in ("Succeeded", "Failed"):
                    out[name] = (core.read_namespaced_pod_log(name, ns).strip().splitlines() or [""])[-1]
            time.sleep(1)
    finally:
        for name, (ns, _) in probes.items():
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    assert len(out) == len(probes), f"probes unfinished after {timeout:.0f} s: {sorted(set(probes) - set(out))}"
    return out


def dashboard_pod(cluster) -> client.V1Pod:
    [pod] = ready_pods(cluster, "dashboard", NS)
    return pod


def other_node(cluster, pod: client.V1Pod) -> str:
    return next(n.name for n in cluster.nodes if n.name != pod.spec.node_name)


def in_operator(cluster, code: str) -> str:
    """Python run in the operator's container (the operator's own network identity)."""
    [pod] = ready_pods(cluster, "operator", NS)[:1]
    r = subprocess.run([str(binary("kubectl")), "-n", NS, "exec", pod.metadata.name, "-c", "operator", "--",
                        "python3", "-c", code], env=cluster.env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_product_flows_pass_the_enforced_policies(enforcing, installed):
    """The operator reaches the dashboard's Service (what its delivery posts to) and every agent's control API;
    a namespace the ingress selector names reaches the dashboard."""
    dashboard = dashboard_pod(enforcing)
    # the URL the operator delivers to (the dashboard's Service), from the operator's own environment
    code = ("import os, urllib.request; url = os.environ['TPCMESH_OPERATOR_RESULTS_URL'] + '/healthz'; "
            "print(urllib.request.urlopen(url, timeout=10).status)")
    assert in_operator(enforcing, code).strip() == "200"
    agents = [n.address for n in enforcing.nodes]
    code = ("import socket\n"
            f"for a in {agents!r}:\n"
            f"    socket.create_connection((a, {AGENT_API_PORT}), timeout=5).close(); print('OPEN', a)")
    assert in_operator(enforcing, code).count("OPEN") == len(agents)
    node = other_node(enforcing, dashboard)
    got = probe(installed, {"ingress-ns": (INGRESS, probe_pod("ingress-ns", node, dashboard.status.pod_ip,
                                                              DASHBOARD_PORT))})
    assert got == {"ingress-ns": "OPEN"}


def test_pods_outside_the_policies_are_refused(enforcing, installed):
    dashboard = dashboard_pod(enforcing)
    node = other_node(enforcing, dashboard)
    [dns] = [p for p in installed.list_namespaced_pod("kube-system", label_selector="k8s-app=kube-dns").items]
    got = probe(installed, {
        "control": (OUTSIDE, probe_pod("control", node, dns.status.pod_ip, 1053)),
        "outside": (OUTSIDE, probe_pod("outside", node, dashboard.status.pod_ip, DASHBOARD_PORT)),
        # the release's namespace, but not the release's pod (no app.kubernetes.io/instance label)
        "stranger": (NS, probe_pod("stranger", node, dashboard.status.pod_ip, DASHBOARD_PORT)),
        # hostNetwork: not policed by kube-network-policies (what the README says protects it instead)
        "agent-api": (OUTSIDE, probe_pod("agent-api", node, enforcing.nodes[0].address, AGENT_API_PORT)),
    })
    assert got == {"control": "OPEN", "outside": "CLOSED", "stranger": "CLOSED", "agent-api": "OPEN"}, got

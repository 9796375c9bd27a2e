"""`tpcmesh-local cluster`: real nodes (kubelet + containerd per network namespace), real pods, Services, DNS.

What a site's cluster gives tpcmesh and what its pods rely on: nodes Ready with a container runtime, hostNetwork
pods on a node's own address (the agents), a pod on one node reaching a Service by name whose pod runs on another
node (the operator reaching the dashboard), `kubectl logs` through the kubelet, and the WAN profile's delays
between nodes.
"""

from __future__ import annotations

import ipaddress
import re
import time

import pytest
from kubernetes import client
from tpcmesh_lab.cluster import BUSYBOX_IMAGE

# The first test pays the package's cluster (images imported into every node's containerd): minutes on a loaded
# 2-core machine, beyond the suite's default 300 s.
pytestmark = [pytest.mark.cluster, pytest.mark.netns, pytest.mark.timeout(1200)]

NS = "cluster-smoke"


def pod(name: str, node: str, command: str, *, host_network: bool = False, labels: dict | None = None,
        restart: str = "Never") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"nodeName": node, "hostNetwork": host_network, "restartPolicy": restart,
                     "containers": [{"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", command],
                                     "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
                     "volumes": [{"name": "tmp", "emptyDir": {}}]}}


def wait_pod_done(core: client.CoreV1Api, name: str, timeout: float = 90) -> str:
    """The pod's log once it Succeeded; a failure or a timeout shows its phase and log."""
    deadline = time.monotonic() + timeout
    phase = "?"
    while time.monotonic() < deadline:
        phase = core.read_namespaced_pod(name, NS).status.phase
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(1)
    log = core.read_namespaced_pod_log(name, NS)
    assert phase == "Succeeded", f"pod {name} ended {phase}:\n{log}"
    return log


@pytest.fixture(scope="module")
def core(real_cluster):
    api = client.CoreV1Api(real_cluster.client())
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
    yield api
    api.delete_namespace(NS)


def test_nodes_are_ready_with_containerd_on_their_own_addresses(real_cluster, core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert sorted(nodes) == sorted(n.name for n in real_cluster.nodes)
    for n in real_cluster.nodes:
        status = nodes[n.name].status
        assert any(c.type == "Ready" and c.status == "True" for c in status.conditions), status.conditions
        assert status.node_info.container_runtime_version.startswith("containerd://")
        # dual stack (ClusterOptions.dual_stack, the default): the kubelet's --node-ip gives both families
        assert [a.address for a in status.addresses if a.type == "InternalIP"] == n.addresses == [n.address,
                                                                                                  n.address6]
    assert len({n.address for n in real_cluster.nodes}) == len(real_cluster.nodes)


def test_host_network_pods_see_their_node_and_the_wan_delays(real_cluster, core):
    a, b = real_cluster.nodes[0], real_cluster.nodes[-1]
    expected_rtt = real_cluster.lab.profile.rtt_ms(a.name, b.name)
    core.create_namespaced_pod(NS, pod("hostnet", a.name, f"ip -4 -o addr show; hostname -i; ping -c 5 {b.address}",
                                       host_network=True))
    log = wait_pod_done(core, "hostnet")
    assert f"inet {a.address}/" in log, log
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", log)]
    assert len(rtts) == 5, log
    # The delay line adds its own ~1-2 ms on a loaded machine; the profile's delay is the floor.
    assert expected_rtt * 0.95 <= min(rtts) <= expected_rtt + 5, (expected_rtt, rtts)


def test_a_pod_reaches_a_service_by_name_on_another_node_and_logs_work(real_cluster, core):
    a, b = real_cluster.nodes[0], real_cluster.nodes[1]
    core.create_namespaced_pod(NS, pod("web", b.name, "echo served-by-$(hostname) > /tmp/index.html; "
                                                      "exec httpd -f -p 8080 -h /tmp", labels={"app": "web"},
                                       restart="Always"))
    core.create_namespaced_service(NS, client.V1Service(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[client.V1ServicePort(port=80, target_port=8080)])))
    # busybox's own resolver (nslookup) asks the cluster DNS: the static wget cannot load glibc's NSS modules (and
    # crashes on names and with -T here).
    core.create_namespaced_pod(NS, pod("client", a.name, f"for i in $(seq 30); do "
                                                         f"ip=$(nslookup web.{NS}.svc.cluster.local | "
                                                         "awk '/^Address: [0-9]/ {print $2}' | tail -1); "
                                                         'echo "web is $ip"; [ -n "$ip" ] && '
                                                         'timeout 5 wget -qO- "http://$ip/" && exit 0; sleep 1; '
                                                         "done; exit 1"))
    log = wait_pod_done(core, "client")
    assert "served-by-web" in log, log
    service_ip = core.read_namespaced_service("web", NS).spec.cluster_ip
    assert f"web is {service_ip}" in log, log
    web = core.read_namespaced_pod("web", NS)
    assert web.spec.node_name == b.name
    assert ipaddress.ip_address(web.status.pod_ip) in real_cluster.plan.pod_network(1)

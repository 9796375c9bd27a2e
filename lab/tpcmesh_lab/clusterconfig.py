"""What `tpcmesh-local cluster` writes for each component (pure: no processes, no files).

Addresses: the nodes live on the WAN lab's range (see netns.py); pods and Services get ranges of their own from
198.18.0.0/15 (the benchmarking range, never routed outside), checked against this machine's routes. Each node
routes its pod /24 through the delay line, so pod-to-pod traffic across nodes crosses the emulated WAN as well.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

CLUSTER_DOMAIN = "cluster.local"
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
# (pod supernet, service range): the first pair that collides with nothing on this machine is used.
CANDIDATE_RANGES = (("198.19.128.0/17", "198.19.96.0/24"), ("198.18.128.0/17", "198.18.96.0/24"))


class AddressPlanError(RuntimeError):
    pass


@dataclass(frozen=True)
class AddressPlan:
    pod_supernet: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network

    def pod_network(self, index: int) -> ipaddress.IPv4Network:
        """Node ``index``'s pod /24 (198.19.128.0/24 for the first node ...)."""
        return list(self.pod_supernet.subnets(new_prefix=24))[index]

    @property
    def api_service_ip(self) -> str:
        return str(self.service_cidr[1])

    @property
    def dns_service_ip(self) -> str:
        return str(self.service_cidr[10])


def plan_addresses(used: Sequence[ipaddress.IPv4Network]) -> AddressPlan:
    for pods, services in CANDIDATE_RANGES:
        p, s = ipaddress.IPv4Network(pods), ipaddress.IPv4Network(services)
        if not any(p.overlaps(u) or s.overlaps(u) for u in used):
            return AddressPlan(p, s)
    raise AddressPlanError(f"every candidate pod/service range {list(CANDIDATE_RANGES)} collides with a route here")


def containerd_config(root: str, state: str, socket: str, cni_conf_dir: str) -> str:
    """containerd 1.6 (config version 2) with its own root, state and socket, the CRI plugin on the node's CNI
    configuration and the locally built sandbox image. ``restrict_oom_score_adj``: runc cannot lower its own
    oom_score_adj in this VM (every sandbox fails with "can't get final child's PID from pipe" without it)."""
    return f"""version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf_dir}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""


def cni_conflist(pod_network: ipaddress.IPv4Network, ipam_dir: str, *, masquerade: bool = True) -> dict:
    """A bridge with host-local addresses from the node's pod /24; traffic leaving the /24 is masqueraded to the
    node's address (replies then come back through the node, whichever node the peer is on). ``masquerade=False``
    (NetworkPolicy enforcement) keeps the pod's own address: a policy on the receiving node must see which pod
    sent the packet, and the delay line routes every pod /24 to its node, so replies find their way back."""
    return {
        "cniVersion": "1.0.0",
        "name": "tpcmesh",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": masquerade, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": ipam_dir, "ranges": [[{"subnet": str(pod_network)}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(*, address: str, runtime_socket: str, ca_file: str, tls_cert: str, tls_key: str,
                   dns_ip: str, resolv_conf: str, pod_logs_dir: str) -> dict:
    """The kubelet of one node: cgroupfs on cgroup v1 (this VM), no QoS cgroups, Webhook authn/authz (the
    apiserver asks with its kubelet-client certificate; nobody else gets in)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "clusterDNS": [dns_ip],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": resolv_conf,
        "podLogsDir": pod_logs_dir,
        "tlsCertFile": tls_cert,
        "tlsPrivateKeyFile": tls_key,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": ca_file}},
        "authorization": {"mode": "Webhook"},
        "serializeImagePulls": False,
        # Every node of the lab shares this machine's disk: evict on nothing but real exhaustion.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusReportFrequency": "10s",
    }


def kube_proxy_config(*, kubeconfig: str, node_name: str, address: str, pod_supernet: str,
                      masquerade_all: bool = True) -> dict:
    """kube-proxy in iptables mode inside the node's namespace. masqueradeAll: a pod reaching a Service whose
    endpoint sits on the same bridge gets its reply through the node (no br_netfilter needed); off with
    NetworkPolicy enforcement, where the Service's endpoint must see the client pod's address (the bridge's
    traffic then passes the node's netfilter hooks: bridge-nf-call-iptables is on in every new namespace here).
    Conntrack limits are left alone (they are this machine's, shared by every node)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "hostnameOverride": node_name,
        "bindAddress": address,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "mode": "iptables",
        "clusterCIDR": pod_supernet,
        "iptables": {"masqueradeAll": masquerade_all},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "nodePortAddresses": [f"{address}/32"],
    }


def hosts_file(host_address: str, nodes: Sequence[tuple[str, str]], own: str, machine_hostname: str) -> str:
    """/etc/hosts as node ``own`` sees it (and its hostNetwork pods with it): every node by name, and this
    machine's host name as the node's own address (GridFTP resolves its own host name)."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback", f"{host_address} tpcmesh-host"]
    for name, address in nodes:
        lines.append(f"{address} {name} {machine_hostname}" if name == own else f"{address} {name}")
    return "\n".join(lines) + "\n"


def coredns_manifests(image: str, dns_ip: str, node_hosts: Sequence[tuple[str, str]]) -> list[dict]:
    """CoreDNS as the cluster DNS: Service names from the API, node names from a hosts block, nothing forwarded
    (no name may be resolved outside this machine). Listens on 1053 as an unprivileged user; the kube-dns Service
    maps 53 to it."""
    labels = {"k8s-app": "kube-dns"}
    hosts = "\n".join(f"      {addr} {name}" for name, addr in node_hosts)
    corefile = f""".:1053 {{
    errors
    health :8080
    ready :8181
    hosts {{
{hosts}
      fallthrough
    }}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
      pods insecure
      fallthrough in-addr.arpa ip6.arpa
    }}
    cache 30
    loadbalance
}}
"""
    meta = {"namespace": "kube-system"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "tpcmesh:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "tpcmesh:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tpcmesh:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", **meta},
         "data": {"Corefile": corefile}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "labels": labels, **meta},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": "coredns", "dnsPolicy": "Default",
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
                      "containers": [{
                          "name": "coredns", "image": image, "imagePullPolicy": "IfNotPresent",
                          "args": ["-conf", "/etc/coredns/Corefile"],
                          "ports": [{"name": "dns", "containerPort": 1053, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 1053, "protocol": "TCP"}],
                          "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                          "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10},
                          "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                              "capabilities": {"drop": ["ALL"]}},
                          "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}]}],
                      "volumes": [{"name": "config", "configMap": {"name": "coredns"}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "labels": labels, **meta},
         "spec": {"clusterIP": dns_ip, "selector": labels,
                  "ports": [{"name": "dns", "port": 53, "targetPort": 1053, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "targetPort": 1053, "protocol": "TCP"}]}},
    ]


NFQUEUE_ID = 100  # the netlink queue kube-network-policies reads the first packets of connections from


def network_policy_manifests(image: str) -> list[dict]:
    """kube-network-policies (SIG Network's NetworkPolicy engine) as a DaemonSet on every node's network, as its
    own install.yaml has it but for the image (built here, tests/cluster/build-network-policies.sh) and the flags:
    fail closed (no verdict while it is down: dropped), no NRI (containerd 1.6 has none here; v0.8.0 still tries
    and logs one failed connection, then learns pod addresses from the API), no DNS-race workaround (fixed in the
    kernel since 6.12), metrics on the node's loopback only. It leaves hostNetwork pods out of its pod-address
    index, so the agents are not policed by it."""
    labels = {"k8s-app": "kube-network-policies"}
    name, meta = "kube-network-policies", {"namespace": "kube-system"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"tpcmesh:{name}"},
         "rules": [{"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
                   {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                    "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"tpcmesh:{name}"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"tpcmesh:{name}"},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}]},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "labels": labels, **meta},
         "spec": {"selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": name, "hostNetwork": True,
                      "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
                      "containers": [{
                          "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
                          "args": ["--hostname-override=$(NODE_NAME)", f"--nfqueue-id={NFQUEUE_ID}",
                                   "--disable-nri", "--netfilter-bug-1766-fix=false",
                                   "--metrics-bind-address=127.0.0.1:9080", "--v=2"],
                          "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                          "securityContext": {"privileged": True}}]}}}},
    ]

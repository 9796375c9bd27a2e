"""The Helm chart: lint, render, server-side dry-run of every object, and an install on the real control plane."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from tests.support.controlplane import K8S_VERSION, UPSTREAM_CRDS, binary, upstream_crds
from tests.support.paths import REPO

pytestmark = pytest.mark.cluster

CHART = REPO / "charts" / "tpcmesh"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))


def helm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    h = binary("helm")
    if h is None:
        pytest.skip("helm is not built; run `make control-plane`")
    return subprocess.run([str(h), *args], capture_output=True, text=True, env=env, timeout=120)


def render(values: Path | None, namespace: str, release: str = "tpc") -> list[dict]:
    args = ["template", release, str(CHART), "--namespace", namespace, "--include-crds",
            "--kube-version", K8S_VERSION.lstrip("v")]
    if values:
        args += ["-f", str(values)]
    out = helm(*args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_chart_crds_are_the_manifests_crds():
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    manifests = {p.name: p.read_bytes() for p in (REPO / "manifests" / "crds").glob("*.yaml")}
    assert chart.keys() == manifests.keys(), "charts/tpcmesh/crds/ and manifests/crds/ list different files; " \
                                             "run `make chart` to copy manifests/crds/ into the chart"
    differ = [n for n in chart if chart[n] != manifests[n]]
    assert not differ, f"charts/tpcmesh/crds/ differs from manifests/crds/ in {differ}; run `make chart`"


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "defaults")
def test_helm_lint(values):
    args = ["lint", str(CHART), "--strict", "--kube-version", K8S_VERSION.lstrip("v")]
    if values:
        args += ["-f", str(values)]
    out = helm(*args)
    assert out.returncode == 0, out.stdout + out.stderr


def test_schema_rejects_bad_values():
    out = helm("template", "t", str(CHART), "--kube-version", K8S_VERSION.lstrip("v"),
               "--set", "agent.ports.api=70000", "--set", "image.tag=latest", "--set", "database.mode=sqlite")
    assert out.returncode != 0
    for field in ("agent.ports.api", "image.tag", "database.mode"):
        assert field in out.stderr


def _operator_env(docs: list[dict]) -> dict[str, str]:
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator"))
    container = dep["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_benchmarks_without_results_deliver_to_the_releases_dashboard(tmp_path):
    env = _operator_env(render(None, "mesh"))
    assert env["TPCMESH_OPERATOR_RESULTS_URL"] == "http://tpc-tpcmesh-dashboard.mesh.svc:80"
    assert env["TPCMESH_OPERATOR_RESULTS_TOKEN_FILE"] == "/var/run/tpcmesh/results-token/token"
    no_dashboard = tmp_path / "values.yaml"
    no_dashboard.write_text("dashboard: {enabled: false}\n")
    assert "TPCMESH_OPERATOR_RESULTS_URL" not in _operator_env(render(no_dashboard, "mesh"))
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text("dashboard: {enabled: false}\noperator: {resultsUrl: 'https://grid.example.org'}\n")
    assert _operator_env(render(elsewhere, "mesh"))["TPCMESH_OPERATOR_RESULTS_URL"] == "https://grid.example.org"


def test_the_prune_cronjob_runs_prune_archive_with_the_retention_values(tmp_path):
    def cronjobs(values: str | None) -> list[dict]:
        path = None
        if values is not None:
            path = tmp_path / "values.yaml"
            path.write_text(values)
        return [d for d in render(path, "mesh") if d["kind"] == "CronJob"]

    (job,) = cronjobs(None)
    assert job["spec"]["schedule"] == "17 3 * * *" and job["spec"]["concurrencyPolicy"] == "Forbid"
    # its pod is no endpoint of the dashboard's Service
    pod_labels = job["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    service = next(d for d in render(None, "mesh") if d["kind"] == "Service" and d["metadata"]["name"].endswith(
        "-dashboard"))
    assert not service["spec"]["selector"].items() <= pod_labels.items()
    container = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python3", "manage.py", "prune_archive"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["TPCMESH_DASHBOARD_RETENTION_RAW_DAYS"], env["TPCMESH_DASHBOARD_RETENTION_FILE_DAYS"]) == ("180", "30")
    (job,) = cronjobs("dashboard: {retention: {rawDays: 400, fileDays: 7}}\n")
    env = {e["name"]: e.get("value")
           for e in job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["TPCMESH_DASHBOARD_RETENTION_RAW_DAYS"], env["TPCMESH_DASHBOARD_RETENTION_FILE_DAYS"]) == ("400", "7")
    assert cronjobs("dashboard: {retention: {enabled: false}}\n") == []


def test_defaults_render_the_agent_daemonset_as_specified():
    docs = render(None, "tpcmesh")
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"] == {"tpcmesh.io/fast-network": "true"}
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    assert agent["command"] == ["tpcmesh-agent"]
    ports = {p["name"]: (p["containerPort"], p["protocol"]) for p in agent["ports"]}
    assert ports == {"api": (9443, "TCP"), "metrics": (9464, "TCP"), "builtin": (9080, "TCP"),
                     "xrootd-root": (1094, "TCP"), "xrootd-https": (8444, "TCP"), "gridftp": (2811, "TCP"),
                     "iperf3": (5201, "TCP"), "loss-probe": (8863, "UDP")}
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    # 2 x 11 x 1 GB + 1 GB headroom; the memory limit must hold the memory-backed volume.
    assert data["emptyDir"] == {"medium": "Memory", "sizeLimit": "23000000000"}
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["TPCMESH_AGENT_BUDGET_BYTES"] == "23000000000"
    assert int(agent["resources"]["limits"]["memory"]) > 23_000_000_000
    assert agent["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz"
    kinds = sorted(d["kind"] for d in docs)
    for kind in ("Deployment", "StatefulSet", "Service", "ServiceAccount", "ClusterRole", "Role", "Secret", "Pod"):
        assert kind in kinds
    for d in docs:
        if d["kind"] != "CustomResourceDefinition":
            labels = d["metadata"]["labels"]
            assert labels["app.kubernetes.io/part-of"] == "tpcmesh" and labels["helm.sh/chart"] == "tpcmesh-0.1.0"


def test_agents_are_dual_stack_from_the_node_addresses_unless_turned_off():
    """The agent and its certificate containers get every node address (status.podIPs, comma-separated with
    hostNetwork), and the pod says so to the operator; agent.dualStack false: the pod IP alone."""
    def agent_pod(values: Path | None) -> dict:
        return next(d for d in render(values, "tpcmesh") if d["kind"] == "DaemonSet")["spec"]["template"]

    def pod_ips(container: dict) -> dict | None:
        return next((e["valueFrom"] for e in container.get("env", []) if e["name"] == "TPCMESH_AGENT_POD_IPS"), None)

    dual = agent_pod(None)
    containers = dual["spec"]["initContainers"][:1] + dual["spec"]["containers"]
    assert [c["name"] for c in containers] == ["certificate", "agent", "certificate-renewer"]
    assert all(pod_ips(c) == {"fieldRef": {"fieldPath": "status.podIPs"}} for c in containers)
    assert dual["metadata"]["annotations"]["tpcmesh.io/dual-stack"] == "true"
    single = agent_pod(CHART / "ci" / "single-stack-values.yaml")
    assert all(pod_ips(c) is None for c in single["spec"]["initContainers"] + single["spec"]["containers"])
    assert "tpcmesh.io/dual-stack" not in (single["metadata"].get("annotations") or {})


def test_agents_mark_their_cpu_shared_only_when_asked(tmp_path):
    """agent.hostCpuShared (make cluster: every node on one machine's cores) reaches the agent; off by default."""
    def agent_env(values: Path | None) -> dict:
        ds = next(d for d in render(values, "tpcmesh") if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
        return _env(next(c for c in ds["containers"] if c["name"] == "agent"))

    assert "TPCMESH_AGENT_HOST_CPU_SHARED" not in agent_env(None)
    shared = tmp_path / "shared.yaml"
    shared.write_text("agent:\n  hostCpuShared: true\n")
    assert agent_env(shared)["TPCMESH_AGENT_HOST_CPU_SHARED"] == "true"


def test_disk_mode_mounts_the_hostpath_as_the_agents_disk_path_only_when_enabled(tmp_path):
    """agent.disk (issue #28): the node's directory mounted at /disk, TPCMESH_AGENT_DISK_DIR and its reserve in the
    agent; off by default (memory tests only, no hostPath); a relative path is refused by the schema."""
    def agent_spec(values: Path | None) -> tuple[dict, dict]:
        ds = next(d for d in render(values, "tpcmesh") if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
        return ds, next(c for c in ds["containers"] if c["name"] == "agent")

    ds, agent = agent_spec(None)
    assert "TPCMESH_AGENT_DISK_DIR" not in _env(agent) and all("hostPath" not in v for v in ds["volumes"])
    disk = tmp_path / "disk.yaml"
    disk.write_text("agent:\n  disk: {enabled: true, hostPath: /mnt/nvme0/tpcmesh, reserveBytes: 5000000000}\n")
    ds, agent = agent_spec(disk)
    env = _env(agent)
    assert (env["TPCMESH_AGENT_DISK_DIR"], env["TPCMESH_AGENT_DISK_RESERVE_BYTES"]) == ("/disk", "5000000000")
    assert {"name": "disk", "mountPath": "/disk"} in agent["volumeMounts"]
    assert {"name": "disk", "hostPath": {"path": "/mnt/nvme0/tpcmesh", "type": "DirectoryOrCreate"}} in ds["volumes"]
    out = helm("template", "t", str(CHART), "--kube-version", K8S_VERSION.lstrip("v"),
               "--set", "agent.disk.hostPath=tpcmesh")
    assert out.returncode != 0 and "agent.disk.hostPath" in out.stderr
    # a volume per agent: a generic ephemeral volume's claim from the site's StorageClass, no hostPath
    claim = {"storageClassName": "local-nvme", "accessModes": ["ReadWriteOnce"],
             "resources": {"requests": {"storage": "200Gi"}}}
    disk.write_text(yaml.safe_dump({"agent": {"disk": {"enabled": True, "volumeClaimSpec": claim}}}))
    ds, agent = agent_spec(disk)
    [volume] = [v for v in ds["volumes"] if v["name"] == "disk"]
    assert volume["ephemeral"]["volumeClaimTemplate"]["spec"] == claim and "hostPath" not in volume
    assert volume["ephemeral"]["volumeClaimTemplate"]["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"
    assert {"name": "disk", "mountPath": "/disk"} in agent["volumeMounts"] and ds["securityContext"]["fsGroup"] == 10001
    out = helm("template", "t", str(CHART), "--kube-version", K8S_VERSION.lstrip("v"),
               "--set", "agent.disk.enabled=true", "--set", "agent.disk.volumeClaimSpec.storageClassName=local-nvme")
    assert out.returncode != 0 and "volumeClaimSpec" in out.stderr and "resources" in out.stderr, out.stderr


# Every API call the operator makes, (apiGroup, resource, verb, resourceName or None) -> where. The chart's RBAC
# must grant exactly these: a verb not in the table is one the operator does not need.
OPERATOR_IN_WATCHED_NAMESPACES = {
    ("tpcmesh.io", "transferbenchmarks", "list", None): "kopf: the watch-stream's listing",
    ("tpcmesh.io", "transferbenchmarks", "watch", None): "kopf",
    ("tpcmesh.io", "transferbenchmarks", "patch", None): "kopf: finalizer and progress annotations",
    ("tpcmesh.io", "transferbenchmarks", "get", None): "rundriver._frozen_spec: a run's benchmarkRef",
    ("tpcmesh.io", "transferbenchmarks/status", "patch", None): "kopf: the status the handlers and timer return",
    ("tpcmesh.io", "transferruns", "list", None): "kopf; controller._list_runs",
    ("tpcmesh.io", "transferruns", "watch", None): "kopf",
    ("tpcmesh.io", "transferruns", "patch", None): "kopf: finalizer, annotations; controller: Replace's stop",
    ("tpcmesh.io", "transferruns", "get", None): "kube.KubeStatusStore.load",
    ("tpcmesh.io", "transferruns", "create", None): "controller.tick_benchmark: a run on schedule",
    ("tpcmesh.io", "transferruns", "delete", None): "controller.tick_benchmark: history limits",
    ("tpcmesh.io", "transferruns/status", "patch", None): "kube.KubeStatusStore.save",
    ("", "pods", "list", None): "kube.KubeAgentDirectory: the Ready agent pods",
    ("", "events", "create", None): "kopf.event",
    ("kopf.dev", "kopfpeerings", "list", None): "kopf peering",
    ("kopf.dev", "kopfpeerings", "watch", None): "kopf peering",
    ("kopf.dev", "kopfpeerings", "patch", None): "kopf peering: keep-alive",
    ("", "secrets", "get", None): "kube.read_secret_key: results tokens; certs.ensure_ca",
}


def operator_ca_calls(ca_secret: str, bundle: str) -> dict:
    """certs.ensure_ca in the release namespace (certificates.mode csr: the operator is the CA)."""
    return {("", "secrets", "create", None): "the CA Secret on first start",
            ("", "secrets", "update", ca_secret): "the CA renewed",
            ("", "configmaps", "create", None): "the bundle published",
            ("", "configmaps", "get", bundle): "the bundle read",
            ("", "configmaps", "update", bundle): "the bundle replaced"}


def operator_token_calls(keys_secret: str) -> dict:
    """tokens.incluster.KeySecret in the release namespace (token mode: the operator is the token issuer)."""
    return {("", "secrets", "create", None): "the signing keys' Secret on first start",
            ("", "secrets", "update", keys_secret): "the signing keys rotated"}


def operator_cluster_calls(signer: str, sign: bool) -> dict:
    calls = {("", "nodes", "list", None): "kube.KubeAgentDirectory; certs.process: node addresses",
             ("certificates.k8s.io", "certificatesigningrequests", "list", None): "kopf; certs.process_all",
             ("certificates.k8s.io", "certificatesigningrequests", "watch", None): "kopf.on.event",
             ("certificates.k8s.io", "certificatesigningrequests", "get", None): "certs.process",
             ("certificates.k8s.io", "certificatesigningrequests/approval", "update", None): "certs.process",
             ("certificates.k8s.io", "signers", "approve", signer): "certs.process"}
    if sign:
        calls |= {("certificates.k8s.io", "certificatesigningrequests/status", "update", None): "certs.process",
                  ("certificates.k8s.io", "signers", "sign", signer): "certs.process"}
    return calls


AGENT_CLUSTER_CALLS = {
    ("certificates.k8s.io", "certificatesigningrequests", "create", None): "tpcmesh_agent.csr.submit",
    ("certificates.k8s.io", "certificatesigningrequests", "get", None): "tpcmesh_agent.csr.wait_for_certificate",
}


def granted(role: dict) -> set[tuple]:
    return {(g, r, v, n) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"] for n in rule.get("resourceNames") or [None]}


def _rbac_mismatch(what: str, role: dict, calls: dict) -> list[str]:
    got = granted(role)
    return [f"{what} grants {t}, which the operator/agent never calls" for t in sorted(got - calls.keys(), key=str)] \
        + [f"{what} lacks {t} ({calls[t]})" for t in sorted(calls.keys() - got, key=str)]


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "defaults")
def test_rbac_grants_exactly_the_calls_the_code_makes(values) -> None:
    ns = "tpcmesh"
    docs = render(values, ns)
    roles = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d for d in docs
             if d["kind"] in ("Role", "ClusterRole")}
    deployment = next((d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator")),
                      None)
    problems: list[str] = []
    if deployment is not None:
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        watched = env["TPCMESH_OPERATOR_NAMESPACES"].split(",")
        for name_ns in sorted({*watched, ns}):
            role = roles.pop(("Role", "tpc-tpcmesh-operator", name_ns))
            calls = dict(OPERATOR_IN_WATCHED_NAMESPACES)
            if name_ns == ns and env.get("TPCMESH_OPERATOR_SIGN") == "true":
                calls |= operator_ca_calls(env["TPCMESH_OPERATOR_CA_SECRET"],
                                           env["TPCMESH_OPERATOR_CA_BUNDLE_CONFIGMAP"])
            if name_ns == ns and env.get("TPCMESH_OPERATOR_TOKEN_ISSUER"):
                calls |= operator_token_calls(env["TPCMESH_OPERATOR_TOKEN_KEYS_SECRET"])
            problems += _rbac_mismatch(f"Role in {name_ns}", role, calls)
        signer = env.get("TPCMESH_OPERATOR_SIGNER_NAME")
        cluster = roles.pop(("ClusterRole", "tpc-tpcmesh-operator", None))
        calls = {k: v for k, v in operator_cluster_calls(signer or "", env.get("TPCMESH_OPERATOR_SIGN") == "true")
                 .items() if signer or k[0] != "certificates.k8s.io"}
        if not env.get("TPCMESH_OPERATOR_CLUSTER_NAME"):
            calls[("", "namespaces", "get", "kube-system")] = "cluster.cluster_name: the kube-system UID"
        problems += _rbac_mismatch("operator ClusterRole", cluster, calls)
        if env["TPCMESH_OPERATOR_AGENT_NAMESPACE"] != ns:
            # agent.namespace: the agents apart, found there, the CA bundle published there.
            agents_role = roles.pop(("Role", "tpc-tpcmesh-operator-agents", env["TPCMESH_OPERATOR_AGENT_NAMESPACE"]))
            calls = {("", "pods", "list", None): "kube.KubeAgentDirectory: the Ready agent pods"}
            if env.get("TPCMESH_OPERATOR_SIGN") == "true":
                calls |= {k: v for k, v in operator_ca_calls(env["TPCMESH_OPERATOR_CA_SECRET"],
                                                             env["TPCMESH_OPERATOR_CA_BUNDLE_CONFIGMAP"]).items()
                          if k[1] == "configmaps"}
            problems += _rbac_mismatch("Role in the agents' namespace", agents_role, calls)
    agent = roles.pop(("ClusterRole", "tpc-tpcmesh-agent", None), None)
    if agent is not None:
        problems += _rbac_mismatch("agent ClusterRole", agent, AGENT_CLUSTER_CALLS)
    issuer_ref = roles.pop(("Role", "tpc-tpcmesh-agent-certmanager", ns), None)
    if issuer_ref is not None:
        # Not a call the agent makes: cert-manager's SubjectAccessReview for the CSR's requester before it signs.
        issuer = next(d["metadata"]["name"] for d in docs if d["kind"] == "Issuer" and d["spec"].get("ca"))
        problems += _rbac_mismatch("agent cert-manager Role", issuer_ref, {
            ("cert-manager.io", "signers", "reference", issuer): "cert-manager: may the requester use the Issuer"})
    crds = roles.pop(("ClusterRole", "tpc-tpcmesh-crds", None), None)
    if crds is not None:
        # The CRD hook Job (tpcmesh_operator.crds.apply): server-side apply of the chart's CRDs, then their status.
        names = sorted(d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition")
        problems += _rbac_mismatch("CRD hook ClusterRole", crds, {
            **{("apiextensions.k8s.io", "customresourcedefinitions", v, n): "crds.apply"
               for n in names for v in ("get", "patch")},
            ("apiextensions.k8s.io", "customresourcedefinitions", "create", None): "crds.apply: a missing CRD"})
    assert not roles, f"roles the table does not cover: {sorted(roles)}"
    assert not problems, "\n".join(problems)


def _ensure_upstream_crds(api_client, docs: list[dict]) -> None:
    """The real CRDs (cert-manager, prometheus-operator releases) of every other project's kind in `docs`."""
    ext = client.ApiextensionsV1Api(api_client)
    groups = {d["apiVersion"].split("/")[0] for d in docs} & set(UPSTREAM_CRDS)
    for group in sorted(groups):
        for body in upstream_crds(group):
            try:
                ext.create_custom_resource_definition(body)
            except ApiException as e:
                if e.status != 409:
                    raise


def _wait_for_kind(dyn: dynamic.DynamicClient, api_version: str, kind: str, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while True:
        try:
            dyn.resources.invalidate_cache()
            return dyn.resources.get(api_version=api_version, kind=kind)
        except dynamic.exceptions.ResourceNotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "defaults")
def test_every_rendered_object_passes_server_side_dry_run(control_plane, values):
    api_client = control_plane.client()
    ns = "tpcmesh-dry-" + (values.name.removesuffix("-values.yaml") if values else "defaults")
    docs = render(values, ns)
    spec = yaml.safe_load(values.read_text()) if values else {}
    spec = spec or {}
    for n in [ns, *spec.get("operator", {}).get("watchNamespaces", []), spec.get("agent", {}).get("namespace")]:
        if n:
            control_plane.ensure_namespace(n)
    _ensure_upstream_crds(api_client, docs)
    dyn = dynamic.DynamicClient(api_client)
    failures = []
    for doc in docs:
        res = _wait_for_kind(dyn, doc["apiVersion"], doc["kind"]) if doc["kind"] != "CustomResourceDefinition" \
            else dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        is_crd = doc["kind"] == "CustomResourceDefinition"
        try:
            if res.namespaced:
                res.create(body=doc, namespace=doc["metadata"].get("namespace", ns), dry_run="All")
            else:
                # CRDs are created for real, as Helm installs crds/ before the templates that use their kinds.
                res.create(body=doc, dry_run=None if is_crd else "All")
        except ApiException as e:
            if e.status == 409 and is_crd:
                continue  # installed by an earlier test
            failures.append(f"{where}: {e.status} {e.body}")
    assert not failures, "\n".join(failures)
    assert len(docs) >= 5


def _can(api_client, verb: str, resource: str, group: str = "", namespace: str | None = None,
         subresource: str | None = None, name: str | None = None) -> bool:
    authz = client.AuthorizationV1Api(api_client)
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, group=group,
                                                        namespace=namespace, subresource=subresource, name=name)))
    return bool(authz.create_self_subject_access_review(review).status.allowed)


def test_install_runs_one_agent_per_fast_node_and_rbac_is_least_privilege(control_plane, monkeypatch):
    ns = "tpcmesh-install"
    control_plane.start_controller_manager()
    control_plane.start_scheduler()
    nodes = {"dtn-a": ("127.0.20.1", True), "dtn-b": ("127.0.20.2", True), "worker-c": ("127.0.20.3", False)}
    for name, (addr, fast) in nodes.items():
        control_plane.create_node(name, addr, {"tpcmesh.io/fast-network": "true"} if fast else {},
                                  address6="2001:db8:20::2" if name == "dtn-b" else None)  # dtn-b: dual stack
    try:
        out = control_plane.helm("install", "tpc", str(CHART), "--namespace", ns, "--create-namespace",
                                 "--set", "image.registry=example.invalid/tpcmesh",
                                 # no kubelet runs the CRD hook Job (helm would wait): see test_crds_hook.py
                                 "--set", "crds.upgradeJob=false", check=False)
        assert out.returncode == 0, out.stderr
        # NOTES.txt: how to label nodes, reach the grid, where benchmarks deliver, run `helm test`.
        for hint in ("kubectl label node <node> tpcmesh.io/fast-network=true", "port-forward svc/tpc-tpcmesh-dashboard",
                     "deliver to http://tpc-tpcmesh-dashboard.tpcmesh-install.svc:80.",
                     "helm test tpc -n tpcmesh-install",
                     "namespace tpcmesh-install needs level privileged; --set agent.namespace=<ns> puts them apart"):
            assert hint in out.stdout, out.stdout
        core = client.CoreV1Api(control_plane.client())
        apps = client.AppsV1Api(control_plane.client())
        selector = "app.kubernetes.io/instance=tpc,app.kubernetes.io/component=agent"
        deadline = time.monotonic() + 60
        placed: list[str] = []
        while time.monotonic() < deadline:
            placed = sorted(p.spec.node_name for p in core.list_namespaced_pod(ns, label_selector=selector).items
                            if p.spec.node_name)
            if len(placed) >= 2:
                break
            time.sleep(0.5)
        time.sleep(1.0)  # a third (wrong) pod would show up by now
        placed = sorted(p.spec.node_name for p in core.list_namespaced_pod(ns, label_selector=selector).items)
        assert placed == ["dtn-a", "dtn-b"]

        played = control_plane.play_kubelet(ns, selector)
        assert sorted((p.spec.node_name, p.status.pod_ip) for p in played) == [("dtn-a", "127.0.20.1"),
                                                                              ("dtn-b", "127.0.20.2")]
        while time.monotonic() < deadline:
            ds = apps.read_namespaced_daemon_set("tpc-tpcmesh-agent", ns)
            if ds.status.number_ready == 2:
                break
            time.sleep(0.5)
        assert (ds.status.desired_number_scheduled, ds.status.number_ready) == (2, 2)

        # The operator's agent directory (with the operator's own ServiceAccount) finds both agents, and dtn-b's
        # IPv6 address from its pod's status.podIPs (the chart's agent.dualStack marks the pods).
        from tpcmesh_operator import kube

        op_core = client.CoreV1Api(control_plane.client(control_plane.kubeconfig_for("tpc-tpcmesh-operator", ns)))
        monkeypatch.setattr(kube, "core", lambda: op_core)
        found = kube.KubeAgentDirectory(ns, selector, {"tpcmesh.io/fast-network": "true"})._agents()
        assert sorted((a.node, a.address, a.address6, sorted(a.families)) for a in found) == [
            ("dtn-a", "127.0.20.1", None, ["ipv4"]), ("dtn-b", "127.0.20.2", "2001:db8:20::2", ["ipv4", "ipv6"])]

        # The installed RBAC as the real authorizer sees it (real tokens): what test_rbac_grants_exactly_the_calls_the
        # _code_makes checks in the rendered rules, and that nothing else (cluster roles, aggregation) adds to it.
        op = control_plane.client(control_plane.kubeconfig_for("tpc-tpcmesh-operator", ns))
        for (group, resource, verb, name), _ in [*OPERATOR_IN_WATCHED_NAMESPACES.items(),
                                                 *operator_cluster_calls("tpcmesh.io/agent", True).items()]:
            res, _, sub = resource.partition("/")
            namespaced = (group, resource, verb, name) in OPERATOR_IN_WATCHED_NAMESPACES
            assert _can(op, verb, res, group, ns if namespaced else None, subresource=sub or None, name=name), \
                (group, resource, verb, name)
        for verb, res, group, where in [("update", "leases", "coordination.k8s.io", ns), ("list", "secrets", "", ns),
                                        ("create", "transferbenchmarks", "tpcmesh.io", ns),
                                        ("update", "transferruns", "tpcmesh.io", ns), ("list", "namespaces", "", None),
                                        ("watch", "customresourcedefinitions", "apiextensions.k8s.io", None),
                                        ("get", "nodes", "", None), ("get", "secrets", "", "kube-system"),
                                        ("delete", "nodes", "", None), ("create", "pods", "", ns),
                                        ("delete", "secrets", "", ns)]:
            assert not _can(op, verb, res, group, where), (verb, res, where)
        assert not _can(op, "sign", "signers", "certificates.k8s.io", name="kubernetes.io/kube-apiserver-client")
        agent = control_plane.client(control_plane.kubeconfig_for("tpc-tpcmesh-agent", ns))
        assert _can(agent, "create", "certificatesigningrequests", "certificates.k8s.io")
        assert _can(agent, "get", "certificatesigningrequests", "certificates.k8s.io")
        assert not _can(agent, "list", "certificatesigningrequests", "certificates.k8s.io")
        assert not _can(agent, "update", "certificatesigningrequests", "certificates.k8s.io", subresource="approval")
        assert not _can(agent, "get", "secrets", "", ns) and not _can(agent, "list", "pods", "", ns)
        # Real calls too, not only reviews.
        client.CoreV1Api(op).list_node()
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(agent).list_namespaced_secret(ns)
        assert denied.value.status == 403
    finally:
        control_plane.helm("uninstall", "tpc", "--namespace", ns, check=False)
        control_plane.delete_nodes()


def test_the_operator_reads_the_agents_ports_from_the_pods(tmp_path):
    """Every port the operator reaches an agent on (run/agents.py DEFAULT_PORTS, its names) comes from the chart's
    values through the pod's tpcmesh.io/ports annotation; the loss probe's UDP port is in the agents' env and their
    NetworkPolicy, and agent.ports.loss 0 turns it off."""
    from tpcmesh_operator.kube import PORTS_ANNOTATION
    from tpcmesh_operator.run.agents import DEFAULT_PORTS

    values = tmp_path / "values.yaml"
    values.write_text("agent: {ports: {loss: 8863, api: 9444}}\nnetworkPolicy: {enabled: true, lossProbeFrom: "
                      "[{ipBlock: {cidr: 192.0.2.9/32}}]}\n")
    docs = render(values, "tpcmesh")
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]
    ports = json.loads(pod["metadata"]["annotations"][PORTS_ANNOTATION])
    assert set(ports) == set(DEFAULT_PORTS) and ports["loss"] == 8863 and ports["control"] == 9444
    assert _env(pod["spec"]["containers"][0])["TPCMESH_AGENT_LOSS_PORT"] == "8863"
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-agent"))
    udp = [rule for rule in policy["spec"]["ingress"] if rule["ports"] == [{"port": 8863, "protocol": "UDP"}]]
    assert len(udp) == 1 and udp[0]["from"][1] == {"ipBlock": {"cidr": "192.0.2.9/32"}}
    assert udp[0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "agent"
    values.write_text("agent: {ports: {loss: 0}}\nnetworkPolicy: {enabled: true}\nmetrics: {prometheusRule: "
                      "{enabled: true}}\n")
    docs = render(values, "tpcmesh")
    agent = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert "loss-probe" not in {p["name"] for p in agent["ports"]}
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-agent"))
    assert not any(p["protocol"] == "UDP" for rule in policy["spec"]["ingress"] for p in rule["ports"])
    assert not any(d["kind"] == "PrometheusRule" and d["metadata"]["name"].endswith("-agent") for d in docs)


def test_problem_alerts_cover_every_rule_of_the_dashboard(tmp_path):
    """One alert per problem kind the dashboard's rules find, on the gauge the dashboard exports, unacknowledged
    only; severity taken from the problem."""
    from results.metrics import ProblemsCollector
    from results.problems import KINDS

    values = tmp_path / "values.yaml"
    values.write_text("metrics: {prometheusRule: {enabled: true}}\n")
    rule = next(d for d in render(values, "mesh") if d["kind"] == "PrometheusRule"
                and d["metadata"]["name"].endswith("-dashboard"))
    alerts = rule["spec"]["groups"][0]["rules"]
    gauge = ProblemsCollector().describe()[0].name
    assert sorted(a["expr"] for a in alerts) == sorted(
        f'{gauge}{{kind="{k}",acknowledged="false"}} > 0' for k in KINDS)
    assert {a["alert"] for a in alerts} >= {"TpcmeshProblemNode", "TpcmeshProblemSitePair"}
    assert all(a["labels"]["severity"] == "{{ $labels.severity }}" for a in alerts)


def _pod(docs: list[dict], kind: str, suffix: str) -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix))["spec"]["template"][
        "spec"]


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_token_mode_is_the_default_and_the_agents_trust_the_operators_issuer(tmp_path) -> None:
    """Defaults: the operator serves the issuer on its Service; the agents name that issuer and see a system CA bundle
    with the agents' CA added (XRootD's token plugin trusts only that file). Without certificates, no tokens."""
    docs = render(None, "tpcmesh")
    operator = _pod(docs, "Deployment", "-operator")
    op_env = _env(operator["containers"][0])
    url = "https://tpc-tpcmesh-operator.tpcmesh.svc:8443"
    assert op_env["TPCMESH_OPERATOR_TOKEN_ISSUER"] == url
    assert op_env["TPCMESH_OPERATOR_TOKEN_KEYS_SECRET"] == "tpc-tpcmesh-token-keys"
    assert {"name": "issuer", "containerPort": 8443} in operator["containers"][0]["ports"]
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "tpc-tpcmesh-operator")
    assert {"name": "issuer", "port": 8443, "targetPort": "issuer"} in service["spec"]["ports"]

    agent = _pod(docs, "DaemonSet", "-agent")
    main = next(c for c in agent["containers"] if c["name"] == "agent")
    assert _env(main)["TPCMESH_AGENT_XROOTD_TOKEN_ISSUER"] == url
    bundle_mount = next(m for m in main["volumeMounts"] if m["name"] == "ca-bundle")
    assert bundle_mount["mountPath"] == "/etc/ssl/certs/ca-certificates.crt"
    init = [c["name"] for c in agent["initContainers"]]
    assert init.index("ca-bundle") > init.index("certificate")  # after the CA bundle ConfigMap exists
    maker = next(c for c in agent["initContainers"] if c["name"] == "ca-bundle")
    assert "/etc/tpcmesh/ca/ca.crt" in maker["command"][-1] and f"/bundle/{bundle_mount['subPath']}" in \
        maker["command"][-1]

    off = tmp_path / "none.yaml"
    off.write_text("certificates: {mode: none}\n")
    for values in (off, tmp_path / "off.yaml"):
        if values.name == "off.yaml":
            values.write_text("tokens: {mode: \"off\"}\n")
        docs = render(values, "tpcmesh")
        assert "TPCMESH_OPERATOR_TOKEN_ISSUER" not in _env(_pod(docs, "Deployment", "-operator")["containers"][0])
        agent = _pod(docs, "DaemonSet", "-agent")
        assert "TPCMESH_AGENT_XROOTD_TOKEN_ISSUER" not in _env(agent["containers"][0]), values.name
        assert not any(v["name"] == "ca-bundle" for v in agent["volumes"]), values.name


def test_external_token_issuer_mode(tmp_path) -> None:
    """tokens.mode external: the operator gets the site issuer's URL and its client credentials, no issuer of its own
    (no port, no keys Secret rights); the agents trust that issuer, with its CA in their bundle."""
    values = tmp_path / "external.yaml"
    values.write_text("tokens:\n  mode: external\n  external: {issuer: 'https://iam.example.org', "
                      "clientSecret: iam-client, caConfigMap: iam-ca}\n")
    docs = render(values, "tpcmesh")
    operator = _pod(docs, "Deployment", "-operator")
    env = _env(operator["containers"][0])
    assert env["TPCMESH_OPERATOR_TOKEN_ISSUER"] == "https://iam.example.org"
    client_dir = next(m for m in operator["containers"][0]["volumeMounts"] if m["name"] == "token-client")
    assert env["TPCMESH_OPERATOR_TOKEN_CLIENT_DIR"] == client_dir["mountPath"]
    assert next(v for v in operator["volumes"] if v["name"] == "token-client")["secret"]["secretName"] == "iam-client"
    assert env["TPCMESH_OPERATOR_TOKEN_ISSUER_CA_FILE"].startswith("/var/run/tpcmesh/token-issuer-ca/")
    assert "TPCMESH_OPERATOR_TOKEN_KEYS_SECRET" not in env
    assert not any(p["name"] == "issuer" for p in operator["containers"][0]["ports"])
    role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "tpc-tpcmesh-operator")
    assert ("", "secrets", "update", "tpc-tpcmesh-token-keys") not in granted(role)
    agent = _pod(docs, "DaemonSet", "-agent")
    assert _env(agent["containers"][0])["TPCMESH_AGENT_XROOTD_TOKEN_ISSUER"] == "https://iam.example.org"
    maker = next(c for c in agent["initContainers"] if c["name"] == "ca-bundle")
    assert "/etc/tpcmesh/token-issuer-ca/ca.crt" in maker["command"][-1]
    missing = tmp_path / "missing.yaml"
    missing.write_text("tokens: {mode: external, external: {issuer: 'https://iam.example.org'}}\n")
    out = helm("template", "tpc", str(CHART), "-f", str(missing))
    assert out.returncode != 0 and "tokens.external.clientSecret" in out.stderr

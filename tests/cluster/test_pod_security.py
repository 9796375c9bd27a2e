"""Pod Security admission (the apiserver's built-in PodSecurity plugin) on the chart's pods.

Every workload the chart renders (Deployments, the StatefulSet, the DaemonSet, the `helm test` Pod) becomes a Pod
created with server-side dry run in a namespace labelled `pod-security.kubernetes.io/enforce: <level>`: the plugin
enforces on Pods (not on their controllers' templates), so this asks it exactly what a kubelet-backed cluster would
be told, without kubelets. The operator, the dashboard, PostgreSQL and the test Pod must pass `restricted`; the
agents (hostNetwork, and the hostPorts it implies) pass only `privileged`, which is why `agent.namespace` lets them
live in a namespace of their own.
"""

from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.test_chart import CI_VALUES, render

pytestmark = pytest.mark.cluster

LEVEL_LABEL = "pod-security.kubernetes.io/enforce"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "Pod")


def _namespace(control_plane, name: str, level: str) -> None:
    """The namespace with its PSA level (labels replaced if it exists) and the ServiceAccounts pods may name."""
    core = client.CoreV1Api(control_plane.client())
    control_plane.ensure_namespace(name)
    core.patch_namespace(name, {"metadata": {"labels": {LEVEL_LABEL: level,
                                                        "pod-security.kubernetes.io/enforce-version": "latest"}}})


def _service_accounts(control_plane, docs: list[dict], into: str) -> None:
    """The rendered ServiceAccounts, created for real in `into` (the ServiceAccount admission plugin refuses a Pod
    whose account does not exist)."""
    core = client.CoreV1Api(control_plane.client())
    for d in docs:
        if d["kind"] != "ServiceAccount":
            continue
        ns = into
        try:
            core.create_namespaced_service_account(ns, {"metadata": {"name": d["metadata"]["name"]}})
        except ApiException as e:
            if e.status != 409:
                raise


def pods(docs: list[dict]) -> list[dict]:
    """One Pod per rendered workload: its template's metadata and spec, named after the workload."""
    out = []
    for d in docs:
        if d["kind"] not in WORKLOADS:
            continue
        if d["kind"] == "Pod":
            pod = copy.deepcopy(d)
        else:
            template = d["spec"]["template"]
            pod = {"apiVersion": "v1", "kind": "Pod", "spec": copy.deepcopy(template["spec"]),
                   "metadata": {**copy.deepcopy(template.get("metadata") or {}),
                                "name": f"{d['metadata']['name']}-psa", "namespace": d["metadata"]["namespace"]}}
        # A StatefulSet's pods get a PersistentVolumeClaim volume per claim template, as its controller adds them.
        for claim in d["spec"].get("volumeClaimTemplates", []) if d["kind"] == "StatefulSet" else []:
            name = claim["metadata"]["name"]
            pod["spec"].setdefault("volumes", []).append(
                {"name": name, "persistentVolumeClaim": {"claimName": f"{name}-{d['metadata']['name']}-0"}})
        pod["metadata"].pop("annotations", None)  # helm hooks
        pod["metadata"]["labels"] = {**pod["metadata"].get("labels", {}), "tpcmesh.io/workload-kind": d["kind"]}
        out.append(pod)
    return out


def admit(control_plane, pod: dict, namespace: str) -> str | None:
    """None when the apiserver admits the Pod (dry run: nothing is stored), else its refusal message."""
    core = client.CoreV1Api(control_plane.client())
    body = {**pod, "metadata": {**pod["metadata"], "namespace": namespace}}
    try:
        core.create_namespaced_pod(namespace, body, dry_run="All")
    except ApiException as e:
        return f"{e.status} {e.body}"
    return None


def _is_agent(pod: dict) -> bool:
    return pod["metadata"]["labels"].get("app.kubernetes.io/component") == "agent"


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "defaults")
def test_every_chart_pod_but_the_agents_is_admitted_as_restricted(control_plane, values: Path | None):
    """The operator, the dashboard, PostgreSQL and the helm test Pod pass `restricted` in every CI scenario; the
    agent does not, and the plugin says why (hostNetwork, hostPort): the check is live."""
    ns = "psa-restricted"
    _namespace(control_plane, ns, "restricted")
    docs = render(values, ns)
    _service_accounts(control_plane, docs, ns)
    rendered = pods(docs)
    others = [p for p in rendered if not _is_agent(p)]
    assert others or values is not None, "the defaults render no operator/dashboard pod"
    refused = {p["metadata"]["name"]: m for p in others if (m := admit(control_plane, p, ns))}
    assert not refused, "\n".join(f"{n}: {m}" for n, m in refused.items())
    for agent in filter(_is_agent, rendered):
        message = admit(control_plane, agent, ns)
        assert message and 'violates PodSecurity \\"restricted:latest\\"' in message, message
        assert "hostNetwork=true" in message and "hostPort" in message, message


def test_agents_need_privileged_for_the_host_network_and_nothing_else(control_plane):
    """`baseline` forbids host namespaces and hostPorts, so the agents need `privileged`; the same pod without
    hostNetwork passes even `restricted`: the host network is the only reason."""
    for ns, level in (("psa-baseline", "baseline"), ("psa-privileged", "privileged"), ("psa-restricted", "restricted")):
        _namespace(control_plane, ns, level)
    docs = render(None, "psa-privileged")
    for ns in ("psa-baseline", "psa-privileged", "psa-restricted"):
        _service_accounts(control_plane, docs, ns)
    agent = next(p for p in pods(docs) if _is_agent(p))
    assert agent["spec"]["hostNetwork"] is True
    message = admit(control_plane, agent, "psa-baseline")
    assert message and 'violates PodSecurity \\"baseline:latest\\"' in message and "hostNetwork=true" in message, \
        message
    assert admit(control_plane, agent, "psa-privileged") is None
    on_pod_network = copy.deepcopy(agent)
    on_pod_network["spec"]["hostNetwork"] = False
    on_pod_network["spec"]["dnsPolicy"] = "ClusterFirst"
    assert admit(control_plane, on_pod_network, "psa-restricted") is None


def test_a_pod_security_context_taken_away_is_refused(control_plane, tmp_path):
    """The restricted check bites on the chart's own values: an operator set to run as root is refused with the
    plugin's reasons."""
    ns = "psa-restricted"
    _namespace(control_plane, ns, "restricted")
    values = tmp_path / "values.yaml"
    values.write_text("operator: {podSecurityContext: {runAsNonRoot: false, runAsUser: 0}}\n")
    docs = render(values, ns)
    _service_accounts(control_plane, docs, ns)
    operator = next(p for p in pods(docs) if p["metadata"]["labels"]["app.kubernetes.io/component"] == "operator")
    message = admit(control_plane, operator, ns)
    assert message and "runAsNonRoot != true" in message and "runAsUser=0" in message, message


def test_agents_apart_each_namespace_at_its_level(control_plane, monkeypatch, tmp_path):
    """agent.namespace: `helm install` into a `restricted` namespace with the agents in a `privileged` one. Every
    pod is admitted where the chart puts it (the agent's refused in the release namespace), also the pods the real
    controllers create from the installed workloads; the agents' token is the operator's; the operator, with its own
    ServiceAccount, finds the agent pod there and publishes the CA bundle there while the CA's key stays in its own
    namespace."""
    from tpcmesh_operator import kube
    from tpcmesh_operator.config import Settings
    from tpcmesh_operator.credentials import signer

    from tests.cluster.test_chart import CHART, _can

    mesh, agents = "psa-mesh", "psa-mesh-agents"
    _namespace(control_plane, mesh, "restricted")
    _namespace(control_plane, agents, "privileged")
    values = tmp_path / "values.yaml"
    # no kubelet runs the CRD hook Job (helm would wait for it); its pod is admitted below with the others
    values.write_text(f"agent: {{namespace: {agents}}}\nimage: {{registry: example.invalid/tpcmesh}}\n"
                      "crds: {upgradeJob: false}\n")
    control_plane.start_controller_manager()
    control_plane.start_scheduler()
    control_plane.create_node("psa-dtn", "127.0.21.1", {"tpcmesh.io/fast-network": "true"})
    out = control_plane.helm("install", "tpc", str(CHART), "--namespace", mesh, "-f", str(values), check=False)
    try:
        assert out.returncode == 0, out.stderr
        assert f"need namespace {agents} at level privileged; {mesh} may enforce restricted" in out.stdout, out.stdout
        assert f"kubectl -n {agents} get pods" in out.stdout
        docs = render(values, mesh)
        placed = {(p["metadata"]["labels"]["app.kubernetes.io/component"], p["metadata"]["namespace"])
                  for p in pods(docs)}
        assert placed == {("agent", agents), ("operator", mesh), ("dashboard", mesh), ("postgresql", mesh),
                          ("test", mesh)}
        refused = {p["metadata"]["name"]: m for p in pods(docs)
                   if (m := admit(control_plane, p, p["metadata"]["namespace"]))}
        assert not refused, "\n".join(f"{n}: {m}" for n, m in refused.items())
        agent = next(p for p in pods(docs) if _is_agent(p))
        agent["spec"]["serviceAccountName"] = "default"  # its own account lives in the agents' namespace only
        assert "hostNetwork=true" in (admit(control_plane, agent, mesh) or "")

        core = client.CoreV1Api(control_plane.client())
        tokens = {ns: core.read_namespaced_secret("tpc-tpcmesh-agent-token", ns).data["token"] for ns in (mesh, agents)}
        assert tokens[mesh] == tokens[agents]

        env = {e["name"]: e.get("value") for e in next(
            d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "tpc-tpcmesh-operator")[
            "spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
        settings = Settings.from_env(env)
        assert (settings.namespace, settings.agent_namespace) == (mesh, agents)
        certs = signer.CertSettings.from_env(env)
        assert certs.agent_service_account == f"system:serviceaccount:{agents}:tpc-tpcmesh-agent"

        op = control_plane.client(control_plane.kubeconfig_for("tpc-tpcmesh-operator", mesh))
        signer.ensure_ca(op, certs)
        bundles = {ns: core.read_namespaced_config_map("tpc-tpcmesh-ca-bundle", ns).data["ca.crt"]
                   for ns in (mesh, agents)}
        assert bundles[mesh] == bundles[agents] and "BEGIN CERTIFICATE" in bundles[mesh]
        assert core.read_namespaced_secret("tpc-tpcmesh-ca", mesh).data["tls.key"]
        assert not _can(op, "get", "secrets", "", agents) and not _can(op, "create", "secrets", "", agents)
        assert not _can(op, "list", "pods", "", "default")

        # The controllers' own pods, admitted for real (no dry run): the agent's on the fast node, the rest here.
        components = {"agent": agents, "operator": mesh, "dashboard": mesh, "postgresql": mesh}
        deadline = time.monotonic() + 60
        while True:
            created = {c: core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance=tpc,"
                                                   f"app.kubernetes.io/component={c}").items
                       for c, ns in components.items()}
            if all(created.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        failed = [f"{e.involved_object.kind}/{e.involved_object.name}: {e.message}" for ns in (mesh, agents)
                  for e in core.list_namespaced_event(ns).items if e.reason == "FailedCreate"]
        assert all(created.values()), f"no pods for {[c for c, p in created.items() if not p]}; {failed}"
        assert created["agent"][0].spec.host_network and created["agent"][0].spec.node_name == "psa-dtn"
        control_plane.play_kubelet(agents, "app.kubernetes.io/component=agent")
        op_core = client.CoreV1Api(op)
        monkeypatch.setattr(kube, "core", lambda: op_core)
        found = kube.KubeAgentDirectory(agents, settings.agent_selector, {})._agents()
        assert [(a.node, a.address) for a in found] == [("psa-dtn", "127.0.21.1")]
    finally:
        control_plane.helm("uninstall", "tpc", "--namespace", mesh, check=False)
        control_plane.delete_nodes()
        core = client.CoreV1Api(control_plane.client())
        for ns in (mesh, agents):
            for name in ("tpc-tpcmesh-ca-bundle",):
                with contextlib.suppress(ApiException):
                    core.delete_namespaced_config_map(name, ns)
        with contextlib.suppress(ApiException):
            core.delete_namespaced_secret("tpc-tpcmesh-ca", mesh)

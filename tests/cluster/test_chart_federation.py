"""Federation's two install shapes (README "Federation"), rendered by `helm template`: the central archive (the
dashboard alone, each cluster's token registered scoped to its cluster) and one cluster's measurement side (operator
and agents, no dashboard, delivering to the archive as its cluster with its token). Lint, RBAC and server-side
dry-run of both run in test_chart.py (ci/archive-values.yaml, ci/measurement-values.yaml)."""

from __future__ import annotations

import pytest

from tests.cluster.test_chart import CHART, render

pytestmark = pytest.mark.cluster

ARCHIVE = CHART / "ci" / "archive-values.yaml"
MEASUREMENT = CHART / "ci" / "measurement-values.yaml"


def kinds(docs: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d["metadata"]["name"])
    return out


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_the_central_archive_is_the_dashboard_alone_with_each_clusters_token():
    docs = render(ARCHIVE, "archive")
    found = kinds(docs)
    assert "DaemonSet" not in found and "ClusterRole" not in found and "KopfPeering" not in found
    assert found["Deployment"] == ["tpc-tpcmesh-dashboard"] and found["StatefulSet"] == ["tpc-tpcmesh-postgresql"]
    pod = docs[[d["kind"] for d in docs].index("Deployment")]["spec"]["template"]["spec"]
    command = pod["initContainers"][0]["command"][-1]
    assert "create_api_token operator-east --cluster east --key-file /etc/tpcmesh/cluster-tokens/east/token" \
        in command
    west = "5f0c6c1e-6d2a-4b8e-9a57-0c1e2d3f4a5b"
    assert f"--cluster {west} --key-file /etc/tpcmesh/cluster-tokens/{west}/key" in command
    mounts = {m["name"]: m["mountPath"] for m in pod["initContainers"][0]["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets[next(n for n, p in mounts.items() if p.endswith("/east"))] == "east-results-token"
    assert secrets[next(n for n, p in mounts.items() if p.endswith(west))] == "west-results-token"


def test_the_measurement_side_delivers_to_the_archive_as_its_cluster():
    docs = render(MEASUREMENT, "east")
    found = kinds(docs)
    assert "StatefulSet" not in found and found["Deployment"] == ["tpc-tpcmesh-operator"]
    assert "tpc-tpcmesh-results-token" not in found.get("Secret", [])  # the archive's token, given
    pod = docs[[d["kind"] for d in docs].index("Deployment")]["spec"]["template"]["spec"]
    env = env_of(pod["containers"][0])
    assert env["TPCMESH_OPERATOR_CLUSTER_NAME"] == "east"
    assert env["TPCMESH_OPERATOR_RESULTS_URL"] == "https://archive.example.org"
    token = next(v for v in pod["volumes"] if v["name"] == "results-token")
    assert token["secret"]["secretName"] == "east-results-token"
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "tpc-tpcmesh-operator")
    assert not any("namespaces" in r["resources"] for r in role["rules"])  # named: no need to read kube-system


def test_an_unnamed_cluster_may_read_the_kube_system_namespace_alone(tmp_path):
    values = tmp_path / "unnamed.yaml"
    values.write_text(MEASUREMENT.read_text().replace("  name: east", '  name: ""'))
    docs = render(values, "west")
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert "TPCMESH_OPERATOR_CLUSTER_NAME" not in env_of(pod["containers"][0])
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "tpc-tpcmesh-operator")
    assert [r for r in role["rules"] if "namespaces" in r["resources"]] == [
        {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["kube-system"], "verbs": ["get"]}]


def test_a_cluster_name_that_could_break_the_token_command_is_refused(tmp_path):
    from tests.cluster.test_chart import helm

    out = helm("template", "t", str(CHART), "-f", str(ARCHIVE), "--set", "dashboard.clusterTokens[0].cluster=a;b")
    assert out.returncode != 0 and "clusterTokens" in out.stderr

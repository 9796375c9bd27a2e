"""Federation (#16) with the real parts: two operators (kopf.testing.KopfRunner on a real kube-apiserver), each
serving its own namespace with its own REAL agents on loopback, deliver to ONE real dashboard (gunicorn,
PostgreSQL) with their own tokens. The first is named by TPCMESH_OPERATOR_CLUSTER_NAME (the chart's cluster.name)
and posts with a token scoped to its cluster; the second names none, so it is delivered as the UID of the
kube-system namespace (the default), and posts with an unscoped (admin) token: the cluster its rows land in can
then only come from the operator.
The operators run one after the other: their settings come from this process's environment. Then a token of one
cluster is refused (403, naming why) on the other's records, and the grid shows one cluster or both."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from kubernetes import client
from tpcmesh_operator.run.delivery import ResultsClient

from tests.cluster import operator_support
from tests.cluster.operator_support import (
    OPERATOR_ARGS,
    G,
    V,
    apply_crds,
    operator_env,
    results_secret,
    wait_for,
)
from tests.support.dashboard import batch, measurement
from tests.support.live_dashboard import LiveDashboard

pytestmark = pytest.mark.cluster


@pytest.fixture
def agent_pods(control_plane, agent_factory, tmp_path):
    return operator_support.agent_pods(control_plane, agent_factory, tmp_path)


def _run_one_benchmark(api, ns: str, results: dict) -> dict:
    """Create a small benchmark in `ns` and wait for its first run to finish with everything delivered."""
    objs = client.CustomObjectsApi(api)
    spec = {"schedule": "@every 1h", "protocols": ["builtin"], "streams": [1], "concurrency": 1,
            "fileSet": {"count": 1, "size": "1MB"}, "latency": {"enabled": False},
            "loopback": {"enabled": False}, "timeoutSeconds": 30, "retries": 0, "results": results}
    objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", {
        "apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "mesh"}, "spec": spec})

    def delivered():
        items = objs.list_namespaced_custom_object(G, V, ns, "transferruns",
                                                   label_selector="tpcmesh.io/benchmark=mesh")["items"]
        done = [r for r in items if (r.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                and not r["status"].get("outbox") and r["status"].get("delivered")]
        return done[0] if done else None

    return wait_for(f"a finished, delivered TransferRun in {ns}", delivered, timeout=90)


def test_two_operators_write_to_one_dashboard_with_their_own_tokens(control_plane, agent_pods, tpcmesh_pki,
                                                                    monkeypatch, postgres_server, tmp_path) -> None:
    from kopf.testing import KopfRunner

    api = control_plane.client()
    apply_crds(api)
    uid = client.CoreV1Api(api).read_namespace("kube-system").metadata.uid
    dashboard = LiveDashboard(postgres_server, tmp_path)
    dashboard.start()
    clusters = {"fed-east": "east", "fed-west": uid}  # west: no name given, the kube-system UID
    tokens = {"east": dashboard._manage("create_api_token", "operator-east", "--cluster", "east").strip(),
              uid: dashboard.token}
    runs = {}
    try:
        for ns, cluster in clusters.items():
            handles = agent_pods(ns, 2)
            secret = results_secret(api, ns, tokens[cluster])
            named = {"CLUSTER_NAME": cluster} if cluster == "east" else {}
            monkeypatch.delenv("TPCMESH_OPERATOR_CLUSTER_NAME", raising=False)
            operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, ns,
                         DELIVERY_MAX_SECONDS="1", **named)
            with KopfRunner([*OPERATOR_ARGS, "--namespace", ns], timeout=120) as runner:
                runs[ns] = _run_one_benchmark(api, ns, {"url": dashboard.url, "tokenSecret": secret})
            assert runner.exception is None, runner.stdout
            assert {a["node"] for a in runs[ns]["status"]["agents"]} == {h.node for h in handles}

        def get(path: str, **query) -> dict:
            r = httpx.get(f"{dashboard.url}{path}", params=query, timeout=10)
            assert r.status_code == 200, r.text
            return r.json()

        for ns, cluster in clusters.items():
            rows = get("/api/v1/measurements/", run=runs[ns]["metadata"]["uid"])["results"]
            assert len(rows) == 2 and {m["cluster"] for m in rows} == {cluster}, rows
            assert {m["status"] for m in rows} == {"succeeded"}
            nodes = get("/api/v1/nodes/", cluster=cluster)["results"]
            assert {n["name"] for n in nodes} == {a["node"] for a in runs[ns]["status"]["agents"]}

        # east's token on a record of west: refused, naming the token, both clusters and the record
        r = httpx.post(f"{dashboard.url}/api/v1/ingest/", timeout=10,
                       headers={"Authorization": f"Token {tokens['east']}"},
                       json=batch([measurement("x", "y")], namespace="fed-west", name="mesh", cluster=uid,
                                  run=f"sneak-{uuid.uuid4().hex[:6]}"))
        assert r.status_code == 403, r.text
        assert "'operator-east' is scoped to cluster 'east'" in r.json()["detail"] and uid in r.json()["detail"]
        west_run = runs["fed-west"]
        r = httpx.post(f"{dashboard.url}/api/v1/ingest/", timeout=10,
                       headers={"Authorization": f"Token {tokens['east']}"},
                       json={**batch([], namespace="fed-west", name="mesh", cluster="east"),
                             "run": {"uid": west_run["metadata"]["uid"], "name": west_run["metadata"]["name"]}})
        assert r.status_code == 403 and f"belongs to cluster '{uid}'" in r.json()["detail"], r.text

        # the grid: each cluster's own, and the two together (their benchmarks have different namespaces here,
        # so each grid is one cluster's; the combined grid of one namespace/name is tested in the dashboard's
        # test_federation.py)
        for ns, cluster in clusters.items():
            grid = get("/api/v1/grid/", benchmark=f"{ns}/mesh", protocol="builtin", cluster=cluster)
            assert grid["clusters"] == [cluster] and {n["cluster"] for n in grid["nodes"]} == {cluster}
            assert len(grid["cells"]) == 2

        # maintenance on a west node: the operator's results client reads its own cluster's windows alone
        west_node = runs["fed-west"]["status"]["agents"][0]["node"]
        ends = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        r = httpx.post(f"{dashboard.url}/api/v1/maintenance/", timeout=10,
                       headers={"Authorization": f"Token {tokens[uid]}"},
                       json={"node": west_node, "reason": "NIC", "ends_at": ends})
        assert r.status_code == 201, r.text

        async def windows(cluster: str) -> list[dict]:
            async with ResultsClient(dashboard.url, tokens["east"]) as results:
                return await results.active_maintenance(cluster)

        assert asyncio.run(windows("east")) == []
        assert [w["node"] for w in asyncio.run(windows(uid))] == [west_node]
    finally:
        dashboard.stop()

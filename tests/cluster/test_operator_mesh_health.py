"""`kubectl wait --for=condition=MeshHealthy` as a pipeline gate, on a real kube-apiserver: the operator
(KopfRunner) runs a benchmark over REAL agents (operator_support.py) and delivers to the real dashboard, which judges
the grid; the wait returns for a healthy mesh and times out for one with a slow node, whose condition names it."""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client
from tpcmesh_lab.controlplane import binary

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
from tests.support.live_dashboard import LiveDashboard

pytestmark = pytest.mark.cluster
GOOD, BAD = "mh-good", "mh-bad"
# loopback moves 1 MB files far above 0.02 Gbit/s even on a loaded machine; an agent serving at 0.25 MB/s per
# connection gives 2 MB x 8 / 4 s = 0.004 Gbit/s, far below 0.01
SPEC = {"schedule": "@every 1h", "protocols": ["builtin"], "streams": [1], "concurrency": 2,
        "fileSet": {"count": 2, "size": "1MB"}, "latency": {"enabled": False}, "loopback": {"enabled": False},
        "timeoutSeconds": 30, "retries": 0, "thresholds": {"goodGbps": 0.02, "warnGbps": 0.01}}


@pytest.fixture
def agent_pods(control_plane, agent_factory, tmp_path):
    return operator_support.agent_pods(control_plane, agent_factory, tmp_path)


def kubectl_wait(control_plane, namespace: str, run: str, timeout: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary("kubectl")), "-n", namespace, "wait", "--for=condition=MeshHealthy",
                           f"transferrun/{run}", f"--timeout={timeout}"], env=control_plane.env(),
                          capture_output=True, text=True, timeout=120)


def test_kubectl_wait_for_mesh_healthy_gates_on_the_open_problems(control_plane, agent_pods, tpcmesh_pki,
                                                                   monkeypatch, postgres_server, tmp_path) -> None:
    from kopf.testing import KopfRunner

    api = control_plane.client()
    apply_crds(api)
    agent_pods(GOOD, 3)
    (slow,) = agent_pods(BAD, 1, builtin_max_rate=250_000)
    agent_pods(BAD, 2)
    dashboard = LiveDashboard(postgres_server, tmp_path)
    dashboard.start()
    operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, f"{GOOD},{BAD}",
                 DELIVERY_MAX_SECONDS="5")
    objs = client.CustomObjectsApi(api)
    runs = {}
    with KopfRunner([*OPERATOR_ARGS, "--namespace", GOOD, "--namespace", BAD], timeout=420) as runner:
        for ns in (GOOD, BAD):
            spec = {**SPEC, "results": {"url": dashboard.url, "tokenSecret": results_secret(api, ns, dashboard.token)}}
            objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", {
                "apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "mesh"}, "spec": spec})
        for ns in (GOOD, BAD):
            def judged(ns=ns):
                items = objs.list_namespaced_custom_object(G, V, ns, "transferruns")["items"]
                return next((r for r in items if any(c["type"] == "MeshHealthy" for c in
                                                     (r.get("status") or {}).get("conditions") or [])), None)

            runs[ns] = wait_for(f"a judged run in {ns}", judged, timeout=180)
        good = kubectl_wait(control_plane, GOOD, runs[GOOD]["metadata"]["name"], "60s")
        bad = kubectl_wait(control_plane, BAD, runs[BAD]["metadata"]["name"], "5s")
        bad_run = objs.get_namespaced_custom_object(G, V, BAD, "transferruns", runs[BAD]["metadata"]["name"])
    dashboard.stop()
    assert runner.exception is None, runner.stdout

    assert good.returncode == 0 and "condition met" in good.stdout, (good.stdout, good.stderr)
    assert bad.returncode != 0 and "timed out" in bad.stderr, (bad.stdout, bad.stderr)
    cond = {c["type"]: c for c in bad_run["status"]["conditions"]}["MeshHealthy"]
    assert (cond["status"], cond["reason"]) == ("False", "ProblemsOpen"), cond
    assert slow.node in cond["message"] and "every test from" in cond["message"], cond

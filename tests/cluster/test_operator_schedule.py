"""Scheduling with the operator (KopfRunner) on a real kube-apiserver and REAL agents: `suspend` holds runs back,
and a run due while a TransferRun made by hand measures the same agents is skipped (it would disturb it)."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.cluster import operator_support
from tests.cluster.operator_support import OPERATOR_ARGS, G, V, apply_crds, operator_env, run_status, wait_for

pytestmark = pytest.mark.cluster
SPEC = {"schedule": "@every 1h", "protocols": ["builtin"], "streams": [1], "concurrency": 2,
        "fileSet": {"count": 2, "size": "4MB"}, "latency": {"enabled": False}, "loopback": {"enabled": False},
        "timeoutSeconds": 60, "retries": 0}


@pytest.fixture
def agent_pods(control_plane, agent_factory, tmp_path):
    return operator_support.agent_pods(control_plane, agent_factory, tmp_path)


def test_suspend_and_a_run_by_hand_on_the_same_agents_hold_the_schedule(control_plane, agent_pods, tpcmesh_pki,
                                                                         monkeypatch) -> None:
    from kopf.testing import KopfRunner

    ns = "op-schedule"
    api = control_plane.client()
    apply_crds(api)
    agent_pods(ns, 2, builtin_max_rate=500_000)  # a test takes ~16 s: the run by hand stays active
    operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, ns)
    objs = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)

    def benchmark() -> dict:
        return objs.get_namespaced_custom_object(G, V, ns, "transferbenchmarks", "mesh")

    def own_runs() -> list[str]:
        return [r["metadata"]["name"] for r in objs.list_namespaced_custom_object(
            G, V, ns, "transferruns", label_selector="tpcmesh.io/benchmark=mesh")["items"]]

    def events(reason: str) -> list[str]:
        return [e.message for e in core.list_namespaced_event(ns).items
                if e.reason == reason and e.involved_object.name == "mesh"]

    with KopfRunner([*OPERATOR_ARGS, "--namespace", ns], timeout=120) as runner:
        objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", {
            "apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "mesh"},
            "spec": {**SPEC, "suspend": True}})
        wait_for("the suspended benchmark's status", lambda: (st := benchmark().get("status") or {}).get(
            "conditions") and {c["type"]: c["reason"] for c in st["conditions"]}.get("Ready") == "Suspended", 30)
        objs.create_namespaced_custom_object(G, V, ns, "transferruns", {
            "apiVersion": f"{G}/{V}", "kind": "TransferRun", "metadata": {"name": "by-hand"},
            "spec": {"benchmark": SPEC}})
        wait_for("the run by hand to measure", lambda: run_status(objs, ns, "by-hand").get("agents"), 30)
        held = benchmark()["status"]
        assert own_runs() == [] and held.get("nextRunTime") is None and "lastScheduleTime" not in held  # suspended
        objs.patch_namespaced_custom_object(G, V, ns, "transferbenchmarks", "mesh", {"spec": {"suspend": False}})
        skipped = wait_for("the due run to be skipped", lambda: events("SkippedRun"), 30)
        after = benchmark()["status"]
        still_running = run_status(objs, ns, "by-hand").get("phase") == "Running"
    assert runner.exception is None, runner.stdout
    assert "TransferRun by-hand is running on its agents" in skipped[0]
    assert still_running and own_runs() == []  # nothing started beside the run by hand
    assert after["lastScheduleTime"] and after["nextRunTime"] > after["lastScheduleTime"]  # the tick is used up

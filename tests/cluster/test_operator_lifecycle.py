"""A TransferRun's faults and end of life with the operator (KopfRunner) on a real kube-apiserver, REAL agents and
the REAL dashboard: deleted mid-run, deleted while the operator is down, replaced by concurrencyPolicy Replace, the
dashboard down mid-run while the operator restarts. In every case each measurement reaches the dashboard, once."""

from __future__ import annotations

import logging
import re

import httpx
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster import operator_support
from tests.cluster.operator_support import (
    OPERATOR_ARGS,
    G,
    V,
    apply_crds,
    operator_env,
    results_secret,
    run_status,
    wait_for,
)
from tests.support.live_dashboard import LiveDashboard

pytestmark = pytest.mark.cluster
SLOW = {"builtin_max_rate": 2_000_000}  # 2 MB/s per connection: a 2 x 2 MB test takes ~1-2 s
SPEC = {"protocols": ["builtin"], "streams": [1], "concurrency": 2, "fileSet": {"count": 2, "size": "2MB"},
        "latency": {"enabled": False}, "loopback": {"enabled": False}, "timeoutSeconds": 60, "retries": 0}


@pytest.fixture
def agent_pods(control_plane, agent_factory, tmp_path):
    return operator_support.agent_pods(control_plane, agent_factory, tmp_path)


@pytest.fixture
def dashboard(postgres_server, tmp_path):
    d = LiveDashboard(postgres_server, tmp_path)
    d.start()
    yield d
    d.stop()


def started_ids(handles) -> set[str]:
    """Every transfer the agents started, from their logs."""
    return {m for h in handles for m in re.findall(r"Started transfer ([0-9a-f-]{36})", h.log())}


def run_manifest(name: str, spec: dict, labels: dict | None = None) -> dict:
    return {"apiVersion": f"{G}/{V}", "kind": "TransferRun", "metadata": {"name": name, "labels": labels or {}},
            "spec": spec}


def gone(objs, ns: str, name: str) -> bool:
    try:
        objs.get_namespaced_custom_object(G, V, ns, "transferruns", name)
    except ApiException as e:
        return e.status == 404
    return False


def test_a_run_deleted_mid_run_cancels_its_test_and_delivers_every_measurement(
        control_plane, agent_pods, tpcmesh_pki, monkeypatch, dashboard) -> None:
    from kopf.testing import KopfRunner

    ns = "op-delete"
    api = control_plane.client()
    apply_crds(api)
    handles = agent_pods(ns, 3, **SLOW)
    spec = {**SPEC, "results": {"url": dashboard.url, "tokenSecret": results_secret(api, ns, dashboard.token)}}
    operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, ns)
    objs = client.CustomObjectsApi(api)
    run = objs.create_namespaced_custom_object(G, V, ns, "transferruns", run_manifest("doomed", {"benchmark": spec}))
    with KopfRunner([*OPERATOR_ARGS, "--namespace", ns], timeout=120) as runner:
        wait_for("a finished test and the next one running",
                 lambda: run_status(objs, ns, "doomed").get("done", 0) >= 1 and len(started_ids(handles)) >= 2,
                 timeout=60, interval=0.1)
        objs.delete_namespaced_custom_object(G, V, ns, "transferruns", "doomed")
        wait_for("the run to be gone", lambda: gone(objs, ns, "doomed"), timeout=60)
        reasons = {e.reason for e in client.CoreV1Api(api).list_namespaced_event(ns).items
                   if e.involved_object.name == "doomed"}
    assert runner.exception is None, runner.stdout
    rows = {m["id"]: m for m in dashboard.measurements() if m["run"] == run["metadata"]["uid"]}
    started = started_ids(handles)
    assert 2 <= len(started) < 6 and set(rows) == started  # every test an agent started, none lost
    assert "cancelled" in {m["status"] for m in rows.values()}  # the one running at the deletion
    assert {"Deleted", "Delivered"} <= reasons


def test_a_run_deleted_while_the_operator_is_down_is_delivered_when_it_returns(
        control_plane, agent_pods, tpcmesh_pki, monkeypatch, dashboard, caplog) -> None:
    from kopf.testing import KopfRunner

    ns = "op-delete-down"
    api = control_plane.client()
    apply_crds(api)
    handles = agent_pods(ns, 2)
    spec = {**SPEC, "results": {"url": dashboard.url, "tokenSecret": results_secret(api, ns, dashboard.token)}}
    operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, ns, DELIVERY_MAX_SECONDS="1")
    objs = client.CustomObjectsApi(api)
    args = [*OPERATOR_ARGS, "--namespace", ns]
    dashboard.stop()
    run = objs.create_namespaced_custom_object(G, V, ns, "transferruns", run_manifest("orphan", {"benchmark": spec}))
    with KopfRunner(args, timeout=60) as first:
        st = wait_for("the run to finish, its measurements waiting",
                      lambda: (s := run_status(objs, ns, "orphan")).get("phase") == "Succeeded" and s, timeout=60)
    assert first.exception is None, first.stdout
    assert len(st["outbox"]) == 2
    objs.delete_namespaced_custom_object(G, V, ns, "transferruns", "orphan")
    held = objs.get_namespaced_custom_object(G, V, ns, "transferruns", "orphan")  # the finalizer keeps it
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"]
    dashboard.start()
    caplog.set_level(logging.WARNING)
    with KopfRunner(args, timeout=60) as second:
        wait_for("the run to be gone", lambda: gone(objs, ns, "orphan"), timeout=60)
    assert second.exception is None, second.stdout
    rows = [m for m in dashboard.measurements() if m["run"] == run["metadata"]["uid"]]
    assert sorted(m["id"] for m in rows) == sorted(m["id"] for m in st["outbox"]) == sorted(started_ids(handles))
    assert not [r for r in caplog.records if "was not delivered" in r.getMessage()]


def test_replace_stops_the_old_run_and_keeps_its_measurements(control_plane, agent_pods, tpcmesh_pki, monkeypatch,
                                                              dashboard) -> None:
    from kopf.testing import KopfRunner

    ns = "op-replace"
    api = control_plane.client()
    apply_crds(api)
    handles = agent_pods(ns, 3, **SLOW)
    spec = {**SPEC, "schedule": "@every 1h", "concurrencyPolicy": "Replace",
            "results": {"url": dashboard.url, "tokenSecret": results_secret(api, ns, dashboard.token)}}
    operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, ns, DELIVERY_MAX_SECONDS="1")
    objs = client.CustomObjectsApi(api)
    # the benchmark's previous run, still running when the first tick comes
    old = objs.create_namespaced_custom_object(G, V, ns, "transferruns", run_manifest(
        "mesh-old", {"benchmarkRef": {"name": "mesh"}, "benchmark": spec}, {"tpcmesh.io/benchmark": "mesh"}))
    with KopfRunner([*OPERATOR_ARGS, "--namespace", ns], timeout=120) as runner:
        wait_for("the old run to run a test", lambda: started_ids(handles), timeout=30, interval=0.1)
        objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", {
            "apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "mesh"}, "spec": spec})

        def new_run() -> dict | None:
            items = objs.list_namespaced_custom_object(G, V, ns, "transferruns",
                                                       label_selector="tpcmesh.io/benchmark=mesh")["items"]
            done = [r for r in items if r["metadata"]["name"] != "mesh-old"
                    and (r.get("status") or {}).get("phase") == "Succeeded" and not r["status"]["outbox"]]
            return done[0] if done else None

        new = wait_for("the new run to finish", new_run, timeout=90)
        before = wait_for("the old run to be stopped and delivered", lambda: (
            s := run_status(objs, ns, "mesh-old")).get("phase") == "Failed" and not s.get("outbox") and s)
        events = [(e.involved_object.name, e.reason) for e in client.CoreV1Api(api).list_namespaced_event(ns).items]
    assert runner.exception is None, runner.stdout
    failed = {c["type"]: c for c in before["conditions"]}["Failed"]
    assert failed["reason"] == "StopRequested" and f"Replaced by {new['metadata']['name']}" in failed["message"]
    assert before["done"] < before["planned"] == 6
    rows = [m for m in dashboard.measurements() if m["run"] == old["metadata"]["uid"]]
    assert len(rows) == before["done"] == before["delivered"] and before["rejectedCount"] == 0
    assert ("mesh", "ReplacedRun") in events
    assert new["status"]["succeeded"] == 6
    # the old run stays (history) and its measurements are all in the dashboard; no run was deleted
    assert not gone(objs, ns, "mesh-old")


def test_a_dashboard_outage_mid_run_with_an_operator_restart_delivers_every_measurement_once(
        control_plane, agent_pods, tpcmesh_pki, monkeypatch, dashboard) -> None:
    from kopf.testing import KopfRunner

    ns = "op-outage"
    api = control_plane.client()
    apply_crds(api)
    agent_pods(ns, 3, **SLOW)
    spec = {**SPEC, "latency": {"enabled": True, "count": 2}, "loopback": {"enabled": True, "protocol": "builtin"},
            "results": {"url": dashboard.url, "tokenSecret": results_secret(api, ns, dashboard.token)}}
    operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, ns, DELIVERY_MAX_SECONDS="1")
    objs = client.CustomObjectsApi(api)
    args = [*OPERATOR_ARGS, "--namespace", ns]
    run = objs.create_namespaced_custom_object(G, V, ns, "transferruns", run_manifest("outage", {"benchmark": spec}))
    with KopfRunner(args, timeout=120) as first:
        wait_for("a first delivery", lambda: run_status(objs, ns, "outage").get("delivered", 0) >= 1, timeout=60,
                 interval=0.1)
        dashboard.stop()
        down = wait_for("measurements waiting", lambda: len((s := run_status(objs, ns, "outage")).get("outbox") or [])
                        >= 2 and s, timeout=60, interval=0.1)
    assert first.exception is None, first.stdout  # the operator stops while the dashboard is down
    with KopfRunner(args, timeout=120) as second:
        wait_for("a test after the restart", lambda: run_status(objs, ns, "outage").get("done", 0) > down["done"],
                 timeout=60, interval=0.1)
        dashboard.start()
        st = wait_for("every measurement delivered", lambda: (s := run_status(objs, ns, "outage")).get(
            "phase") == "Succeeded" and not s.get("outbox") and s, timeout=120)
    assert second.exception is None, second.stdout
    assert (st["planned"], st["succeeded"], st["delivered"], st["rejectedCount"]) == (15, 15, 15, 0)
    rows = [m for m in dashboard.measurements() if m["run"] == run["metadata"]["uid"]]
    assert len(rows) == 12 and len({m["id"] for m in rows}) == 12  # 6 pairs x (rtt + builtin), each once
    assert len({(m["source"], m["destination"], m["protocol"]) for m in rows}) == 12
    assert all(m["status"] == "succeeded" for m in rows)
    nodes = httpx.get(f"{dashboard.url}/api/v1/nodes/?limit=100", timeout=10).json()["results"]
    assert sum(1 for n in nodes if n["name"].startswith("op-outage") and n["loopback_gbps"]) == 3

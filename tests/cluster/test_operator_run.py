"""The operator (kopf.testing.KopfRunner) on a real kube-apiserver, driving REAL agents on loopback (see
operator_support.py) and the real dashboard."""

from __future__ import annotations

import signal
import subprocess

import httpx
import pytest
from kubernetes import client

from tests.cluster import operator_support
from tests.cluster.operator_support import (
    OPERATOR_ARGS,
    G,
    V,
    apply_crds,
    ensure_namespace,
    operator_env,
    results_secret,
    run_status,
    wait_for,
)
from tests.support.live_dashboard import LiveDashboard
from tests.support.paths import VENV_BIN

pytestmark = pytest.mark.cluster


@pytest.fixture
def agent_pods(control_plane, agent_factory, tmp_path):
    return operator_support.agent_pods(control_plane, agent_factory, tmp_path)


def test_operator_schedules_and_runs_a_benchmark(control_plane, agent_pods, tpcmesh_pki, monkeypatch,
                                                 postgres_server, tmp_path) -> None:
    from kopf.testing import KopfRunner

    ns = "op-run"
    api = control_plane.client()
    apply_crds(api)
    handles = agent_pods(ns, 3)
    dashboard = LiveDashboard(postgres_server, tmp_path)
    dashboard.start()
    token_secret = results_secret(api, ns, dashboard.token)
    operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, ns, DELIVERY_MAX_SECONDS="1")
    objs = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    spec = {"schedule": "@every 1h", "protocols": ["builtin"], "streams": [1], "concurrency": 2,
            "fileSet": {"count": 2, "size": "1MB"}, "latency": {"enabled": True, "count": 2},
            "loopback": {"enabled": True, "protocol": "builtin"}, "timeoutSeconds": 30,
            "retries": 0, "successfulRunsHistoryLimit": 2,
            "results": {"url": dashboard.url, "tokenSecret": token_secret}}
    # a run in a namespace this operator does not watch (another operator's) never holds its schedule
    ensure_namespace(api, "op-run-elsewhere")
    objs.create_namespaced_custom_object(G, V, "op-run-elsewhere", "transferruns", {
        "apiVersion": f"{G}/{V}", "kind": "TransferRun", "metadata": {"generateName": "by-hand-"},
        "spec": {"benchmark": {"protocols": ["builtin"]}}})
    args = [*OPERATOR_ARGS, "--namespace", ns]
    with KopfRunner(args, timeout=120) as runner:
        objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", {
            "apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "mesh"}, "spec": spec})

        def finished_run():
            items = objs.list_namespaced_custom_object(G, V, ns, "transferruns",
                                                       label_selector="tpcmesh.io/benchmark=mesh")["items"]
            done = [r for r in items if (r.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                    and not r["status"].get("outbox")]
            return done[0] if done else None

        run = wait_for("a finished TransferRun", finished_run, timeout=90)

        def summarised():
            tb = objs.get_namespaced_custom_object(G, V, ns, "transferbenchmarks", "mesh")
            return tb if (tb.get("status") or {}).get("lastRun") else None

        tb = wait_for("the benchmark's lastRun", summarised, timeout=20)

        # an on-demand run by hand, and one with an invalid inline spec
        objs.create_namespaced_custom_object(G, V, ns, "transferruns", {
            "apiVersion": f"{G}/{V}", "kind": "TransferRun", "metadata": {"name": "bad-run"},
            "spec": {"benchmark": {"streams": [0]}}})
        bad = wait_for("the invalid run to fail", lambda: (
            lambda r: r if (r.get("status") or {}).get("phase") == "Failed" else None)(
            objs.get_namespaced_custom_object(G, V, ns, "transferruns", "bad-run")), timeout=30)
        events = wait_for("events", lambda: [e for e in core.list_namespaced_event(ns).items
                                             if e.reason in ("Completed", "CreatedRun", "InvalidSpec")]
                          if len({e.reason for e in core.list_namespaced_event(ns).items}
                                 & {"Completed", "CreatedRun", "InvalidSpec"}) == 3 else None, timeout=20)
    assert runner.exception is None, runner.stdout
    assert runner.exit_code == 0
    rows = [m for m in dashboard.measurements() if m["run"] == run["metadata"]["uid"]]
    dashboard_nodes = httpx.get(f"{dashboard.url}/api/v1/nodes/?limit=100", timeout=10).json()["results"]
    dashboard.stop()

    st = run["status"]
    nodes = {h.node for h in handles}
    assert run["metadata"]["ownerReferences"][0]["kind"] == "TransferBenchmark"
    assert run["spec"]["benchmark"]["protocols"] == ["builtin"]  # frozen copy
    assert st["phase"] == "Succeeded", st.get("message")
    assert (st["planned"], st["succeeded"], st["failed"]) == (15, 15, 0)  # 3 loopback, 6 pairs x (rtt + builtin)
    assert st["progress"] == "15/15"
    assert {a["node"] for a in st["agents"]} == nodes
    assert {a["address"] for a in st["agents"]} == {h.address for h in handles}
    # every measurement acknowledged by the real dashboard, stored once, under the Kubernetes node names
    assert st["outbox"] == [] and st["undelivered"] == 0 and st["delivered"] == 15
    assert len(rows) == 12 and len({r["id"] for r in rows}) == 12 and st["tests"] == {}
    assert {(m["source"], m["destination"]) for m in rows} == {(a, b) for a in nodes for b in nodes if a != b}
    assert len({r["benchmark"] for r in rows}) == 1
    loopback = {n["name"]: n["loopback_gbps"] for n in dashboard_nodes}
    assert all(loopback[n] > 0 for n in nodes)  # the grid's diagonal
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Succeeded"]["status"] == "True" and conds["Progressing"]["status"] == "False"

    ts = tb["status"]
    assert ts["lastRun"]["succeeded"] == 15 and ts["lastRun"]["name"] == run["metadata"]["name"]
    assert ts["nextRunTime"] and ts["lastScheduleTime"]
    tconds = {c["type"]: c for c in ts["conditions"]}
    assert tconds["Ready"]["status"] == "True" and tconds["Degraded"]["status"] == "False"

    assert "spec.benchmark.streams[0]" in bad["status"]["message"]
    reasons = {(e.involved_object.name, e.reason) for e in events}
    assert (run["metadata"]["name"], "Completed") in reasons
    assert ("mesh", "CreatedRun") in reasons
    assert ("bad-run", "InvalidSpec") in reasons


@pytest.mark.parametrize("stop", ["graceful", "sigkill"])
def test_operator_stopped_mid_run_resumes_without_redoing_pairs(control_plane, agent_pods, tpcmesh_pki, monkeypatch,
                                                                 tmp_path, stop) -> None:
    """The first operator ends mid-run, gracefully (KopfRunner leaves) or killed outright (SIGKILL of a `kopf run`
    process: no last status write); the second one finishes the run without starting any test twice."""
    from kopf.testing import KopfRunner

    ns = f"op-restart-{stop}"
    api = control_plane.client()
    apply_crds(api)
    handles = agent_pods(ns, 3, builtin_max_rate=8_000_000)  # slow sources (~0.5 s a test): the stop lands mid-run
    operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, ns)
    objs = client.CustomObjectsApi(api)
    spec = {"protocols": ["builtin"], "streams": [2, 1], "concurrency": 2, "latency": {"enabled": False},
            "loopback": {"enabled": False},
            "fileSet": {"count": 2, "size": "4MB"}, "timeoutSeconds": 30, "retries": 0}
    objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", {
        "apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "mesh"}, "spec": spec})
    objs.create_namespaced_custom_object(G, V, ns, "transferruns", {
        "apiVersion": f"{G}/{V}", "kind": "TransferRun", "metadata": {"name": "by-hand"},
        "spec": {"benchmarkRef": {"name": "mesh"}}})

    def status() -> dict:
        return run_status(objs, ns, "by-hand")

    args = [*OPERATOR_ARGS, "--namespace", ns]

    def some_finished_tests():
        wait_for("some finished tests", lambda: status() if status().get("done", 0) >= 4 else None, timeout=60,
                 interval=0.05)

    if stop == "graceful":
        with KopfRunner(args, timeout=60) as first:
            some_finished_tests()
        assert first.exception is None, first.stdout
    else:
        with open(tmp_path / "operator.log", "wb") as log:
            proc = subprocess.Popen([str(VENV_BIN / "kopf"), *args], stdout=log, stderr=subprocess.STDOUT)
            try:
                some_finished_tests()
            finally:
                proc.kill()
                proc.wait(10)
        assert proc.returncode == -signal.SIGKILL, (tmp_path / "operator.log").read_text()[-3000:]
    before = status()
    assert before["phase"] == "Running" and 4 <= before["done"] < 12, before.get("progress")
    finished = {m["id"]: m for m in before["outbox"]}  # no results endpoint: every measurement waits there
    assert len(finished) == before["done"]
    assert before["benchmarkSpec"]["streams"] == [2, 1]  # the referenced spec, frozen into the run at its start

    with KopfRunner(args, timeout=60) as second:
        after = wait_for("the resumed run", lambda: status() if status().get("phase") == "Succeeded" else None,
                         timeout=60)
    assert second.exception is None, second.stdout
    assert (after["done"], after["succeeded"]) == (12, 12)
    logs = "\n".join(h.log() for h in handles)
    waiting = {m["id"]: m for m in after["outbox"]}
    for tid, m in finished.items():
        assert waiting[tid] == m  # untouched
        assert logs.count(f"Started transfer {tid}") == 1, tid  # ran once, not again after the restart
    ids = list(waiting)
    assert all(logs.count(f"Started transfer {i}") == 1 for i in ids)
    assert len(after["outbox"]) == 12 and len({m["id"] for m in after["outbox"]}) == 12

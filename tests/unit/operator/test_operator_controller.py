"""The controller's pure parts: benchmark status, run manifests, pruning by history limits."""

from __future__ import annotations

import asyncio
import datetime as dt

from tpcmesh_operator.controller import build_run, reconcile_benchmark, runs_to_prune
from tpcmesh_operator.kube import compact, status_patch
from tpcmesh_operator.plan.spec import parse_spec

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
META = {"generation": 3, "creationTimestamp": "2026-03-01T00:00:00Z"}


def cond(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_reconcile_ready_with_next_run() -> None:
    out = reconcile_benchmark({"schedule": "@every 12h"}, META, {"lastScheduleTime": "2026-03-01T00:00:00Z"}, NOW)
    assert out["observedGeneration"] == 3
    assert out["nextRunTime"] == "2026-03-01T12:00:00Z"  # due now
    assert cond(out, "Ready")["status"] == "True"
    out = reconcile_benchmark({"schedule": "@every 12h"}, META, {"lastScheduleTime": "2026-03-01T12:00:00Z"}, NOW)
    assert out["nextRunTime"] == "2026-03-02T00:00:00Z"


def test_reconcile_invalid_and_suspended() -> None:
    out = reconcile_benchmark({"streams": [0]}, META, None, NOW)
    c = cond(out, "Ready")
    assert (c["status"], c["reason"]) == ("False", "InvalidSpec") and "spec.streams[0]" in c["message"]
    out = reconcile_benchmark({"suspend": True}, META, out, NOW)
    assert cond(out, "Ready")["reason"] == "Suspended" and out["nextRunTime"] is None


def test_build_run_freezes_the_spec() -> None:
    spec = parse_spec({"protocols": ["iperf3"], "streams": [4]})
    run = build_run("bench-123", "bench", spec, NOW)
    assert run["kind"] == "TransferRun" and run["metadata"]["labels"]["tpcmesh.io/benchmark"] == "bench"
    assert parse_spec(run["spec"]["benchmark"]) == spec
    assert run["spec"]["scheduledTime"] == "2026-03-01T12:00:00Z"


def test_prune_keeps_history_limits_and_undelivered_runs() -> None:
    def run(name: str, phase: str, t: int, outbox: int = 0) -> dict:
        return {"metadata": {"name": name, "creationTimestamp": f"2026-03-01T{t:02d}:00:00Z"},
                "status": {"phase": phase, "outbox": [{}] * outbox}}
    runs = [run("ok1", "Succeeded", 1), run("ok2", "Succeeded", 2), run("ok3", "Succeeded", 3),
            run("bad1", "Failed", 4), run("bad2", "Failed", 5), run("live", "Running", 0),
            run("ok0", "Succeeded", 0, outbox=3)]
    assert runs_to_prune(runs, keep_ok=2, keep_failed=1) == ["ok1", "bad1"]
    assert runs_to_prune(runs, keep_ok=0, keep_failed=0) == ["ok3", "ok2", "ok1", "bad2", "bad1"]


def test_status_compaction_drops_file_details_only_when_too_big() -> None:
    m = {"id": "x", "throughput_gbps": 1.0, "files": [{"name": "f" * 100}] * 50}
    small = {"outbox": [m], "tests": {}}
    assert compact(small) is small
    big = compact({"outbox": [m] * 100, "tests": {}}, limit=100_000)
    assert big["compacted"] and all("files" not in x and x["throughput_gbps"] == 1.0 for x in big["outbox"])


def test_status_patch_changes_only_what_changed_and_keeps_nulls() -> None:
    old = {"tests": {"a": {"status": "succeeded", "error": None}}, "done": 2, "gone": 1, "rttMs": [[None, 1.0], None]}
    new = {"tests": {}, "done": 3, "rttMs": [[None, 1.0], None], "a/b": 1,
           "outbox": [{"id": "1", "files": [{"name": "f", "error": None}]}]}
    ops = status_patch(old, new)
    assert ops == [{"op": "remove", "path": "/status/gone"}, {"op": "add", "path": "/status/tests", "value": {}},
                   {"op": "add", "path": "/status/done", "value": 3}, {"op": "add", "path": "/status/a~1b", "value": 1},
                   {"op": "add", "path": "/status/outbox", "value": new["outbox"]}]
    assert status_patch(None, new) == [{"op": "add", "path": "/status", "value": new}]
    assert status_patch(new, dict(new)) == []


def test_kube_status_store_patches_what_the_run_changed(monkeypatch) -> None:
    from tpcmesh_operator import kube

    sent: list[list] = []

    class Api:
        def get_namespaced_custom_object(self, *a):
            return {"status": {"kopf": {"x": 1}, "phase": "Running", "agents": [], "tests": {"k": {"id": "1"}}}}

        def patch_namespaced_custom_object_status(self, *a, _content_type=None):
            assert _content_type == "application/json-patch+json"
            sent.append(a[-1])

    monkeypatch.setattr(kube, "custom", Api)
    store = kube.KubeStatusStore("ns", "run")
    st = asyncio.run(store.load())
    assert st is not None and "kopf" not in st
    st["tests"].clear()  # the executor changes the loaded dict in place
    asyncio.run(store.save(st))
    assert sent[-1] == [{"op": "add", "path": "/status/tests", "value": {}}]  # kopf's key is left alone
    st["tests"]["j"] = {"id": "2", "error": None}
    asyncio.run(store.save(st))
    assert sent[-1] == [{"op": "add", "path": "/status/tests", "value": {"j": {"id": "2", "error": None}}}]
    asyncio.run(store.save(st))
    assert len(sent) == 2  # nothing changed, nothing sent

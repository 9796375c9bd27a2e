"""A TransferBenchmark's timer tick, decided by plan_tick (pure): when a run is created, skipped or replaces
another, what is pruned, and the status it reports."""

from __future__ import annotations

import datetime as dt

from tpcmesh_operator.controller import BENCHMARK_LABEL, plan_tick
from tpcmesh_operator.plan.schedule import run_name

T0 = dt.datetime(2026, 3, 1, 0, 0, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)
NODES = frozenset({"dtn-a", "dtn-b"})


def bench(**spec) -> dict:
    return {"metadata": {"name": "mesh", "creationTimestamp": "2026-03-01T00:00:00Z", "generation": 1},
            "spec": {"schedule": "@every 1h", **spec}, "status": {"lastScheduleTime": "2026-03-01T00:00:00Z"}}


def run(name: str, phase: str | None = "Running", benchmark: str | None = "mesh", agents=("dtn-a", "dtn-b"),
        created: str = "2026-03-01T00:00:00Z", **status) -> dict:
    st = {"phase": phase, **status} if phase else {}
    if agents is not None and phase:
        st["agents"] = [{"node": n, "address": "10.0.0.1"} for n in agents]
    labels = {BENCHMARK_LABEL: benchmark} if benchmark else {}
    return {"metadata": {"name": name, "labels": labels, "creationTimestamp": created}, "status": st}


def reasons(plan) -> list[str]:
    return [e[1] for e in plan.events]


def test_a_due_tick_creates_its_run_once() -> None:
    p = plan_tick("mesh", bench(), [], T0 + H + dt.timedelta(seconds=3))
    assert p.create is not None and p.create["metadata"]["name"] == run_name("mesh", T0 + H)
    assert p.create["spec"]["scheduledTime"] == "2026-03-01T01:00:00Z" and p.create["spec"]["benchmark"]
    assert p.patch["lastScheduleTime"] == "2026-03-01T01:00:00Z" and p.patch["nextRunTime"] == "2026-03-01T02:00:00Z"
    assert p.patch["active"] == [p.create["metadata"]["name"]] and not p.stop and not p.events
    # not due: nothing to do
    done = bench()
    done["status"]["lastScheduleTime"] = "2026-03-01T01:00:00Z"
    assert plan_tick("mesh", done, [], T0 + H + dt.timedelta(minutes=5)).create is None
    # an operator restarted before it recorded the tick: the same run again (its creation answers AlreadyExists)
    again = plan_tick("mesh", bench(), [run(run_name("mesh", T0 + H))], T0 + H + dt.timedelta(minutes=1))
    assert again.create is not None and again.create["metadata"]["name"] == run_name("mesh", T0 + H)
    assert not again.stop and not again.events


def test_suspended_creates_nothing_but_still_prunes_and_reports() -> None:
    runs = [run(f"ok{i}", "Succeeded", created=f"2026-03-01T0{i}:00:00Z", completionTime=f"2026-03-01T0{i}:30:00Z",
                succeeded=2) for i in range(5)]
    p = plan_tick("mesh", bench(suspend=True, successfulRunsHistoryLimit=2), runs, T0 + 5 * H)
    assert p.create is None and "lastScheduleTime" not in p.patch and p.patch["nextRunTime"] is None
    assert p.prune == ["ok2", "ok1", "ok0"]
    assert p.patch["lastRun"]["name"] == "ok4"
    assert {c["type"]: c["reason"] for c in p.patch["conditions"]}["Ready"] == "Suspended"


def test_forbid_skips_the_tick_while_its_own_run_is_active() -> None:
    p = plan_tick("mesh", bench(), [run("mesh-old")], T0 + H)
    assert p.create is None and reasons(p) == ["SkippedRun"] and "mesh-old is still running (Forbid)" in p.events[0][2]
    assert p.patch["lastScheduleTime"] == "2026-03-01T01:00:00Z"  # the tick is used up, as CronJob does
    assert p.patch["active"] == ["mesh-old"]


def test_replace_stops_its_own_active_run_and_creates_the_new_one() -> None:
    p = plan_tick("mesh", bench(concurrencyPolicy="Replace"), [run("mesh-old"), run("mesh-done", "Failed")], T0 + H)
    assert p.stop == ["mesh-old"] and p.create is not None and reasons(p) == ["ReplacedRun"]
    assert "mesh-done" not in p.stop and p.prune == []  # the failed one is within failedRunsHistoryLimit 1


def test_other_runs_on_the_same_agents_block_a_due_run_whatever_the_policy() -> None:
    for policy in ("Forbid", "Replace"):
        by_hand = [run("by-hand", benchmark=None, agents=("dtn-b", "dtn-c"))]
        first = plan_tick("mesh", bench(concurrencyPolicy=policy), by_hand, T0 + H)
        assert first.needs_agents and first.create is None  # asks for the benchmark's agents, decides nothing yet
        p = plan_tick("mesh", bench(concurrencyPolicy=policy), by_hand, T0 + H, NODES)
        assert p.create is None and not p.stop and reasons(p) == ["SkippedRun"]
        assert "TransferRun by-hand is running on its agents" in p.events[0][2]
    # another benchmark's run, elsewhere: no conflict
    elsewhere = [run("other-1", benchmark="other", agents=("dtn-x", "dtn-y"))]
    assert plan_tick("mesh", bench(), elsewhere, T0 + H, NODES).create is not None
    # a run that has not frozen its agents yet may use any: the tick waits for it, not used up (two benchmarks due
    # at the same instant on disjoint nodes both run), and after FREEZE_GRACE counts it as on all
    young = [run("by-hand", phase=None, benchmark=None, created="2026-03-01T00:59:50Z")]
    waits = plan_tick("mesh", bench(), young, T0 + H, NODES)
    assert waits.create is None and not waits.events and "lastScheduleTime" not in waits.patch
    chosen = [run("by-hand", benchmark=None, agents=("dtn-x",), created="2026-03-01T00:59:50Z")]
    assert plan_tick("mesh", bench(), chosen, T0 + H + dt.timedelta(seconds=2), NODES).create is not None
    stuck = [run("by-hand", phase=None, benchmark=None, created="2026-03-01T00:58:59Z")]
    p = plan_tick("mesh", bench(), stuck, T0 + H, NODES)
    assert p.create is None and reasons(p) == ["SkippedRun"] and p.patch["lastScheduleTime"] == "2026-03-01T01:00:00Z"
    # finished runs block nothing, and nothing is asked when no tick is due
    assert plan_tick("mesh", bench(), [run("by-hand", "Succeeded", benchmark=None)], T0 + H).create is not None
    assert not plan_tick("mesh", bench(), by_hand, T0 + 30 * dt.timedelta(minutes=1)).needs_agents


def test_last_run_summary_and_degraded() -> None:
    runs = [run("mesh-1", "Succeeded", completionTime="2026-03-01T00:10:00Z", succeeded=12, planned=12),
            run("mesh-2", "Succeeded", completionTime="2026-03-01T00:50:00Z", succeeded=11, failed=0, planned=12,
                rejectedCount=1, message="12 of 12 tests succeeded, 0 failed"),
            run("someone-else", "Failed", benchmark="other", completionTime="2026-03-01T00:55:00Z")]
    p = plan_tick("mesh", bench(), runs, T0 + dt.timedelta(minutes=55))
    assert p.patch["lastRun"] == {"name": "mesh-2", "phase": "Succeeded", "succeeded": 11, "failed": 0,
                                  "planned": 12, "undelivered": 0, "rejected": 1}
    degraded = {c["type"]: c for c in p.patch["conditions"]}["Degraded"]
    assert degraded["status"] == "True" and degraded["reason"] == "MeasurementsRejected"


def test_an_invalid_spec_reports_and_does_nothing_else() -> None:
    p = plan_tick("mesh", bench(streams=[0]), [run("mesh-old", "Succeeded")], T0 + H)
    assert p.create is None and p.prune == [] and not p.events
    ready = {c["type"]: c for c in p.patch["conditions"]}["Ready"]
    assert ready["reason"] == "InvalidSpec" and "spec.streams[0]" in ready["message"]


def test_only_a_due_tick_asks_for_the_other_runs() -> None:
    own = [run("mesh-1", "Succeeded", completionTime="2026-03-01T00:10:00Z", succeeded=2, planned=2)]
    quiet = plan_tick("mesh", bench(), own, T0 + 30 * dt.timedelta(minutes=1), others_listed=False)
    assert not quiet.needs_others and quiet.patch["lastRun"]["name"] == "mesh-1"  # summary from its own runs
    due = plan_tick("mesh", bench(), own, T0 + H, others_listed=False)
    assert due.needs_others and due.create is None and not due.events


def test_a_same_named_benchmark_in_another_namespace_is_another_benchmark() -> None:
    body = bench(concurrencyPolicy="Replace")
    body["metadata"]["namespace"] = "site-a"
    theirs = run("mesh-old", agents=("dtn-a",))
    theirs["metadata"]["namespace"] = "site-b"
    p = plan_tick("mesh", body, [theirs], T0 + H, NODES)
    assert p.stop == [] and p.create is None  # not ours to stop; but it runs on our agents
    assert "TransferRun mesh-old is running on its agents" in p.events[0][2]
    assert p.patch["active"] == []


def test_a_tick_parses_its_spec_once(monkeypatch) -> None:
    """A due tick plans up to three times (its own runs, then every run, then with the agents) and each plan reads the
    spec twice: the spec is parsed once, and again only when it changes."""
    from tpcmesh_operator.plan import spec as spec_module

    parsed = []
    real = spec_module._parse_spec
    monkeypatch.setattr(spec_module, "_parse_spec", lambda s, path: parsed.append(path) or real(s, path))
    spec_module._parse_spec_once.cache_clear()
    body = bench(streams=[4])
    first = plan_tick("mesh", body, [], T0 + H, others_listed=False)
    assert first.needs_others
    assert plan_tick("mesh", body, [run("by-hand", benchmark=None)], T0 + H).needs_agents
    assert plan_tick("mesh", body, [run("by-hand", benchmark=None)], T0 + H, NODES).create is None
    assert len(parsed) == 1
    plan_tick("mesh", bench(streams=[8]), [], T0 + H)
    assert len(parsed) == 2

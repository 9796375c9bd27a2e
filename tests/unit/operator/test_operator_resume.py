"""A run resumed by a newer operator plans the rounds it started with, or stops saying why (no round redone)."""

from __future__ import annotations

from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import Agent
from tpcmesh_operator.run.driver import _as_started
from tpcmesh_operator.run.executor import MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory
from tpcmesh_operator.run.status import initial_status

AGENTS = [Agent(node=f"dtn-{i}", address=f"10.0.0.{i}", labels={}, name=f"agent-{i}") for i in range(1, 4)]


def test_a_spec_frozen_before_loopback_existed_resumes_without_a_loopback_round() -> None:
    old = {"protocols": ["builtin"], "streams": [1]}  # what an older operator froze: no loopback key
    assert _as_started(old, {"agents": [], "currentRound": 3})["loopback"] == {"enabled": False}
    assert "loopback" not in _as_started(old, {})  # not started yet: today's defaults apply
    kept = {**old, "loopback": {"enabled": True, "protocol": "builtin"}}
    assert _as_started(kept, {"agents": []}) == kept


async def test_a_resumed_run_whose_plan_changed_stops_instead_of_redoing_rounds() -> None:
    spec = parse_spec({"protocols": ["builtin"], "streams": [1], "latency": False})
    status = initial_status(AGENTS) | {"phase": "Running", "totalRounds": 99, "currentRound": 4, "planned": 6,
                                       "done": 2, "succeeded": 2, "failed": 0, "outbox": []}
    store = MemoryStatusStore(status)
    info = RunInfo(benchmark_namespace="ns", benchmark_name="mesh", run_name="mesh-1", run_uid="uid-1")
    # no agent is contacted: agents_client None would fail the test if the executor tried
    st = await RunExecutor(spec, info, StaticDirectory(AGENTS), None, None, store).execute()
    assert st["phase"] == "Failed" and "planned in 99 rounds and now plans" in st["message"], st["message"]
    failed = {c["type"]: c for c in st["conditions"]}["Failed"]
    assert failed["status"] == "True" and failed["reason"] == "PlanChanged"
    assert store.status["phase"] == "Failed"


async def test_the_plan_is_made_off_the_event_loop(monkeypatch) -> None:
    """A siteExclusive plan solves an LP (seconds at many sites): made on the loop it would stall every other run,
    the probes and kopf's handlers, so the executor plans in a worker thread."""
    import threading

    from tpcmesh_operator.run import executor as runs

    planned_on, real_plan = [], runs.plan

    def recording_plan(*args, **kwargs):
        planned_on.append(threading.get_ident())
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(runs, "plan", recording_plan)
    spec = parse_spec({"protocols": ["builtin"], "streams": [1], "latency": False})
    status = initial_status(AGENTS) | {"phase": "Running", "totalRounds": 99, "currentRound": 4, "planned": 6,
                                       "done": 2, "succeeded": 2, "failed": 0, "outbox": []}
    info = RunInfo(benchmark_namespace="ns", benchmark_name="mesh", run_name="mesh-1", run_uid="uid-1")
    st = await RunExecutor(spec, info, StaticDirectory(AGENTS), None, None, MemoryStatusStore(status)).execute()
    assert "PlanChanged" in {c.get("reason") for c in st["conditions"]}  # it did plan, with the real planner
    assert len(planned_on) == 1 and planned_on[0] != threading.get_ident()

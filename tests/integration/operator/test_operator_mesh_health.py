"""A finished run's MeshHealthy condition (run/meshhealth.py) with REAL agents (127.0.1.x) and the REAL dashboard:
after the final delivery the dashboard evaluates the benchmark's grid (POST /api/v1/problems/evaluate/) and the run
says whether problems are open, naming them: a pass/fail gate for pipelines."""

from __future__ import annotations

import uuid

import pytest
from tpcmesh_operator.run.agents import AgentsClient
from tpcmesh_operator.run.delivery import ResultsClient
from tpcmesh_operator.run.executor import MemoryStatusStore, RunInfo
from tpcmesh_operator.run.meshhealth import describe

from tests.integration.operator.test_operator_executor import SPEC, executor

pytestmark = pytest.mark.integration
# loopback moves 1 MB files at well over 0.1 Gbit/s; an agent serving at 1 MB/s is far below 0.05
HEALTH_SPEC = {**SPEC, "thresholds": {"goodGbps": 0.1, "warnGbps": 0.05}}


def mesh_health(status: dict) -> dict:
    return {c["type"]: c for c in status["conditions"]}["MeshHealthy"]


async def run(mesh_agents, shared_token, tpcmesh_pki, results) -> dict:
    info = RunInfo("default", f"health-{uuid.uuid4().hex[:6]}", f"health-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac:
        return await executor(HEALTH_SPEC, mesh_agents, ac, results, MemoryStatusStore(), run=info).execute()


async def test_a_healthy_mesh_is_mesh_healthy(mesh, shared_token, tpcmesh_pki, dashboard):
    _, agents = mesh(3)
    async with ResultsClient(dashboard.url, dashboard.token) as rc:
        st = await run(agents, shared_token, tpcmesh_pki, rc)
    assert st["phase"] == "Succeeded" and st["outbox"] == [], st.get("message")
    cond = mesh_health(st)
    assert (cond["status"], cond["reason"]) == ("True", "NoProblems"), cond


async def test_a_slow_node_makes_the_mesh_unhealthy_and_is_named(mesh, shared_token, tpcmesh_pki, dashboard):
    (slow,), (slow_agent,) = mesh(1, builtin_max_rate=1_000_000)
    _, others = mesh(2)
    async with ResultsClient(dashboard.url, dashboard.token) as rc:
        st = await run([slow_agent, *others], shared_token, tpcmesh_pki, rc)
    assert st["phase"] == "Succeeded", st.get("message")
    cond = mesh_health(st)
    assert (cond["status"], cond["reason"]) == ("False", "ProblemsOpen"), cond
    assert slow.name in cond["message"] and "every test from" in cond["message"], cond


async def test_without_a_dashboard_the_health_is_unknown_and_says_why(mesh, shared_token, tpcmesh_pki):
    _, agents = mesh(2)
    st = await run(agents, shared_token, tpcmesh_pki, None)
    cond = mesh_health(st)
    assert (cond["status"], cond["reason"]) == ("Unknown", "NoDashboard") and "spec.results" in cond["message"]


def test_the_message_puts_the_most_severe_first_and_fits_a_condition():
    problems = [{"severity": "warning", "kind": "tuning", "key": "tuning:b", "summary": "w" * 1200},
                {"severity": "critical", "kind": "node", "key": "node:a", "summary": "every test from a"}]
    healthy, reason, message = describe(problems)
    assert (healthy, reason) == (False, "ProblemsOpen")
    assert message.startswith("2 open problem(s): critical node: every test from a; warning tuning")
    assert len(message) == 1000
    assert describe([])[:2] == (True, "NoProblems")

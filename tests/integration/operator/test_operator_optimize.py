"""spec.optimize end to end: the executor asks the REAL dashboard's advice for each link, REAL agents run the
setting it names, the dashboard stores it, and the next run's advice reads it. Without a dashboard a run keeps the
spec's setting and says so."""

from __future__ import annotations

import uuid

import httpx
import pytest
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import AgentsClient
from tpcmesh_operator.run.delivery import ResultsClient
from tpcmesh_operator.run.executor import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory

pytestmark = pytest.mark.integration

FAST = ExecutorOptions(poll_interval=0.1, unreachable_grace=1.0, timeout_grace=5.0, delivery_max_seconds=5.0)
SPEC = {"protocols": ["builtin"], "streams": [2], "concurrency": 3, "fileSet": {"count": 4, "size": "1MB"},
        "latency": False, "loopback": {"enabled": False}, "timeoutSeconds": 30, "retries": 0,
        "optimize": True, "optimizeBounds": {"streamsMax": 4, "concurrencyMax": 4}}
RUNS = 6  # start, 2 confirmations (3 runs before a setting's level counts), then the climb explores upward


def advice(dashboard, bench: str, source: str, destination: str) -> dict:
    r = httpx.get(f"{dashboard.url}/api/v1/advice/", timeout=30, params={
        "source": source, "destination": destination, "protocol": "builtin", "benchmark": bench,
        "streams_max": 4, "concurrency_max": 4})
    assert r.status_code == 200, r.text
    return r.json()


async def test_each_run_runs_what_the_dashboards_advice_names_for_each_link(mesh, shared_token, tpcmesh_pki,
                                                                           dashboard) -> None:
    _, agents = mesh(2)
    a, b = sorted(x.node for x in agents)
    name = f"it-optimize-{uuid.uuid4().hex[:6]}"
    ran: list[dict[tuple[str, str], tuple[int, int]]] = []
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                      dashboard.token) as rc:
        for i in range(RUNS):
            expected = {}
            if i:  # the first run: the dashboard knows neither the nodes nor the benchmark (404: the climb's start)
                for s, d in ((a, b), (b, a)):
                    nxt = advice(dashboard, f"default/{name}", s, d)["next"]
                    expected[(s, d)] = (nxt["streams"], nxt["concurrency"])
            info = RunInfo("default", name, f"{name}-{i}", str(uuid.uuid4()))
            events: list = []
            st = await RunExecutor(parse_spec(SPEC), info, StaticDirectory(agents), ac, rc, MemoryStatusStore(),
                                   options=FAST, on_event=lambda *e, seen=events: seen.append(e)).execute()
            assert st["phase"] == "Succeeded", st.get("message")
            assert st["outbox"] == [] and st["planned"] == 2, st
            rows = [m for m in dashboard.measurements() if m["run"] == info.run_uid]
            got = {(m["source"], m["destination"]): (m["streams"], m["concurrency"]) for m in rows}
            assert len(rows) == 2 and all(m["status"] == "succeeded" for m in rows), rows
            if i == 0:
                assert got == {(a, b): (1, 1), (b, a): (1, 1)} and st["optimizer"] == "2 links: start 2"
            else:
                assert got == expected, f"run {i}: ran {got}, the advice named {expected}"
                assert st["optimizer"].startswith("2 links: ") and "spec's setting" not in st["optimizer"]
            assert not [e for e in events if e[1] == "AdviceUnavailable"]
            ran.append(got)
    settings = {s for run in ran for s in run.values()}
    assert (1, 1) in settings and len(settings) >= 2, ran  # confirmed the start, then explored a neighbour
    assert all(s[0] <= 4 and s[1] <= 4 for s in settings)  # within spec.optimizeBounds
    final = advice(dashboard, f"default/{name}", a, b)
    assert final["runs"] == RUNS and {(x["streams"], x["concurrency"]) for x in final["settings"]} == {
        run[(a, b)] for run in ran}


async def test_without_advice_a_run_keeps_the_specs_setting_and_says_why(mesh, shared_token, tpcmesh_pki) -> None:
    """The dashboard is unreachable: no wait, each link runs spec.streams x spec.concurrency (within the bounds),
    status.optimizer and one AdviceUnavailable Event say so; the measurements wait in the outbox."""
    _, agents = mesh(2)
    events: list = []
    info = RunInfo("default", "it-optimize-away", "it-optimize-away-1", str(uuid.uuid4()))
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient("http://127.0.0.1:9",
                                                                                      "t") as rc:
        st = await RunExecutor(parse_spec(SPEC), info, StaticDirectory(agents), ac, rc, MemoryStatusStore(),
                               options=FAST, on_event=lambda *e: events.append(e)).execute()
    assert st["phase"] == "Succeeded", st.get("message")
    assert [(m["streams"], m["concurrency"]) for m in st["outbox"]] == [(2, 3), (2, 3)]
    assert st["optimizer"].startswith("2 links: fallback 2; the spec's setting where the advice was not had: GET ")
    unavailable = [e for e in events if e[1] == "AdviceUnavailable"]
    assert len(unavailable) == 1 and unavailable[0][0] == "Warning" and "127.0.0.1:9" in unavailable[0][2]

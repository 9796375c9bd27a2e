"""Delivery of a run's outbox to the REAL dashboard (gunicorn + Django on the suite's PostgreSQL): records the
dashboard refuses are set aside one by one, a wrong URL and an ingress body limit lose nothing."""

from __future__ import annotations

import json
import logging
import uuid

import httpx
import pytest
from aiohttp import web
from prometheus_client import REGISTRY
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import Agent
from tpcmesh_operator.run.delivery import ResultsClient
from tpcmesh_operator.run.executor import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory
from tpcmesh_operator.run.measurements import now_iso

from tests.support.live_dashboard import LiveDashboard

pytestmark = pytest.mark.integration
NODES = ["dtn-a", "dtn-b", "dtn-c"]


def finished_run(n: int) -> tuple[RunInfo, dict]:
    """The status of a finished run with n RTT measurements waiting in its outbox."""
    info = RunInfo("default", "delivery", f"delivery-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))
    outbox = []
    for i in range(n):
        src, dst = NODES[i % 3], NODES[(i + 1) % 3]
        t = now_iso()
        outbox.append({"id": str(uuid.uuid4()), "source": src, "destination": dst, "protocol": "rtt",
                       "status": "succeeded", "error": None, "started_at": t, "finished_at": t,
                       "rtt_ms": 0.1 + i / 1000, "rtt_min_ms": 0.1, "rtt_max_ms": 0.2 + i / 1000})
    status = {"phase": "Succeeded", "startTime": now_iso(), "completionTime": now_iso(), "planned": n, "done": n,
              "succeeded": n, "failed": 0, "delivered": 0, "rejected": [], "rejectedCount": 0, "outbox": outbox,
              "agents": [Agent(node, f"127.0.9.{i + 1}").to_dict() for i, node in enumerate(NODES)]}
    return info, status


def delivery(info: RunInfo, status: dict, results, events: list | None = None) -> RunExecutor:
    return RunExecutor(parse_spec({}), info, StaticDirectory([]), None, results,  # type: ignore[arg-type]
                       MemoryStatusStore(status), options=ExecutorOptions(delivery_max_seconds=5.0),
                       on_event=(lambda *e: events.append(e)) if events is not None else None)


def stored_ids(dashboard: LiveDashboard, info: RunInfo) -> list[str]:
    return [m["id"] for m in dashboard.measurements() if m["run"] == info.run_uid]


async def test_refused_records_are_set_aside_and_the_rest_delivered(dashboard, caplog) -> None:
    info, status = finished_run(120)
    same = status["outbox"][17]
    same["destination"] = same["source"]  # the dashboard refuses a pair of one node
    backwards = status["outbox"][90]
    backwards["started_at"], backwards["finished_at"] = "2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z"
    events: list = []
    before = REGISTRY.get_sample_value("tpcmesh_operator_rejected_measurements_total", {"protocol": "rtt"}) or 0
    caplog.set_level(logging.WARNING, logger="tpcmesh_operator.run.executor")
    async with ResultsClient(dashboard.url, dashboard.token) as rc:
        ex = delivery(info, status, rc, events)
        await ex.load()
        assert await ex.deliver(30) == 0
    st = ex.status
    assert st["outbox"] == [] and st["delivered"] == 118 and st["rejectedCount"] == 2
    good = {m["id"] for m in status["outbox"]} - {same["id"], backwards["id"]}
    assert set(stored_ids(dashboard, info)) == good
    refused = {r["measurement"]["id"]: r for r in st["rejected"]}
    assert refused.keys() == {same["id"], backwards["id"]}
    assert refused[same["id"]]["measurement"] == same  # the whole record is kept
    assert "measurements[0].destination" in refused[same["id"]]["reason"]
    assert "finished_at" in refused[backwards["id"]]["reason"]
    assert any(e[:2] == ("Warning", "MeasurementsRejected") for e in events)
    assert REGISTRY.get_sample_value("tpcmesh_operator_rejected_measurements_total", {"protocol": "rtt"}) == before + 2
    logged = [r.getMessage() for r in caplog.records if "Dashboard refused measurement" in r.getMessage()]
    assert len(logged) == 2 and any(json.dumps(same, separators=(",", ":")) in line for line in logged)
    assert {c["type"]: c["status"] for c in st["conditions"]}["Delivered"] == "True"


async def test_a_wrong_url_keeps_every_measurement(dashboard) -> None:
    info, status = finished_run(5)
    async with ResultsClient(dashboard.url + "/not-the-dashboard", dashboard.token) as rc:
        ex = delivery(info, status, rc)
        await ex.load()
        assert await ex.deliver(1.0) == 5  # 404: temporary
    assert ex.status["delivered"] == 0 and ex.status["rejectedCount"] == 0
    cond = {c["type"]: c for c in ex.status["conditions"]}["Delivered"]
    assert cond["status"] == "False" and "HTTP 404" in cond["message"]
    async with ResultsClient(dashboard.url, dashboard.token) as rc:
        ex.results_client = rc  # the URL fixed: everything arrives
        assert await ex.deliver(10) == 0
    assert sorted(stored_ids(dashboard, info)) == sorted(m["id"] for m in status["outbox"])


@pytest.fixture
async def ingress(dashboard):
    """A real HTTP proxy in front of the dashboard that answers 413 to bodies above 20 kB (an ingress limit)."""
    limit = 20_000
    sizes: list[int] = []

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        sizes.append(len(body))
        if len(body) > limit:
            return web.Response(status=413, text="413 Request Entity Too Large")
        async with httpx.AsyncClient() as c:
            r = await c.post(dashboard.url + request.path, content=body, headers={
                "Authorization": request.headers["Authorization"], "Content-Type": "application/json"})
        return web.Response(status=r.status_code, body=r.content, content_type="application/json")

    app = web.Application(client_max_size=10 * 2**20)
    app.router.add_post("/api/v1/ingest/", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", sizes, limit
    await runner.cleanup()


async def test_an_ingress_body_limit_splits_the_batches(dashboard, ingress) -> None:
    url, sizes, limit = ingress
    info, status = finished_run(300)  # ~90 kB in one batch
    async with ResultsClient(url, dashboard.token) as rc:
        ex = delivery(info, status, rc)
        await ex.load()
        assert await ex.deliver(30) == 0
    assert ex.status["delivered"] == 300 and ex.status["rejectedCount"] == 0
    assert sizes[0] > limit and sizes[-1] <= limit
    assert sorted(stored_ids(dashboard, info)) == sorted(m["id"] for m in status["outbox"])


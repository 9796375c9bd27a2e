"""A 30-agent paper run (30 loopback tests, 5 settings x 870 pairs) with the dashboard down: the run waits
(DeliveryBacklog) instead of growing its status past what etcd stores, survives a restart at that point without
outgrowing it either, and when the dashboard is back every measurement arrives exactly once.

The agents answer in-process (every transfer finishes at once with a record shaped like theirs, checked against
the contract); the results client is the real one, against a closed port (down) and then an in-process dashboard
that acknowledges like the real one. Sizes are measured with the JSON encoding the API server stores."""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections import Counter

import httpx
import jsonschema
import pytest
from tpcmesh_operator.config import Settings, SettingsError
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import Agent
from tpcmesh_operator.run.delivery import ResultsClient
from tpcmesh_operator.run.executor import ExecutorOptions, RunExecutor, RunInfo, StaticDirectory, status_size_bytes
from tpcmesh_operator.run.outbox import MAX_STATUS_BYTES

from tests.support.paths import REPO
from tests.unit.operator.instant import ETCD_LIMIT, EtcdSizedStore, InstantAgents

PAPER = parse_spec({"protocols": ["xrootd-https", "gridftp"], "streams": [8, 1], "latency": True,
                    "results": {"url": "http://dashboard.invalid"}})
BUDGET = ExecutorOptions().status_budget_bytes
SCHEMA = json.loads((REPO / "manifests/schemas/measurement.v1.schema.json").read_text())


class Dashboard:
    """Acknowledges batches as the dashboard's ingest API does, counting every measurement it receives."""

    def __init__(self) -> None:
        self.received: Counter[str] = Counter()
        self.loopback: dict[str, float] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        batch = json.loads(request.content)
        self.loopback |= {n["name"]: n["loopback_gbps"] for n in batch["nodes"] if "loopback_gbps" in n}
        ms = batch["measurements"]
        new = [m["id"] for m in ms if m["id"] not in self.received]
        self.received.update(m["id"] for m in ms)
        return httpx.Response(200, json={"created": len(new), "duplicates": len(ms) - len(new), "ids": new})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


def backlog(status: dict) -> str | None:
    c = {c["type"]: c for c in status.get("conditions") or []}.get("DeliveryBacklog")
    return c["status"] if c else None


async def wait_for(what, fn, task: asyncio.Task | None = None, timeout: float = 60.0):
    for _ in range(int(timeout / 0.02)):
        if fn():
            return
        assert task is None or not task.done(), f"the run ended before {what}: {task.result()}"
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_30_agent_paper_run_waits_for_the_dashboard_instead_of_outgrowing_its_status() -> None:
    mesh = [Agent(f"dtn-{i:02d}.site-{i % 5}.grid.example.org", f"10.0.{i // 250}.{i % 250}",
                  labels={"tpcmesh.io/site": f"site-{i % 5}", "tpcmesh.io/nic-speed-gbps": "100",
                          "kubernetes.io/hostname": f"dtn-{i:02d}"}) for i in range(30)]
    info = RunInfo("default", "paper", "paper-1", str(uuid.uuid4()))
    options = ExecutorOptions(poll_interval=0.01, delivery_max_seconds=0.05, backlog_retry_seconds=0.05)
    store = EtcdSizedStore()
    agents = InstantAgents()
    jsonschema.Draft202012Validator({**SCHEMA, "$ref": "#/$defs/transferRecord"}).validate(
        await agents.start_transfer(None, {"test_id": str(uuid.uuid4()), "protocol": "gridftp", "streams": 8,
                                           "concurrency": 11}))

    dashboard = Dashboard()
    up = ResultsClient("http://dashboard.invalid", "token", transport=httpx.MockTransport(dashboard))
    async with ResultsClient(f"http://127.0.0.1:{closed_port()}", "token") as down, up:
        first = RunExecutor(PAPER, info, StaticDirectory(mesh), agents, down, store, options=options)
        task = asyncio.create_task(first.execute())
        await wait_for("the backlog", lambda: store.encoded and backlog(store.status) == "True", task)
        paused = store.status
        assert paused["planned"] == 30 + 5 * 30 * 29 and 0 < paused["done"] < paused["planned"]
        assert len(paused["outbox"]) == paused["done"]  # nothing measured is lost, nothing delivered
        assert BUDGET * 0.9 < status_size_bytes(paused) and store.largest <= BUDGET + 10_000
        await asyncio.sleep(0.3)
        assert store.status["done"] == paused["done"]  # no new test while the status is full
        task.cancel()  # the operator restarts here
        await asyncio.gather(task, return_exceptions=True)

        second = RunExecutor(PAPER, info, StaticDirectory(mesh), agents, down, store, options=options)
        task = asyncio.create_task(second.execute())
        await asyncio.sleep(0.3)
        resumed = store.status
        # resumed, and still waiting: at most what its exact measure of the status leaves room for (the running
        # count estimates each booked test's `tests` entry generously)
        assert backlog(resumed) == "True" and resumed["done"] - paused["done"] < 15
        assert status_size_bytes(resumed) <= BUDGET
        assert not task.done()

        second.results_client = up  # the dashboard is back
        st = await asyncio.wait_for(task, 120)
    assert st["phase"] == "Succeeded" and st["done"] == st["succeeded"] == 30 + 5 * 30 * 29
    assert st["outbox"] == [] and st["delivered"] == st["done"] and backlog(st) == "False"
    # each measurement exactly once; the loopback figures on their nodes
    assert len(dashboard.received) == st["done"] - 30 and set(dashboard.received.values()) == {1}
    assert dashboard.loopback == {a.node: 72.7 for a in mesh}
    assert store.largest <= BUDGET + 10_000 < ETCD_LIMIT


async def test_without_a_results_endpoint_a_full_status_ends_the_run_and_keeps_what_it_measured() -> None:
    mesh = [Agent(f"dtn-{i}", f"10.0.0.{i}") for i in range(4)]
    store = EtcdSizedStore()
    ex = RunExecutor(parse_spec({"protocols": ["gridftp"], "streams": [1]}),
                     RunInfo("default", "small", "small-1", str(uuid.uuid4())), StaticDirectory(mesh),
                     InstantAgents(), None, store, options=ExecutorOptions(status_budget_bytes=20_000))
    st = await asyncio.wait_for(ex.execute(), 30)
    failed = {c["type"]: c for c in st["conditions"]}["Failed"]
    assert st["phase"] == "Failed" and failed["reason"] == "OutboxFull" and "spec.results" in failed["message"]
    assert 0 < st["done"] < st["planned"] == 4 + 24 and len(st["outbox"]) == st["done"]
    assert store.largest < 20_000 + 10_000


def test_a_status_budget_at_or_above_the_compaction_limit_is_refused() -> None:
    assert Settings.from_env({"TPCMESH_OPERATOR_STATUS_BUDGET_BYTES": "500000"}).status_budget_bytes == 500_000
    with pytest.raises(SettingsError, match="STATUS_BUDGET_BYTES: 1000000 must be positive and below 1000000"):
        Settings.from_env({"TPCMESH_OPERATOR_STATUS_BUDGET_BYTES": str(MAX_STATUS_BYTES)})

"""The run executor against REAL agents (tpcmesh-agent processes on 127.0.1.x) and the REAL dashboard
(gunicorn + Django on the suite's PostgreSQL, stopped and started to play an outage).

Faults: an agent killed mid-run, the dashboard down for the whole run then back, the executor stopped and resumed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import httpx
import pytest
from prometheus_client import REGISTRY
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import Agent, AgentsClient
from tpcmesh_operator.run.delivery import ResultsClient
from tpcmesh_operator.run.executor import (
    ExecutorOptions,
    JsonFileStatusStore,
    MemoryStatusStore,
    RunExecutor,
    RunInfo,
    StaticDirectory,
)

from tests.support.live_dashboard import LiveDashboard

pytestmark = pytest.mark.integration

FAST = ExecutorOptions(poll_interval=0.1, unreachable_grace=1.0, timeout_grace=5.0, delivery_max_seconds=5.0)
SPEC = {"protocols": ["builtin"], "streams": [1], "concurrency": 2, "fileSet": {"count": 2, "size": "1MB"},
        "latency": {"enabled": True, "count": 2}, "loopback": {"enabled": False}, "timeoutSeconds": 30, "retries": 0}


def stored(dashboard: LiveDashboard, run: RunInfo) -> list[dict]:
    return [m for m in dashboard.measurements() if m["run"] == run.run_uid]


def run_info() -> RunInfo:
    return RunInfo("default", "it-bench", f"it-bench-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))


def executor(spec, agents, client, results, store, directory=None, **kw) -> RunExecutor:
    return RunExecutor(parse_spec(spec), kw.pop("run", None) or run_info(), directory or StaticDirectory(agents),
                       client, results, store, options=kw.pop("options", FAST), **kw)


async def test_full_mesh_delivers_every_measurement_once(mesh, shared_token, tpcmesh_pki, dashboard) -> None:
    handles, agents = mesh(3)
    info = run_info()
    progress = []
    events = []
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                      dashboard.token) as rc:
        store = MemoryStatusStore()
        st = await executor(SPEC, agents, ac, rc, store, run=info, on_progress=progress.append,
                            on_event=lambda *e: events.append(e)).execute()
    assert st["phase"] == "Succeeded", st.get("message")
    assert (st["planned"], st["succeeded"], st["failed"]) == (12, 12, 0)  # 6 pairs x (rtt + builtin/1)
    assert st["totalRounds"] == 12 and st["currentRound"] == 12
    assert st["outbox"] == [] and st["delivered"] == 12 and st["undelivered"] == 0
    rows = stored(dashboard, info)
    assert len(rows) == 12 and len({r["id"] for r in rows}) == 12
    assert len({(r["source"], r["destination"], r["protocol"], r["streams"]) for r in rows}) == 12  # each test once
    assert st["tests"] == {} and st["recentFailures"] == []  # finished rounds leave only their counts
    assert {r["protocol"] for r in rows} == {"rtt", "builtin"}
    names = {h.name for h in handles}
    for r in rows:
        assert {r["source"], r["destination"]} <= names and r["source"] != r["destination"]
        assert r["rtt_ms"] is not None and r["rtt_ms"] >= 0
        if r["protocol"] == "builtin":
            assert r["total_bytes"] == 2 * 10**6 and r["throughput_gbps"] > 0 and r["checksum"] in ("ok", "skipped")
    assert progress[-1].done == 12 and progress[-1].total == 12
    # each probe test traced the source's path (the source agent's tracepath): one loopback hop, the destination
    paths = httpx.get(f"{dashboard.url}/api/v1/paths/?run={info.run_uid}&limit=100", timeout=10).json()["results"]
    address = {h.name: h.address for h in handles}
    assert sorted((p["source"], p["destination"]) for p in paths) == sorted(
        (r["source"], r["destination"]) for r in rows if r["protocol"] == "rtt")
    for p in paths:
        assert p["error"] is None and p["reached"] and p["hops"] == [address[p["destination"]]], p
        assert p["pmtu"] and p["pmtu_reduced"] is False and p["changed"] is None
    a, b = sorted(names)[:2]
    assert REGISTRY.get_sample_value("tpcmesh_operator_last_throughput_bits_per_second",
                                     {"source": a, "destination": b, "protocol": "builtin", "streams": "1"}) > 0
    assert REGISTRY.get_sample_value("tpcmesh_operator_tests_total", {"protocol": "rtt", "status": "succeeded"}) >= 6
    assert REGISTRY.get_sample_value("tpcmesh_operator_runs_total", {"outcome": "succeeded"}) >= 1
    assert any(e[1] == "Started" for e in events) and any(e[1] == "Completed" for e in events)
    assert store.status["phase"] == "Succeeded"


async def test_agent_killed_mid_run_fails_its_pairs_without_stalling(mesh, shared_token, tpcmesh_pki) -> None:
    # a slow source (1 MB/s per connection) keeps each builtin test ~2 s, so the kill lands mid-run
    handles, agents = mesh(3, builtin_max_rate=1_000_000)
    victim = handles[2]
    spec = {**SPEC, "latency": False, "fileSet": {"count": 2, "size": "2MB"}}
    killed = asyncio.Event()
    directory = StaticDirectory(agents)

    def on_progress(p) -> None:
        if p.done >= 2 and not killed.is_set():
            victim.kill()
            killed.set()
            # its pod stops being Ready a moment later (in a cluster: the kubelet's probe fails)
            asyncio.get_running_loop().call_later(1.5, directory.remove, victim.name)

    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac:
        ex = executor(spec, agents, ac, None, MemoryStatusStore(), directory=directory, on_progress=on_progress)
        st = await asyncio.wait_for(ex.execute(), timeout=90)
    assert killed.is_set()
    assert st["done"] == st["planned"] == 6
    tests = {f"{m['source']}>{m['destination']}": m for m in st["outbox"]}  # no results endpoint: all wait there
    failed = {k: v for k, v in tests.items() if v["status"] != "succeeded"}
    assert failed, tests
    assert all(victim.name in k for k in failed), failed
    for v in failed.values():
        assert v["error"], v
    assert any("vanished" in v["error"] for v in failed.values()), failed
    assert {f["id"] for f in st["recentFailures"]} == {v["id"] for v in failed.values()}
    # pairs not touching the victim succeeded
    others = [k for k in tests if victim.name not in k]
    assert others and all(tests[k]["status"] == "succeeded" for k in others)
    assert st["phase"] == "Succeeded" and st["failed"] == len(failed)
    assert len(st["outbox"]) == 6  # no results endpoint: everything waits in the outbox


async def test_dashboard_down_whole_run_then_back(mesh, shared_token, tpcmesh_pki, dashboard) -> None:
    _, agents = mesh(2)
    info = run_info()
    dashboard.stop()
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                      dashboard.token) as rc:
        ex = executor(SPEC, agents, ac, rc, MemoryStatusStore(), run=info,
                      options=ExecutorOptions(poll_interval=0.1, delivery_max_seconds=1.0))
        st = await ex.execute()
        assert st["phase"] == "Succeeded" and st["undelivered"] == 4 == len(st["outbox"])
        cond = {c["type"]: c for c in st["conditions"]}
        assert cond["Delivered"]["status"] == "False" and cond["Delivered"]["reason"] == "DashboardUnavailable"
        await asyncio.to_thread(dashboard.start)
        assert stored(dashboard, info) == []
        waiting = {m["id"] for m in st["outbox"]}
        left = await ex.deliver(20)
    assert left == 0 and ex.status["outbox"] == [] and ex.status["delivered"] == 4
    rows = stored(dashboard, info)
    assert len(rows) == 4 and {r["id"] for r in rows} == waiting
    assert {c["type"]: c["status"] for c in ex.status["conditions"]}["Delivered"] == "True"


class CountingClient(AgentsClient):
    """The real client, counting the transfers it starts (by test_id)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.started: Counter[str] = Counter()

    async def start_transfer(self, agent, request):
        self.started[request["test_id"]] += 1
        return await super().start_transfer(agent, request)


async def test_stopped_and_resumed_run_does_not_redo_finished_tests(mesh, shared_token, tpcmesh_pki, dashboard,
                                                                     tmp_path) -> None:
    _, agents = mesh(3, builtin_max_rate=4_000_000)
    store = JsonFileStatusStore(tmp_path / "run.json")
    info = run_info()
    spec = {**SPEC, "streams": [2, 1]}  # rtt + builtin/2 + builtin/1 = 18 tests in 18 rounds
    async with CountingClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                        dashboard.token) as rc:
        first = executor(spec, agents, ac, rc, store, run=info)
        task = asyncio.create_task(first.execute())
        while (first.status.get("done") or 0) < 9:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        saved = await store.load()
        # the finished tests: their measurements are either acknowledged by the dashboard or waiting in the outbox
        # (both, if the stop cut a batch between the dashboard's answer and the status save)
        finished = {r["id"]: r for r in stored(dashboard, info)} | {m["id"]: m for m in saved["outbox"]}
        assert 9 <= saved["done"] < 18 and saved["phase"] == "Running"
        assert len(finished) == saved["done"] and saved["currentRound"] <= saved["done"]
        posted_before = Counter(ac.started)

        second = executor(spec, agents, ac, rc, store, run=info)
        st = await second.execute()
    assert st["phase"] == "Succeeded" and (st["done"], st["succeeded"]) == (18, 18)
    rows = {r["id"]: r for r in stored(dashboard, info)}
    for tid, m in finished.items():
        assert rows[tid]["status"] == m["status"]  # its measurement, stored under its first id
        assert ac.started[tid] == posted_before[tid]  # not started again
    # a test cut mid-flight is re-posted once with the same id (the agent answers 200 with the same record)
    assert max(ac.started.values()) <= 2
    assert len(ac.started) == 12  # 12 transfers (rtt probes are not transfers), none under a second id
    # stored exactly once (a batch cut by the stop between the dashboard's answer and the status save is re-sent;
    # the dashboard is idempotent by id)
    assert len(rows) == 18 and len({(r["source"], r["destination"], r["protocol"], r["streams"])
                                    for r in rows.values()}) == 18
    assert set(ac.started) <= set(rows) and st["tests"] == {}


async def test_every_protocol_through_the_executor(mesh, shared_token, tpcmesh_pki) -> None:
    """One run over several movers: the requests the executor builds work for each protocol. (XRootD is left out
    here: its servers listen on the wildcard address, so two local agents cannot both run it on the same ports.)"""
    protocols = ["builtin", "gridftp", "iperf3"]
    _, agents = mesh(2, protocols=tuple(protocols), run_user="nobody")
    spec = {**SPEC, "protocols": protocols, "streams": [2], "latency": {"enabled": True, "count": 2},
            "timeoutSeconds": 4, "iperf3": {"durationSeconds": 1}}
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac:
        st = await executor(spec, agents, ac, None, MemoryStatusStore()).execute()
    bad = {(m["source"], m["protocol"]): m["error"] for m in st["outbox"] if m["status"] != "succeeded"}
    assert not bad, bad
    assert st["done"] == 8  # 2 pairs x (rtt + 3 protocols)
    by_protocol = {m["protocol"]: m for m in st["outbox"]}
    assert set(by_protocol) == {"rtt", *protocols}
    for p in protocols:
        assert by_protocol[p]["throughput_gbps"] > 0, by_protocol[p]
        assert by_protocol[p]["rtt_ms"] is not None
    # the spec's iperf3.durationSeconds reached iperf3 (the agent's default would be half the timeout, 2 s)
    [iperf3_file] = by_protocol["iperf3"]["files"]
    assert iperf3_file["bytes"] > 0 and 0.9 < iperf3_file["seconds"] < 1.6, iperf3_file


async def test_timeouts_fail_the_test_after_the_retries(mesh, shared_token, tpcmesh_pki) -> None:
    # 200 kB/s per connection and 2 x 1 MB: ~5 s per attempt, the timeout is 1 s; one retry (a new test id)
    _, agents = mesh(2, builtin_max_rate=200_000)
    spec = {**SPEC, "latency": False, "timeoutSeconds": 1, "retries": 1}
    opts = ExecutorOptions(poll_interval=0.1, unreachable_grace=1.0, timeout_grace=1.0, delivery_max_seconds=1.0)
    async with CountingClient(shared_token[0], tpcmesh_pki.ca_file) as ac:
        st = await asyncio.wait_for(executor(spec, agents, ac, None, MemoryStatusStore(), options=opts).execute(), 60)
    assert (st["done"], st["failed"]) == (2, 2) and st["phase"] == "Failed"
    assert len(ac.started) == 4 and set(ac.started.values()) == {1}  # 2 tests x 2 attempts, each its own id
    assert len(st["recentFailures"]) == 2
    for t in [*st["outbox"], *st["recentFailures"]]:
        assert t["error"], t


class FromBeforeWait(AgentsClient):
    """The real client playing agents from before GET ?wait= (an upgrade rolls the operator first): every answer
    comes at once. Counts the GETs."""

    gets = 0

    async def get_transfer(self, agent, test_id, wait=0.0):
        self.gets += 1
        return await super().get_transfer(agent, test_id)


async def test_the_run_goes_on_when_a_test_ends_not_at_the_next_poll(mesh, shared_token, tpcmesh_pki) -> None:
    """The agent holds each GET until its test ends: with a 25 s poll interval two ~2 s tests end in seconds. An
    agent that answers at once is still polled at the interval, not in a loop."""
    _, agents = mesh(2, builtin_max_rate=1_000_000)  # 2 x 2 MB at 1 MB/s per connection: ~2 s per test
    spec = {**SPEC, "latency": False, "fileSet": {"count": 2, "size": "2MB"}}
    slow_poll = ExecutorOptions(poll_interval=25.0, unreachable_grace=5.0, timeout_grace=5.0, delivery_max_seconds=1.0)
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac:
        st = await asyncio.wait_for(executor(spec, agents, ac, None, MemoryStatusStore(), options=slow_poll).execute(),
                                    20)  # 25 s per test if the GETs did not wait for the end
    assert (st["done"], st["failed"]) == (2, 0), st
    poll = 0.3
    opts = ExecutorOptions(poll_interval=poll, unreachable_grace=5.0, timeout_grace=5.0, delivery_max_seconds=1.0)
    async with FromBeforeWait(shared_token[0], tpcmesh_pki.ca_file) as old:
        t0 = asyncio.get_running_loop().time()
        st = await asyncio.wait_for(executor(spec, agents, old, None, MemoryStatusStore(), options=opts).execute(), 60)
        elapsed = asyncio.get_running_loop().time() - t0
    assert (st["done"], st["failed"]) == (2, 0), st
    assert 2 <= old.gets <= elapsed / poll + 2 * 2, (old.gets, elapsed)  # one GET per interval, and the last


async def test_a_stopped_run_cancels_its_running_test_and_keeps_what_it_measured(mesh, shared_token,
                                                                                  tpcmesh_pki) -> None:
    # 500 kB/s per connection, 2 x 4 MB: a test takes ~8 s, the stop lands in the first one
    handles, agents = mesh(2, builtin_max_rate=500_000)
    spec = {**SPEC, "latency": False, "fileSet": {"count": 2, "size": "4MB"}}
    running = asyncio.Event()
    events: list = []

    def on_progress(p) -> None:
        if p.running and p.gbps > 0:
            running.set()

    async with CountingClient(shared_token[0], tpcmesh_pki.ca_file) as ac:
        ex = executor(spec, agents, ac, None, MemoryStatusStore(), on_progress=on_progress,
                      on_event=lambda *e: events.append(e))
        task = asyncio.create_task(ex.execute())
        await asyncio.wait_for(running.wait(), 30)
        ex.request_stop("StopRequested", "Replaced by it-bench-2")
        st = await asyncio.wait_for(task, 30)
    assert st["phase"] == "Failed" and (st["planned"], st["done"]) == (2, 1)  # the second test never started
    assert len(ac.started) == 1
    cond = {c["type"]: c for c in st["conditions"]}["Failed"]
    assert cond["reason"] == "StopRequested" and "Replaced by it-bench-2: 1 of 2 tests done" in cond["message"]
    (m,) = st["outbox"]
    assert m["id"] in ac.started and m["status"] == "cancelled"
    assert "cancelled by request after" in m["error"] and m["total_bytes"] is not None  # the agent's own record
    logs = "\n".join(h.log() for h in handles)
    assert f"Started transfer {m['id']}" in logs
    assert any(e[1] == "StopRequested" for e in events)


@pytest.mark.parametrize("protocol", ["builtin", "iperf3"])
async def test_loopback_round_gives_each_node_its_own_ceiling(mesh, shared_token, tpcmesh_pki, dashboard,
                                                              protocol) -> None:
    handles, agents = mesh(3, protocols=("builtin", "iperf3"), run_user="nobody")
    info = run_info()
    spec = {**SPEC, "latency": {"enabled": False}, "loopback": {"enabled": True, "protocol": protocol},
            "timeoutSeconds": 4, "iperf3": {"durationSeconds": 2}}
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                      dashboard.token) as rc:
        st = await executor(spec, agents, ac, rc, MemoryStatusStore(), run=info).execute()
    assert st["phase"] == "Succeeded" and st["failed"] == 0, st.get("recentFailures")
    assert (st["planned"], st["done"], st["totalRounds"]) == (3 + 6, 9, 1 + 6)
    assert st["outbox"] == [] and st["delivered"] == 9
    rows = stored(dashboard, info)
    assert len(rows) == 6 and all(r["source"] != r["destination"] for r in rows)  # the pairs, as measurements
    nodes = {n["name"]: n for n in httpx.get(f"{dashboard.url}/api/v1/nodes/?limit=100", timeout=10).json()["results"]}
    for h in handles:
        assert nodes[h.name]["loopback_gbps"] > 0, nodes[h.name]
        assert f"from {h.address}:" in h.log()  # it pulled from itself


async def test_nodes_and_pairs_in_maintenance_are_left_out_and_named(mesh, shared_token, tpcmesh_pki,
                                                                     dashboard) -> None:
    """A node annotated tpcmesh.io/maintenance-until (future) and a pair in a dashboard window are not measured;
    the status names both; an annotation whose time does not parse is reported and its node measured."""
    from datetime import UTC, datetime, timedelta

    from tpcmesh_operator.plan import maintenance

    _, agents = mesh(4)
    names = sorted(a.node for a in agents)
    until = (datetime.now(UTC) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    by_name = {a.node: a for a in agents}
    off = by_name[names[0]]
    by_name[names[0]] = Agent(**{**off.__dict__, "annotations": {maintenance.UNTIL: until,
                                                                 maintenance.REASON: "NIC swap"}})
    typo = by_name[names[3]]
    by_name[names[3]] = Agent(**{**typo.__dict__, "annotations": {maintenance.UNTIL: "tomorrow"}})
    headers = {"Authorization": f"Token {dashboard.token}"}
    async with httpx.AsyncClient(base_url=dashboard.url, headers=headers) as http:
        seed = {"benchmark": {"namespace": "default", "name": "it-bench"}, "run": {"uid": str(uuid.uuid4()),
                                                                                  "name": "seed"},
                "measurements": [], "nodes": [{"name": n} for n in names]}
        assert (await http.post("/api/v1/ingest/", json=seed)).status_code == 200
        r = await http.post("/api/v1/maintenance/", json={"source": names[1], "destination": names[2],
                                                          "reason": "fibre works", "ends_at": until})
        assert r.status_code == 201, r.text
    info = run_info()
    events: list = []
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                      dashboard.token) as rc:
        st = await executor(SPEC, list(by_name.values()), ac, rc, MemoryStatusStore(), run=info,
                            on_event=lambda *e: events.append(e)).execute()
    assert st["phase"] == "Succeeded", st.get("message")
    assert st["planned"] == 2 * (3 * 2 - 2)  # 3 nodes, 6 pairs, less the pair both ways; rtt + builtin each
    assert sorted(a["node"] for a in st["agents"]) == names[1:]
    assert st["inMaintenance"] == f"{names[0]}, {names[1]}↔{names[2]}"
    assert {(w["origin"], w["reason"]) for w in st["maintenance"]} == {("annotation", "NIC swap"),
                                                                         ("dashboard", "fibre works")}
    rows = stored(dashboard, info)
    assert len(rows) == st["planned"]
    ends = {frozenset((r["source"], r["destination"])) for r in rows}
    assert all(names[0] not in e for e in ends) and frozenset(names[1:3]) not in ends
    assert any(e[1] == "BadMaintenanceAnnotation" and names[3] in e[2] and "tomorrow" in e[2] for e in events)
    assert any(e[1] == "Started" and "in maintenance" in e[2] for e in events)


async def test_congestion_control_settings_reach_the_agents_and_the_dashboard(mesh, shared_token, tpcmesh_pki,
                                                                              dashboard) -> None:
    """spec.tcp.congestionControl [cubic, bbr]: each a setting of its own; the source sends with it, the row says
    which was asked for, and the TCP view (with the senders' retransmits) is stored."""
    handles, agents = mesh(2)
    info = run_info()
    spec = {**SPEC, "latency": {"enabled": False}, "tcp": {"congestionControl": ["cubic", "bbr"]}}
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                      dashboard.token) as rc:
        st = await executor(spec, agents, ac, rc, MemoryStatusStore(), run=info).execute()
    assert st["phase"] == "Succeeded", st.get("message")
    rows = stored(dashboard, info)
    assert sorted((r["source"], r["congestion_control"]) for r in rows) == sorted(
        (h.name, cc) for h in handles for cc in ("cubic", "bbr"))
    for r in rows:
        assert isinstance(r["retransmits"], int)
        detail = httpx.get(f"{dashboard.url}/api/v1/measurements/{r['id']}/", timeout=10,
                           headers={"Accept": "application/json"}).json()
        assert detail["tcp"]["sender"]["congestion"] == [r["congestion_control"]]
        assert all(f["tcp"]["sender"]["connections"] == 1 for f in detail["files"])


async def test_repeats_measure_each_setting_k_times_and_the_grid_shows_their_median(mesh, shared_token,
                                                                                   tpcmesh_pki, dashboard) -> None:
    """spec.repeats 3: every builtin test of a pair runs three times in the run (RTT once), each row names its
    repeat, and the dashboard's latest cell is the median of the three with its interval."""
    handles, agents = mesh(2)
    info = run_info()
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                      dashboard.token) as rc:
        st = await executor({**SPEC, "repeats": 3}, agents, ac, rc, MemoryStatusStore(), run=info).execute()
    assert st["phase"] == "Succeeded", st.get("message")
    assert (st["planned"], st["succeeded"]) == (8, 8)  # 2 directions x (rtt + 3 x builtin/1)
    rows = stored(dashboard, info)
    detail = [httpx.get(f"{dashboard.url}/api/v1/measurements/{r['id']}/", timeout=10,
                        headers={"Accept": "application/json"}).json() for r in rows]
    assert sorted((d["source"], d["protocol"], d["repeat"]) for d in detail) == sorted(
        [(h.name, "rtt", None) for h in handles] + [(h.name, "builtin", k) for h in handles for k in range(3)])
    grid = httpx.get(f"{dashboard.url}/api/v1/grid/", timeout=10, headers={"Accept": "application/json"},
                     params={"benchmark": f"{info.benchmark_namespace}/{info.benchmark_name}", "protocol": "builtin",
                             "streams": 1}).json()
    names = {h.name for h in handles}  # the benchmark is shared with the module's other tests
    mine = [c for c in grid["cells"] if {c["source"], c["destination"]} <= names]
    assert len(mine) == 2
    for cell in mine:
        runs = sorted(d["throughput_gbps"] for d in detail
                      if (d["source"], d["destination"], d["protocol"]) == (cell["source"], cell["destination"],
                                                                            "builtin"))
        assert cell["count"] == 3 and cell["value"] == pytest.approx(runs[1])
        assert runs[0] <= cell["low"] <= cell["value"] <= cell["high"] <= runs[2]

"""The run status's bookkeeping (pure): bounded for large meshes, and still enough to resume a run."""

from __future__ import annotations

import random

from tpcmesh_operator.plan.planner import RTT, Test, plan
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run import status as run_status
from tpcmesh_operator.run.agents import Agent
from tpcmesh_operator.run.executor import (
    failed_measurement,
    measurement_from_record,
    rtt_measurement,
    status_size_bytes,
)

PAPER = parse_spec({"protocols": ["xrootd-https", "gridftp"], "streams": [8, 1], "latency": True})
LIMIT = 200_000  # bytes, without the outbox; etcd refuses objects above ~1.5 MB, kube.compact trims from 1 MB


def agents(n: int) -> list[Agent]:
    """Agents as discovery reports them in a cluster: long node names, a dozen node labels."""
    out = []
    for i in range(n):
        node = f"worker-{i:03d}.site-{i % 7}.grid.example.org"
        labels = {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "topology.kubernetes.io/zone": f"site-{i % 7}", "tpcmesh.io/site": f"site-{i % 7}",
                  "tpcmesh.io/nic-speed-gbps": "100", "node.kubernetes.io/instance-type": "dtn-2x100g"}
        out.append(Agent(node=node, address=f"10.{i // 250}.{i % 250}.17", labels=labels, name=f"tpcmesh-agent-{i}"))
    return out


def measurement(test: Test, rnd: random.Random, status: dict) -> dict:
    """What the executor books for one test: an RTT probe, a failed test with a long error, or an agent record."""
    tid = f"{rnd.getrandbits(128):032x}"
    rtt = run_status.get_rtt(status, PLAN_AGENTS[0], test.source, test.destination)
    if test.setting.protocol == RTT:
        base = rnd.uniform(0.05, 150.0)
        probe = {"median_ms": base * 1.01, "min_ms": base, "max_ms": base * 1.3}
        return rtt_measurement(tid, test, probe, "2026-03-01T00:00:00.000Z") | {"_probe": probe}
    if rnd.random() < 0.03:
        return failed_measurement(tid, test, PAPER, "transfer failed: " + "stderr tail " * 200,
                                  "2026-03-01T00:00:00.000Z", rtt)
    files = [{"name": f"file-{k:02d}", "bytes": 10**9, "seconds": 1.23, "gbps": 6.5} for k in range(11)]
    record = {"test_id": tid, "protocol": test.setting.protocol, "streams": test.setting.streams,
              "concurrency": 11, "file_size": 10**9, "file_count": 11, "total_bytes": 11 * 10**9,
              "throughput_gbps": rnd.uniform(1, 90), "status": "succeeded", "checksum": "ok",
              "started_at": "2026-03-01T00:00:00.000Z", "finished_at": "2026-03-01T00:00:10.000Z", "files": files}
    return measurement_from_record(record, test.source, test.destination, rtt)


PLAN_AGENTS: list[tuple[str, ...]] = [()]


def test_status_of_a_100_agent_paper_run_stays_small() -> None:
    """100 loopback tests, then 5 settings x 100 x 99 tests in 990 rounds: the status stays under LIMIT at every
    round's fullest point (all its tests booked, their measurements still waiting for the dashboard), and the counts
    add up."""
    mesh = agents(100)
    p = plan({a.node: a.labels for a in mesh}, PAPER)
    PLAN_AGENTS[0] = p.agents
    assert len(p.settings) == 5 and p.num_tests == 100 + 5 * 100 * 99 and p.num_rounds == 1 + 990
    status = run_status.initial_status(mesh)
    status.update(planned=p.num_tests, totalRounds=p.num_rounds, conditions=[])
    rnd = random.Random(7)
    sizes: list[int] = []
    waiting: list[int] = []
    failed = unsent = 0
    for i, tests in enumerate(p.rounds()):
        for t in tests:
            m = measurement(t, rnd, status)
            probe = m.pop("_probe", None)
            if probe is not None:
                run_status.put_rtt(status, p.agents, t.source, t.destination, probe["median_ms"])
            assert run_status.book_test(status, t.key, m)
            failed += m["status"] != "succeeded"
            unsent += m["status"] != "succeeded" and t.setting.loopback  # a failed loopback has no figure to send
        if i % 9 == 0 or i >= p.num_rounds - 2:
            outbox = status.pop("outbox")  # O(undelivered): the round's 50 measurements with their 11 files each
            sizes.append(status_size_bytes(status))
            waiting.append(status_size_bytes({"outbox": outbox}))
            status["outbox"] = outbox
        status["delivered"] += len(status["outbox"])  # the dashboard acknowledges after the round
        status["outbox"] = []
        run_status.finish_round(status, i)
    assert max(sizes) < LIMIT, f"largest status {max(sizes)} bytes (+ outbox) at sample {sizes.index(max(sizes))}"
    assert max(s + w for s, w in zip(sizes, waiting, strict=True)) < 2 * LIMIT
    assert status_size_bytes(status) < LIMIT
    assert (status["done"], status["failed"]) == (p.num_tests, failed) and failed > run_status.MAX_RECENT_FAILURES
    assert status["succeeded"] == p.num_tests - failed and status["delivered"] == p.num_tests - unsent
    assert len(status["recentFailures"]) == run_status.MAX_RECENT_FAILURES
    assert all(len(f["error"]) <= 300 for f in status["recentFailures"])
    assert status["currentRound"] == p.num_rounds and status["tests"] == {}
    # every pair's RTT is still there for the measurements of a resumed run
    a, b = p.agents[3], p.agents[42]
    rtt = run_status.get_rtt(status, p.agents, a, b)
    assert rtt is not None and 0.05 <= rtt["median_ms"] <= 152.0


def test_a_round_keeps_its_finished_keys_until_it_is_over() -> None:
    mesh = agents(4)
    p = plan([a.node for a in mesh], PAPER)
    status = run_status.initial_status(mesh)
    first = p.round(0)
    m = rtt_measurement("id-1", first[0], {"median_ms": 1.0, "min_ms": 0.5, "max_ms": 2.0}, "t")
    assert run_status.book_test(status, first[0].key, m)
    # a second result of one test is not counted
    assert not run_status.book_test(status, first[0].key, dict(m, id="id-2"))
    assert status["tests"] == {first[0].key: {"status": "succeeded", "id": "id-1", "gbps": None, "error": None}}
    assert (status["done"], status["succeeded"], status["failed"], status["undelivered"]) == (1, 1, 0, 1)
    # a resumed executor starts at currentRound and skips the keys in `tests`
    assert status["currentRound"] == 0
    run_status.finish_round(status, 0)
    assert status["currentRound"] == 1 and status["tests"] == {} and status["done"] == 1


def test_rtt_table_round_trip_and_old_status_migrates() -> None:
    names = ("a", "b", "c")
    status: dict = {}
    run_status.put_rtt(status, names, "c", "a", 12.34567)
    assert run_status.get_rtt(status, names, "c", "a") == {"median_ms": 12.346}
    assert run_status.get_rtt(status, names, "a", "c") is None and run_status.get_rtt(status, names, "a", "zz") is None
    old = {"rtt": {"a>b": {"median_ms": 1.0, "min_ms": 0.5, "max_ms": 2.0}}, "tests": {"rtt:a>b": {}},
           "done": 1, "succeeded": 1, "failed": 0}
    run_status.migrate_status(old, names)
    assert "rtt" not in old and old["recentFailures"] == [] and old["done"] == 1
    assert run_status.get_rtt(old, names, "a", "b") == {"median_ms": 1.0}
    assert old["rttMs"] == [[None, 1.0, None], None, None]


def test_a_transfer_carries_its_own_familys_rtt_never_the_others() -> None:
    """Dual stack: the IPv6 probe of a pair fails (the IPv4 one succeeded earlier in the run): the IPv6 transfers
    carry no RTT, not the IPv4 one; the IPv4 transfers carry IPv4's."""
    import asyncio
    import uuid

    from tpcmesh_operator.run.executor import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory

    from tests.unit.operator.instant import InstantAgents

    class NoIPv6Echo(InstantAgents):
        async def probe_rtt(self, agent, host, port, count) -> dict:
            if ":" in host:
                return {"error": "no answer over IPv6"}
            return await super().probe_rtt(agent, host, port, count)

    mesh = [Agent(f"ds-{i}", f"10.9.1.{i}", address6=f"fd00::{i + 1}") for i in range(2)]
    spec = parse_spec({"protocols": ["builtin"], "streams": [1], "loopback": {"enabled": False},
                       "latency": {"path": False}, "addressFamilies": ["ipv4", "ipv6"]})
    store = MemoryStatusStore()
    st = asyncio.run(RunExecutor(spec, RunInfo("ns", "ds", "ds-1", str(uuid.uuid4())), StaticDirectory(mesh),
                                 NoIPv6Echo(), None, store, options=ExecutorOptions()).execute())
    rows = [m for m in st["outbox"] if m["protocol"] == "builtin"]
    assert len(rows) == 4 and st["failed"] == 2  # the two IPv6 probes
    assert {m.get("address_family", "ipv4"): m.get("rtt_ms") for m in rows} == {"ipv4": 12.3, "ipv6": None}

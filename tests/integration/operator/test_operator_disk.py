"""Disk mode (issue #28) end to end with the run executor and REAL agents: two agents with a disk path on the real
disk, one whose disk path is memory-backed (tmpfs, which the agent refuses). The good pair's disk->disk tests
succeed with the agents' `storage`; every test with the tmpfs node as either end is recorded failed with the
agent's reason naming the node and the path, and the run goes on. Each good node's disk ceilings (a real fio run)
reach the ingest batch's nodes[]."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import Agent, AgentsClient
from tpcmesh_operator.run.executor import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory

pytestmark = pytest.mark.integration

FAST = ExecutorOptions(poll_interval=0.1, unreachable_grace=1.0, timeout_grace=5.0, delivery_max_seconds=1.0)
SPEC = {"protocols": ["builtin"], "streams": [2], "concurrency": 2, "fileSet": {"count": 2, "size": "3MB"},
        "latency": False, "loopback": {"enabled": False}, "storage": ["disk"], "timeoutSeconds": 30, "retries": 0}


@pytest.fixture
def disk_root():
    d = Path(tempfile.mkdtemp(prefix="tpcmesh-disk-", dir="/var/tmp"))  # the real disk (/tmp may be tmpfs)
    shm = Path(tempfile.mkdtemp(prefix="tpcmesh-disk-", dir="/dev/shm"))
    yield d, shm
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(shm, ignore_errors=True)


async def test_disk_pairs_work_and_a_memory_backed_path_fails_its_tests_with_the_reason(
        agent_factory, shared_token, tpcmesh_pki, disk_root) -> None:
    real, shm = disk_root
    for end in ("a", "b"):
        (real / end).mkdir()
    handles = [agent_factory(token_file=shared_token[1], disk_dir=real / end, disk_reserve_bytes="1M")
               for end in ("a", "b")] + [agent_factory(token_file=shared_token[1], disk_dir=shm)]
    agents = [Agent(node=h.name, address=h.address, ports={"control": h.api_port, "builtin": h.builtin_port})
              for h in handles]
    good, bad = {handles[0].name, handles[1].name}, handles[2].name
    events: list = []
    info = RunInfo("default", "disk", f"disk-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac:
        ex = RunExecutor(parse_spec(SPEC), info, StaticDirectory(agents), ac, None, MemoryStatusStore(), options=FAST,
                         on_event=lambda *e: events.append(e))
        st = await ex.execute()
    assert (st["planned"], st["succeeded"], st["failed"]) == (6, 2, 4), st["recentFailures"]
    assert st["phase"] == "Succeeded"  # with failures: CompletedWithFailures, and the run went on to the end
    rows = [m for m in st["outbox"] if not m.get("kind")]
    assert len(rows) == 6
    for m in rows:
        assert m["storage"]["source"] == m["storage"]["destination"] == "disk"
        if {m["source"], m["destination"]} == good:
            assert m["status"] == "succeeded" and m["checksum"] == "ok" and m["total_bytes"] == 6 * 10**6
            assert m["storage"]["direct_write"] is True
        else:
            # the agent's refusal: as source, its disk set; as destination, its landing. Both name node and path.
            assert m["status"] == "failed"
            assert f"node {bad}: disk path {shm} is memory-backed (tmpfs)" in m["error"], m["error"]
            if m["source"] == bad:
                assert m["error"].startswith(f"disk file set 2x3000000 not ready on {bad}: ")
    # the ceilings: fio on each good disk path, none for the tmpfs node (said in an Event and the status)
    assert set(st["ceilings"]) == good | {bad} and "memory-backed" in st["ceilings"][bad]
    nodes = {n["name"]: n for n in ex._batch(st["outbox"])["nodes"]}
    for name in good:
        assert nodes[name]["disk_read_gbps"] > 0 and nodes[name]["disk_write_gbps"] > 0
        assert st["ceilings"][name] == {"readGbps": nodes[name]["disk_read_gbps"],
                                        "writeGbps": nodes[name]["disk_write_gbps"]}
    assert "disk_read_gbps" not in nodes[bad]
    assert any(e[1] == "StorageCeilingsFailed" and bad in e[2] for e in events)
    assert ex._batch(st["outbox"])["measurements"] == rows  # the ceilings go in nodes[], never as measurements
    # the agents removed what they received; each good disk path holds its set and nothing else
    for end in ("a", "b"):
        assert {p.name for p in (real / end).iterdir()} <= {"incoming", "sets"}
        assert list((real / end).glob("incoming/*")) == []

"""Local mode's disk mode (issue #28): a benchmark asking for disk gives each lab node without a loop disk a
directory of its own on the machine's real disk, and a run measures disk to disk there; the directories go with
the lab."""

from __future__ import annotations

import asyncio
import os
import secrets
import uuid

import pytest
from tpcmesh_lab.diskpath import DISK_DIR
from tpcmesh_lab.mesh import DATA_PREFIX, Certificates, start_agents
from tpcmesh_lab.netns import Lab
from tpcmesh_lab.profile import parse_profile
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import AgentsClient
from tpcmesh_operator.run.executor import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory

pytestmark = pytest.mark.integration

SPEC = {"protocols": ["builtin"], "streams": [1], "concurrency": 2, "fileSet": {"count": 2, "size": "2MB"},
        "latency": False, "loopback": {"enabled": False}, "storage": ["disk"], "timeoutSeconds": 30, "retries": 0}


def test_lab_nodes_get_a_real_disk_directory_when_the_benchmark_asks_for_disk(tmp_path):
    tmp_path.chmod(0o755)
    root = DISK_DIR / f"{DATA_PREFIX}{os.getpid()}-disk"
    with Lab(parse_profile({"nodes": ["a", "b"]}, "disk"), mode="loopback") as lab:
        certs = Certificates.create(tmp_path / "pki", lab.nodes)
        token = secrets.token_urlsafe(32)
        agents = start_agents(lab, certs, token, tmp_path, budget_bytes=10**9, protocols=("builtin",),
                              disk=parse_spec(SPEC).uses_disk)
        for a in agents:
            assert a.info["disk"]["path"] == str(root / a.node.name) and a.info["disk"]["available"], a.info["disk"]

        async def run() -> dict:
            async with AgentsClient(token, certs.ca_file) as ac:
                return await RunExecutor(
                    parse_spec(SPEC), RunInfo("lab", "disk", "disk-1", str(uuid.uuid4())),
                    StaticDirectory([a.agent() for a in agents]), ac, None, MemoryStatusStore(),
                    options=ExecutorOptions(poll_interval=0.1, delivery_max_seconds=1.0)).execute()

        st = asyncio.run(run())
        assert (st["succeeded"], st["failed"]) == (2, 0), st["recentFailures"]
        rows = [m for m in st["outbox"] if not m.get("kind")]
        assert all(m["storage"]["destination"] == "disk" and m["checksum"] == "ok" for m in rows)
        assert {e["source"] for e in st["outbox"] if e.get("kind") == "ceilings"} == {"a", "b"}
        assert (root / "a" / "sets" / "2x2000000").is_dir()
    assert not root.exists()

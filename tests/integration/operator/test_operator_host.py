"""Both ends' host telemetry through the run executor: REAL agents (127.0.1.x) and the REAL dashboard. The
destination's summary comes in its record, the executor asks the source agent for its own after each test
(hosttelemetry.add_source_host), and the dashboard serves both on the measurement; an agent that keeps no
telemetry costs no test."""

from __future__ import annotations

import httpx
import pytest
from tpcmesh_operator.run.agents import AgentsClient
from tpcmesh_operator.run.delivery import ResultsClient
from tpcmesh_operator.run.executor import MemoryStatusStore

from tests.integration.operator.test_operator_executor import SPEC, executor, run_info, stored

pytestmark = pytest.mark.integration


def _detail(dashboard, mid: str) -> dict:
    r = httpx.get(f"{dashboard.url}/api/v1/measurements/{mid}/", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


async def test_each_measurement_carries_both_ends_host_telemetry(mesh, shared_token, tpcmesh_pki, dashboard):
    handles, agents = mesh(2, host_sample_interval=0.25)
    info = run_info()
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                      dashboard.token) as rc:
        st = await executor(SPEC, agents, ac, rc, MemoryStatusStore(), run=info).execute()
    assert st["phase"] == "Succeeded", st.get("message")
    builtin = [r for r in stored(dashboard, info) if r["protocol"] == "builtin"]
    assert len(builtin) == 2
    for row in builtin:
        host = _detail(dashboard, row["id"])["host"]
        assert set(host) == {"source", "destination"}, host
        for end in host.values():
            assert end["interface"]["name"] == "lo" and end["cpu"]["cores"] >= 1
            assert end["processes"]["agent"]["cpu_seconds"] >= 0 and end["limits"]["mtu"] == 65536
        # the source sent the file set's 2 MB over loopback, the destination received them
        assert host["source"]["interface"]["tx_bytes"] >= 2 * 10**6
        assert host["destination"]["interface"]["rx_bytes"] >= 2 * 10**6


async def test_a_source_without_telemetry_leaves_only_the_destinations(mesh, shared_token, tpcmesh_pki, dashboard):
    (quiet,), (quiet_agent,) = mesh(1, host_sample_interval=0)
    (keen,), (keen_agent,) = mesh(1, host_sample_interval=0.25)
    agents = [quiet_agent, keen_agent]
    info = run_info()
    async with AgentsClient(shared_token[0], tpcmesh_pki.ca_file) as ac, ResultsClient(dashboard.url,
                                                                                      dashboard.token) as rc:
        st = await executor(SPEC, agents, ac, rc, MemoryStatusStore(), run=info).execute()
    assert st["phase"] == "Succeeded", st.get("message")
    hosts = {(r["source"], r["destination"]): _detail(dashboard, r["id"])["host"]
             for r in stored(dashboard, info) if r["protocol"] == "builtin"}
    q, k = quiet.name, keen.name
    assert hosts[(q, k)] is not None and set(hosts[(q, k)]) == {"destination"}  # the source keeps none: no guess
    assert hosts[(k, q)] is not None and set(hosts[(k, q)]) == {"source"}  # the destination keeps none

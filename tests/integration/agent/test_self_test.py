"""The grid's diagonal: the operator asks an agent to measure its own loopback ceiling, with the agent's own
address and port as the source. iperf3 (against the agent's own iperf3 server) and the built-in mover (pulling
from its own data server) both work and are not refused as source == destination."""

from __future__ import annotations

import pytest

from tests.integration.agent.test_builtin_transfers import _validator

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def agent(module_agent_factory):
    return module_agent_factory(protocols=("builtin", "iperf3"), run_user="nobody")


@pytest.mark.parametrize("streams", [1, 4])
def test_iperf3_against_itself(agent, streams):
    rec = agent.transfer(protocol="iperf3", source={"host": agent.address, "port": agent.ports["iperf3_port"]},
                         streams=streams, timeout_seconds=4, timeout=30)
    _validator().validate(rec)
    assert rec["status"] == "succeeded", rec
    assert rec["destination_kind"] == "sink" and rec["total_bytes"] > 10**6
    assert rec["throughput_gbps"] > 0 and 0.95 <= rec["peak_gbps"] / rec["throughput_gbps"] < 2
    # the agent's iperf3 server is free again for the next test (a self-test must not leave it busy)
    again = agent.transfer(protocol="iperf3", source={"host": agent.address, "port": agent.ports["iperf3_port"]},
                           streams=1, timeout_seconds=2, timeout=30)
    assert again["status"] == "succeeded", again


@pytest.mark.parametrize("destination, streams", [("sink", 1), ("store", 4)])
def test_builtin_pulls_from_its_own_data_server(agent, destination, streams):
    files = agent.file_set(count=3, size=2_000_003)["files"]
    rec = agent.transfer(protocol="builtin", source={"host": agent.address, "port": agent.builtin_port},
                         file_set={"count": 3, "size": 2_000_003}, files=files, concurrency=3, streams=streams,
                         destination=destination, timeout_seconds=60)
    _validator().validate(rec)
    assert rec["status"] == "succeeded", rec
    assert rec["total_bytes"] == 3 * 2_000_003 and rec["destination_kind"] == destination
    assert rec["checksum"] == ("ok" if destination == "store" else "skipped")
    # the set it served is untouched and the received copies are gone
    assert agent.file_set(count=3, size=2_000_003, verify=True)["files"] == files
    assert not list((agent.data_dir / "data" / "incoming").iterdir())

"""Two real agents with the real XRootD, GridFTP and iperf3 servers: each protocol's record names the program that
made it, in this machine's version at both ends (the source's asked over the protocol), and the agent's version;
the status API lists the versions found at start."""

from __future__ import annotations

from importlib import metadata

import pytest

from tests.integration.agent.test_builtin_transfers import _validator
from tests.integration.agent.test_protocols import ALL, start_pair
from tests.unit.agent.test_versions import LIVE

pytestmark = pytest.mark.integration

COUNT, SIZE = 2, 100_003
PORTS = {"builtin": "builtin_port", "xrootd-https": "xrootd_https_port", "xrootd-root": "xrootd_root_port",
         "gridftp": "gridftp_port", "iperf3": "iperf3_port"}
IMPLEMENTATION = {"builtin": "tpcmesh-agent", "xrootd-https": "xrootd", "xrootd-root": "xrootd",
                  "gridftp": "globus-gridftp-server", "iperf3": "iperf3"}


def live_version(name: str) -> str:
    """The version ``name`` says it is, read here by the test's own pattern (not the agent's parser)."""
    import re
    import subprocess

    if name == "tpcmesh-agent":
        return metadata.version("tpcmesh-agent")
    argv, pattern = LIVE[name]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    found = re.search(pattern, out.stdout + out.stderr, re.MULTILINE)
    assert found, out
    return found.group(1)


@pytest.fixture(scope="module")
def pair(module_agent_factory):
    return start_pair(module_agent_factory, COUNT, SIZE)


def test_the_status_api_lists_the_versions_found_at_start(pair):
    _, dst, _ = pair
    found = dst.get("/api/v1/info").json()["versions"]
    for name in ("tpcmesh-agent", "xrootd", "globus-gridftp-server", "iperf3", "xrdcp", "globus-url-copy"):
        assert found[name] == live_version(name), (name, found)


@pytest.mark.parametrize("protocol", ALL)
def test_each_record_names_the_implementation_and_both_ends_versions(pair, protocol):
    src, dst, files = pair
    extra = ({"file_set": {"count": 1, "size": 10**9}, "duration_seconds": 1} if protocol == "iperf3" else
             {"file_set": {"count": COUNT, "size": SIZE}, "files": files})
    rec = dst.transfer(protocol=protocol, source={"host": src.address, "port": src.ports[PORTS[protocol]]},
                       concurrency=1, streams=1, timeout_seconds=30, destination="sink" if protocol == "iperf3"
                       else "store", timeout=60, **extra)
    assert rec["status"] == "succeeded", rec
    _validator().validate(rec)
    name = IMPLEMENTATION[protocol]
    agent = live_version("tpcmesh-agent")
    assert rec["implementation"] == {"name": name, "version": live_version(name), "peer_version": live_version(name),
                                     "agent_version": agent}

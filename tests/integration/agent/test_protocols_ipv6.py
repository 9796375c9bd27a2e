"""Dual-stack agents move files over IPv6 with every protocol (issue #15): two real agents in the WAN lab's
namespaces, each on its IPv4 and its IPv6 address, with the real XRootD (HTTPS TPC and root://), GridFTP (gsiftp)
and iperf3 servers. Each protocol pulls a set from the other agent's IPv6 address; the kernel's view of the
receiving sockets shows the copy went over IPv6 to that peer. The control API answers HTTPS on the IPv6 address:
the host certificates name both addresses."""

from __future__ import annotations

import ssl
import time
import uuid

import httpx
import pytest
from tpcmesh_lab.netns import netns_unavailable_reason

from tests.support.labmesh import lab_mesh

pytestmark = [
    pytest.mark.netns,
    pytest.mark.integration,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
]

DELAY_MS = 5  # each way: copies last long enough for the kernel view (sampled every 0.25 s) to see them
NODES = ["six-a", "six-b"]
PROTOCOLS = ("builtin", "xrootd-https", "xrootd-root", "gridftp", "iperf3")
FILES = {"count": 3, "size": 48_000_000}


@pytest.fixture(scope="module")
def dual(tmp_path_factory):
    with lab_mesh(NODES, DELAY_MS, tmp_path_factory.mktemp("dual-protocols"), protocols=PROTOCOLS,
                  family="dual") as mesh:
        ctx = ssl.create_default_context(cafile=str(mesh.certs.ca_file))
        with httpx.Client(verify=ctx, timeout=60, headers={"Authorization": f"Bearer {mesh.token}"}) as client:
            source = mesh.agents[1]
            # the mesh's members, as an operator's run names them: the source's GridFTP server admits the destination
            made = client.post(source.control_url + "/api/v1/filesets",
                               json={**FILES, "mesh": [a.node.name for a in mesh.agents]})
            made.raise_for_status()
            yield mesh, client, made.json()["files"]  # with their checksums, which the destination verifies


def control_url6(agent) -> str:
    return f"https://[{agent.address6}]:{agent.ports['control']}"


def pull(dual, protocol: str, **extra) -> dict:
    """six-a's agent pulls the set from six-b's IPv6 address; its finished record."""
    mesh, client, files = dual
    dst, src = mesh.agents
    tid = str(uuid.uuid4())
    r = client.post(dst.control_url + "/api/v1/transfers", json={
        "test_id": tid, "protocol": protocol, "source": {"host": src.address6, "port": src.ports[protocol]},
        "file_set": FILES, "files": files, "concurrency": 3, "timeout_seconds": 60, **extra})
    assert r.status_code in (200, 201, 202), r.text
    deadline = time.monotonic() + 90
    while (rec := client.get(dst.control_url + f"/api/v1/transfers/{tid}").json())["status"] == "running":
        assert time.monotonic() < deadline, f"the {protocol} test over IPv6 did not finish in 90 s"
        time.sleep(0.2)
    return rec


def test_every_server_runs_and_the_control_api_answers_https_on_the_ipv6_address(dual):
    mesh, client, _ = dual
    for agent in mesh.agents:
        info = client.get(control_url6(agent) + "/api/v1/info").json()  # TLS verified against the IPv6 address
        assert (info["address"], info["address6"]) == (agent.address, agent.address6)
        for p in PROTOCOLS:
            st = info["protocols"][p]
            assert st["available"] is True and st["running"] is True, (p, st)


@pytest.mark.parametrize("protocol", ["builtin", "xrootd-https", "xrootd-root", "gridftp"])
def test_each_protocol_moves_the_set_over_ipv6(dual, protocol):
    rec = pull(dual, protocol, streams=2, destination="store")
    assert rec["status"] == "succeeded", (rec.get("error"), [f.get("error") for f in rec.get("files") or []])
    assert rec["total_bytes"] == FILES["count"] * FILES["size"] and rec["checksum"] == "ok"
    # the receiving end's sockets, found by the IPv6 peer's address (sampled: a short copy may end before a
    # sample sees its data): the copy connected over IPv6 to the source
    assert rec["tcp"]["receiver"]["connections"] >= 1, rec["tcp"]


def test_gridftp_sink_and_iperf3_over_ipv6(dual):
    sink = pull(dual, "gridftp", streams=1, destination="sink")
    assert sink["status"] == "succeeded" and sink["total_bytes"] == FILES["count"] * FILES["size"], sink.get("error")
    iperf = pull(dual, "iperf3", streams=1, duration_seconds=1)
    assert iperf["status"] == "succeeded" and iperf["total_bytes"] > 0, iperf.get("error")

"""Host telemetry and why TCP waited in the WAN lab's network namespaces (issue #26): each node's TCP buffer limit
is set in its own namespace (net.ipv4.tcp_rmem is per namespace), and each agent reports its own, not the
machine's; the interface is the node's wan0; and a destination whose receive buffer cannot hold the path's
bandwidth-delay product makes the built-in sender receive-window-limited, while one with room does not."""

from __future__ import annotations

import json
import secrets
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from tpcmesh_lab.mesh import Certificates, start_agents
from tpcmesh_lab.netns import Lab, netns_unavailable_reason
from tpcmesh_lab.profile import parse_profile
from tpcmesh_operator.run.agents import DEFAULT_PORTS

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
]

DELAY_MS = 5  # each way: 10 ms RTT; at the delay line's ~1-4 Gbit/s the path holds 1-5 MB in flight
SMALL_RMEM = 131072  # "tight"'s tcp_rmem maximum: a window of at most ~128 KB, far below the path's BDP
LARGE_RMEM = 16 * 2**20  # "roomy"'s: room for the whole BDP
FILES = {"count": 1, "size": 100_000_000}


def _set_rmem(netns: str, maximum: int) -> None:
    subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-q", "-w", f"net.ipv4.tcp_rmem=4096 131072 {maximum}"],
                   check=True)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    profile = parse_profile({"nodes": ["tight", "roomy"], "links": [
        {"between": ["tight", "roomy"], "delayMs": DELAY_MS}]}, "host-telemetry")
    state = tmp_path_factory.mktemp("host-lab")
    state.chmod(0o755)
    with Lab(profile, mode="netns") as lab:
        _set_rmem(lab.node("tight").netns or "", SMALL_RMEM)
        _set_rmem(lab.node("roomy").netns or "", LARGE_RMEM)
        certs = Certificates.create(state / "pki", lab.nodes)
        token = secrets.token_urlsafe(32)
        start_agents(lab, certs, token, state, budget_bytes=2 * 10**9, protocols=("builtin",))
        ctx = ssl.create_default_context(cafile=str(certs.ca_file))
        with httpx.Client(verify=ctx, timeout=120, headers={"Authorization": f"Bearer {token}"}) as client:
            for name in ("tight", "roomy"):
                client.post(f"{_api(lab, name)}/api/v1/filesets", json=FILES).raise_for_status()
            yield lab, client


def _api(lab, name: str) -> str:
    return f"https://{lab.node(name).address}:{DEFAULT_PORTS['control']}"


def pull(mesh, destination: str, source: str) -> tuple[dict, dict]:
    """A built-in test run by ``destination`` from ``source``: its record, and the source's host summary of it."""
    lab, client = mesh
    tid = str(uuid.uuid4())
    client.post(_api(lab, destination) + "/api/v1/transfers", json={
        "test_id": tid, "protocol": "builtin", "source": {"host": lab.node(source).address, "port": 9080},
        "file_set": FILES, "timeout_seconds": 120, "destination": "sink"}).raise_for_status()
    deadline = time.monotonic() + 150
    while (rec := client.get(_api(lab, destination) + f"/api/v1/transfers/{tid}").json())["status"] == "running":
        assert time.monotonic() < deadline, f"the test from {source} to {destination} did not finish in 150 s"
        time.sleep(0.2)
    assert rec["status"] == "succeeded", rec.get("error")
    answer = client.get(_api(lab, source) + "/api/v1/host", params={
        "since": rec["started_at"], "until": rec["finished_at"], "peer": lab.node(destination).address})
    assert answer.status_code == 200, answer.text
    return rec, answer.json()


def test_each_end_reports_its_own_namespaces_limits_and_interface(mesh):
    rec, source = pull(mesh, "tight", "roomy")
    destination = rec["host"]["destination"]
    assert destination["limits"]["tcp_rmem_max_bytes"] == SMALL_RMEM  # tight's namespace, not the machine's
    assert source["limits"]["tcp_rmem_max_bytes"] == LARGE_RMEM
    machine = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    assert machine not in (SMALL_RMEM, LARGE_RMEM)  # else the check above would not tell namespaces apart
    for end, moved in ((destination, "rx_bytes"), (source, "tx_bytes")):
        assert end["interface"]["name"] == "wan0" and end["limits"]["mtu"] == 65000
        assert end["interface"][moved] >= FILES["size"], end["interface"]
        assert end["processes"]["agent"]["cpu_seconds"] > 0


def test_a_small_receive_buffer_makes_the_sender_receive_window_limited(mesh):
    tight, _ = pull(mesh, "tight", "roomy")  # tight receives: its 128 KB window over 10 ms caps the sender
    roomy, _ = pull(mesh, "roomy", "tight")  # roomy receives with room for the path
    small, large = tight["tcp"]["sender"], roomy["tcp"]["sender"]
    print(f"rwnd-limited share: small buffer {small['rwnd_limited_fraction']} at {tight['throughput_gbps']:.2f} "
          f"Gbit/s, large {large['rwnd_limited_fraction']} at {roomy['throughput_gbps']:.2f} Gbit/s")
    assert small["busy_ms"] > 0 and large["busy_ms"] > 0
    # seen: 0.58 (the sender's pacing fills part of the wait) against 0.12
    assert small["rwnd_limited_fraction"] >= 0.4, small
    assert large["rwnd_limited_fraction"] <= 0.25, large
    assert small["rwnd_limited_fraction"] - large["rwnd_limited_fraction"] >= 0.25
    assert tight["files"][0]["tcp"]["sender"]["rwnd_limited_fraction"] == small["rwnd_limited_fraction"]


SAMPLE_A_VETH = r"""
import json, socket, sys, time
from tpcmesh_agent import hosttelemetry as ht
sampler = ht.Sampler(0.2, [sys.argv[1]]).start()
time.sleep(0.5)
since = time.time()
with socket.create_connection((sys.argv[2], 5001)) as s:
    s.sendall(b"v" * 20_000_000)
time.sleep(0.3)
print(json.dumps(sampler.summary(since, time.time(), sys.argv[2])))
sampler.stop()
"""
DRAIN = r"""
import socket
with socket.create_server(("0.0.0.0", 5001)) as srv:
    c, _ = srv.accept()
    while c.recv(1 << 20):
        pass
"""


def test_a_veth_gives_the_drivers_statistics_and_its_speed(tmp_path):
    """Two namespaces joined by a veth pair (the kernel's veth driver keeps ethtool statistics and reports a speed,
    unlike loopback and the lab's TUN devices): the sampler reads both through pyroute2's ethtool support."""
    a, b = f"tpcm-ht-{uuid.uuid4().hex[:6]}", f"tpcm-ht-{uuid.uuid4().hex[:6]}"
    try:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "-n", a, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", b],
                       check=True)
        for ns, dev, address in ((a, "v0", "198.51.100.1/30"), (b, "v1", "198.51.100.2/30")):
            subprocess.run(["ip", "-n", ns, "addr", "add", address, "dev", dev], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        drain = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-c", DRAIN])
        time.sleep(0.5)
        out = subprocess.run(["ip", "netns", "exec", a, sys.executable, "-c", SAMPLE_A_VETH, "198.51.100.1",
                              "198.51.100.2"], check=True, capture_output=True, text=True, timeout=60)
        drain.wait(10)
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], check=False)
    summary = json.loads(out.stdout)
    nic = summary["interface"]
    assert nic["name"] == "v0" and nic["tx_bytes"] >= 20_000_000, nic
    assert nic["driver"] is not None, nic  # veth's counters (e.g. rx_queue_0_drops), none of which moved
    assert summary["limits"]["speed_mbps"] == 10000 and summary["limits"]["mtu"] == 1500

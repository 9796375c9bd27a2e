"""An IPv6 mesh end to end (issue #15) on the WAN lab: real agents listen on their namespaces' IPv6 addresses
(2001:db8::/32), the delay line carries IPv6 with the profile's delays, the operator's run executor measures every
pair with the built-in mover and iperf3 under cubic and bbr (this kernel has both), and the dashboard on the suite's
PostgreSQL keeps each family and congestion control as cells of their own. Congestion control in the grid (bbr vs
cubic rows per pair) is shown by the same run."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path

import pytest
from tpcmesh_lab.netns import netns_unavailable_reason

from tests.support.dashboard import batch
from tests.support.labmesh import lab_mesh

pytestmark = [
    pytest.mark.netns,
    pytest.mark.integration,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
]

DELAY_MS = 5  # each way on every link: a 10 ms RTT
NODES = ["v6a", "v6b", "v6c"]
CONGESTION = ("cubic", "bbr")
SPEC = {"protocols": ["builtin", "iperf3"], "streams": [1], "concurrency": 2, "fileSet": {"count": 2, "size": "4MB"},
        "addressFamilies": ["ipv6"], "tcp": {"congestionControl": list(CONGESTION)},
        "iperf3": {"durationSeconds": 1}, "loopback": {"enabled": False}, "timeoutSeconds": 60, "retries": 0}


def _kernel_congestion() -> set[str]:
    return set(Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split())


@pytest.fixture(scope="module")
def lab6(tmp_path_factory):
    with lab_mesh(NODES, DELAY_MS, tmp_path_factory.mktemp("ipv6-lab"), protocols=("builtin", "iperf3"),
                  family="ipv6") as mesh:
        yield mesh


def test_namespaces_have_documentation_ipv6_addresses_and_the_delay_line_carries_them(lab6):
    lab, agents = lab6.lab, lab6.agents
    doc = ipaddress.IPv6Network("2001:db8::/32")
    assert all(ipaddress.IPv6Address(n.address6) in doc for n in lab.nodes)
    assert all(a.agent().address == a.node.address6 and a.agent().families == {"ipv6"} for a in agents)
    a, b = agents[0], agents[1]
    # the smallest of five TCP handshakes from a's namespace to b's agent over IPv6: the profile's two delays
    probe = ("import socket, sys, time\nbest = 1e9\nfor _ in range(5):\n    t = time.perf_counter()\n"
             "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()\n"
             "    best = min(best, time.perf_counter() - t)\nprint(best * 1000)")
    out = subprocess.run(lab.command(a.node, [sys.executable, "-c", probe, b.address, str(b.ports["control"])]),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 2 * DELAY_MS * 0.9 <= float(out.stdout) <= 2 * DELAY_MS + 5, out.stdout


@pytest.mark.django_db
def test_an_ipv6_mesh_runs_end_to_end_with_cubic_and_bbr_rows_in_the_grid(lab6):
    from django.test import Client
    from results import services

    client = Client()

    missing = set(CONGESTION) - _kernel_congestion()
    if missing:
        pytest.skip(f"this kernel lacks {', '.join(sorted(missing))}")
    st = lab6.run(SPEC, "ipv6")
    pairs = len(NODES) * (len(NODES) - 1)
    settings = 1 + 2 * len(CONGESTION)  # rtt, then builtin and iperf3 under each congestion control
    assert (st["planned"], st["succeeded"], st["failed"]) == (settings * pairs, settings * pairs, 0), \
        st.get("recentFailures")
    rows = st["outbox"]
    assert {m["address_family"] for m in rows} == {"ipv6"}
    rtts = [m["rtt_ms"] for m in rows if m["protocol"] == "rtt"]
    assert len(rtts) == pairs and all(2 * DELAY_MS * 0.9 <= r <= 2 * DELAY_MS + 10 for r in rtts), rtts
    moved = [m for m in rows if m["protocol"] != "rtt"]
    assert {(m["protocol"], m["congestion_control"]) for m in moved} == {
        (p, c) for p in ("builtin", "iperf3") for c in CONGESTION}
    assert all(m["throughput_gbps"] > 0 for m in moved)
    # the senders really used what was asked: the TCP view's algorithm (builtin: both ends sampled)
    assert all(m["tcp"]["congestion"] == m["congestion_control"] for m in moved if m["protocol"] == "builtin"
               and (m.get("tcp") or {}).get("congestion")), [m.get("tcp") for m in moved]

    # into the dashboard: each (family, congestion control) a cell of its own, per pair
    key = services.create_api_token("lab", write=True)[1]
    r = client.post("/api/v1/ingest/", batch(rows, namespace="lab", name="ipv6"), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {key}")
    assert r.status_code == 200 and r.json()["created"] == len(rows), r.content
    for protocol in ("builtin", "iperf3"):
        grid = client.get(f"/api/v1/grid/?benchmark=lab/ipv6&protocol={protocol}&address_family=ipv6",
                          HTTP_ACCEPT="application/json").json()
        cells = {(c["source"], c["destination"], c["congestion_control"]) for c in grid["cells"]}
        assert cells == {(s, d, c) for s in NODES for d in NODES if s != d for c in CONGESTION}, grid["cells"]
        bbr = client.get(f"/api/v1/grid/?benchmark=lab/ipv6&protocol={protocol}&congestion_control=bbr",
                         HTTP_ACCEPT="application/json").json()["cells"]
        assert len(bbr) == pairs and {c["address_family"] for c in bbr} == {"ipv6"}
        assert not client.get(f"/api/v1/grid/?benchmark=lab/ipv6&protocol={protocol}&address_family=ipv4",
                              HTTP_ACCEPT="application/json").json()["cells"]


def test_a_family_an_agent_lacks_is_skipped_with_the_reason_in_the_runs_status(lab6):
    """The lab's agents listen on IPv6 alone: asked for both families, the run measures IPv6 and says why each
    IPv4 test was left out (not failed, not dropped)."""
    events: list[tuple[str, str, str]] = []
    st = lab6.run({**SPEC, "protocols": ["builtin"], "tcp": {}, "latency": {"enabled": False},
                   "addressFamilies": ["ipv4", "ipv6"]}, "dual", events)
    pairs = len(NODES) * (len(NODES) - 1)
    assert (st["planned"], st["succeeded"], st["failed"]) == (pairs, pairs, 0), st.get("recentFailures")
    assert {m["address_family"] for m in st["outbox"]} == {"ipv6"}
    assert st["familySkipped"] == "; ".join(f"node {n} has no IPv4 address (2 IPv4 tests)" for n in NODES)
    started = [m for _, reason, m in events if reason == "Started"]
    assert len(started) == 1 and f"skipped: {st['familySkipped']}" in started[0], events

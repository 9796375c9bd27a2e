"""The WAN lab's choice of address range (never one that overlaps a route or address of this machine) and its
teardown."""

from __future__ import annotations

import ipaddress
import json

import pytest
from tpcmesh_lab import netns

NET = ipaddress.IPv4Network


def test_the_first_free_candidate_is_picked():
    assert netns.pick_subnet([]) == NET(netns.CANDIDATE_SUBNETS[0])
    assert netns.pick_subnet([NET("192.0.2.0/24"), NET("198.51.100.0/24")]) == NET("203.0.113.0/24")
    # a wider route that covers a candidate counts as well as the candidate itself
    assert netns.pick_subnet([NET("198.51.0.0/16"), NET("203.0.113.128/25")]) == NET("198.18.0.0/24")


def test_every_candidate_taken_is_an_error_naming_them():
    with pytest.raises(netns.LabError, match="every candidate range"):
        netns.pick_subnet([NET("198.0.0.0/8"), NET("203.0.113.0/24")])


def test_used_networks_reads_routes_and_addresses(monkeypatch):
    """What `ip -j` reports on a machine whose routes hold the first candidate and whose addresses the second."""
    routes = [{"dst": "default", "gateway": "192.0.2.1"}, {"dst": "198.51.100.0/24", "dev": "vpn0"},
              {"dst": "192.0.2.255", "type": "broadcast"}, {"dst": "10.1.2.3", "dev": "eth1"}]
    addrs = [{"ifname": "eth0", "addr_info": [{"local": "203.0.113.7", "prefixlen": 24}]}]

    def fake_ip(*args: str) -> str:
        return json.dumps(routes if "route" in args else addrs)

    monkeypatch.setattr(netns, "_ip", fake_ip)
    used = netns.used_networks()
    assert NET("198.51.100.0/24") in used and NET("203.0.113.0/24") in used and NET("10.1.2.3/32") in used
    assert netns.pick_subnet() == NET("198.18.0.0/24")


def test_closing_the_lab_gives_its_processes_one_grace_period_together(tmp_path):
    """Ctrl-C on the demo stops every agent, the dashboard and the issuer: each gets SIGTERM at once and they
    share one grace period (one after another, four stubborn agents took four; CI saw the demo outlive 30 s),
    then what still runs is killed."""
    import subprocess
    import sys
    import time

    stubborn = ("import signal, sys, time, pathlib\n"
                "out = pathlib.Path(sys.argv[1])\n"
                "signal.signal(signal.SIGTERM, lambda *_: out.write_text(repr(time.monotonic())))\n"
                "out.with_suffix('.ready').touch()\n"
                "while True: time.sleep(0.05)\n")
    procs = [subprocess.Popen([sys.executable, "-c", stubborn, str(tmp_path / f"p{i}")], start_new_session=True)
             for i in range(4)]
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"p{i}.ready").exists() for i in range(4)):
        assert time.monotonic() < deadline, "the test's processes did not start"
        time.sleep(0.05)
    grace = 2.0
    netns.terminate_all(procs, grace=grace)
    assert [p.returncode for p in procs] == [-9] * 4  # they ignored SIGTERM: killed after the grace period
    termed = [float((tmp_path / f"p{i}").read_text()) for i in range(4)]
    assert max(termed) - min(termed) < grace  # all asked before any grace period ran out (in turn: >= 3 x grace)

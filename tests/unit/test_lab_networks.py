"""The WAN lab's choice of address range: never one that overlaps a route or address of this machine."""

from __future__ import annotations

import ipaddress
import json

import pytest
from tpcmesh_operator.local import netns

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

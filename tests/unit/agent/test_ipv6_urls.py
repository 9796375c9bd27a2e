"""IPv6 literals in what the movers write (issue #15): bracketed in URLs and Host headers (RFC 3986), iperf3 told
the family of the address it was given."""

from __future__ import annotations

from tpcmesh_agent.movers.base import Endpoint, TransferJob, url_host
from tpcmesh_agent.movers.iperf3 import client_argv


def test_url_hosts_bracket_ipv6_literals_only() -> None:
    assert url_host("2001:db8::1") == "[2001:db8::1]"
    assert url_host("192.0.2.7") == "192.0.2.7" and url_host("node-a.example.org") == "node-a.example.org"
    assert Endpoint("2001:db8::1", 8444).hostport() == "[2001:db8::1]:8444"
    assert Endpoint("198.51.100.9", 1094).hostport() == "198.51.100.9:1094"
    assert f"https://{Endpoint('2001:db8:c612:500::a', 1094).hostport()}/sets/x/f" == \
        "https://[2001:db8:c612:500::a]:1094/sets/x/f"


def _job(host: str, congestion: str | None = None) -> TransferJob:
    return TransferJob(test_id="t", protocol="iperf3", source=Endpoint(host, 5201), files=(), file_set="",
                       concurrency=1, streams=4, timeout=30, destination_dir=None, congestion=congestion)


def test_iperf3_is_told_the_family_of_its_source() -> None:
    v6 = client_argv(_job("2001:db8::b", "bbr"), "2001:db8::a", 5)
    assert v6[:3] == ["iperf3", "-c", "2001:db8::b"] and "-6" in v6 and "-4" not in v6  # iperf3 takes bare literals
    assert v6[v6.index("-B") + 1] == "2001:db8::a" and v6[v6.index("-C") + 1] == "bbr"
    v4 = client_argv(_job("198.51.100.2"), "198.51.100.1", 5)
    assert "-4" in v4 and "-6" not in v4 and "-C" not in v4

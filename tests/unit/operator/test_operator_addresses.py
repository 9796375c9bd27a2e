"""An agent's address families (issue #15): which it has, the address the executor uses per family, IPv6 control
URLs in brackets, and a dual-stack pod's second address from its status."""

from __future__ import annotations

from types import SimpleNamespace

from tpcmesh_operator.agents import Agent
from tpcmesh_operator.kube import _second_ipv6


def test_families_and_the_address_per_family() -> None:
    v4 = Agent(node="a", address="198.51.100.10")
    dual = Agent(node="b", address="198.51.100.11", address6="2001:db8::11")
    v6 = Agent(node="c", address="2001:db8::12")
    assert (v4.families, dual.families, v6.families) == ({"ipv4"}, {"ipv4", "ipv6"}, {"ipv6"})
    assert (dual.host("ipv4"), dual.host("ipv6")) == ("198.51.100.11", "2001:db8::11")
    assert v6.host("ipv6") == "2001:db8::12"
    assert v6.control_url == "https://[2001:db8::12]:9443"
    assert Agent.from_dict(dual.to_dict()) == dual and "address6" not in v4.to_dict()


def _pod(primary: str, *ips: str) -> SimpleNamespace:
    return SimpleNamespace(status=SimpleNamespace(pod_ip=primary, pod_i_ps=[SimpleNamespace(ip=i) for i in ips]))


def test_a_dual_stack_pod_gives_its_ipv6_address() -> None:
    assert _second_ipv6(_pod("10.244.1.5", "10.244.1.5", "fd00:10:244:1::5")) == "fd00:10:244:1::5"
    assert _second_ipv6(_pod("10.244.1.5", "10.244.1.5")) is None
    assert _second_ipv6(_pod("fd00::5", "fd00::5")) is None  # an IPv6 primary is the agent's address already
    assert _second_ipv6(SimpleNamespace(status=SimpleNamespace(pod_ip="10.0.0.1", pod_i_ps=None))) is None

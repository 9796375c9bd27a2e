"""An agent's address families (issue #15): the planner's families come from its addresses (address, and a dual-stack
agent's address6), IPv6 control URLs are bracketed."""

from __future__ import annotations

from tpcmesh_operator.run.agents import Agent


def test_an_agents_family_is_its_addresss_and_ipv6_control_urls_are_bracketed() -> None:
    v4 = Agent(node="a", address="198.51.100.10")
    v6 = Agent(node="c", address="2001:db8::12")
    assert (v4.families, v6.families) == ({"ipv4"}, {"ipv6"})
    assert v6.control_url == "https://[2001:db8::12]:9443" and v4.control_url == "https://198.51.100.10:9443"
    assert Agent.from_dict(v6.to_dict()) == v6


def test_a_dual_stack_agent_has_both_families_and_an_address_for_each() -> None:
    dual = Agent(node="b", address="198.51.100.11", address6="2001:db8::11")
    assert dual.families == {"ipv4", "ipv6"}
    assert (dual.host("ipv4"), dual.host("ipv6")) == ("198.51.100.11", "2001:db8::11")
    assert Agent.from_dict(dual.to_dict()) == dual and "address6" not in Agent(node="a", address="192.0.2.1").to_dict()


def _pod(pod_ips: list[str], dual_stack: bool) -> object:
    from kubernetes import client

    annotations = {"tpcmesh.io/dual-stack": "true"} if dual_stack else None
    return client.V1Pod(metadata=client.V1ObjectMeta(name="agent", annotations=annotations),
                        status=client.V1PodStatus(pod_ip=pod_ips[0],
                                                  pod_ips=[client.V1PodIP(ip=ip) for ip in pod_ips]))


def test_a_dual_stack_agent_pods_ipv6_address_comes_from_its_pod_ips() -> None:
    from tpcmesh_operator.kube import agent_addresses

    both = ["198.51.100.11", "2001:db8::11"]
    assert agent_addresses(_pod(both, True)) == ("198.51.100.11", "2001:db8::11")
    assert agent_addresses(_pod(both[::-1], True)) == ("198.51.100.11", "2001:db8::11")  # IPv6-primary cluster
    assert agent_addresses(_pod(both, False)) == ("198.51.100.11", None)  # the chart's agent.dualStack off
    assert agent_addresses(_pod(["2001:db8::11"], True)) == ("2001:db8::11", None)
    assert agent_addresses(_pod(["198.51.100.11"], True)) == ("198.51.100.11", None)

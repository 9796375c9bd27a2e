"""WAN profiles: the shipped ones load, bad ones are rejected with a message naming the field."""

from __future__ import annotations

import pytest
from tpcmesh_lab.netns import Lab
from tpcmesh_lab.profile import ProfileError, load_profile, parse_profile


def test_default_profile_mirrors_the_papers():
    p = load_profile()
    assert len(p.nodes) == 4
    rtts = sorted({round(p.rtt_ms(a, b), 2) for a in p.nodes for b in p.nodes if a < b})
    assert rtts[0] < 1 and 2.0 in rtts and 53.0 in rtts


def test_fidelity_profile_has_a_rate_and_a_delay():
    link = load_profile("fidelity").link("near", "far")
    assert (link.delay_ms, link.rate_mbit) == (20, 500)


def test_more_nodes_than_the_profile_names_use_the_default_link():
    p = load_profile().with_nodes(6)
    assert p.nodes[4:] == ["node-5", "node-6"]
    assert p.link("node-5", "site-c") == p.default
    assert load_profile().with_nodes(2).nodes == ["site-a-1", "site-a-2"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"nodes": []}, "nodes must be a non-empty list"),
        ({"nodes": ["A b"]}, "nodes[0]"),
        ({"nodes": ["a", "b"], "links": [{"between": ["a", "c"]}]}, "'c' is not in nodes"),
        ({"nodes": ["a", "b"], "links": [{"between": ["a", "b"], "delayMs": -1}]}, "links[0].delayMs"),
        ({"nodes": ["a", "b"], "links": [{"between": ["a", "b"], "rateMbit": "fast"}]}, "must be a number"),
        ({"nodes": ["a", "b"], "links": [{"between": ["a", "b"], "jitter": 1}]}, "unknown field"),
        ({"nodes": ["a", "b"], "links": [{"from": "a"}]}, "needs `between"),
        ({"kind": "Pod", "nodes": ["a"]}, "kind must be WanProfile"),
        ({"nodes": ["a", "b"], "uplinks": [{"name": "s", "nodes": ["a"]}]}, "uplinks[0].rateMbit: an uplink needs"),
        ({"nodes": ["a", "b"], "uplinks": [{"name": "s", "nodes": ["c"], "rateMbit": 1}]}, "'c' is not in nodes"),
        ({"nodes": ["a", "b"], "uplinks": [{"name": "s", "nodes": ["a"], "rateMbit": 1},
                                           {"name": "t", "nodes": ["a"], "rateMbit": 1}]}, "already behind uplink 's'"),
        ({"nodes": ["a"], "uplinks": [{"name": "s", "nodes": ["a"], "rateMbit": 1, "burst": 2}]}, "unknown field"),
        ({"nodes": ["a"], "hosts": {"a": {}}}, "hosts must be a list"),
        ({"nodes": ["a"], "hosts": [{"node": "b"}]}, "hosts[0].node: 'b' is not in nodes"),
        ({"nodes": ["a"], "hosts": [{"node": "a"}, {"node": "a"}]}, "hosts[1].node: 'a' has limits already"),
        ({"nodes": ["a"], "hosts": [{"node": "a", "tcpRmem": 1}]}, "hosts[0]: unknown field"),
        ({"nodes": ["a"], "hosts": [{"node": "a", "tcpRmemMaxBytes": 100}]}, "tcpRmemMaxBytes: 100 is outside"),
        ({"nodes": ["a"], "hosts": [{"node": "a", "tcpWmemMaxBytes": 1.5e6}]}, "tcpWmemMaxBytes: must be an integer"),
        ({"nodes": ["a"], "hosts": [{"node": "a", "tcpWmemMaxBytes": 2**31}]}, "2147483648 is outside"),
        ({"nodes": ["a"], "hosts": [{"node": "a", "cpuQuota": 0}]}, "hosts[0].cpuQuota: 0 is outside 0.01..1024"),
        ({"nodes": ["a"], "hosts": [{"node": "a", "cpuQuota": "half"}]}, "cpuQuota: must be a number"),
        ({"nodes": ["a"], "hosts": [{"node": "a", "cpuQuota": True}]}, "cpuQuota: must be a number"),
        ({"nodes": ["a"], "hosts": [{"node": "a", "cpuHogs": 1}]}, "hosts[0].cpuHogs: needs cpuQuota"),
        ({"nodes": ["a"], "hosts": [{"node": "a", "cpuQuota": 1, "cpuHogs": -1}]}, "cpuHogs: -1 is outside 0..64"),
    ],
)
def test_bad_profiles_name_the_field(data, message):
    with pytest.raises(ProfileError, match=message.replace("[", r"\[").replace("]", r"\]")) as err:
        parse_profile(data, "p.yaml")
    assert str(err.value).startswith("p.yaml")


def test_uplinks_are_kept_for_the_nodes_a_smaller_mesh_has():
    p = parse_profile({"nodes": ["a1", "a2", "b1"], "uplinks": [{"name": "site-a", "nodes": ["a1", "a2"],
                                                                  "rateMbit": 200}]})
    assert p.uplinks[0].nodes == ("a1", "a2") and p.uplinks[0].rate_mbit == 200
    assert p.with_nodes(1).uplinks[0].nodes == ("a1",)


def test_host_limits_are_parsed_and_kept_for_the_nodes_a_smaller_mesh_has():
    p = parse_profile({"nodes": ["a", "b"], "hosts": [
        {"node": "b", "tcpRmemMaxBytes": 3145728, "tcpWmemMaxBytes": 2097152, "cpuQuota": 0.5, "cpuHogs": 1}]})
    spec = p.host("b")
    assert (spec.tcp_rmem_max, spec.tcp_wmem_max, spec.cpu_quota, spec.cpu_hogs) == (3145728, 2097152, 0.5, 1)
    assert spec.sysctls == {"net.ipv4.tcp_rmem": 3145728, "net.ipv4.tcp_wmem": 2097152}
    assert p.host("a").sysctls == {} and p.host("a").cpu_quota is None
    assert p.with_nodes(2).host("b") == spec and p.with_nodes(1).hosts == {}


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ProfileError, match="nope.yaml"):
        load_profile(tmp_path / "nope.yaml")


def test_loopback_mode_needs_no_privileges():
    with Lab(load_profile(), mode="loopback") as lab:
        assert not lab.emulated
        addresses = [n.address for n in lab.nodes]
        assert len(set(addresses)) == 4 and all(a.startswith("127.0.") for a in addresses)
        assert lab.command("site-b", ["true"]) == ["true"]

"""spec.lossProbe (plan/lossprobe.py): parsing with errors that name the field, the round trip through a frozen
spec, each agent's peers (per address family), the merge of several benchmarks' probes on one agent, and the
comparison that keeps the operator from re-configuring an agent that already has its configuration."""

from __future__ import annotations

import pytest
from tpcmesh_operator.plan.lossprobe import (
    LossProbe,
    Member,
    Reflector,
    collector_of,
    merge,
    parse_loss_probe,
    peers_of,
    same_config,
)
from tpcmesh_operator.plan.spec import SpecError, parse_spec, to_dict


def test_defaults_are_the_issues() -> None:
    lp = parse_spec({}).loss_probe
    assert lp == LossProbe() and not lp.enabled
    assert (lp.rate_pps, lp.padding, lp.dscp, lp.period_s, lp.max_clock_error_ms) == (10.0, 27, 0, 60, 1.0)
    assert "lossProbe" not in to_dict(parse_spec({}))  # a frozen spec says nothing of an unused probe


def test_parse_and_round_trip() -> None:
    s = parse_spec({"lossProbe": {"enabled": True, "ratePps": 2.5, "paddingBytes": 100, "dscp": 46,
                                  "periodSeconds": 30, "maxClockErrorMs": 0.5,
                                  "externalReflectors": [{"name": "ps-cern", "address": "2001:DB8:0::5"},
                                                         {"name": "rtr", "address": "192.0.2.1", "port": 8863}],
                                  "allowedSenders": ["198.51.100.7", "198.51.100.7", "2001:db8::9"]}})
    lp = s.loss_probe
    assert lp.enabled and (lp.rate_pps, lp.padding, lp.dscp, lp.period_s, lp.max_clock_error_ms) == \
        (2.5, 100, 46, 30, 0.5)
    assert lp.external_reflectors == (Reflector("ps-cern", "2001:db8::5", 863), Reflector("rtr", "192.0.2.1", 8863))
    assert lp.allowed_senders == ("198.51.100.7", "2001:db8::9")  # canonical, once each
    assert parse_spec(to_dict(s)) == s


@pytest.mark.parametrize("raw,field", [
    ({"lossProbe": True}, "spec.lossProbe"),
    ({"lossProbe": {"enable": True}}, "spec.lossProbe.enable"),
    ({"lossProbe": {"enabled": "yes"}}, "spec.lossProbe.enabled"),
    ({"lossProbe": {"ratePps": 0}}, "spec.lossProbe.ratePps"),
    ({"lossProbe": {"ratePps": 5000}}, "spec.lossProbe.ratePps"),
    ({"lossProbe": {"ratePps": "10"}}, "spec.lossProbe.ratePps"),
    ({"lossProbe": {"paddingBytes": 26}}, "spec.lossProbe.paddingBytes"),  # the reply would be larger
    ({"lossProbe": {"paddingBytes": 27.5}}, "spec.lossProbe.paddingBytes"),
    ({"lossProbe": {"dscp": 64}}, "spec.lossProbe.dscp"),
    ({"lossProbe": {"periodSeconds": 5}}, "spec.lossProbe.periodSeconds"),
    ({"lossProbe": {"maxClockErrorMs": 0}}, "spec.lossProbe.maxClockErrorMs"),
    ({"lossProbe": {"externalReflectors": {"name": "x"}}}, "spec.lossProbe.externalReflectors"),
    ({"lossProbe": {"externalReflectors": [{"name": "x", "address": "ps.example.org"}]}},
     "spec.lossProbe.externalReflectors[0].address"),
    ({"lossProbe": {"externalReflectors": [{"address": "192.0.2.1"}]}},
     "spec.lossProbe.externalReflectors[0].name"),
    ({"lossProbe": {"externalReflectors": [{"name": "x", "address": "192.0.2.1", "port": 0}]}},
     "spec.lossProbe.externalReflectors[0].port"),
    ({"lossProbe": {"externalReflectors": [{"name": "x", "address": "192.0.2.1", "ttl": 3}]}},
     "spec.lossProbe.externalReflectors[0].ttl"),
    ({"lossProbe": {"externalReflectors": [{"name": "x", "address": "192.0.2.1"},
                                           {"name": "y", "address": "192.0.2.1"}]}},
     "spec.lossProbe.externalReflectors[1]"),
    ({"lossProbe": {"allowedSenders": ["192.0.2.1", "10.0.0.300"]}}, "spec.lossProbe.allowedSenders[1]"),
])
def test_errors_name_the_field(raw, field) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(raw)
    assert e.value.field == field, str(e.value)


A = Member("a", {"ipv4": "10.0.0.1", "ipv6": "fd00::1"}, 863)
B = Member("b", {"ipv4": "10.0.0.2"}, 863)
C = Member("c", {"ipv4": "10.0.0.3", "ipv6": "FD00:0::3"}, 8863)


def test_peers_are_the_other_agents_in_each_family_both_have() -> None:
    assert peers_of(A, [C, B, A]) == [
        {"name": "b", "address": "10.0.0.2", "port": 863},
        {"name": "c", "address": "10.0.0.3", "port": 8863},
        {"name": "c", "address": "fd00::3", "port": 8863},  # canonical: the agent reports it so
    ]
    assert peers_of(B, [A, B, C]) == [{"name": "a", "address": "10.0.0.1", "port": 863},
                                      {"name": "c", "address": "10.0.0.3", "port": 8863}]
    assert peers_of(A, [A]) == []


def test_merge_of_several_benchmarks_on_one_agent() -> None:
    slow = parse_loss_probe({"enabled": True, "ratePps": 1, "dscp": 10, "periodSeconds": 300, "maxClockErrorMs": 5,
                             "externalReflectors": [{"name": "rtr", "address": "192.0.2.1"}],
                             "allowedSenders": ["192.0.2.9"]})
    fast = parse_loss_probe({"enabled": True, "ratePps": 20, "paddingBytes": 500, "periodSeconds": 60,
                             "externalReflectors": [{"name": "rtr-again", "address": "192.0.2.1"}],
                             "allowedSenders": ["192.0.2.8"]})
    mesh1 = peers_of(A, [A, B])
    mesh2 = peers_of(A, [A, C])
    cfg = merge([(slow, mesh1), (fast, mesh2 + mesh1)])
    assert cfg["peers"] == peers_of(A, [A, B, C])  # the union, each (address, port) once
    assert cfg["external_reflectors"] == [{"name": "rtr", "address": "192.0.2.1", "port": 863}]
    assert cfg["allowed_senders"] == ["192.0.2.8", "192.0.2.9"]
    assert (cfg["rate_pps"], cfg["padding"], cfg["dscp"]) == (20, 500, 10)  # the highest asked
    assert (cfg["period_s"], cfg["max_clock_error_s"]) == (60.0, 0.001)  # the shortest, the strictest
    assert merge([(fast, mesh2), (slow, mesh1)]) == merge([(slow, mesh1), (fast, mesh2)])  # order-free


def test_no_benchmark_means_no_peers() -> None:
    cfg = merge([])
    assert cfg["peers"] == cfg["external_reflectors"] == cfg["allowed_senders"] == []
    assert (cfg["rate_pps"], cfg["padding"], cfg["period_s"], cfg["loss_timeout_s"]) == (10.0, 27, 60.0, 5.0)


def test_same_config_reads_the_agents_answer() -> None:
    lp = parse_loss_probe({"enabled": True, "ratePps": 5})
    wanted = merge([(lp, peers_of(A, [A, B, C]))])
    # what the agent's GET /api/v1/loss says: its own order, its own number types
    reported = {**wanted, "rate_pps": 5, "padding": 27, "peers": list(reversed(wanted["peers"])),
                "allowed_senders": []}
    assert same_config(reported, wanted)
    assert not same_config(None, wanted)
    assert not same_config({**reported, "rate_pps": 10.0}, wanted)
    assert not same_config({**reported, "peers": reported["peers"][1:]}, wanted)
    assert not same_config({**reported, "allowed_senders": ["192.0.2.1"]}, wanted)
    assert not same_config({**reported, "max_clock_error_s": 0.002}, wanted)


def test_the_first_benchmark_collects() -> None:
    assert collector_of([("lhc", "wan"), ("default", "mesh"), ("default", "zz")]) == ("default", "mesh")
    assert collector_of([]) is None

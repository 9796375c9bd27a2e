"""Paths against the real kernel (issue #15): the agent's tracepath probe in a routed lab (local/routed.py: veth
pairs and a router namespace that forwards in the kernel). Two nodes talk over a direct link; then the route
changes to go through the router, whose far link carries 1400-byte packets. Each trace becomes the operator's rtt
row and is ingested by the dashboard: the second shows as a path change with the path MTU flagged."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient
from results import services
from results.paths import same_route
from tpcmesh_lab.netns import netns_unavailable_reason
from tpcmesh_lab.routed import RoutedLab
from tpcmesh_operator.plan.planner import Setting, Test
from tpcmesh_operator.run.measurements import rtt_measurement

from tests.support.dashboard import batch

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
]

SERVICE = "198.19.252.1"  # b's own address, reached by whichever route a takes
SMALL_MTU = 1400


@pytest.fixture(scope="module")
def routed():
    with RoutedLab() as lab:
        for name in ("a", "b"):
            lab.add_node(name)
        lab.add_node("r", router=True)
        direct = lab.link("a", "b", "198.19.251.0/30")
        a_r = lab.link("a", "r", "198.19.251.4/30")
        r_b = lab.link("r", "b", "198.19.251.8/30", mtu=SMALL_MTU)
        lab.add_address("b", SERVICE)
        lab.route("a", SERVICE, via=direct.b_address)
        lab.route("r", SERVICE, via=r_b.b_address)
        lab.route("b", "198.19.251.4/30", via=r_b.a_address)  # the answers to a's router side go back that way
        yield lab, direct, a_r


def trace(lab: RoutedLab, node: str, host: str, max_hops: int = 8, timeout: float = 60) -> dict:
    """The agent's path probe (tpcmesh_agent.tracepath), run inside the node's namespace."""
    code = ("import asyncio, json, sys; from tpcmesh_agent.tracepath import trace_path; "
            "print(json.dumps(asyncio.run(trace_path(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))))")
    out = lab.run(node, [sys.executable, "-c", code, host, str(max_hops), str(timeout)], check=True)
    return json.loads(out.stdout)


@contextlib.contextmanager
def silent(lab: RoutedLab, node: str):
    """The node sends no ICMP (a router that does not answer expired packets, a host behind a firewall)."""
    rule = ["OUTPUT", "-p", "icmp", "-j", "DROP"]
    lab.run(node, ["iptables", "-A", *rule], check=True)
    try:
        yield
    finally:
        lab.run(node, ["iptables", "-D", *rule], check=True)


def test_a_route_through_a_router_is_a_path_change_and_its_small_mtu_is_flagged(routed, db):
    lab, direct, a_r = routed
    before = trace(lab, "a", SERVICE)
    assert before["error"] is None and [h["address"] for h in before["hops"]] == [SERVICE], before
    assert before["pmtu"] == 1500 and before["interface_mtu"] == 1500

    lab.route("a", SERVICE, via=a_r.b_address)
    after = trace(lab, "a", SERVICE)
    assert after["error"] is None and [h["address"] for h in after["hops"]] == [a_r.b_address, SERVICE], after
    assert after["pmtu"] == SMALL_MTU and after["interface_mtu"] == 1500

    key = services.create_api_token("operator", write=True)[1]
    client = APIClient()
    t0 = datetime.now(UTC) - timedelta(hours=2)
    for k, found in enumerate((before, after)):
        at = (t0 + timedelta(hours=k)).isoformat().replace("+00:00", "Z")
        row = rtt_measurement(str(uuid.uuid4()), Test(0, Setting("rtt"), "a", "b"),
                              {"median_ms": 0.05, "min_ms": 0.04, "max_ms": 0.06, "error": None}, at, found)
        row["finished_at"] = at
        r = client.post("/api/v1/ingest/", json.dumps(batch([row], run=f"route-{k}")),
                        content_type="application/json", HTTP_AUTHORIZATION=f"Token {key}")
        assert r.status_code == 200, r.content
    paths = client.get("/api/v1/paths/?source=a&destination=b&ordering=at").json()["results"]
    assert [(p["hop_count"], p["changed"], p["pmtu"], p["pmtu_reduced"]) for p in paths] == [
        (1, None, 1500, False), (2, True, SMALL_MTU, True)]
    (change,) = client.get("/api/v1/changes/?metric=path&source=a").json()["results"]
    assert (change["before"], change["after"], change["worse"]) == (1.0, 2.0, True)


def test_a_router_that_does_not_answer_is_the_same_route(routed):
    lab, _, a_r = routed
    lab.route("a", SERVICE, via=a_r.b_address)
    answering = trace(lab, "a", SERVICE)
    with silent(lab, "r"):
        quiet = trace(lab, "a", SERVICE)
    assert [h["address"] for h in quiet["hops"]] == [None, SERVICE] and quiet["reached"], quiet
    assert same_route([h["address"] for h in answering["hops"]], [h["address"] for h in quiet["hops"]])


def test_a_path_that_goes_silent_keeps_its_hops_when_the_probe_times_out(routed):
    lab, _, a_r = routed
    lab.route("a", SERVICE, via=a_r.b_address)
    with silent(lab, "b"):  # each silent hop costs tracepath ~4 s: 3 of them outlast the 6 s
        found = trace(lab, "a", SERVICE, max_hops=4, timeout=6)
    assert found["hops"][0]["address"] == a_r.b_address and not found["reached"], found
    assert "did not finish within 6 s" in found["error"]


def test_the_lab_leaves_nothing_behind():
    with RoutedLab() as lab:
        netns = lab.add_node("x")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert netns not in listed


pytestmark.append(pytest.mark.django_db(transaction=True))

"""The delay line's per-link clock: delay, rate (serialisation with a bounded queue) and loss, and a site's shared
uplink, without devices."""

from __future__ import annotations

import random

import pytest
from tpcmesh_lab.delayline import Link, build_links, build_routes


def test_a_packet_leaves_after_the_delay():
    link = Link(delay=0.02, rate_bps=None, loss=0.0, queue_bytes=0)
    assert link.admit(100.0, 1500) == pytest.approx(100.02)


def test_the_rate_spaces_packets_and_a_full_queue_drops():
    link = Link(delay=0.01, rate_bps=8e6, loss=0.0, queue_bytes=3000)  # 1 MB/s: 1000 bytes take 1 ms
    times = [link.admit(0.0, 1000) for _ in range(6)]
    assert times[:4] == pytest.approx([0.011, 0.012, 0.013, 0.014])
    assert times[4:] == [None, None]  # 4 ms of backlog = 4000 bytes > the 3000-byte queue
    assert link.dropped_packets == 2
    # After the queue drained the link accepts again at the rate.
    assert link.admit(1.0, 1000) == pytest.approx(1.011)


def test_loss_drops_about_the_given_share():
    link = Link(delay=0.0, rate_bps=None, loss=0.25, queue_bytes=0)
    rng = random.Random(7)
    kept = sum(link.admit(0.0, 100, rng.random) is not None for _ in range(10_000))
    assert 7300 < kept < 7700


def test_links_are_built_per_direction_with_a_bdp_sized_queue():
    names, by_addr, links = build_links({
        "nodes": [{"name": "a", "address": "198.51.100.10", "device": "tp1-0"},
                  {"name": "b", "address": "198.51.100.11", "device": "tp1-1"}],
        "links": [{"from": "a", "to": "b", "delay_s": 0.02, "rate_bps": 500e6, "loss": 0.0}],
    })
    assert names == ["tp1-0", "tp1-1"]
    assert len(by_addr) == 2
    ab = links[0][1]
    assert ab is not None and ab.queue_bytes == int(500e6 / 8 * 0.04)
    assert links[1][0] is None  # not configured: packets b -> a are not routed


def test_a_node_routes_its_own_24s_and_bad_networks_are_named():
    import socket

    from tpcmesh_lab.delayline import routed_networks

    nodes = [{"name": "a", "address": "198.51.100.10", "networks": ["198.19.128.0/24"]},
             {"name": "b", "address": "198.51.100.11", "networks": ["198.19.129.0/24"]}]
    by_net = routed_networks(nodes)
    assert by_net[socket.inet_aton("198.19.129.77")[:3]] == 1
    assert socket.inet_aton("198.19.130.1")[:3] not in by_net
    with pytest.raises(ValueError, match=r"node c: routed network '198.19.0.0/16' must be a /24"):
        routed_networks([{"name": "c", "address": "x", "networks": ["198.19.0.0/16"]}])
    with pytest.raises(ValueError, match="already routed"):
        routed_networks(nodes + [{"name": "c", "address": "x", "networks": ["198.19.129.0/24"]}])


def test_a_sites_uplink_is_shared_by_its_nodes_and_only_towards_other_sites():
    nodes = [{"name": n, "address": f"198.51.100.{10 + i}", "device": f"tp1-{i}"}
             for i, n in enumerate(["a1", "a2", "b1", "b2"])]
    config = {"nodes": nodes, "uplinks": [{"name": "site-a", "members": ["a1", "a2"], "rate_bps": 8e6}],
              "links": [{"from": x["name"], "to": y["name"], "delay_s": 0.01} for x in nodes for y in nodes
                        if x is not y]}
    _, _, links = build_links(config)
    routes = build_routes(config, links)
    a1, a2, b1, b2 = range(4)
    assert routes[a1][b1][0] is routes[a2][b2][0]  # one clock for everything leaving site A
    assert routes[b1][a1][0] is routes[b2][a2][0] and routes[b1][a1][0] is not routes[a1][b1][0]  # and one in
    assert routes[a1][a2] == (links[a1][a2],) and routes[b1][b2] == (links[b1][b2],)  # inside a site: no uplink

    def send(route, now):  # the delay line's chain: each stage takes the packet when the one before lets it go
        for stage in route:
            now = stage.admit(now, 1000)
        return now

    # 1000 bytes take 1 ms at 8 Mbit/s: two senders of site A at once queue behind each other, B's pair does not
    assert send(routes[a1][b1], 0.0) == pytest.approx(0.011)
    assert send(routes[a2][b2], 0.0) == pytest.approx(0.012)
    assert send(routes[b1][b2], 0.0) == pytest.approx(0.010)


def test_a_packet_never_overtakes_the_one_ahead_on_its_link():
    from tpcmesh_lab.delayline import schedule

    link = Link(delay=0.005, rate_bps=None, loss=0.0, queue_bytes=0)
    first = schedule((link,), 10.0, 1500, lateness=0.0)
    # the line's lateness compensation grew between two packets 10 us apart: taken alone, the second would leave
    # 0.29 ms before the first
    second = schedule((link,), 10.00001, 1500, lateness=0.0003)
    assert first == pytest.approx(10.005)
    assert second == first
    # later packets are scheduled early again, by the compensation, once that keeps them in order
    third = schedule((link,), 10.001, 1500, lateness=0.0003)
    assert third == pytest.approx(10.0057)
    # a short link (delay below the compensation) is not scheduled early at all
    metro = Link(delay=0.0002, rate_bps=None, loss=0.0, queue_bytes=0)
    assert schedule((metro,), 10.0, 1500, lateness=0.0003) == pytest.approx(10.0002)

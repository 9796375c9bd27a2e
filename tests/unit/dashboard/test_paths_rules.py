"""results.paths' two rules, pure: when two hop lists are the same route, and when a path MTU is reduced."""

from __future__ import annotations

from results.paths import pmtu_reduced, same_route


def test_a_silent_hop_matches_any_address_but_the_length_counts():
    assert same_route(["198.18.1.1", "198.18.2.2"], [None, "198.18.2.2"])
    assert same_route([None], ["198.18.2.2"])
    assert not same_route(["198.18.2.2"], ["198.18.1.1", "198.18.2.2"])  # a hop more
    assert not same_route(["198.18.1.1", "198.18.2.2"], ["198.18.1.9", "198.18.2.2"])  # another router


def test_the_flag_caps_the_interface_at_the_largest_packet():
    assert pmtu_reduced(1400, 1500) is True
    assert pmtu_reduced(1500, 1500) is False
    assert pmtu_reduced(65535, 65536) is False  # loopback: IP packets stop at 65,535 bytes
    assert pmtu_reduced(None, 1500) is None and pmtu_reduced(1400, None) is None

"""The problem rules on grids built to show each pattern (results.problems is pure: no database)."""

from __future__ import annotations

import itertools
from dataclasses import replace

from results.problems import Cell, find

NODES = ["a1", "a2", "b1", "b2", "c1", "c2"]
SITES = {n: n[0].upper() for n in NODES}


def grid(state_of, settings=(("builtin", 8), ("xrootd-https", 1))) -> list[Cell]:
    """Every ordered pair in every setting; ``state_of(source, destination, protocol)`` gives the state."""
    return [Cell(s, d, p, st, state_of(s, d, p)) for s, d in itertools.permutations(NODES, 2) for p, st in settings]


def kinds(found) -> list[tuple[str, str]]:
    return sorted((f.kind, f.key) for f in found)


def test_a_healthy_grid_has_no_problem():
    assert find(grid(lambda s, d, p: "ok"), SITES, {}) == []


def test_every_pair_from_a_node_is_a_node_problem_on_its_sending_side():
    found = find(grid(lambda s, d, p: "critical" if s == "b1" else "ok"), SITES, {})
    assert kinds(found) == [("node", "node:b1")]
    (f,) = found
    assert "every test from b1" in f.summary and "sending" in f.summary
    assert len(f.cells) == 5 * 2 and all(c[0] == "b1" for c in f.cells)


def test_both_directions_failed_names_the_node_itself():
    (f,) = find(grid(lambda s, d, p: "failed" if "c2" in (s, d) else "ok"), SITES, {})
    assert f.key == "node:c2" and "from and to c2" in f.summary and len(f.cells) == 10 * 2


def test_a_grid_bad_everywhere_blames_no_single_node():
    """Every cell critical: the thresholds (or everything) are wrong, not one node's NIC."""
    assert [f for f in find(grid(lambda s, d, p: "critical"), SITES, {}) if f.kind == "node"] == []


def test_all_pairs_across_two_sites_degraded_is_a_site_pair_problem():
    def state(s, d, p):
        return "warning" if {SITES[s], SITES[d]} == {"A", "B"} else "ok"

    found = find(grid(state), SITES, {})
    assert kinds(found) == [("site-pair", "site-pair:A|B")]
    assert found[0].severity == "warning" and len(found[0].cells) == 8 * 2
    # critical both ways: the same problem, now critical
    (f,) = find(grid(lambda s, d, p: "critical" if {SITES[s], SITES[d]} == {"A", "B"} else "ok"), SITES, {})
    assert (f.key, f.severity) == ("site-pair:A|B", "critical")


def test_one_direction_only():
    found = find(grid(lambda s, d, p: "critical" if (s, d, p) == ("a1", "c2", "builtin") else "ok"), SITES, {})
    assert kinds(found) == [("one-direction", "one-direction:a1|c2|builtin|8")]
    assert found[0].cells == (("a1", "c2", "builtin", 8),)


def test_a_silent_node_and_its_cells_raise_one_problem_not_more():
    """No result in 2 runs: one 'silent' problem; its stale failed cells are explained by it, not repeated as a
    node problem."""
    found = find(grid(lambda s, d, p: "failed" if "a2" in (s, d) else "ok"), SITES, {"a2": 2, "b1": 1})
    assert kinds(found) == [("silent", "silent:a2")]


def test_cells_in_maintenance_raise_nothing():
    cells = grid(lambda s, d, p: "maintenance" if "b1" in (s, d) else "ok")
    assert find(cells, SITES, {}) == []


def test_the_fingerprint_changes_with_the_cells_or_the_severity_only():
    one = find(grid(lambda s, d, p: "critical" if s == "b1" else "ok"), SITES, {})[0]
    again = find(grid(lambda s, d, p: "failed" if s == "b1" else "ok"), SITES, {})[0]
    assert one.fingerprint == again.fingerprint  # same cells, same severity: still acknowledged
    fewer = find(grid(lambda s, d, p: "critical" if s == "b1" else "ok", settings=(("builtin", 8),)), SITES, {})[0]
    assert fewer.fingerprint != one.fingerprint


def test_congestion_controls_and_families_are_compared_within_their_own_setting():
    """bbr bad one way while cubic is fine both ways: one finding, on the bbr cells only; a default IPv4 cell's
    reference (and so a stored problem's fingerprint) is what it was before the settings existed."""
    cells = [Cell(s, d, "builtin", 8, "ok", setting) for s, d in itertools.permutations(NODES, 2)
             for setting in ("", "bbr", "ipv6 bbr")]
    cells = [Cell(c.source, c.destination, c.protocol, c.streams, "critical", c.setting)
             if (c.source, c.destination, c.setting) == ("a1", "c2", "ipv6 bbr") else c for c in cells]
    found = find(cells, SITES, {})
    assert kinds(found) == [("one-direction", "one-direction:a1|c2|builtin|8|ipv6 bbr")]
    assert found[0].cells == (("a1", "c2", "builtin", 8, "ipv6 bbr"),) and "builtin ×8 ipv6 bbr" in found[0].summary
    assert Cell("a1", "c2", "builtin", 8, "ok").ref == ("a1", "c2", "builtin", 8)


def diagnosed(limit_to_b1: str, fix: str = "") -> list[Cell]:
    """Every test to b1 critical, each with the binding limit its diagnosis gave; the rest healthy."""
    return [Cell(s, d, p, st, "critical" if d == "b1" else "ok", "", limit_to_b1 if d == "b1" else "",
                 fix if d == "b1" else "")
            for s, d in itertools.permutations(NODES, 2) for p, st in (("builtin", 1), ("xrootd-https", 1))]


def test_a_node_whose_slow_tests_all_wait_on_its_receive_window_is_a_tuning_problem_not_the_node():
    fix = "raise net.ipv4.tcp_rmem max on b1 to at least 2 × BDP = 66 MB"
    (f,) = find(diagnosed("receive-window", fix), SITES, {})
    assert (f.kind, f.key, f.severity) == ("tuning", "tuning:b1:receive-window", "warning")
    assert fix in f.summary and "every slow test to b1" in f.summary and len(f.cells) == 5 * 2


def test_a_node_whose_slow_tests_sit_at_the_path_capacity_raises_nothing():
    assert find(diagnosed("network-capacity"), SITES, {}) == []


def test_the_node_itself_when_its_own_evidence_says_so_with_the_limits_named():
    (f,) = find(diagnosed("destination-cpu"), SITES, {})
    assert f.key == "node:b1" and "their limits: destination-cpu" in f.summary


def test_a_far_node_whose_senders_buffers_bind_is_their_tuning_not_the_node():
    """Every test to b1 held by the senders' send buffers (b1 is far: their windows are fine on shorter paths):
    one tuning problem naming the senders' setting, not b1's NIC."""
    fix = "raise net.ipv4.tcp_wmem max on a1 to at least 2 × BDP = 47.7 MB"
    (f,) = find(diagnosed("send-buffer", fix), SITES, {})
    assert (f.kind, f.key, f.severity) == ("tuning", "tuning:b1:peers-send-buffer", "warning")
    assert "at the senders' end" in f.summary and fix in f.summary and "NIC" not in f.summary


def test_a_healthy_far_node_with_mixed_diagnoses_raises_no_node_problem():
    """The demo's far node: its slow cells are the protocol's, a window, or unexplained; none is its own CPU,
    loopback or loss, so it is not sent to look at its NIC."""
    limits = itertools.cycle(["protocol", "send-buffer", "unknown", "protocol"])
    cells = [replace(c, limit=next(limits)) if c.destination == "b1" else c for c in diagnosed("x")]
    assert [f for f in find(cells, SITES, {}) if f.kind == "node"] == []


def test_its_own_evidence_on_half_the_cells_still_names_the_node():
    limits = itertools.cycle(["destination-cpu", "unknown"])
    cells = [replace(c, limit=next(limits)) if c.destination == "b1" else c for c in diagnosed("x")]
    (f,) = find(cells, SITES, {})
    assert f.key == "node:b1" and "destination-cpu" in f.summary


def test_undiagnosed_cells_keep_the_node_rule():
    (f,) = find(diagnosed(""), SITES, {})
    assert f.key == "node:b1"


def test_a_node_whose_slow_disk_tests_wait_on_its_disk_is_a_storage_problem_not_its_nic():
    """Disk mode: every slow test to b1 held by the disk it writes (destination-storage): one storage problem, not
    "look at the node (NIC, uplink)"; from it, the disk it reads."""
    (f,) = find(diagnosed("destination-storage"), SITES, {})
    assert (f.kind, f.key, f.severity) == ("storage", "storage:b1:destination-storage", "warning")
    assert "every slow disk test to b1 is held by the disk it writes" in f.summary and "NIC" not in f.summary
    cells = [Cell(d, s, p, st, c.state, "", "source-storage" if c.limit else "")
             for c in diagnosed("x") for s, d, p, st in [(c.source, c.destination, c.protocol, c.streams)]]
    (f,) = find(cells, SITES, {})
    assert f.key == "storage:b1:source-storage" and "from b1 is held by the disk it reads" in f.summary


def test_its_disk_on_half_the_cells_is_the_nodes_own_evidence():
    limits = itertools.cycle(["destination-storage", "protocol"])
    cells = [replace(c, limit=next(limits)) if c.destination == "b1" else c for c in diagnosed("x")]
    (f,) = find(cells, SITES, {})
    assert f.key == "node:b1" and "destination-storage" in f.summary

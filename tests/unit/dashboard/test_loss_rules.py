"""The loss mesh's problem rules (results.loss.rules, pure) on meshes built to show each pattern."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from results.loss import rules

NODES = ["a1", "a2", "b1", "b2", "c1", "c2"]
SITES = {n: n[0].upper() for n in NODES}
NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
SENT = 600


def history(losses: list[int]) -> list[rules.Period]:
    """One-minute periods ending now, oldest first, losing these many packets of SENT each."""
    return [(NOW - timedelta(minutes=len(losses) - i), SENT, lost) for i, lost in enumerate(losses)]


def mesh(lossy: dict[tuple[str, str], list[int]]):
    """Every ordered pair measured; the given ones with their histories."""
    measured = {(s, d, 4) for s, d in itertools.permutations(NODES, 2)}
    return {(s, d, 4): history(h) for (s, d), h in lossy.items()}, measured


def kinds(found) -> list[tuple[str, str]]:
    return sorted((f.kind, f.key) for f in found)


PERSISTENT = [0, 0, 0, 0] + [6] * rules.PERSISTENT_PERIODS  # 1 % lately, no clean hour before
ONSET = [0] * 60 + [6, 6]  # a clean hour, then 1 %


def test_a_healthy_mesh_raises_nothing():
    periods, measured = mesh({("a1", "b1"): [0] * 70, ("b1", "a1"): [1] * 3})  # 1 of 600: under 0.1 %
    assert rules.find(periods, measured, SITES) == []


def test_persistent_loss_on_a_pair():
    found = rules.find(*mesh({("a1", "b1"): PERSISTENT}), SITES)
    assert kinds(found) == [("loss", "loss:a1|b1|4")]
    assert found[0].severity == "critical"  # 1 %
    assert "a1 → b1 loses 1 %" in found[0].summary
    assert found[0].cells == (("a1", "b1", "loss", 4),)


def test_loss_ending_in_a_clean_period_is_not_persistent():
    assert rules.find(*mesh({("a1", "b1"): PERSISTENT + [0]}), SITES) == []


def test_too_short_a_stretch_is_not_persistent():
    short = [0, 0] + [6] * (rules.PERSISTENT_PERIODS - 1)
    assert rules.find(*mesh({("a1", "b1"): short}), SITES) == []


def test_an_onset_after_a_clean_hour_is_a_change():
    found = rules.find(*mesh({("a1", "b1"): ONSET}), SITES)
    assert kinds(found) == [("loss-onset", "loss:a1|b1|4")]  # the pair's key: it stays one problem
    assert "began losing packets at 2026-11-28 11:58 UTC" in found[0].summary


def test_an_onset_needs_a_measured_clean_hour():
    """Ten clean minutes are no clean hour: not an onset (nor persistent yet)."""
    assert rules.find(*mesh({("a1", "b1"): [0] * 10 + [6, 6]}), SITES) == []


def test_loss_on_every_path_through_a_node_is_one_node_problem():
    lossy = {(s, d): PERSISTENT for s, d in itertools.permutations(NODES, 2) if "c2" in (s, d)}
    found = rules.find(*mesh(lossy), {n: "" for n in NODES})
    assert kinds(found) == [("loss-node", "loss-node:c2")]
    assert len(found[0].cells) == 10  # both directions to each of its five peers


def test_loss_on_every_path_of_a_site_is_one_site_problem():
    lossy = {(s, d): PERSISTENT for s, d in itertools.permutations(NODES, 2) if (SITES[s] == "C") != (SITES[d] == "C")}
    found = rules.find(*mesh(lossy), SITES)
    assert kinds(found) == [("loss-site", "loss-site:C")]
    assert len(found[0].cells) == 16  # 2 nodes × 4 outside, both ways


def test_a_node_lossy_everywhere_in_a_lossy_mesh_is_no_node_problem():
    """Every pair lossy: nothing tells one node from another; each pair is its own problem."""
    lossy = {(s, d): PERSISTENT for s, d in itertools.permutations(NODES, 2)}
    found = rules.find(*mesh(lossy), {n: "" for n in NODES})
    assert {f.kind for f in found} == {"loss"} and len(found) == 30

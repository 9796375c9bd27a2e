"""`make bench-diagnosis`'s pure parts (lab/tpcmesh_lab/diagnosisbench.py): the injection plan is a valid WAN
profile where each cause sits alone on its pairs, and the scorer's confusion matrix."""

from __future__ import annotations

from collections import Counter

import pytest
from tpcmesh_lab import diagnosisbench as bench
from tpcmesh_lab.profile import parse_profile


def test_the_plan_is_a_profile_with_each_cause_on_pairs_of_its_own():
    p = bench.plan(pairs_per_cause=2)
    profile = parse_profile(p.profile, "bench-diagnosis")  # the lab's own validation
    per_cause = Counter(t.cause.name for t in p.tests)
    assert per_cause == {c.name: 2 * len(c.streams or bench.STREAMS) for c in bench.CAUSES}
    assert {c.expected for c in bench.CAUSES} >= {"network-capacity", "receive-window", "send-buffer", "loss",
                                                  "source-cpu", "destination-cpu"}
    links = {}
    for t in p.tests:
        links.setdefault(frozenset((t.source, t.destination)), set()).add(t.cause.name)
    assert all(len(causes) == 1 for causes in links.values())  # no link carries two causes
    assert len(links) == 2 * len(bench.CAUSES)
    for t in p.tests:
        link = profile.link(t.source, t.destination)
        src, dst = profile.host(t.source), profile.host(t.destination)
        cause = t.cause
        assert link.delay_ms == cause.delay_ms
        assert link.loss_percent == dict(cause.link).get("lossPercent", 0.0)
        assert link.rate_mbit == dict(cause.link).get("rateMbit")
        faulty = {"source": src, "destination": dst}.get(cause.side)
        healthy = [h for h in (src, dst) if h is not faulty]
        assert all(h.tcp_rmem_max == h.tcp_wmem_max == bench.LARGE_BUFFER and h.cpu_quota is None for h in healthy)
        if cause.kind == "host":
            fault = dict(cause.host)
            node = t.source if cause.side == "source" else t.destination
            assert faulty.tcp_rmem_max == fault.get("tcpRmemMaxBytes", bench.LARGE_BUFFER)
            assert faulty.tcp_wmem_max == fault.get("tcpWmemMaxBytes", bench.LARGE_BUFFER)
            if "cpuQuota" in fault:  # started with room, cut once the agent is up
                assert faulty.cpu_quota == bench.STARTUP_QUOTA and p.quotas[node] == fault["cpuQuota"]
            # a faulty node is scored only on the side its fault is on
            assert all(getattr(o, cause.side) == node for o in p.tests if node in (o.source, o.destination))
    assert next(t for t in p.tests if t.cause.expected == "loss").cause.congestion_control == "cubic"


def test_more_pairs_per_cause_need_more_healthy_nodes():
    small, big = bench.plan(pairs_per_cause=1), bench.plan(pairs_per_cause=4)
    parse_profile(big.profile)
    assert len(big.tests) == 4 * len(small.tests)
    assert len(big.profile["nodes"]) > len(small.profile["nodes"])


def test_a_plan_needs_a_pair():
    with pytest.raises(ValueError, match="pairs_per_cause must be at least 1, got 0"):
        bench.plan(pairs_per_cause=0)


def test_the_score_is_a_confusion_matrix():
    p = bench.plan(pairs_per_cause=1, streams=(1,))
    results = [(t, t.cause.expected) for t in p.tests]
    results[1] = (results[1][0], "unknown")  # the small receive buffer, missed once
    s = bench.score(results)
    assert (s.right, s.total) == (len(p.tests) - 1, len(p.tests))
    assert s.accuracy == pytest.approx((len(p.tests) - 1) / len(p.tests))
    missed = p.tests[1].cause.name
    assert s.matrix[missed] == Counter({"unknown": 1})
    table = s.table()
    row = next(line for line in table if line.startswith(f"| {missed} |"))
    assert row.endswith("| 0/1 |") and "| receive-window |" in row
    good = next(line for line in table if line.startswith(f"| {p.tests[0].cause.name} |"))
    assert "**1**" in good and good.endswith("| 1/1 |")
    assert table[-1] == f"\n{len(p.tests) - 1} of {len(p.tests)} labelled right (86%)."

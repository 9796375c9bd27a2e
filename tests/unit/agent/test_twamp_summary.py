"""Period summaries from constructed packet streams: loss, duplicates, reordering, RTT, one-way delay, IPDV, and
when a one-way delay is trusted. Times in seconds; the reflector's clock is OFFSET ahead of the sender's."""

from __future__ import annotations

import pytest
from tpcmesh_agent.twamp.summary import Reply, percentile, summarize

OFFSET = 3.0  # the reflector's clock runs 3 s ahead: one-way delays carry it, RTT and IPDV do not


def reply(seq: int, forward: float = 0.010, backward: float = 0.020, hold: float = 0.0001, *,
          error: float = 1e-5, synced: bool = True) -> Reply:
    t1 = 100.0 + seq * 0.1
    t2 = t1 + forward + OFFSET
    t3 = t2 + hold
    return Reply(seq, t1, t2, t3, t3 - OFFSET + backward, reflector_error_s=error, reflector_synchronized=synced)


def run(sent, replies, synced=True, local_error=1e-5, bound=1e-3):
    return summarize(sent, replies, local_synchronized=synced, local_error_s=local_error, max_error_s=bound)


def test_a_clean_stream():
    s = run(range(100), [reply(i) for i in range(100)])
    assert (s["sent"], s["received"], s["lost"], s["loss_percent"], s["duplicates"], s["reordered"]) == \
        (100, 100, 0, 0.0, 0, 0)
    assert s["rtt_ms"] == {"min": 30.0, "median": 30.0, "p95": 30.0, "max": 30.0}
    assert s["one_way_ms"]["forward"] == {"min": 10.0 + OFFSET * 1000, "median": 10.0 + OFFSET * 1000}
    assert s["ipdv_ms"]["forward"] == {"mean_abs": 0.0, "median_abs": 0.0, "p95_abs": 0.0, "pairs": 99}
    assert s["ipdv_ms"]["round_trip"]["mean_abs"] == 0.0


def test_loss_counts_every_packet_without_a_reply():
    lost = {3, 4, 50, 99}
    s = run(range(100), [reply(i) for i in range(100) if i not in lost])
    assert (s["lost"], s["received"], s["loss_percent"]) == (4, 96, 4.0)
    # IPDV pairs only consecutive sequence numbers that both arrived (RFC 3393's selection function)
    assert s["ipdv_ms"]["forward"]["pairs"] == 99 - 6  # (2,3) (3,4) (4,5) (49,50) (50,51) (98,99) are gone


def test_duplicates_are_counted_once_and_not_as_received_twice():
    late_copy = reply(2, backward=0.5)  # a copy that took half a second longer
    replies = [reply(i) for i in range(10)] + [late_copy, reply(2), reply(7)]
    s = run(range(10), replies)
    assert (s["received"], s["lost"], s["duplicates"]) == (10, 0, 3)
    assert s["reordered"] == 0 and s["rtt_ms"]["max"] == 30.0  # the first copy counts, the others only as copies


def test_reordered_packets_are_those_below_one_seen_before():
    order = [0, 1, 3, 2, 4, 7, 5, 6, 8, 9]
    s = run(range(10), [reply(i) for i in order])
    assert s["reordered"] == 3  # 2 after 3; 5 and 6 after 7
    assert s["lost"] == 0


def test_replies_to_other_periods_are_not_counted():
    s = run(range(5), [reply(i) for i in range(7)])
    assert (s["received"], s["unexpected"]) == (5, 2)


def test_jitter_from_alternating_delays():
    # forward delay alternates 10 / 12 ms: every consecutive pair differs by 2 ms; backward stays constant
    s = run(range(20), [reply(i, forward=0.010 + 0.002 * (i % 2)) for i in range(20)])
    assert s["ipdv_ms"]["forward"] == {"mean_abs": 2.0, "median_abs": 2.0, "p95_abs": 2.0,
                                         "pairs": 19}
    assert s["ipdv_ms"]["backward"]["mean_abs"] == 0.0
    assert s["ipdv_ms"]["round_trip"]["mean_abs"] == pytest.approx(2.0)
    assert s["rtt_ms"]["min"] == 30.0 and s["rtt_ms"]["max"] == 32.0


def test_rtt_percentiles():
    s = run(range(100), [reply(i, backward=0.001 * i) for i in range(100)])
    assert s["rtt_ms"]["min"] == pytest.approx(10.0)
    assert s["rtt_ms"]["p95"] == pytest.approx(10.0 + 94)
    assert s["rtt_ms"]["max"] == pytest.approx(10.0 + 99)
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([1, 2, 3, 4], 100) == 4
    assert percentile([1, 2, 3, 4, 5], 50) == 3  # nearest rank: the smallest value with at least q % at or below


@pytest.mark.parametrize(("synced", "remote_synced", "local_error", "remote_error", "trusted", "why"), [
    (True, True, 1e-5, 1e-5, True, None),
    (False, True, 1e-5, 1e-5, False, "local clock"),
    (True, False, 1e-5, 1e-5, False, "reflector's clock"),
    (True, True, 6e-4, 6e-4, False, "above the bound"),
])
def test_one_way_trust(synced, remote_synced, local_error, remote_error, trusted, why):
    s = run(range(5), [reply(i, error=remote_error, synced=remote_synced) for i in range(5)], synced=synced,
            local_error=local_error)
    assert s["one_way_ms"]["trusted"] is trusted
    assert (s["one_way_ms"]["untrusted_reason"] is None) if why is None else why in s["one_way_ms"]["untrusted_reason"]


def test_no_replies_at_all():
    s = run(range(10), [])
    assert (s["lost"], s["loss_percent"], s["rtt_ms"]) == (10, 100.0, None)
    assert s["one_way_ms"]["trusted"] is False and s["one_way_ms"]["untrusted_reason"] == "no replies"

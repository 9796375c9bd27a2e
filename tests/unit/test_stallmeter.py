"""The stall meter's allowance: 0 on a quiet machine, the time-weighted wait of a random arrival when the process
stops, and a median bound that holds for figures passing several waits."""

from __future__ import annotations

import random
import statistics
import sys
import time

import pytest
from tpcmesh_lab.stallmeter import StallMeter


def meter_with(late_s: list[float], window_s: float) -> StallMeter:
    m = StallMeter()
    m.late_s, m.window_s = late_s, window_s
    return m


def test_a_quiet_machine_adds_nothing():
    # 1 ms sleeps that wake 0.07 ms late: 6.5 % of the time, too little to hold an eighth of the arrivals
    m = meter_with([0.00007] * 935, 1.0)
    assert m.wait_ms(0.875) == 0.0 and m.median_bound_ms(4) == 0.0 and m.median_bound_ms(2) == 0.0


def test_stops_hold_their_time_weighted_share_of_arrivals():
    # stopped 45 % of the time in 9 ms stops: a random arrival waits U(0, 9) ms with probability 0.45, so the
    # share waiting longer than w is 0.45 * (1 - w / 9)
    m = meter_with([0.009] * 50 + [0.00007] * 500, 1.0)
    assert m.wait_ms(0.75) == pytest.approx(9 * (1 - 0.25 / 0.45), abs=0.01)
    assert m.wait_ms(0.875) == pytest.approx(9 * (1 - 0.125 / 0.45), abs=0.01)
    assert m.median_bound_ms(4) == pytest.approx(4 * m.wait_ms(0.875))


def test_the_median_bound_holds_for_sums_of_waits():
    """Simulated arrivals on the same stops: the median of four waits summed stays under median_bound_ms(4)."""
    rng = random.Random(7)
    stops = [rng.choice([0.0001, 0.004, 0.012]) for _ in range(400)]
    window = 6.0  # 15 ms a stop and the running time before it: stopped ~36 % of the time
    m = meter_with(stops, window)
    timeline, t = [], 0.0  # (start, end) of each stop, spread over the window with running time between
    for stop in stops:
        t += window / len(stops) - stop
        timeline.append((t, t + stop))
        t += stop

    def wait(at: float) -> float:
        return next((end - at for start, end in timeline if start <= at < end), 0.0)

    sums = [sum(wait(rng.uniform(0, t)) for _ in range(4)) * 1000 for _ in range(4000)]
    assert 0.3 < m.summary()["stopped_share"] < 0.4
    assert 0 < statistics.median(sums) <= m.median_bound_ms(4)


def test_a_thread_that_holds_the_interpreter_shows_as_stops():
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.02)  # the busy loop below gives the meter's thread a turn only every 20 ms
    try:
        with StallMeter() as m:
            end = time.perf_counter() + 0.5
            while time.perf_counter() < end:
                pass
    finally:
        sys.setswitchinterval(before)
    s = m.summary()
    assert s["stopped_share"] > 0.5 and s["late_max_ms"] >= 10, s
    assert m.wait_ms(0.875) >= 5, s


def test_no_sample_is_an_error_that_says_how_to_use_it():
    with pytest.raises(ValueError, match="context manager"):
        StallMeter().wait_ms(0.5)

"""Scheduling like CronJob: cron, interval, restarts, one catch-up, idempotent run names."""

from __future__ import annotations

import datetime as dt

import pytest
from tpcmesh_operator.schedule import due, next_run, parse_interval, parse_schedule, run_name

T0 = dt.datetime(2026, 1, 1, 0, 0, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)


def test_intervals() -> None:
    assert parse_interval("12h") == 12 * H
    assert parse_interval("@every 1h30m") == dt.timedelta(minutes=90)
    assert parse_interval("2d") == dt.timedelta(days=2)
    assert parse_interval("*/5 * * * *") is None
    for bad in ("@every", "@every soon", "@every 10s"):
        with pytest.raises(ValueError):
            parse_interval(bad)


def test_bad_schedules_name_the_problem() -> None:
    for bad in ("", "every day", "61 * * * *", "* * *"):
        with pytest.raises(ValueError, match="schedule|interval"):
            parse_schedule(bad)


def test_interval_first_run_at_creation_then_every_period() -> None:
    s = parse_schedule("@every 12h")
    assert due(s, T0, T0, None) == T0
    assert due(s, T0 + H, T0, T0) is None
    assert next_run(s, T0 + H, T0, T0) == T0 + 12 * H
    assert due(s, T0 + 12 * H, T0, T0) == T0 + 12 * H


def test_cron() -> None:
    s = parse_schedule("0 */6 * * *")
    created = T0 + dt.timedelta(minutes=10)
    assert due(s, created, created, None) is None
    assert next_run(s, created, created, None) == T0 + 6 * H
    assert due(s, T0 + 6 * H + dt.timedelta(seconds=5), created, None) == T0 + 6 * H
    assert due(s, T0 + 7 * H, created, T0 + 6 * H) is None


def test_restart_does_not_double_start() -> None:
    s = parse_schedule("@every 1h")
    first = due(s, T0 + dt.timedelta(minutes=1), T0, None)
    # operator restarts before recording lastScheduleTime: the same tick is due again, with the same run name
    again = due(s, T0 + dt.timedelta(minutes=2), T0, None)
    assert first == again == T0
    assert run_name("bench", first) == run_name("bench", again)
    # once recorded, nothing until the next tick
    assert due(s, T0 + dt.timedelta(minutes=3), T0, first) is None


def test_at_most_one_catch_up_after_downtime() -> None:
    s = parse_schedule("@every 1h")
    # down from 00:30 to 05:10: ticks at 01..05 were missed; only the latest (05:00) runs
    tick = due(s, T0 + dt.timedelta(hours=5, minutes=10), T0, T0)
    assert tick == T0 + 5 * H
    assert due(s, T0 + dt.timedelta(hours=5, minutes=11), T0, tick) is None
    # a starting deadline skips a catch-up that is too late
    assert due(s, T0 + dt.timedelta(hours=5, minutes=10), T0, T0, starting_deadline=dt.timedelta(minutes=5)) is None


def test_run_names_are_distinct_per_tick_and_valid() -> None:
    names = {run_name("paper-benchmark", T0 + i * H) for i in range(24)}
    assert len(names) == 24
    assert all(len(n) <= 63 and n.replace("-", "").isalnum() for n in names)
    assert len(run_name("x" * 200, T0)) <= 63

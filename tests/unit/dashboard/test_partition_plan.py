"""The partitions' planning (results/partitions.py, pure): months, which months to create ahead (never one before the
newest), which partitions are all past a cutoff, the month partitions' span, and the bounds PostgreSQL writes."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from results.partitions import (
    DEFAULT,
    LEGACY,
    Partition,
    add_months,
    at,
    month_name,
    month_of,
    month_span,
    months_to_create,
    parse_bound,
    past,
)


def month(y: int, m: int) -> Partition:
    start = date(y, m, 1)
    return Partition(month_name(start), at(start), at(add_months(start, 1)))


def test_months():
    assert month_of(datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == date(2026, 12, 1)
    assert add_months(date(2026, 11, 1), 2) == date(2027, 1, 1)
    assert add_months(date(2027, 1, 1), -1) == date(2026, 12, 1)
    assert month_name(date(2027, 3, 1)) == "results_measurement_y2027m03"


def test_months_ahead_follow_the_newest_partition():
    legacy = Partition(LEGACY, None, at(date(2027, 1, 1)))
    default = Partition(DEFAULT, None, None)
    parts = [legacy, default, month(2027, 1)]
    now = datetime(2026, 11, 28, tzinfo=UTC)
    assert months_to_create(parts, now, ahead=3) == [date(2027, 2, 1)]
    # a prune that has not run for months catches up to three ahead of today
    assert months_to_create(parts, datetime(2027, 5, 2, tzinfo=UTC), ahead=3) == [
        date(2027, m, 1) for m in range(2, 9)]
    # a clock in the past never makes a month before the newest: such rows go to the default partition
    assert months_to_create(parts, datetime(2026, 6, 1, tzinfo=UTC), ahead=3) == []


def test_past_and_span():
    legacy = Partition(LEGACY, None, at(date(2027, 1, 1)))
    parts = [month(2027, 2), legacy, Partition(DEFAULT, None, None), month(2027, 1), month(2027, 3)]
    assert past(parts, at(date(2027, 2, 1))) == [legacy, month(2027, 1)]
    assert past(parts, datetime(2027, 2, 28, 23, tzinfo=UTC)) == [legacy, month(2027, 1)]
    assert past(parts, at(date(2026, 12, 1))) == []
    assert month_span(parts) == (at(date(2027, 1, 1)), at(date(2027, 4, 1)))
    assert month_span([legacy]) is None


def test_bounds_as_postgresql_writes_them():
    assert parse_bound("p", "DEFAULT") == Partition("p", None, None)
    assert parse_bound("p", "FOR VALUES FROM (MINVALUE) TO ('2027-01-01 00:00:00+00')") == Partition(
        "p", None, at(date(2027, 1, 1)))
    assert parse_bound("p", "FOR VALUES FROM ('2027-01-01 00:00:00+00') TO ('2027-02-01 00:00:00+00')") == Partition(
        "p", at(date(2027, 1, 1)), at(date(2027, 2, 1)))
    with pytest.raises(ValueError, match="partition p: unexpected bound"):
        parse_bound("p", "FOR VALUES IN (1)")

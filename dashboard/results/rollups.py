"""Daily rollups (DailyRollup): each grid cell's measurements of a UTC day summarised as count, failures, mean,
median, p10 and p90. Writing them lives here (results.retention calls it before raw rows go); reading them in
selectors. Rolling up a day recomputes it from its raw rows and replaces what was there: idempotent.

PostgreSQL aggregates with percentile_cont; SQLite (the zero-setup default) in Python with the same interpolation
(results.stats.daily), so both give the same figures."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from results.models import DailyRollup, Measurement
from results.protocols import PROTOCOLS
from results.selectors import metric_for
from results.stats.daily import FIGURES, QUANTILES, summarise

# a cell's key columns, NULLs as PairLatest keeps them ("" and 0)
KEY = ("benchmark_id", "protocol", "streams", "address_family", "congestion_control", "auth", "storage_setting",
       "source_id", "destination_id")


def midnight(day: date) -> datetime:
    """The start of a UTC day."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _value_sql() -> str:
    """The protocol's metric of a measurement ``m`` (selectors.metric_for, written as SQL)."""
    others = [p for p in PROTOCOLS if metric_for(p) != "throughput_gbps"]
    cases = " ".join(f"WHEN '{p}' THEN m.{metric_for(p)}" for p in others)
    return f"CASE m.protocol {cases} ELSE m.throughput_gbps END"


def _roll_up_sql(start: datetime, end: datetime) -> int:
    ok = "m.status = 'succeeded' AND v.value IS NOT NULL"
    figures = ", ".join(f"percentile_cont({q}) WITHIN GROUP (ORDER BY v.value) FILTER (WHERE {ok})"
                        for q in QUANTILES.values())
    columns = ", ".join(("day", *KEY, *FIGURES[:4], *QUANTILES, *FIGURES[-2:], "rolled_at"))
    sql = f"""
        INSERT INTO {DailyRollup._meta.db_table} ({columns})
        SELECT (m.finished_at AT TIME ZONE 'UTC')::date, m.benchmark_id, m.protocol, coalesce(m.streams, 0),
               m.address_family, coalesce(m.congestion_control, ''), coalesce(m.auth, ''), m.storage_setting,
               m.source_id, m.destination_id, count(*), count(*) FILTER (WHERE m.status <> 'succeeded'),
               count(*) FILTER (WHERE {ok}), avg(v.value) FILTER (WHERE {ok}), {figures},
               max(m.finished_at), (array_agg(m.status ORDER BY m.finished_at DESC))[1], now()
        FROM {Measurement._meta.db_table} m CROSS JOIN LATERAL (SELECT {_value_sql()} AS value) v
        WHERE m.finished_at >= %(start)s AND m.finished_at < %(end)s
        GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
    """
    with connection.cursor() as cur:
        cur.execute(sql, {"start": start, "end": end})
        return cur.rowcount


def _roll_up_python(start: datetime, end: datetime) -> int:
    groups: dict[tuple, list[tuple[datetime, float | None, str]]] = defaultdict(list)
    rows = Measurement.objects.filter(finished_at__gte=start, finished_at__lt=end).values_list(
        *KEY, "finished_at", "throughput_gbps", "rtt_ms", "status")
    for *key, finished, gbps, rtt, status in rows.iterator(chunk_size=20000):
        bench, protocol, streams, family, cc, auth, storage, src, dst = key
        value = rtt if metric_for(protocol) == "rtt_ms" else gbps
        day = finished.astimezone(UTC).date()
        groups[(day, bench, protocol, streams or 0, family, cc or "", auth or "", storage, src, dst)].append(
            (finished, value, status))
    now = timezone.now()
    DailyRollup.objects.bulk_create(
        [DailyRollup(day=k[0], **dict(zip(KEY, k[1:], strict=True)), **summarise(items), rolled_at=now)
         for k, items in groups.items()], batch_size=2000)
    return len(groups)


def roll_up(first: date, last: date) -> int:
    """Recompute the rollups of the UTC days ``first`` to ``last`` (inclusive) from their raw rows, replacing
    what was there, in one transaction; the number of cell-days written. A day must still have all its raw rows
    (results.retention rolls a day up before it prunes it, never after)."""
    start, end = midnight(first), midnight(last + timedelta(days=1))
    with transaction.atomic():
        DailyRollup.objects.filter(day__gte=first, day__lte=last).delete()
        return (_roll_up_sql if connection.vendor == "postgresql" else _roll_up_python)(start, end)

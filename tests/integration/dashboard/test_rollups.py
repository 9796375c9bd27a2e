"""Daily rollups on PostgreSQL (results.rollups): the prune rolls up each day before its raw rows go and the days
completed since, idempotently; the figures are the day's count, failures, mean, median, p10 and p90 (checked against
statistics' own median and inclusive quantiles), and the portable Python path (SQLite's) writes the same rows as
PostgreSQL's percentile_cont."""

from __future__ import annotations

import json
import random
import statistics
from datetime import UTC, date, datetime, timedelta

import pytest

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)
OLD_DAYS = [date(2026, 5, 1) + timedelta(days=k) for k in range(4)]  # past rawDays=10
RECENT_DAYS = [date(2026, 6, 10) + timedelta(days=k) for k in range(3)]  # completed, within the age


def seeded(rng: random.Random) -> list[dict]:
    """Per day: a -> b xrootd-https (some failed) and a -> b rtt, 1 to 7 measurements each (odd and even counts)."""
    out = []
    for day in OLD_DAYS + RECENT_DAYS + [NOW.date()]:
        for protocol in ("xrootd-https", "rtt"):
            for k in range(rng.randint(1, 7)):
                finished = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(hours=1 + 2 * k)
                value = round(rng.uniform(1, 40), 3)
                failed = protocol != "rtt" and rng.random() < 0.2
                m = measurement("a", "b", protocol=protocol, finished=finished, gbps=None if failed else value,
                                rtt_ms=value, status="failed" if failed else "succeeded",
                                error="reset" if failed else None)
                out.append(m)
    return out


def expected(ms: list[dict]) -> dict[tuple, dict]:
    """Each (day, protocol)'s figures, by statistics' own functions."""
    groups: dict[tuple, list[dict]] = {}
    for m in ms:
        finished = datetime.fromisoformat(m["finished_at"].replace("Z", "+00:00"))
        groups.setdefault((finished.date(), m["protocol"]), []).append({**m, "at": finished})
    out = {}
    for key, items in groups.items():
        metric = "rtt_ms" if key[1] == "rtt" else "throughput_gbps"
        values = sorted(m[metric] for m in items if m["status"] == "succeeded" and m[metric] is not None)
        quantiles = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else values * 9
        last = max(items, key=lambda m: m["at"])
        out[key] = {"count": len(items), "failures": sum(m["status"] != "succeeded" for m in items),
                    "succeeded": len(values), "mean": statistics.fmean(values) if values else None,
                    "median": statistics.median(values) if values else None,
                    "p10": quantiles[0] if values else None, "p90": quantiles[8] if values else None,
                    "last_at": last["at"], "last_status": last["status"]}
    return out


FIGURES = ("count", "failures", "succeeded", "mean", "median", "p10", "p90", "last_at", "last_status")


def rollup_rows(days: list[date]) -> dict[tuple, dict]:
    from results.models import DailyRollup

    rows = DailyRollup.objects.filter(day__in=days).values("day", "protocol", "streams", "source__name",
                                                           "destination__name", "auth", *FIGURES)
    out = {}
    for r in rows:
        assert (r.pop("source__name"), r.pop("destination__name")) == ("a", "b")
        out[(r.pop("day"), r.pop("protocol"))] = {k: v for k, v in r.items() if k in FIGURES}
    return out


def approx(rows: dict[tuple, dict]) -> dict[tuple, dict]:
    return {k: {f: pytest.approx(v) if isinstance(v, float) else v for f, v in r.items()} for k, r in rows.items()}


def test_prune_rolls_up_days_before_they_go_and_completed_days(client, write_key):
    from django.db.models import F
    from results import retention, rollups
    from results.models import DailyRollup, Measurement

    ms = seeded(random.Random(29))
    r = client.post("/api/v1/ingest/", json.dumps(batch(ms)), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200, r.content
    Measurement.objects.update(ingested_at=F("finished_at"))  # delivered when measured, as old rows were
    want = expected(ms)
    policy = retention.Policy(raw_days=10, file_days=3)

    dry = retention.prune(NOW, policy, dry_run=True)
    assert (dry.pruned_days, dry.completed_days) == (OLD_DAYS, RECENT_DAYS)
    assert not DailyRollup.objects.exists()

    report = retention.prune(NOW, policy)
    assert (report.pruned_days, report.completed_days) == (OLD_DAYS, RECENT_DAYS)
    assert retention.horizon() == datetime(2026, 6, 5, tzinfo=UTC)
    # the old days' raw rows are gone but their newest (the grid's cells are today's): their rollups hold them
    assert not Measurement.objects.filter(finished_at__lt=retention.horizon()).exists()
    days = OLD_DAYS + RECENT_DAYS
    assert rollup_rows(days) == approx({k: v for k, v in want.items() if k[0] in days})
    assert not DailyRollup.objects.filter(day=NOW.date()).exists()  # today is not complete

    # idempotent: a day rolled up again is the same rows; the next run has nothing to do
    before = rollup_rows(RECENT_DAYS)
    rollups.roll_up(RECENT_DAYS[0], RECENT_DAYS[-1])
    assert rollup_rows(RECENT_DAYS) == before
    again = retention.prune(NOW, policy)
    assert (again.pruned_days, again.completed_days, again.measurements) == ([], [], 0)

    # the portable path (SQLite's, Python's percentiles) writes what PostgreSQL's percentile_cont wrote
    DailyRollup.objects.filter(day__in=RECENT_DAYS).delete()
    start, end = rollups.midnight(RECENT_DAYS[0]), rollups.midnight(RECENT_DAYS[-1] + timedelta(days=1))
    assert rollups._roll_up_python(start, end) == len(before)
    assert rollup_rows(RECENT_DAYS) == approx(before)

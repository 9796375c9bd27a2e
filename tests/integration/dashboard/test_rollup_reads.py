"""Reads across the raw horizon on PostgreSQL: after a prune, the windowed grid and the pair history read the daily
rollups for the days before the horizon and raw rows after it, and answer as the raw rows did before the prune:
count, mean, status and newest time exactly; a day's median exactly (a pair history point, a cell measured on one
day); a median over several days within the daily medians' spread (stats.daily), as the raw median is."""

from __future__ import annotations

import json
import random
import statistics
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)  # rawDays=10: the horizon becomes 2026-06-05
WINDOW = timedelta(days=60)


def seed(client, key) -> list[dict]:
    rng = random.Random(7)
    ms = []
    # a -> b: six old days of different levels (odd and even counts), then recent days, then today
    for k in range(6):
        at = datetime(2026, 5, 1 + 3 * k, 6, tzinfo=UTC)
        level = rng.uniform(5, 30)
        for j in range(rng.randint(2, 6)):
            failed = rng.random() < 0.15
            ms.append(measurement("a", "b", gbps=None if failed else round(level + rng.uniform(-3, 3), 3),
                                  status="failed" if failed else "succeeded", error="reset" if failed else None,
                                  finished=at + timedelta(hours=2 * j)))
    for k in range(6):
        ms.append(measurement("a", "b", gbps=round(rng.uniform(10, 20), 3), finished=NOW - timedelta(days=k, hours=1)))
    # c -> d: measured on one old day only (its cell's newest stays raw, below the horizon)
    ms += [measurement("c", "d", gbps=g, finished=datetime(2026, 5, 20, 8 + j, tzinfo=UTC))
           for j, g in enumerate((4.0, 9.0, 5.0, 7.0))]
    r = client.post("/api/v1/ingest/", json.dumps(batch(ms)), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {key}")
    assert r.status_code == 200, r.content
    from django.db.models import F
    from results.models import Measurement

    Measurement.objects.update(ingested_at=F("finished_at"))  # delivered when measured, as old rows were
    return ms


def cells(mode: str, window: timedelta = WINDOW, cells_json: bool = False) -> dict[tuple, dict]:
    from results import selectors

    g = selectors.grid(selectors.get_benchmark("mesh/nightly"), "xrootd-https", 1, mode=mode, window=window,
                       now=NOW, cells_json=cells_json)
    rows = json.loads(g["cells_json"]) if cells_json else g["cells"]
    return {(c["source"], c["destination"]): c for c in rows}


def history() -> list[dict]:
    from results import selectors
    from results.models import Node

    a, b = Node.objects.get(name="a"), Node.objects.get(name="b")
    return selectors.pair_history(a, b, since=NOW - WINDOW)


def test_reads_across_the_horizon_answer_as_the_raw_rows(client, write_key):
    from results import retention, rfc3339

    ms = seed(client, write_key)
    raw = {mode: cells(mode) for mode in ("median", "mean")}
    recent = cells("median", timedelta(days=5))
    raw_history = history()

    report = retention.prune(NOW, retention.Policy(raw_days=10, file_days=3))
    assert len(report.pruned_days) == 7  # a -> b's six old days and c -> d's
    assert report.measurements == sum(m["finished_at"] < "2026-06-05" for m in ms) - 1  # but c -> d's newest

    for mode in ("median", "mean"):
        rolled = cells(mode)
        assert rolled.keys() == raw[mode].keys() == {("a", "b"), ("c", "d")}
        # the API's JSON path (PostgreSQL) gives the same cells
        assert cells(mode, cells_json=True) == {
            k: {**c, "finished_at": rfc3339.format_utc(c["finished_at"])} for k, c in rolled.items()}
        for key in rolled:
            for field in ("count", "status", "finished_at", "stale"):
                assert rolled[key][field] == raw[mode][key][field], (mode, key, field)
    median, mean = cells("median"), cells("mean")
    assert mean[("a", "b")]["value"] == pytest.approx(raw["mean"][("a", "b")]["value"])
    assert mean[("c", "d")]["value"] == pytest.approx(6.25)
    assert median[("c", "d")]["value"] == raw["median"][("c", "d")]["value"] == 6.0  # one day: exact

    # a -> b over several days: within the spread of its daily medians, as the raw median is
    by_day: dict = {}
    for m in ms:
        if (m["source"], m["status"]) == ("a", "succeeded"):
            by_day.setdefault(m["finished_at"][:10], []).append(m["throughput_gbps"])
    medians = [statistics.median(v) for v in by_day.values()]
    for value in (median[("a", "b")]["value"], raw["median"][("a", "b")]["value"]):
        assert min(medians) <= value <= max(medians)

    # a window after the horizon is read from raw rows alone, as before
    assert cells("median", timedelta(days=5)) == recent

    # the pair history: a point per old day from the rollups, its value that day's raw median; raw ones as before
    points = history()
    rolled_points = [p for p in points if p["day"] is not None]
    assert [p for p in points if p["day"] is None] == [
        {**p, "day": None} for p in raw_history if p["finished_at"] >= retention.horizon()]
    old_days = {d: v for d, v in by_day.items() if d < "2026-06-05"}
    assert len(rolled_points) == len(old_days)
    for p in rolled_points:
        day = p["finished_at"].date().isoformat()
        raw_day = [r for r in raw_history if r["finished_at"].date().isoformat() == day]
        assert p["throughput_gbps"] == pytest.approx(statistics.median(old_days[day]))
        assert p["day"]["count"] == len(raw_day) and p["id"] is None
        assert p["day"]["failures"] == sum(r["status"] != "succeeded" for r in raw_day)
        assert p["finished_at"] == max(r["finished_at"] for r in raw_day)
    # the page and the API serve the rollup points (ids null, their day's figures)
    assert client.get("/pair/a/b/?since=400d").status_code == 200
    api = client.get("/api/v1/pairs/history/?source=a&destination=b&since=400d").json()
    days = [p for p in api if p["day"] is not None]
    assert len(days) == len(rolled_points) and all(p["id"] is None for p in days)
    assert days[0]["day"] == {k: rolled_points[0]["day"][k] for k in ("count", "failures", "p10", "p90")}

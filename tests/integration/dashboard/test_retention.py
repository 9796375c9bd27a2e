"""Retention on PostgreSQL (results.retention, `manage.py prune_archive`): raw measurements go by whole UTC days
once past retention.rawDays, per-file rows after their own (shorter) age; both sides of each boundary, the newest
measurement of a grid cell kept however old, batches, and a dry run that removes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)
RAW_CUTOFF = datetime(2026, 6, 5, tzinfo=UTC)  # rawDays=10: the start of the day ten days before NOW
FILE_CUTOFF = datetime(2026, 6, 12, tzinfo=UTC)  # fileDays=3


def ingest(client, key, ms, delivered_when_measured=True):
    from django.db.models import F
    from results.models import Measurement

    r = client.post("/api/v1/ingest/", json.dumps(batch(ms)), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {key}")
    assert r.status_code == 200, r.content
    if delivered_when_measured:  # as an archive's old rows were; a late delivery is a case of its own
        Measurement.objects.filter(id__in=[m["id"] for m in ms]).update(ingested_at=F("finished_at"))


def seed(client, key):
    """Measurements on each side of the cutoffs; their ids by role."""
    ms = {
        "before_cutoff": measurement("a", "b", finished=RAW_CUTOFF - timedelta(microseconds=1), files=2),
        "at_cutoff": measurement("a", "b", finished=RAW_CUTOFF, files=2),
        # older than the age, but on the day that is not yet all past it: its day goes whole, tomorrow
        "past_age_same_day": measurement("a", "b", finished=NOW - timedelta(days=10, hours=1)),
        "files_old": measurement("a", "b", finished=FILE_CUTOFF - timedelta(microseconds=1), files=2),
        "files_young": measurement("a", "b", finished=FILE_CUTOFF, files=2),
        "newest_a_b": measurement("a", "b", finished=NOW - timedelta(hours=1)),
        # b -> a was last measured long ago: its cell's newest stays, with its files (its older one goes)
        "older_b_a": measurement("b", "a", finished=RAW_CUTOFF - timedelta(days=30)),
        "newest_b_a": measurement("b", "a", finished=RAW_CUTOFF - timedelta(days=20), files=1),
    }
    ingest(client, key, list(ms.values()))
    return {role: m["id"] for role, m in ms.items()}


def state():
    from results.models import FileTransfer, Measurement, PairLatest

    return ({str(i) for i in Measurement.objects.values_list("id", flat=True)},
            {str(i) for i in FileTransfer.objects.values_list("measurement_id", flat=True)},
            {str(i) for i in PairLatest.objects.values_list("measurement_id", flat=True)})


def test_prune_removes_only_what_is_past_its_age(client, write_key):
    from results import retention

    ids = seed(client, write_key)
    before = state()
    policy = retention.Policy(raw_days=10, file_days=3)
    assert (policy.raw_cutoff(NOW), policy.file_cutoff(NOW)) == (RAW_CUTOFF, FILE_CUTOFF)

    dry = retention.prune(NOW, policy, dry_run=True)
    assert (dry.measurements, dry.files, dry.kept) == (2, 2 + 2 + 2 + 1, 1)
    assert state() == before  # a dry run removes nothing

    batches = []
    report = retention.prune(NOW, policy, batch=1, log=batches.append)
    assert (report.measurements, report.files) == (2, 7)
    assert sum(line.startswith("Deleted a batch of 1 ") for line in batches) == 7 + 2  # a transaction per row
    # each day with raw rows before the cutoff was rolled up first (b -> a's two, a -> b's one)
    assert [str(d) for d in report.pruned_days] == ["2026-05-06", "2026-05-16", "2026-06-04"]
    measurements, files, latest = state()
    gone = {ids["before_cutoff"], ids["older_b_a"]}
    assert measurements == before[0] - gone
    # per-file rows: before the file cutoff they go (the b -> a newest's too), from it on they stay
    assert files == {ids["files_young"]}
    # the grid still shows both cells, b -> a by its measurement from 20 days before the cutoff
    assert latest == before[2] == {ids["newest_a_b"], ids["newest_b_a"]}
    assert retention.prune(NOW, policy).measurements == 0  # nothing more to do


def test_prune_archive_command(client, write_key, settings):
    from results.models import Measurement

    settings.RETENTION_RAW_DAYS, settings.RETENTION_FILE_DAYS = 180, 30
    now = datetime.now(UTC)
    ingest(client, write_key, [measurement("a", "b", finished=now - timedelta(days=400), files=3),
                               measurement("a", "b", finished=now - timedelta(days=1))])
    out = StringIO()
    call_command("prune_archive", "--dry-run", stdout=out)
    assert "Would remove 3 per-file row(s)" in out.getvalue() and "and 1 measurement(s)" in out.getvalue()
    assert Measurement.objects.count() == 2
    out = StringIO()
    call_command("prune_archive", stdout=out)
    assert "Removed 3 per-file row(s)" in out.getvalue() and "results.Measurement: 1" in out.getvalue()
    assert Measurement.objects.count() == 1


def test_a_measurement_a_change_points_at_stays(client, write_key):
    from results import retention
    from results.models import Change, Measurement

    old = [measurement("a", "b", finished=RAW_CUTOFF - timedelta(days=k)) for k in (1, 2)]
    ingest(client, write_key, [*old, measurement("a", "b", finished=NOW)])
    first = Measurement.objects.get(id=old[0]["id"])
    Change.objects.create(benchmark=first.benchmark, source=first.source, destination=first.destination,
                          protocol=first.protocol, streams=1, metric="throughput_gbps", measurement=first,
                          at=first.finished_at, before=10, after=5, worse=True, detected_at=NOW, runs_to_detect=3)
    report = retention.prune(NOW, retention.Policy(raw_days=10, file_days=3))
    assert (report.measurements, report.kept) == (1, 1)
    assert set(Measurement.objects.values_list("id", flat=True).filter(finished_at__lt=RAW_CUTOFF)) == {first.id}
    assert Change.objects.get().measurement_id == first.id


def test_a_measurement_delivered_after_its_day_was_rolled_up_stays(client, write_key, settings):
    from results import retention
    from results.models import DailyRollup, Measurement

    day = RAW_CUTOFF - timedelta(days=3)
    ingest(client, write_key, [measurement("a", "b", finished=day), measurement("a", "b", finished=NOW)])
    policy = retention.Policy(raw_days=10, file_days=3)
    assert retention.prune(NOW, policy).measurements == 1
    rolled = list(DailyRollup.objects.filter(day=day.date()).values("count", "rolled_at"))
    # the operator's outbox delivers one more from that day only now: no rollup holds it, so it is kept raw
    late = measurement("a", "b", finished=day + timedelta(hours=1))
    ingest(client, write_key, [late], delivered_when_measured=False)
    assert retention.prune(NOW, policy, dry_run=True).late == 1
    report = retention.prune(NOW, policy)
    assert (report.measurements, report.late) == (0, 1)
    assert Measurement.objects.filter(id=late["id"]).exists()
    assert list(DailyRollup.objects.filter(day=day.date()).values("count", "rolled_at")) == rolled
    settings.RETENTION_RAW_DAYS = 100  # the command's clock is today's: that day is past this age too
    out = StringIO()
    call_command("prune_archive", stdout=out)
    assert "Kept 1 older measurement(s) delivered after their day was rolled up" in out.getvalue()


def test_loss_summaries_go_after_their_own_age(client, write_key):
    """Whole days by the period's start (lossDays=3: from June 12 on they stay), with the default cells of pairs
    whose newest period is that old; the command's dry run counts them and removes nothing."""
    from results import retention
    from results.models import LossCell, LossSummary

    from tests.support.dashboard import loss_summary

    loss_cutoff = datetime(2026, 6, 12, tzinfo=UTC)
    periods = {("a", "b"): [loss_cutoff - timedelta(minutes=1), loss_cutoff, NOW - timedelta(minutes=5)],
               ("b", "a"): [loss_cutoff - timedelta(days=2), loss_cutoff - timedelta(minutes=1)]}  # silent since
    summaries = [loss_summary(src, dst, t) for (src, dst), ts in periods.items() for t in ts]
    r = client.post("/api/v1/loss/ingest/", json.dumps({"summaries": summaries}), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200, r.content
    policy = retention.Policy(raw_days=10, file_days=3, loss_days=3)
    assert policy.loss_cutoff(NOW) == loss_cutoff
    cells_before = LossCell.objects.count()
    assert retention.prune(NOW, policy, dry_run=True).loss_summaries == 3
    assert LossSummary.objects.count() == 5
    report = retention.prune(NOW, policy, batch=2)
    assert report.loss_summaries == 3
    assert sorted(LossSummary.objects.values_list("period_start", flat=True)) == [loss_cutoff,
                                                                                   NOW - timedelta(minutes=5)]
    # b -> a's newest period is before the cutoff: its default cell goes too, a -> b's stays
    assert LossCell.objects.count() == cells_before - 1

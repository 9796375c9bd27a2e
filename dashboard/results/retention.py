"""The archive's lifecycle: how long raw rows are kept (the policy: pure) and the prune that rolls up and removes
what is past its age (`manage.py prune_archive`, the chart's daily CronJob).

Raw measurements go by whole UTC days: a day is removed once all of it is older than ``raw_days``, so it is either
all raw or all gone and the prune never removes anything younger than the age. Before a day goes it is rolled up
(results.rollups) and the horizon (ArchiveHorizon: where reads switch from rollups to raw rows) moves past it, in one
transaction, so a prune stopped at any point leaves every day readable once, from one source. A measurement that a
grid cell still shows (its PairLatest row) or that a found change points at stays, however old. Deletes go in
batches, each its own short transaction, so a first prune of a years-old archive never holds one huge transaction.

Loss summaries (one a minute per directed pair: ~14 M a day at 100 agents) go after ``loss_days`` by their period's
start, in batches the same way, with the default cells (LossCell) whose newest period is that old: the grid no
longer shows those. They are not rolled up: the pair page's loss plot reaches back ``loss_days``.

On PostgreSQL the archive is partitioned by month (results.partitions): a month goes whole, its partition dropped,
once all of it is past the age (its kept rows move out first), so a raw row there stays up to a month longer than
the age (reads below the horizon use the rollups all the same). Rows outside the month partitions (the upgraded
archive's old table, the default partition) go by row deletes as on SQLite. The prune also creates the months
ahead."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import (
    CharField,
    DateTimeField,
    Exists,
    Expression,
    ExpressionWrapper,
    Field,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Value,
)
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from results import partitions, rollups, selectors
from results.models import (
    ArchiveHorizon,
    Change,
    DailyRollup,
    FileTransfer,
    LossCell,
    LossSummary,
    Measurement,
    PairLatest,
)

BATCH = 5000  # measurements (or per-file rows) per delete transaction


def day_start(t: datetime) -> datetime:
    """The start (UTC) of the day ``t`` falls on."""
    return datetime.combine(t.astimezone(UTC).date(), time(), tzinfo=UTC)


@dataclass(frozen=True)
class Policy:
    """How long each kind of row is kept, in days (settings RETENTION_*, the chart's dashboard.retention.*)."""

    raw_days: int = 180
    file_days: int = 30
    loss_days: int = 30

    def __post_init__(self) -> None:
        for name in ("raw_days", "file_days", "loss_days"):
            if getattr(self, name) < 1:
                raise ValueError(f"retention {name} must be 1 or more, not {getattr(self, name)}")

    @classmethod
    def from_settings(cls) -> Policy:
        return cls(raw_days=settings.RETENTION_RAW_DAYS, file_days=settings.RETENTION_FILE_DAYS,
                   loss_days=settings.RETENTION_LOSS_DAYS)

    def raw_cutoff(self, now: datetime) -> datetime:
        """Raw measurements that finished before this go: the start of the day ``raw_days`` ago (whole days)."""
        return day_start(now - timedelta(days=self.raw_days))

    def file_cutoff(self, now: datetime) -> datetime:
        """Per-file rows of measurements that finished before this go (never later than the raw cutoff)."""
        return max(day_start(now - timedelta(days=self.file_days)), self.raw_cutoff(now))

    def loss_cutoff(self, now: datetime) -> datetime:
        """Loss summaries whose period started before this go (whole days, as raw measurements)."""
        return day_start(now - timedelta(days=self.loss_days))


@dataclass
class Report:
    """What a prune removed (or, dry, would remove)."""

    raw_cutoff: datetime
    file_cutoff: datetime
    loss_cutoff: datetime
    measurements: int = 0
    files: int = 0
    loss_summaries: int = 0
    kept: int = 0  # past the age but still shown by a grid cell or pointed at by a change
    late: int = 0  # past the age, delivered after their day was rolled up: kept raw, not in the rollups
    pruned_days: list[date] = field(default_factory=list)  # rolled up, then their raw rows removed
    completed_days: list[date] = field(default_factory=list)  # rolled up, raw rows kept (newly completed days)
    removed: dict[str, int] = field(default_factory=dict)  # per model label, as Django's delete counts them
    partitions: list[str] = field(default_factory=list)  # month partitions dropped (or, dry, that would be)
    awaiting: int = 0  # past the age in a month partition not all past it: they go with their month
    created: list[str] = field(default_factory=list)  # month partitions created ahead


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


horizon = selectors.raw_horizon  # where the raw archive begins; None before the first prune


def _set_horizon(raw_since: datetime) -> None:
    ArchiveHorizon.objects.update_or_create(pk=1, defaults={"raw_since": raw_since})


def raw_days(start: datetime, end: datetime) -> Iterator[date]:
    """The UTC days from ``start`` to before ``end`` that have raw measurements, oldest first (an index probe
    per day found, so years without rows cost nothing)."""
    while start < end:
        first = Measurement.objects.filter(finished_at__gte=start, finished_at__lt=end).aggregate(
            t=Min("finished_at"))["t"]
        if first is None:
            return
        day = first.astimezone(UTC).date()
        yield day
        start = rollups.midnight(day + timedelta(days=1))


def protected() -> tuple[QuerySet, QuerySet]:
    """Ids of measurements that must stay whatever their age: each grid cell's newest, each change's."""
    return (PairLatest.objects.values("measurement_id"), Change.objects.values("measurement_id"))


LATE_MARGIN = timedelta(minutes=10)  # an ingest committing while its day was rolled up counts as late: kept


def rolled_up() -> Exists:
    """A measurement's cell-day was rolled up after it arrived (LATE_MARGIN later): the rollup holds it. One
    delivered later than that (finished before the horizon, delivered after its day was rolled up) is not in it."""
    def outer(name: str, field: Field, default: object = None) -> Expression:
        ref = ExpressionWrapper(OuterRef(name), output_field=field)  # a typed reference, for the functions
        return ref if default is None else Coalesce(ref, Value(default), output_field=field)

    return Exists(DailyRollup.objects.filter(
        benchmark=OuterRef("benchmark"), protocol=OuterRef("protocol"),
        streams=outer("streams", IntegerField(), 0), address_family=OuterRef("address_family"),
        congestion_control=outer("congestion_control", CharField(), ""), auth=outer("auth", CharField(), ""),
        storage_setting=OuterRef("storage_setting"),
        source=OuterRef("source"), destination=OuterRef("destination"),
        day=TruncDate(outer("finished_at", DateTimeField()), tzinfo=UTC),
        rolled_at__gt=ExpressionWrapper(OuterRef("ingested_at") + Value(LATE_MARGIN), output_field=DateTimeField())))


def _unprotected(cutoff: datetime) -> QuerySet[Measurement]:
    qs = Measurement.objects.filter(finished_at__lt=cutoff)
    for ids in protected():
        qs = qs.exclude(id__in=ids)
    return qs


def removable(cutoff: datetime) -> QuerySet[Measurement]:
    """Measurements past the cutoff that may go: not protected, and in their day's rollup."""
    return _unprotected(cutoff).filter(rolled_up())


def old_files(cutoff: datetime) -> QuerySet[FileTransfer]:
    return FileTransfer.objects.filter(measurement__finished_at__lt=cutoff)


def old_loss(cutoff: datetime) -> QuerySet[LossSummary]:
    # by family too: the loss_window index (family, period_start) then finds each batch without a table scan
    return LossSummary.objects.filter(family__in=(4, 6), period_start__lt=cutoff)


def _delete_in_batches(select: Callable[[], QuerySet], batch: int, report: Report,
                       log: Callable[[str], None]) -> int:
    """Delete the rows ``select()`` gives, ``batch`` at a time, each batch one transaction; the number deleted.
    ``select`` is evaluated again inside each transaction, so a row that became protected meanwhile stays."""
    total = 0
    while True:
        ids = list(select().order_by().values_list("pk", flat=True)[:batch])  # unordered: no sort per batch
        if not ids:
            return total
        with transaction.atomic():
            _, per_model = select().filter(pk__in=ids).only("pk").delete()
        for label, n in per_model.items():
            report.removed[label] = report.removed.get(label, 0) + n
        deleted = per_model.get(select().model._meta.label, 0)  # fewer when one became protected meanwhile
        total += deleted
        log(f"Deleted a batch of {deleted} ({', '.join(f'{k}: {v}' for k, v in sorted(per_model.items()))}).")


def _completed_start(raw_since: datetime) -> datetime:
    """Where the newly completed days begin: after the newest rolled-up day, and never before the horizon."""
    newest = DailyRollup.objects.aggregate(d=Max("day"))["d"]
    return max(raw_since, rollups.midnight(newest + timedelta(days=1))) if newest else raw_since


def _outside(qs: QuerySet[Measurement], span: tuple[datetime, datetime] | None) -> QuerySet[Measurement]:
    """The rows of ``qs`` that go by row deletes: all (SQLite), or those outside the month partitions."""
    return qs if span is None else qs.exclude(finished_at__gte=span[0], finished_at__lt=span[1])


def _span_after(parts: list[partitions.Partition], cutoff: datetime) -> tuple[datetime, datetime] | None:
    """The month partitions' span once those past ``cutoff`` are dropped (None: not partitioned, or none left)."""
    past = {p.name for p in partitions.past(parts, cutoff)}
    return partitions.month_span([p for p in parts if p.name not in past])


def prune(now: datetime | None = None, policy: Policy | None = None, dry_run: bool = False, batch: int = BATCH,
          log: Callable[[str], None] = lambda _: None) -> Report:
    """Roll up each day about to go and move the horizon past it; remove the per-file rows and then the raw
    measurements past their age; roll up the days completed since the last run (dry: find and count only)."""
    now = now or timezone.now()
    policy = policy or Policy.from_settings()
    report = Report(raw_cutoff=policy.raw_cutoff(now), file_cutoff=policy.file_cutoff(now),
                    loss_cutoff=policy.loss_cutoff(now))
    raw_since = horizon() or EPOCH
    report.pruned_days = list(raw_days(raw_since, report.raw_cutoff))
    report.kept = Measurement.objects.filter(finished_at__lt=report.raw_cutoff).count() - _unprotected(
        report.raw_cutoff).count()
    parts = partitions.partitions() if partitions.enabled() else []
    span = _span_after(parts, report.raw_cutoff)
    if dry_run:
        report.completed_days = list(raw_days(_completed_start(max(raw_since, report.raw_cutoff)), day_start(now)))
        report.files = old_files(report.file_cutoff).count()
        report.partitions = [p.name for p in partitions.past(parts, report.raw_cutoff)]
        report.created = [partitions.month_name(m) for m in partitions.months_to_create(parts, now)] if parts else []
        # the days from the horizon on are rolled up first; below it, only what their rollups hold goes
        unprotected = _outside(_unprotected(report.raw_cutoff), span)
        report.measurements = unprotected.filter(Q(finished_at__gte=raw_since) | Q(rolled_up())).count()
        report.late = unprotected.count() - report.measurements
        report.awaiting = _unprotected(report.raw_cutoff).count() - unprotected.count()
        report.loss_summaries = old_loss(report.loss_cutoff).count()
        return report
    for day in report.pruned_days:
        with transaction.atomic():
            rollups.roll_up(day, day)
            _set_horizon(rollups.midnight(day + timedelta(days=1)))
        log(f"Rolled up {day} before its raw rows go.")
    if raw_since < report.raw_cutoff:  # also across days without rows
        _set_horizon(report.raw_cutoff)
    report.files = _delete_in_batches(lambda: old_files(report.file_cutoff), batch, report, log)
    if parts:  # the months all past the age go whole (their kept rows moved out first)
        for r in partitions.retire_past(report.raw_cutoff, log):
            report.partitions.append(r.name)
            report.measurements += r.dropped
            label = Measurement._meta.label
            report.removed[label] = report.removed.get(label, 0) + r.dropped
        span = partitions.month_span(partitions.partitions())
    report.measurements += _delete_in_batches(lambda: _outside(removable(report.raw_cutoff), span), batch, report,
                                              log)
    report.late = _outside(_unprotected(report.raw_cutoff), span).count()
    report.awaiting = _unprotected(report.raw_cutoff).count() - report.late
    if parts:
        report.created = partitions.create_ahead(now, log=log)
    report.loss_summaries = _delete_in_batches(lambda: old_loss(report.loss_cutoff), batch, report, log)
    LossCell.objects.filter(newest__lt=report.loss_cutoff).delete()
    raw_since = horizon() or EPOCH
    for day in raw_days(_completed_start(raw_since), day_start(now)):
        rollups.roll_up(day, day)
        report.completed_days.append(day)
    return report

"""`manage.py prune_archive`: remove what is past its retention age (the chart's daily CronJob runs it)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from results import retention


class Command(BaseCommand):
    help = ("Roll up into daily per-cell summaries, then remove, per-file rows, raw measurements and loss "
            "summaries past their retention age (TPCMESH_DASHBOARD_RETENTION_*); a grid cell's newest measurement "
            "stays however old.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="print what would be removed, remove nothing")
        parser.add_argument("--batch-size", type=int, default=retention.BATCH,
                            help=f"rows per delete transaction (default {retention.BATCH})")

    def handle(self, *args, dry_run: bool = False, batch_size: int = retention.BATCH, **options):
        if batch_size < 1:
            raise CommandError(f"--batch-size must be 1 or more, not {batch_size}")
        log = self.stdout.write if options["verbosity"] > 1 else (lambda _: None)
        report = retention.prune(dry_run=dry_run, batch=batch_size, log=log)
        verb = "Would remove" if dry_run else "Removed"
        days = report.pruned_days
        span = f" ({days[0]} to {days[-1]})" if days else ""
        self.stdout.write(f"{'Would roll up' if dry_run else 'Rolled up'} {len(days)} day(s) before their raw rows "
                          f"go{span} and {len(report.completed_days)} newly completed day(s).")
        self.stdout.write(f"{verb} {report.files} per-file row(s) of measurements finished before "
                          f"{report.file_cutoff:%Y-%m-%d} and {report.measurements} measurement(s) finished before "
                          f"{report.raw_cutoff:%Y-%m-%d} (UTC).")
        self.stdout.write(f"{verb} {report.loss_summaries} loss summar{'y' if report.loss_summaries == 1 else 'ies'} "
                          f"of periods that began before {report.loss_cutoff:%Y-%m-%d} (UTC).")
        if report.removed:
            self.stdout.write("Rows removed: " + ", ".join(f"{k}: {v}" for k, v in sorted(report.removed.items())))
        if report.partitions:
            self.stdout.write(f"{'Would drop' if dry_run else 'Dropped'} {len(report.partitions)} month partition(s) "
                              f"all past the age: {', '.join(report.partitions)}.")
        if report.awaiting:
            self.stdout.write(f"{report.awaiting} measurement(s) past the age go with their month's partition.")
        if report.created:
            self.stdout.write(f"{'Would create' if dry_run else 'Created'} partition(s) ahead: "
                              f"{', '.join(report.created)}.")
        self.stdout.write(f"Kept {report.kept} older measurement(s): a grid cell's newest or a change's.")
        if report.late:
            self.stdout.write(f"Kept {report.late} older measurement(s) delivered after their day was rolled up: "
                              "raw, not in the rollups, not read by the grid or the pair history.")

"""`manage.py analyse`: change detection on every cell with unseen measurements, then the problem rules (what the
dashboard's background thread does after each ingest; for TPCMESH_DASHBOARD_ANALYSIS=off, a cron job, or after a
bulk load)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from results import analysis
from results.models import Benchmark


class Command(BaseCommand):
    help = "Find step changes in new measurements and re-evaluate the problem rules."

    def add_arguments(self, parser):
        parser.add_argument("--problems-only", action="store_true",
                            help="only re-evaluate every benchmark's problems (e.g. after a maintenance window ended)")

    def handle(self, *args, problems_only: bool = False, **options):
        if problems_only:
            benches = list(Benchmark.objects.all())
        else:
            benches = list(Benchmark.objects.filter(id__in=analysis.detect_changes()))
        for bench in benches:
            found = analysis.evaluate_problems(bench)
            self.stdout.write(f"{bench}: {len(found)} problem(s)")

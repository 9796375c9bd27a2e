"""Prometheus metrics of the dashboard (tpcmesh_dashboard_*); bounded labels only."""

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

REQUESTS = Counter(
    "tpcmesh_dashboard_http_requests_total", "HTTP requests answered", ["method", "route", "code"]
)
LATENCY = Histogram(
    "tpcmesh_dashboard_http_request_duration_seconds", "Time to answer a request", ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10),
)
INGESTED = Counter(
    "tpcmesh_dashboard_ingested_measurements_total", "Measurements received by ingest", ["result"]
)
INGEST_REJECTED = Counter(
    "tpcmesh_dashboard_ingest_rejected_total", "Ingest requests refused", ["reason"]
)


class ProblemsCollector:
    """tpcmesh_dashboard_problems: the open problems per benchmark, kind, severity and acknowledgement, read from
    the database at each scrape (every worker process answers the same; the chart's alert rules use it)."""

    def describe(self):
        return [GaugeMetricFamily("tpcmesh_dashboard_problems", "Open problems found in the grids",
                                  labels=["benchmark", "kind", "severity", "acknowledged"])]

    def collect(self):
        from django.db import DatabaseError
        from django.db.models import BooleanField as Bool
        from django.db.models import Count, ExpressionWrapper, F, Q

        from results.models import Problem

        family = self.describe()[0]
        rows = (Problem.objects.filter(resolved_at__isnull=True)
                .annotate(acked=ExpressionWrapper(Q(ack_fingerprint=F("fingerprint")), output_field=Bool()))
                .values("benchmark__namespace", "benchmark__name", "kind", "severity", "acked")
                .annotate(n=Count("id")).order_by())
        try:
            rows = list(rows)
        except DatabaseError:  # /metrics still answers (with the process's own metrics) while the database is away
            rows = []
        for r in rows:
            family.add_metric([f"{r['benchmark__namespace']}/{r['benchmark__name']}", r["kind"], r["severity"],
                               "true" if r["acked"] else "false"], r["n"])
        yield family


# Its own registry, read only by the dashboard's /metrics: a process that merely imports the dashboard (tests, the
# operator's suite) must not query a database whenever something scrapes the default registry.
PROBLEMS = CollectorRegistry(auto_describe=True)
PROBLEMS.register(ProblemsCollector())

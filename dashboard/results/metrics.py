"""Prometheus metrics of the dashboard (tpcmesh_dashboard_*); bounded labels only."""

from prometheus_client import Counter, Histogram

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

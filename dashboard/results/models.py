"""The results archive: nodes, benchmarks, runs, measurements (with per-file transfers), API tokens.

PairLatest is a summary kept by services.ingest: the newest measurement of each
(benchmark, protocol, streams, source, destination), so the "latest" grid reads one row per cell.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid

from django.db import models

from results.thresholds import effective as effective_bounds

PROTOCOLS = ["builtin", "xrootd-https", "xrootd-root", "gridftp", "iperf3", "rtt"]
TPC_PROTOCOLS = ["builtin", "xrootd-https", "xrootd-root", "gridftp"]
STATUSES = ["succeeded", "failed", "cancelled"]


class Node(models.Model):
    name = models.CharField(max_length=253, unique=True)
    site = models.CharField(max_length=200, blank=True, default="")
    address = models.CharField(max_length=253, blank=True, default="")
    labels = models.JSONField(default=dict, blank=True)
    nic_speed_gbps = models.FloatField(null=True, blank=True)
    loopback_gbps = models.FloatField(null=True, blank=True, help_text="the node's own loopback ceiling, if measured")
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Benchmark(models.Model):
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True, default="")
    spec = models.JSONField(default=dict, blank=True)
    thresholds = models.JSONField(default=dict, blank=True)  # spec.thresholds: goodGbps, warnGbps, goodRttMs, warnRttMs
    nodes = models.ManyToManyField(Node, related_name="benchmarks", blank=True, help_text="nodes in its results")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="benchmark_namespace_name")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def effective_thresholds(self) -> dict[str, dict[str, float]]:
        """The benchmark's thresholds over the defaults, per kind (throughput, latency); never fails on junk."""
        return effective_bounds(self.thresholds)


class Run(models.Model):
    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="runs")
    uid = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=253)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=40, blank=True, default="")
    counts = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["benchmark", "-started_at"], name="run_benchmark_started")]

    def __str__(self) -> str:
        return self.name


class Measurement(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, help_text="client-chosen idempotency key")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="measurements")
    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="measurements")
    source = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    destination = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    protocol = models.CharField(max_length=20, choices=[(p, p) for p in PROTOCOLS])
    streams = models.PositiveSmallIntegerField(null=True, blank=True)
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    file_size = models.BigIntegerField(null=True, blank=True)
    file_count = models.IntegerField(null=True, blank=True)
    total_bytes = models.BigIntegerField(null=True, blank=True)
    throughput_gbps = models.FloatField(null=True, blank=True, help_text="bytes / mean transfer time")
    aggregate_gbps = models.FloatField(null=True, blank=True, help_text="bytes / wall time")
    peak_gbps = models.FloatField(null=True, blank=True)
    rtt_ms = models.FloatField(null=True, blank=True)
    rtt_min_ms = models.FloatField(null=True, blank=True)
    rtt_max_ms = models.FloatField(null=True, blank=True)
    retransmits = models.BigIntegerField(null=True, blank=True,
                                         help_text="TCP segments the senders retransmitted (tcp.retransmits)")
    tcp = models.JSONField(null=True, blank=True, help_text="the TCP view of the test (the contract's testTcp)")
    congestion_control = models.CharField(max_length=15, null=True, blank=True,
                                          help_text="the congestion control the test asked for (null: default)")
    status = models.CharField(max_length=12, choices=[(s, s) for s in STATUSES])
    error = models.TextField(null=True, blank=True)
    checksum = models.CharField(max_length=12, null=True, blank=True)
    destination_kind = models.CharField(max_length=8, null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    ingested_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-finished_at"]
        indexes = [
            # A pair's history (both directions are two lookups) and the windowed grid aggregates.
            models.Index(fields=["source", "destination", "-finished_at"], name="meas_pair_finished"),
            # Covering (PostgreSQL): a window's grid (mean/median per cell) reads this index alone, not the table.
            models.Index(fields=["benchmark", "protocol", "streams", "-finished_at"], name="meas_window",
                         include=["source", "destination", "throughput_gbps", "rtt_ms", "status"]),
            models.Index(fields=["-finished_at"], name="meas_finished"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(source=models.F("destination")), name="meas_source_ne_destination"
            ),
            models.CheckConstraint(
                condition=models.Q(finished_at__gte=models.F("started_at")), name="meas_finish_after_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source_id}->{self.destination_id} {self.protocol} x{self.streams} {self.finished_at:%Y-%m-%d}"


class FileTransfer(models.Model):
    measurement = models.ForeignKey(Measurement, on_delete=models.CASCADE, related_name="files")
    name = models.CharField(max_length=200)
    size = models.BigIntegerField()
    bytes = models.BigIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    seconds = models.FloatField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    checksum_ok = models.BooleanField(null=True, blank=True)
    tcp = models.JSONField(null=True, blank=True, help_text="the file's TCP view (the contract's fileTcp)")

    class Meta:
        ordering = ["measurement", "name"]


class PairLatest(models.Model):
    """The newest measurement per grid cell and setting (kept by services.ingest)."""

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="+")
    protocol = models.CharField(max_length=20)
    streams = models.PositiveSmallIntegerField(default=0, help_text="0 when the measurement has no stream count")
    source = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    destination = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    measurement = models.ForeignKey(Measurement, on_delete=models.CASCADE, related_name="+")
    finished_at = models.DateTimeField()
    # Copied from the measurement so the grid reads one narrow table, no join.
    throughput_gbps = models.FloatField(null=True, blank=True)
    rtt_ms = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=12)
    error = models.CharField(max_length=200, null=True, blank=True, help_text="first 200 characters")
    cell_json = models.TextField(null=True, blank=True,
                                 help_text="PostgreSQL: the cell's JSON but age, staleness and state (celljson.py)")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["benchmark", "protocol", "streams", "source", "destination"], name="pairlatest_cell"
            )
        ]
        indexes = [
            models.Index(fields=["source", "benchmark"], name="pairlatest_source"),
            models.Index(fields=["destination", "benchmark"], name="pairlatest_destination"),
        ]


def hash_token(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiToken(models.Model):
    """An API token; only its SHA-256 is stored. `write` allows ingest, otherwise read-only."""

    name = models.CharField(max_length=100, unique=True)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=8, editable=False, help_text="first characters, to recognise a token")
    write = models.BooleanField(default=False, help_text="may ingest measurements")
    enabled = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({'write' if self.write else 'read'})"

    @staticmethod
    def generate_key() -> str:
        return secrets.token_hex(20)

    def set_key(self, key: str) -> None:
        self.key_hash = hash_token(key)
        self.prefix = key[:8]

    # DRF treats request.user/auth duck-typed; these make a token usable as request.auth.
    @property
    def is_authenticated(self) -> bool:
        return True

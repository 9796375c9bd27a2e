"""The results archive: clusters, nodes, benchmarks, runs, measurements (with per-file transfers), API tokens.

Federation: every node and benchmark belongs to a Cluster (the operator that measured it says which); runs and
measurements belong to their benchmark's. Node names and benchmarks' namespace/name are unique per cluster. A write
token may be scoped to one cluster (ApiToken.cluster): it writes that cluster's records only (results.scope).

PairLatest is a summary kept by services.ingest: the newest measurement of each
(benchmark, protocol, streams, address family, congestion control, auth mode, source, destination), so the
"latest" grid reads one row per cell.
Change, Problem and Maintenance are what watching the mesh over time adds (results.analysis writes the first two).
Path is the route a pair's probe test traced (results.paths; a differing hop list is a Change of metric "path").
"""

from __future__ import annotations

import hashlib
import secrets
import uuid

from django.db import models

from results.protocols import PROTOCOLS
from results.storage import STORAGE_SETTINGS
from results.thresholds import effective as effective_bounds

STATUSES = ["succeeded", "failed", "cancelled"]
AUTH_MODES = ["token", "x509", "none"]
ADDRESS_FAMILIES = ["ipv4", "ipv6"]
METRICS = ["throughput_gbps", "rtt_ms", "path"]
SEVERITIES = ["critical", "warning"]


def figure(help_text: str = "") -> models.FloatField:
    """A measured or derived figure (Gbit/s, ms, a ratio): NULL where it was not measured or cannot be computed."""
    return models.FloatField(null=True, blank=True, help_text=help_text)


DEFAULT_CLUSTER = "default"  # rows from before federation, and batches that name no cluster (admin tokens)


class Cluster(models.Model):
    """A Kubernetes cluster whose operator delivers here: by the chart's cluster.name (default: the UID of its
    kube-system namespace), "local" for the local mode."""

    name = models.CharField(max_length=253, unique=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


def default_cluster() -> int:
    """The default cluster's id (created on first use): a node or benchmark made without a cluster is its."""
    return Cluster.objects.get_or_create(name=DEFAULT_CLUSTER)[0].pk


# Federation's two rules for a node and a benchmark: each belongs to a cluster (the default one when made without),
# which cannot be deleted while it has any, and its name is unique within its cluster only.
def cluster_key(related_name: str) -> models.ForeignKey:
    return models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name=related_name, default=default_cluster)


def unique_in_cluster(model_name: str, *fields: str) -> models.UniqueConstraint:
    return models.UniqueConstraint(fields=["cluster", *fields], name="_".join([model_name, "cluster", *fields]))


class Node(models.Model):
    cluster = cluster_key("nodes")
    name = models.CharField(max_length=253)
    site = models.CharField(max_length=200, blank=True, default="")
    address = models.CharField(max_length=253, blank=True, default="")
    labels = models.JSONField(default=dict, blank=True)
    nic_speed_gbps = figure()
    loopback_gbps = figure("the node's own loopback ceiling, if measured")
    disk_read_gbps = figure("its disk path's read ceiling (fio)")
    disk_write_gbps = figure("its disk path's write ceiling (fio)")
    # db_default: rows inserted by SQL alone (the contract test's seed, the bench) are agents' nodes too
    external = models.BooleanField(default=False, db_default=False,
                                   help_text="an external endpoint (another site's storage), not an agent's node")
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "cluster_id"]
        constraints = [unique_in_cluster("node", "name")]

    def __str__(self) -> str:
        return self.name


class Benchmark(models.Model):
    cluster = cluster_key("benchmarks")
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True, default="")
    spec = models.JSONField(default=dict, blank=True)
    thresholds = models.JSONField(default=dict, blank=True)  # spec.thresholds: goodGbps, warnGbps, goodRttMs, warnRttMs
    nodes = models.ManyToManyField(Node, related_name="benchmarks", blank=True, help_text="nodes in its results")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["namespace", "name", "cluster_id"]
        constraints = [unique_in_cluster("benchmark", "namespace", "name")]

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
    throughput_gbps = figure("bytes / mean transfer time")
    aggregate_gbps = figure("bytes / wall time")
    peak_gbps = figure()
    rtt_ms = figure()
    rtt_min_ms = figure()
    rtt_max_ms = figure()
    retransmits = models.BigIntegerField(null=True, blank=True,
                                         help_text="TCP segments the senders retransmitted (tcp.retransmits)")
    tcp = models.JSONField(null=True, blank=True, help_text="the TCP view of the test (the contract's testTcp)")
    implementation = models.JSONField(null=True, blank=True, help_text=(
        "the program and versions that made the measurement (the contract's implementation); null: not recorded"))
    host = models.JSONField(null=True, blank=True, help_text=(
        "both ends' host telemetry over the test: CPU, own processes, interface, memory, TCP limits (the contract's "
        "host); null: not recorded"))
    # The limit model's answer (results.diagnosis), given while the measurement is its cell's newest: not the record's
    binding_limit = models.CharField(max_length=20, blank=True, db_default="", help_text=(
        "the bound the measurement sits at (results/diagnosis/limits.py): network-capacity, receive-window, "
        "send-buffer, loss, source-cpu, destination-cpu, protocol, source-storage, destination-storage, unknown; "
        "empty: not diagnosed"))
    efficiency = figure("measured ÷ the pair's path capacity (iperf3)")
    diagnosis = models.JSONField(null=True, blank=True, help_text=(
        "the limit model's bounds with their evidence figures, the binding one's fix, and what was missing"))
    congestion_control = models.CharField(max_length=15, null=True, blank=True,
                                          help_text="the congestion control the test asked for (null: default)")
    repeat = models.PositiveSmallIntegerField(null=True, blank=True,
                                              help_text="which repeat of its setting in the run (spec.repeats)")
    # db_default too: bulk loads (the dashboard bench's COPY) that leave the column out ran over IPv4
    address_family = models.CharField(max_length=4, choices=[(f, f) for f in ADDRESS_FAMILIES], default="ipv4",
                                      db_default="ipv4", help_text="the IP version the test ran over (ipv4, ipv6)")
    storage = models.JSONField(null=True, blank=True, help_text=(
        "where each end kept the files (the contract's storage); null: memory to memory"))
    storage_setting = models.CharField(max_length=14, choices=[(s, s) for s in STORAGE_SETTINGS], default="memory",
                                       db_default="memory", help_text="storage as a grid setting (STORAGE_SETTINGS)")
    status = models.CharField(max_length=12, choices=[(s, s) for s in STATUSES])
    error = models.TextField(null=True, blank=True)
    checksum = models.CharField(max_length=12, null=True, blank=True)
    destination_kind = models.CharField(max_length=8, null=True, blank=True)
    auth = models.CharField(max_length=8, null=True, blank=True, choices=[(a, a) for a in AUTH_MODES],
                            help_text="how the transfer was authorized: token, x509 or none")
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
                         include=["source", "destination", "throughput_gbps", "rtt_ms", "status", "address_family",
                                  "congestion_control", "auth", "storage_setting"]),
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
    measurement = models.ForeignKey(Measurement, on_delete=models.CASCADE, related_name="files",
                                    db_constraint=False)  # partitioned measurements (results.partitions)
    name = models.CharField(max_length=200)
    size = models.BigIntegerField()
    bytes = models.BigIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    seconds = figure()
    error = models.TextField(null=True, blank=True)
    checksum_ok = models.BooleanField(null=True, blank=True)
    tcp = models.JSONField(null=True, blank=True, help_text="the file's TCP view (the contract's fileTcp)")

    class Meta:
        ordering = ["measurement", "name"]


class CellSettings(models.Model):
    """A grid cell's settings beside its streams, each a setting of its own like streams: an IPv6, a bbr or a disk
    result never overwrites an IPv4, cubic or memory one, and a benchmark whose spec.auth changed keeps a cell per
    mode (#13)."""

    address_family = models.CharField(max_length=4, default="ipv4", db_default="ipv4")
    congestion_control = models.CharField(max_length=15, default="", db_default="", blank=True,
                                          help_text="empty: the nodes' default")
    auth = models.CharField(max_length=8, default="", db_default="", blank=True,
                            help_text="token, x509 or none; empty: a protocol without auth modes")
    storage_setting = models.CharField(max_length=14, default="memory", db_default="memory",
                                       help_text="memory, disk, disk-to-memory or memory-to-disk (STORAGE_SETTINGS)")

    class Meta:
        abstract = True


class PairLatest(CellSettings):
    """The newest measurement per grid cell and setting (kept by services.ingest)."""

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="+")
    protocol = models.CharField(max_length=20)
    streams = models.PositiveSmallIntegerField(default=0, help_text="0 when the measurement has no stream count")
    source = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    destination = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    measurement = models.ForeignKey(Measurement, on_delete=models.CASCADE, related_name="+",
                                    db_constraint=False)  # partitioned measurements (results.partitions)
    finished_at = models.DateTimeField()
    # Copied from the measurement so the grid reads one narrow table, no join.
    throughput_gbps = figure()
    rtt_ms = figure()
    status = models.CharField(max_length=12)
    error = models.CharField(max_length=200, null=True, blank=True, help_text="first 200 characters")
    cell_json = models.TextField(null=True, blank=True,
                                 help_text="PostgreSQL: the cell's JSON but age, staleness and state (celljson.py)")
    # A benchmark with spec.repeats: the value is the median of the newest run's repeats, with its interval.
    repeats = models.PositiveSmallIntegerField(db_default=1, help_text="succeeded measurements the value is the "
                                                                    "median of (1: the newest alone)")
    low = figure("95 % bootstrap interval of that median (3+ repeats)")
    high = figure()
    # The analysis' diagnosis of the cell as JSON members (gridcell.diagnosis_members of CellDiagnosis' fields) for
    # the latest grid's JSON, valid while diagnosis_of is the cell's measurement: beside the cell's own JSON, so a
    # read probes no second table per cell (for 100×100 of every setting that probe was a quarter of the request,
    # ~24 ms for 19 800 cells). Written by the analysis alone (results.diagnosis.cells: rows an ingest holds are
    # skipped, never waited for); ingest leaves both alone, and a new measurement makes them stale.
    diagnosis_json = models.TextField(null=True, blank=True, help_text="the diagnosis' JSON members")
    diagnosis_of = models.UUIDField(null=True, blank=True, help_text="the measurement diagnosis_json judged")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                # the mode right after the protocol: which modes a protocol's cells have is an index probe each
                # (selectors.newest_auth, the grid's default mode), and a mode's cells one index range
                fields=["benchmark", "protocol", "auth", "streams", "address_family", "congestion_control",
                        "storage_setting", "source", "destination"], name="pairlatest_storage_cell"
            )
        ]
        indexes = [
            models.Index(fields=["source", "benchmark"], name="pairlatest_source"),
            models.Index(fields=["destination", "benchmark"], name="pairlatest_destination"),
        ]


class DailyRollup(CellSettings):
    """One grid cell's measurements of one UTC day, summarised (results.rollups): kept for years after the raw
    rows are pruned (results.retention). The figures are of the day's succeeded measurements with a value, in the
    protocol's metric (Gbit/s; ms for rtt); percentiles as PostgreSQL's percentile_cont interpolates them."""

    day = models.DateField(help_text="the UTC day")
    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="+")
    protocol = models.CharField(max_length=20)
    streams = models.PositiveSmallIntegerField(default=0, help_text="0 when the measurements have no stream count")
    source = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    destination = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    count = models.PositiveIntegerField(help_text="measurements of the day")
    failures = models.PositiveIntegerField(help_text="of them, those that did not succeed (failed or cancelled)")
    succeeded = models.PositiveIntegerField(help_text="succeeded ones with a value: what the figures are of")
    mean = figure()
    median = figure()
    p10 = figure()
    p90 = figure()
    last_at = models.DateTimeField(help_text="when the day's newest measurement finished")
    last_status = models.CharField(max_length=12, help_text="that measurement's status")
    rolled_at = models.DateTimeField(help_text="when it was computed: a measurement delivered later is not in it")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["benchmark", "protocol", "auth", "streams", "address_family", "congestion_control",
                        "storage_setting", "source", "destination", "day"], name="rollup_storage_cell_day"),
        ]
        indexes = [
            models.Index(fields=["source", "destination", "day"], name="rollup_pair_day"),
            models.Index(fields=["day"], name="rollup_day"),
        ]


class WindowCell(CellSettings):
    """One grid cell's figures over a standard window (results.windows, PostgreSQL): what the windowed grid
    aggregates from the raw rows, kept so that a read joins them instead (one row per cell, not a window's rows).
    Valid while its range's WindowStamp still fingerprints the window's rows: written with it, in one statement."""

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="+")
    protocol = models.CharField(max_length=20)
    streams = models.PositiveSmallIntegerField(default=0, help_text="0 when the measurements have no stream count")
    window_seconds = models.PositiveIntegerField()
    source = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    destination = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    count = models.PositiveIntegerField(help_text="measurements in the window")
    succeeded = models.PositiveIntegerField(help_text="succeeded ones with a value: what the figures are of")
    mean = figure()
    median = figure()
    last_at = models.DateTimeField(help_text="when the window's newest measurement finished")
    # the cell's PairLatest row (its status and newest measurement, read live), joined by key when computed
    cell_id = models.BigIntegerField(null=True)
    # The cell's JSON members (results.windows.JSON_PARTS) but those of each read (age, staleness, state, status,
    # diagnosis), written once, as PairLatest.cell_json is for the latest grid
    key_json = models.TextField(help_text="source to storage")
    mean_json = models.TextField(help_text="value, the mean")
    median_json = models.TextField(help_text="value, the median")
    last_json = models.TextField(help_text="finished_at")
    tail_json = models.TextField(help_text="error to high")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["benchmark", "protocol", "streams", "window_seconds", "auth", "address_family",
                        "congestion_control", "storage_setting", "source", "destination"], name="windowcell_cell"),
        ]


class WindowStamp(models.Model):
    """The rows a range's WindowCells were computed from (a benchmark, protocol and stream setting: one range of
    the index meas_window), fingerprinted: their count and sums of their times, pairs, settings and values. A read
    whose window fingerprints alike reads the same rows, so the stored figures are its answer."""

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="+")
    protocol = models.CharField(max_length=20)
    streams = models.PositiveSmallIntegerField(default=0)
    window_seconds = models.PositiveIntegerField()
    computed_for = models.DateTimeField(help_text="the window's end when computed (its start: this minus the window)")
    fingerprint = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["benchmark", "protocol", "streams", "window_seconds"],
                                    name="windowstamp_range"),
        ]


class ArchiveHorizon(models.Model):
    """Where the raw archive begins (results.retention): the days before ``raw_since`` are read from DailyRollup,
    not from raw rows (a grid cell's newest may still be there, below it). One row; none before the first prune."""

    raw_since = models.DateTimeField()
    updated = models.DateTimeField(auto_now=True)


class AnalysisMark(models.Model):
    """How far change detection has seen a grid cell. A table of its own, not a PairLatest column: analysis
    writes one bulk upsert per batch here and never touches the rows ingest upserts (no row lock, no row version
    shared with ingest). No database foreign key for the same reason (a key check would lock the cell's row in
    share mode); Django still deletes the mark with its cell."""

    cell = models.OneToOneField(PairLatest, primary_key=True, on_delete=models.CASCADE, db_constraint=False,
                                related_name="mark")
    analysed_at = models.DateTimeField(help_text="finished_at of the newest measurement change detection has seen")


class CellDiagnosis(models.Model):
    """The limit model's answer on a grid cell's newest measurement (results.diagnosis.cells), in the grid's shape.

    A narrow table of its own, written by the analysis alone (like AnalysisMark: never a row ingest upserts), and
    joined by primary key only by the grid reads that answer it (the grid API's cells, the page's why and
    efficiency views): the grid keeps reading one narrow PairLatest row per cell, and a cell's diagnosis costs one
    index probe on a table of four short columns, not a read of the wide Measurement row (its host and TCP JSON).
    ``measurement`` names the measurement judged: a cell whose newest measurement has moved on since shows no
    diagnosis until the analysis has judged the new one (the readers join on both). The latest grid's JSON reads the
    same answer as JSON text from the cell's own row (PairLatest.diagnosis_json), written with this one (``members``
    too, for the previous release's pods)."""

    cell = models.OneToOneField(PairLatest, primary_key=True, on_delete=models.CASCADE, db_constraint=False,
                                related_name="diagnosis")
    measurement_id = models.UUIDField(help_text="the measurement judged: the cell's newest when it was")
    binding_limit = models.CharField(max_length=20, help_text="results/diagnosis/limits.py's LIMITS")
    efficiency = figure("measured ÷ the pair's path capacity (iperf3)")
    evidence = models.TextField(blank=True, default="", help_text="the model's reason, with its figures")
    fix = models.TextField(blank=True, default="", help_text="the binding limit's fix, citing the figures")
    # The same text as the cell's PairLatest.diagnosis_json, which this release reads instead: still written
    # because the previous release's dashboard pods read it during a rolling upgrade (expand, then contract: drop
    # it in the release after the next).
    members = models.TextField(help_text="the cell's JSON members of these fields (gridcell.diagnosis_members)")


def hash_token(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiToken(models.Model):
    """An API token; only its SHA-256 is stored. `write` allows ingest, otherwise read-only. A write token with a
    `cluster` writes that cluster's records only; one without is an admin token (any cluster, as before
    federation)."""

    name = models.CharField(max_length=100, unique=True)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=8, editable=False, help_text="first characters, to recognise a token")
    write = models.BooleanField(default=False, help_text="may ingest measurements")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, null=True, blank=True, related_name="tokens",
                                help_text="writes this cluster's records only (empty: any cluster)")
    enabled = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        scope = f", cluster {self.cluster}" if self.cluster_id else ""
        return f"{self.name} ({'write' if self.write else 'read'}{scope})"

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


class Change(CellSettings):
    """A step change in one cell's history (results.stats.changes): the first run after the step, the medians of
    the stretches on each side, and when it was found."""

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="changes")
    source = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    destination = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    protocol = models.CharField(max_length=20)
    streams = models.PositiveSmallIntegerField(default=0, help_text="0 when the measurements have no stream count")
    metric = models.CharField(max_length=20, choices=[(m, m) for m in METRICS])
    measurement = models.ForeignKey(Measurement, on_delete=models.CASCADE, related_name="+",
                                    db_constraint=False,  # partitioned measurements (results.partitions)
                                    help_text="the first measurement after the step")
    at = models.DateTimeField(help_text="when that measurement finished")
    before = models.FloatField(help_text="median of the stretch before")
    after = models.FloatField(help_text="median of the stretch after")
    worse = models.BooleanField(help_text="lower throughput or higher RTT")
    detected_at = models.DateTimeField()
    runs_to_detect = models.PositiveIntegerField(help_text="runs after the step, counting its first, when found")

    class Meta:
        ordering = ["-at", "id"]
        constraints = [models.UniqueConstraint(fields=["measurement", "metric"], name="change_measurement_metric")]
        indexes = [
            models.Index(fields=["benchmark", "-at"], name="change_benchmark_at"),
            models.Index(fields=["source", "destination", "-at"], name="change_pair_at"),
        ]

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else float("inf")


class Path(models.Model):
    """The path the source traced to the destination in a run's probe test (the rtt measurement's `path`)."""

    measurement = models.OneToOneField(Measurement, on_delete=models.CASCADE, related_name="path",
                                       db_constraint=False,  # partitioned measurements (results.partitions)
                                       help_text="the rtt measurement it came with")
    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="+")
    source = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    destination = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(help_text="when the probe test finished")
    hops = models.JSONField(default=list, help_text="hop addresses in order; null: a hop that did not answer")
    hop_count = models.PositiveSmallIntegerField()
    reached = models.BooleanField()
    pmtu = models.PositiveIntegerField(null=True, blank=True, help_text="path MTU tracepath found (bytes)")
    interface_mtu = models.PositiveIntegerField(null=True, blank=True,
                                                help_text="MTU of the source's interface towards the destination")
    pmtu_reduced = models.BooleanField(null=True, blank=True,
                                       help_text="the path MTU is smaller than the interface's (null: unknown)")
    changed = models.BooleanField(null=True, blank=True,
                                  help_text="hops differ from the pair's previous path (null: nothing to compare)")
    error = models.TextField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "id"]
        indexes = [models.Index(fields=["benchmark", "source", "destination", "-at"], name="path_pair_at")]


class Maintenance(models.Model):
    """A node, or a pair (both directions), in maintenance from ``starts_at`` to ``ends_at``: its cells show the
    maintenance colour, it raises no problem, and the operator leaves it out of runs."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    source = models.ForeignKey(Node, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    destination = models.ForeignKey(Node, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    reason = models.CharField(max_length=500)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    created_by = models.CharField(max_length=150, help_text="a user, an API token's name, or operator:<cluster>")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_at", "id"]
        indexes = [models.Index(fields=["ends_at"], name="maintenance_ends")]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(node__isnull=False, source__isnull=True, destination__isnull=True)
                           | models.Q(node__isnull=True, source__isnull=False, destination__isnull=False)),
                name="maintenance_node_or_pair"),
            models.CheckConstraint(condition=models.Q(ends_at__gt=models.F("starts_at")),
                                   name="maintenance_ends_later"),
        ]


class Problem(models.Model):
    """A problem the rules (results.problems) found in a benchmark's grid. ``key`` names what it is about (the
    rule and its node, pair or sites), so a problem found again is the same row; ``fingerprint`` changes when its
    severity or cells do. An acknowledgement holds while the fingerprint it was given for is current."""

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="problems")
    key = models.CharField(max_length=600)
    kind = models.CharField(max_length=20)
    severity = models.CharField(max_length=10, choices=[(s, s) for s in SEVERITIES])
    summary = models.CharField(max_length=1000)
    cells = models.JSONField(default=list, help_text="[source, destination, protocol, streams] of the cells explained")
    fingerprint = models.CharField(max_length=64)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    ack_by = models.CharField(max_length=150, blank=True, default="")
    ack_at = models.DateTimeField(null=True, blank=True)
    ack_note = models.CharField(max_length=1000, blank=True, default="")
    ack_fingerprint = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["resolved_at", "-first_seen", "id"]
        constraints = [models.UniqueConstraint(fields=["benchmark", "key"], name="problem_benchmark_key")]

    @property
    def acknowledged(self) -> bool:
        return bool(self.ack_fingerprint) and self.ack_fingerprint == self.fingerprint


class LossSummary(models.Model):
    """One TWAMP-light period of a sender (source) towards a reflector (destination), as its agent summarised it
    (the contract's lossSummary; results.loss.ingest stores it). The columns are what the loss grid, the pair
    page and the problem rules read; ``detail`` keeps the rest of the summary as sent (JSON text: a text column
    takes any string the contract allows, jsonb would refuse an escaped NUL). Identity: (source, destination,
    family, period_start), so a summary sent again is a duplicate."""

    # no index of its own on source: the identity's index leads with it (one index less to write at ingest)
    source = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False,
                               help_text="the sender (node)")
    destination = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+",
                                    help_text="the reflector (peer)")
    family = models.PositiveSmallIntegerField(choices=[(4, "4"), (6, "6")])
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    partial = models.BooleanField(default=False)
    rate_pps = figure()
    sent = models.IntegerField()
    lost = models.IntegerField()
    duplicates = models.IntegerField(null=True, blank=True)
    reordered = models.IntegerField(null=True, blank=True)
    rtt_min_ms = figure()
    rtt_median_ms = figure()
    rtt_p95_ms = figure()
    rtt_max_ms = figure()
    forward_min_ms = figure("one-way delay source → destination")
    forward_median_ms = figure()
    backward_min_ms = figure("one-way delay destination → source")
    backward_median_ms = figure()
    trusted = models.BooleanField(default=False, help_text="both clocks within the agent's bound: one-way delays "
                                                          "may be shown")
    untrusted_reason = models.CharField(max_length=500, blank=True, default="")
    ipdv_ms = figure("round-trip median |IPDV| (jitter)")
    ipdv_forward_ms = figure("forward median |IPDV|")
    ipdv_backward_ms = figure("backward median |IPDV|")
    detail = models.TextField(default="{}", help_text="the summary's other fields as sent (JSON text)")
    ingested_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-period_start", "id"]
        constraints = [
            # the identity, and the index of a pair's history and of its newest window (read backwards)
            models.UniqueConstraint(fields=["source", "destination", "family", "period_start"],
                                    name="loss_pair_period"),
            models.CheckConstraint(condition=~models.Q(source=models.F("destination")), name="loss_source_ne_dest"),
        ]
        indexes = [
            # Covering (PostgreSQL): a window's grid reads this index alone, not the table.
            models.Index(fields=["family", "-period_start"], name="loss_window",
                         include=["source", "destination", "sent", "lost", "rtt_median_ms", "forward_median_ms",
                                  "backward_median_ms", "trusted", "untrusted_reason", "ipdv_ms"]),
        ]

    def __str__(self) -> str:
        return f"{self.source_id}->{self.destination_id} IPv{self.family} {self.period_start:%Y-%m-%d %H:%M}"


class LossCell(models.Model):
    """The loss grid's default cell of a directed pair and family: its summaries over the default window (15
    minutes) up to its newest period, as the grid's JSON (results.loss.selectors.CELL_SQL), rewritten by
    ingest (PostgreSQL) for every pair a batch touched, so the default grid reads one narrow row per pair."""

    source = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False)
    destination = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    family = models.PositiveSmallIntegerField()
    newest = models.DateTimeField(help_text="start of the pair's newest period")
    cell_json = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "destination", "family"], name="losscell_pair")]

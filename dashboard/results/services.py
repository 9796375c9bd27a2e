"""Writes: ingest of a validated batch, acknowledgements, maintenance windows, API tokens. Reads live in
selectors."""

from __future__ import annotations

import io
import json
import logging
import operator
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from results import analysis, contract, metrics, paths, scope, storage
from results.celljson import cell_json_sql, fill_sql
from results.models import (
    DEFAULT_CLUSTER,
    ApiToken,
    Benchmark,
    Cluster,
    FileTransfer,
    Maintenance,
    Measurement,
    Node,
    PairLatest,
    Problem,
    Run,
)
from results.stats.level import recent_level

log = logging.getLogger(__name__)

# A record's own columns: every field of the contract's `measurement` (manifests/schemas/measurement.v1.schema.json)
# but those stored apart: its identity and nodes (keys), its files and path (tables of their own), its address family
# (below: a default when left out)
STORED_APART = ("id", "source", "destination", "files", "path", "address_family")
MEASUREMENT_FIELDS = [f for f in contract.schema()["$defs"]["measurement"]["properties"] if f not in STORED_APART]
# retransmits: tcp.retransmits in a column, for filtering; address_family: "ipv4" when a batch leaves it out
# storage_setting: storage as the grid setting it is (results.storage.setting_of)
STORED_FIELDS = [*MEASUREMENT_FIELDS, "retransmits", "address_family", "storage_setting"]
FILE_FIELDS = ["name", "size", "bytes", "started_at", "finished_at", "seconds", "error", "checksum_ok", "tcp"]
# A PairLatest row's copy of its newest measurement, which an upsert rewrites. Not a grid cell's fields
# (results.gridcell): a row keeps both metrics and its measurement, and a cell is built from a row by protocol;
# test_grid_cell_fields checks that every PairLatest column a cell reads is written here or in LATEST_KEY.
LATEST_FIELDS = ["measurement_id", "finished_at", "throughput_gbps", "rtt_ms", "status", "error", "repeats", "low",
                 "high"]
NODE_FIELDS = ["site", "address", "labels", "nic_speed_gbps", "loopback_gbps", "disk_read_gbps", "disk_write_gbps",
               "external"]


@dataclass
class IngestResult:
    created: int = 0
    duplicates: int = 0
    ids: list[str] = field(default_factory=list)


def cluster_named(name: str) -> Cluster:
    cluster, _ = Cluster.objects.get_or_create(name=name)
    return cluster


def upsert_benchmark(cluster: Cluster, data: dict[str, Any]) -> Benchmark:
    bench, _ = Benchmark.objects.get_or_create(cluster=cluster, namespace=data["namespace"], name=data["name"])
    changed = []
    for key in ("uid", "spec", "thresholds"):
        value = data.get(key)
        if value is not None and getattr(bench, key) != value:
            setattr(bench, key, value)
            changed.append(key)
    if changed:
        bench.save(update_fields=[*changed, "updated"])
    return bench


def _upsert_run(bench: Benchmark, data: dict[str, Any]) -> Run:
    values = {k: data[k] for k in ("name", "scheduled_at", "started_at", "finished_at", "state", "counts") if k in data}
    values = {k: v for k, v in values.items() if v is not None}
    run, created = Run.objects.select_related("benchmark__cluster").get_or_create(
        uid=data["uid"], defaults={"benchmark": bench, **values})
    if not created and run.benchmark.cluster_id != bench.cluster_id:
        # a run's uid is its TransferRun's: one cluster's, whoever sends it (an admin token too)
        raise scope.OtherCluster(f"run {data['uid']!r} ({run.name}) belongs to cluster {run.benchmark.cluster.name!r}"
                                 f", not to this batch's cluster {bench.cluster.name!r}")
    if not created and values:
        for k, v in values.items():
            setattr(run, k, v)
        run.save(update_fields=list(values))
    return run


def _node_clusters(described: dict[str, dict[str, Any]], names: set[str], cluster: Cluster,
                   token: object) -> dict[str, Cluster]:
    """Each node's cluster: the batch's, or the one its description names (another cluster's agent in a
    cross-cluster pair). A cluster-scoped token may name another cluster's node but not describe it."""
    asked = {name: (described.get(name) or {}).get("cluster") or cluster.name for name in names}
    clusters = {c: cluster if c == cluster.name else cluster_named(c) for c in set(asked.values())}
    for name, c in asked.items():
        if c != cluster.name and any(described[name].get(k) is not None for k in NODE_FIELDS):
            scope.check(token, c, f"node {name!r} (its description: {', '.join(NODE_FIELDS)})")
    return {name: clusters[c] for name, c in asked.items()}


def upsert_nodes(described_list: list[dict[str, Any]], names: set[str], cluster: Cluster,
                  token: object = None) -> dict[str, Node]:
    """The batch's nodes by name (created when new), their descriptions stored."""
    by_name = {n["name"]: n for n in described_list}
    names = names | set(by_name)
    home = _node_clusters(by_name, names, cluster, token)

    if not names:
        return {}

    def stored() -> dict[str, Node]:
        q = Q()
        for c in {c.id: c for c in home.values()}.values():
            q |= Q(cluster=c, name__in=[n for n in names if home[n].id == c.id])
        return {n.name: n for n in Node.objects.filter(q) if home[n.name].id == n.cluster_id}

    existing = stored()
    missing = [Node(name=name, cluster=home[name],
                    **{k: v for k, v in by_name.get(name, {}).items() if k in NODE_FIELDS and v is not None})
               for name in sorted(names - set(existing))]
    if missing:
        Node.objects.bulk_create(missing, ignore_conflicts=True)
        existing = stored()
    now = timezone.now()
    to_update = []
    for name, desc in by_name.items():
        node = existing[name]
        for k in NODE_FIELDS:
            if desc.get(k) is not None:
                setattr(node, k, desc[k])
        node.last_seen = now
        to_update.append(node)
    if to_update:
        Node.objects.bulk_update(to_update, [*NODE_FIELDS, "last_seen"])
    return existing


# A grid cell: a pair under one setting (protocol, streams, address family, congestion control, "" = the default;
# auth mode, "" = a protocol without modes; storage).
LATEST_KEY = ["benchmark_id", "protocol", "streams", "address_family", "congestion_control", "auth", "storage_setting",
              "source_id", "destination_id"]
LATEST_COLUMNS = [*LATEST_KEY, *LATEST_FIELDS]


def _latest_upsert(fields: list[str] = LATEST_FIELDS) -> str:
    """The ON CONFLICT clause that keeps a grid cell (PairLatest) at its newest measurement: it only moves forward
    in time, so a concurrent ingest (or a late, older batch) never puts an older measurement back. Both
    storage paths use it."""
    table = PairLatest._meta.db_table
    return (f"ON CONFLICT ({', '.join(LATEST_KEY)}) DO UPDATE SET "
            + ", ".join(f"{c} = EXCLUDED.{c}" for c in fields)
            + f" WHERE {table}.finished_at <= EXCLUDED.finished_at")


def _update_latest(bench: Benchmark, rows: list[Row]) -> None:
    """The portable path (SQLite 3.24+): the newest of the rows per cell, upserted in key order. PostgreSQL does
    the same inside _copy_measurements' statement."""
    newest: dict[tuple, Row] = {}
    for m in rows:
        key = (m.protocol, m.streams or 0, m.address_family, m.congestion_control or "", m.auth or "",
               m.storage_setting, m.source_id, m.destination_id)
        if key not in newest or m.finished_at > newest[key].finished_at:
            newest[key] = m
    prep = [PairLatest._meta.get_field(c.removesuffix("_id")).get_db_prep_value for c in LATEST_COLUMNS]
    values = [
        [f(v, connection) for f, v in zip(prep, (bench.id, *key, m.id, m.finished_at, m.throughput_gbps, m.rtt_ms,
                                                 m.status, (m.error or "")[:200] or None, 1, None, None),
                                          strict=True)]
        for key, m in sorted(newest.items())
    ]
    with connection.cursor() as cur:
        cur.executemany(f"INSERT INTO {PairLatest._meta.db_table} ({', '.join(LATEST_COLUMNS)}) VALUES "
                        f"({', '.join(['%s'] * len(LATEST_COLUMNS))}) {_latest_upsert()}", values)


def _summarise_repeats(run: Run, rows: list[Row]) -> None:
    """A benchmark with spec.repeats: each grid cell whose newest measurement is of this run shows the median of
    the run's succeeded repeats of it (those stored so far: a run's repeats may come in several batches), with its
    bootstrap interval (stats.level) once there are 3. A cell none of whose repeats succeeded keeps its newest
    failure."""
    # a cell's key: its setting (family, congestion control and auth mode too: each is a cell of its own)
    cells = {(r.protocol, r.streams or 0, r.address_family, r.congestion_control or "", r.auth or "",
              r.storage_setting, r.source_id, r.destination_id)
             for r in rows if r.repeat is not None and r.protocol != "rtt"}
    values_of: dict[tuple, list[float]] = defaultdict(list)
    for protocol, streams, family, cc, auth, store, src, dst, gbps in Measurement.objects.filter(
            run=run, protocol__in={c[0] for c in cells}, source_id__in={c[6] for c in cells},
            destination_id__in={c[7] for c in cells}, status="succeeded", throughput_gbps__gt=0).values_list(
            "protocol", "streams", "address_family", "congestion_control", "auth", "storage_setting", "source_id",
            "destination_id", "throughput_gbps"):
        values_of[(protocol, streams or 0, family, cc or "", auth or "", store, src, dst)].append(gbps)
    changed = []
    for cell in PairLatest.objects.filter(benchmark_id=run.benchmark_id, measurement__run=run,
                                          protocol__in={c[0] for c in cells}):
        key = (cell.protocol, cell.streams, cell.address_family, cell.congestion_control, cell.auth,
               cell.storage_setting, cell.source_id, cell.destination_id)
        values = values_of.get(key) if key in cells else None
        if not values:
            continue
        level = recent_level(values)
        cell.throughput_gbps = level.median if level else statistics.median(values)
        cell.low, cell.high = (level.low, level.high) if level else (None, None)
        cell.repeats, cell.status, cell.error = len(values), "succeeded", None
        changed.append(cell)
    PairLatest.objects.bulk_update(changed, ["throughput_gbps", "low", "high", "repeats", "status", "error"])
    if changed and connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(fill_sql("p.id = ANY(%s)"), [[c.id for c in changed]])


class Row(SimpleNamespace):
    """A measurement on its way in: the contract's fields plus node ids (lighter than a model instance)."""


def _csv(v: Any) -> str:
    if v is None:
        return ""
    t = type(v)
    if t is float or t is int:
        return repr(v)
    if t is bool:
        return "t" if v else "f"
    if t is datetime:
        return v.isoformat()
    if t is dict or t is list:
        v = json.dumps(v)
    return '"' + str(v).replace('"', '""') + '"'


def _copy(table: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
    """COPY rows into a table (PostgreSQL): many times faster than INSERT for thousands of rows."""
    text = "".join(",".join(map(_csv, row)) + "\n" for row in rows)
    if not text:
        return
    with connection.cursor() as cur:
        cur.cursor.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT csv)", io.StringIO(text))


MEASUREMENT_COLUMNS = ["id", "run_id", "benchmark_id", "source_id", "destination_id", *STORED_FIELDS,
                       "ingested_at"]


def _copy_measurements(run: Run, rows: list[Row]) -> set[str]:
    """PostgreSQL: insert the measurements whose id is not stored yet and move their grid cells forward, in one
    statement; returns the ids inserted. An id stored already is skipped whatever its finished_at; safe against a
    concurrent ingest of the same measurements (ON CONFLICT DO NOTHING: the partitioned table's key is (id,
    finished_at), results.partitions) and of the same cells (_latest_upsert). Both inserts go in key order: two
    ingests sharing ids or cells wait for each other in the same order (no deadlock)."""
    if not rows:
        return set()
    now = timezone.now()
    table = Measurement._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"CREATE TEMP TABLE ingest_tmp (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DROP")
    fields = [operator.attrgetter(k) for k in STORED_FIELDS]
    _copy("ingest_tmp", MEASUREMENT_COLUMNS,
          ([r.id, run.id, run.benchmark_id, r.source_id, r.destination_id, *(f(r) for f in fields), now]
           for r in rows))
    cols = ", ".join(MEASUREMENT_COLUMNS)
    cell = ("protocol, COALESCE(streams, 0), address_family, COALESCE(congestion_control, ''), COALESCE(auth, ''), "
            "storage_setting, source_id, destination_id")
    with connection.cursor() as cur:
        # The newest created measurement per cell, from the rows this very statement inserted (no second
        # round trip of the batch): the SQL twin of _update_latest's loop.
        cur.execute(f"""
            WITH created AS (
                INSERT INTO {table} ({cols}) SELECT {cols} FROM ingest_tmp t
                WHERE NOT EXISTS (SELECT 1 FROM {table} m WHERE m.id = t.id) ORDER BY id
                ON CONFLICT (id, finished_at) DO NOTHING RETURNING {cols}
            ), newest AS (
                SELECT DISTINCT ON ({cell}) benchmark_id, protocol, COALESCE(streams, 0) AS streams, address_family,
                       COALESCE(congestion_control, '') AS congestion_control, COALESCE(auth, '') AS auth,
                       storage_setting, source_id, destination_id, id,
                       finished_at, throughput_gbps, rtt_ms, status, left(error, 200) AS error,
                       1 AS repeats, NULL::float8 AS low, NULL::float8 AS high
                FROM created ORDER BY {cell}, finished_at DESC
            ), cells AS (
                INSERT INTO {PairLatest._meta.db_table} ({", ".join(LATEST_COLUMNS)}, cell_json)
                SELECT n.*, {cell_json_sql("n", "s.name", "d.name")}
                FROM newest n JOIN {Node._meta.db_table} s ON s.id = n.source_id
                JOIN {Node._meta.db_table} d ON d.id = n.destination_id
                ORDER BY n.protocol, n.streams, n.address_family, n.congestion_control, n.auth, n.storage_setting,
                         n.source_id, n.destination_id
                {_latest_upsert([*LATEST_FIELDS, "cell_json"])}
            )
            SELECT id FROM created""")
        created = {str(r[0]) for r in cur.fetchall()}
        cur.execute("DROP TABLE ingest_tmp")
    return created


def _insert_measurements(run: Run, rows: list[Row]) -> set[str]:
    """The portable path (SQLite): skip ids already stored, bulk insert the rest."""
    ids = [r.id for r in rows]
    stored: set[str] = set()
    for i in range(0, len(ids), 900):
        stored.update(str(x) for x in Measurement.objects.filter(id__in=ids[i:i + 900]).values_list("id", flat=True))
    new = [r for r in rows if str(r.id) not in stored]
    Measurement.objects.bulk_create(
        [Measurement(run=run, benchmark_id=run.benchmark_id, **vars(r)) for r in new], batch_size=500
    )
    return {str(r.id) for r in new}


def _store_files(files: list[list[Any]]) -> None:
    """Per-file results: [measurement_id, *FILE_FIELDS] rows."""
    if connection.vendor == "postgresql":
        _copy(FileTransfer._meta.db_table, ["measurement_id", *FILE_FIELDS], files)
    else:
        FileTransfer.objects.bulk_create(
            [FileTransfer(measurement_id=f[0], **dict(zip(FILE_FIELDS, f[1:], strict=True))) for f in files],
            batch_size=5000,
        )


def _retransmits(m: dict[str, Any]) -> int | None:
    """tcp.retransmits for its column: the contract's integer (JSON may write it 12.0)."""
    v = (m.get("tcp") or {}).get("retransmits")
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


@transaction.atomic
def ingest(batch: dict[str, Any], token: object = None) -> IngestResult:
    """Store one validated ingestBatch; idempotent by measurement id, all or nothing. Raises scope.OtherCluster
    (nothing stored) when the batch writes a record of a cluster `token` may not write, or names a run of
    another cluster."""
    cluster = cluster_named(scope.batch_cluster(token, batch.get("cluster"), DEFAULT_CLUSTER))
    bench = upsert_benchmark(cluster, batch["benchmark"])
    run = _upsert_run(bench, batch["run"])
    measurements = batch["measurements"]
    names = {m["source"] for m in measurements} | {m["destination"] for m in measurements}
    nodes = upsert_nodes(batch.get("nodes") or [], names, cluster, token)
    bench.nodes.add(*nodes.values())

    unique: dict[str, dict[str, Any]] = {}
    for m in measurements:
        unique.setdefault(str(m["id"]), m)
    candidates = [
        Row(id=m["id"], source_id=nodes[m["source"]].id, destination_id=nodes[m["destination"]].id,
            retransmits=_retransmits(m), **{k: m.get(k) for k in MEASUREMENT_FIELDS},
            address_family=m.get("address_family") or "ipv4",  # a batch from before IPv6 ran over IPv4
            storage_setting=storage.setting_of(m.get("storage")))
        for m in unique.values()
    ]
    postgresql = connection.vendor == "postgresql"
    created_ids = _copy_measurements(run, candidates) if postgresql else _insert_measurements(run, candidates)
    rows = [r for r in candidates if str(r.id) in created_ids]
    _store_files([[r.id, *(f.get(k) for k in FILE_FIELDS)] for r in rows for f in unique[str(r.id)].get("files")
                  or []])
    if rows and not postgresql:
        _update_latest(bench, rows)
    paths.store([paths.path_row(r.id, bench.id, r.source_id, r.destination_id, r.finished_at, unique[str(r.id)]["path"])
                 for r in rows if unique[str(r.id)].get("path")])
    if any(r.repeat is not None for r in rows):
        _summarise_repeats(run, rows)

    if rows:
        transaction.on_commit(analysis.schedule)
    result = IngestResult(created=len(rows), duplicates=len(measurements) - len(rows), ids=[str(r.id) for r in rows])
    metrics.INGESTED.labels(result="created").inc(result.created)
    metrics.INGESTED.labels(result="duplicate").inc(result.duplicates)
    log.info("Ingested run %s of benchmark %s (cluster %s): %d created, %d duplicates", run.name, bench, cluster,
             result.created, result.duplicates)
    return result


def acknowledge(problem: Problem, who: str, note: str | None) -> None:
    """Acknowledge a problem for its current fingerprint (``note`` None takes the acknowledgement back)."""
    if note is None:
        problem.ack_by, problem.ack_at, problem.ack_note, problem.ack_fingerprint = "", None, "", ""
    else:
        problem.ack_by, problem.ack_at, problem.ack_note = who, timezone.now(), note
        problem.ack_fingerprint = problem.fingerprint
    problem.save(update_fields=["ack_by", "ack_at", "ack_note", "ack_fingerprint"])
    log.info("Problem %s of %s %s by %s", problem.key, problem.benchmark, "acknowledged" if note is not None
             else "unacknowledged", who)


def _window_benchmarks(window: Maintenance) -> list[Benchmark]:
    nodes = [n for n in (window.node_id, window.source_id, window.destination_id) if n is not None]
    return list(Benchmark.objects.filter(nodes__in=nodes).distinct())


def maintenance_changed(window: Maintenance) -> None:
    """A window was set or ended: the problem rules see the grid as it is now (the cells in maintenance raise
    none, the ones back from it may)."""
    log.info("Maintenance %s: %s, %s .. %s (%s)", window.pk, window.node or f"{window.source}<->{window.destination}",
             window.reason, window.ends_at.isoformat(), window.created_by)
    for bench in _window_benchmarks(window):
        analysis.evaluate_problems(bench)


def end_maintenance(window: Maintenance) -> None:
    """End a window now (kept in the history); one that has not started yet is removed."""
    now = timezone.now()
    if window.starts_at >= now:
        window.delete()
    else:
        window.ends_at = min(window.ends_at, now + timedelta(microseconds=1))
        window.save(update_fields=["ends_at"])
    maintenance_changed(window)


def _describe_token(token: ApiToken) -> str:
    scope_ = f", cluster {token.cluster.name}" if token.cluster_id else ""
    return f"{'write' if token.write else 'read-only'}{scope_}"


def create_api_token(name: str, write: bool = False, cluster: str | None = None) -> tuple[ApiToken, str]:
    """Create a token; returns it and its key (shown once, only the hash is stored). `cluster` scopes a write
    token to that cluster's records (results.scope)."""
    key = ApiToken.generate_key()
    token = ApiToken(name=name, write=write, cluster=cluster_named(cluster) if cluster else None)
    token.set_key(key)
    token.save()
    log.info("Created API token %s (%s)", name, _describe_token(token))
    return token, key


def ensure_api_token(name: str, key: str, write: bool = False, cluster: str | None = None) -> str:
    """Make token `name` have exactly this key, write permission and cluster scope (a key from a Kubernetes
    Secret, set at every start); returns "created", "updated" or "unchanged"."""
    scoped = cluster_named(cluster) if cluster else None
    token = ApiToken.objects.filter(name=name).first()
    if token is None:
        token = ApiToken(name=name, write=write, cluster=scoped)
        token.set_key(key)
        token.save()
        log.info("Created API token %s (%s) from a given key", name, _describe_token(token))
        return "created"
    before = (token.key_hash, token.write, token.enabled, token.cluster_id)
    token.set_key(key)
    token.write, token.enabled, token.cluster = write, True, scoped
    if (token.key_hash, token.write, token.enabled, token.cluster_id) == before:
        return "unchanged"
    token.save()
    log.info("Updated API token %s (%s) from a given key", name, _describe_token(token))
    return "updated"


def touch_token(token: ApiToken) -> None:
    now = timezone.now()
    if token.last_used is None or (now - token.last_used).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)

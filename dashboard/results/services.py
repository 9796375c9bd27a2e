"""Writes: ingest of a validated batch, acknowledgements, maintenance windows, API tokens. Reads live in
selectors."""

from __future__ import annotations

import io
import json
import logging
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from results import analysis, metrics
from results.celljson import cell_json_sql
from results.models import ApiToken, Benchmark, FileTransfer, Maintenance, Measurement, Node, PairLatest, Problem, Run

log = logging.getLogger(__name__)

MEASUREMENT_FIELDS = [
    "protocol", "streams", "concurrency", "file_size", "file_count", "total_bytes", "throughput_gbps",
    "aggregate_gbps", "peak_gbps", "rtt_ms", "rtt_min_ms", "rtt_max_ms", "status", "error", "checksum",
    "destination_kind", "auth", "started_at", "finished_at", "tcp", "congestion_control",
]
# retransmits: tcp.retransmits in a column, for filtering; address_family: "ipv4" when a batch leaves it out
STORED_FIELDS = [*MEASUREMENT_FIELDS, "retransmits", "address_family"]
FILE_FIELDS = ["name", "size", "bytes", "started_at", "finished_at", "seconds", "error", "checksum_ok", "tcp"]
LATEST_FIELDS = ["measurement_id", "finished_at", "throughput_gbps", "rtt_ms", "status", "error"]
NODE_FIELDS = ["site", "address", "labels", "nic_speed_gbps", "loopback_gbps"]


@dataclass
class IngestResult:
    created: int = 0
    duplicates: int = 0
    ids: list[str] = field(default_factory=list)


def _upsert_benchmark(data: dict[str, Any]) -> Benchmark:
    bench, _ = Benchmark.objects.get_or_create(namespace=data["namespace"], name=data["name"])
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
    run, created = Run.objects.get_or_create(uid=data["uid"], defaults={"benchmark": bench, **values})
    if not created and values:
        for k, v in values.items():
            setattr(run, k, v)
        run.save(update_fields=list(values))
    return run


def _upsert_nodes(described: list[dict[str, Any]], names: set[str]) -> dict[str, Node]:
    by_name = {n["name"]: n for n in described}
    names = names | set(by_name)
    existing = {n.name: n for n in Node.objects.filter(name__in=names)}
    missing = [Node(name=name, **{k: v for k, v in by_name.get(name, {}).items() if k in NODE_FIELDS and v is not None})
               for name in sorted(names - set(existing))]
    if missing:
        Node.objects.bulk_create(missing, ignore_conflicts=True)
        existing = {n.name: n for n in Node.objects.filter(name__in=names)}
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


# A grid cell: a pair under one setting (protocol, streams, address family, congestion control; "" = the default).
LATEST_KEY = ["benchmark_id", "protocol", "streams", "address_family", "congestion_control", "source_id",
              "destination_id"]
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
        key = (m.protocol, m.streams or 0, m.address_family, m.congestion_control or "", m.source_id, m.destination_id)
        if key not in newest or m.finished_at > newest[key].finished_at:
            newest[key] = m
    prep = [PairLatest._meta.get_field(c.removesuffix("_id")).get_db_prep_value for c in LATEST_COLUMNS]
    values = [
        [f(v, connection) for f, v in zip(prep, (bench.id, *key, m.id, m.finished_at, m.throughput_gbps, m.rtt_ms,
                                                 m.status, (m.error or "")[:200] or None), strict=True)]
        for key, m in sorted(newest.items())
    ]
    with connection.cursor() as cur:
        cur.executemany(f"INSERT INTO {PairLatest._meta.db_table} ({', '.join(LATEST_COLUMNS)}) VALUES "
                        f"({', '.join(['%s'] * len(LATEST_COLUMNS))}) {_latest_upsert()}", values)


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
    statement; returns the ids inserted. Safe against a concurrent ingest of the same ids (ON CONFLICT DO NOTHING)
    and of the same cells (_latest_upsert). Both inserts go in key order: two ingests sharing ids or cells wait
    for each other in the same order (no deadlock)."""
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
    cell = "protocol, COALESCE(streams, 0), address_family, COALESCE(congestion_control, ''), source_id, destination_id"
    with connection.cursor() as cur:
        # The newest created measurement per cell, from the rows this very statement inserted (no second
        # round trip of the batch): the SQL twin of _update_latest's loop.
        cur.execute(f"""
            WITH created AS (
                INSERT INTO {table} ({cols}) SELECT {cols} FROM ingest_tmp ORDER BY id
                ON CONFLICT (id) DO NOTHING RETURNING {cols}
            ), newest AS (
                SELECT DISTINCT ON ({cell}) benchmark_id, protocol, COALESCE(streams, 0) AS streams, address_family,
                       COALESCE(congestion_control, '') AS congestion_control, source_id, destination_id, id,
                       finished_at, throughput_gbps, rtt_ms, status, left(error, 200) AS error
                FROM created ORDER BY {cell}, finished_at DESC
            ), cells AS (
                INSERT INTO {PairLatest._meta.db_table} ({", ".join(LATEST_COLUMNS)}, cell_json)
                SELECT n.*, {cell_json_sql("n", "s.name", "d.name")}
                FROM newest n JOIN {Node._meta.db_table} s ON s.id = n.source_id
                JOIN {Node._meta.db_table} d ON d.id = n.destination_id
                ORDER BY n.protocol, n.streams, n.address_family, n.congestion_control, n.source_id, n.destination_id
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
def ingest(batch: dict[str, Any]) -> IngestResult:
    """Store one validated ingestBatch; idempotent by measurement id, all or nothing."""
    bench = _upsert_benchmark(batch["benchmark"])
    run = _upsert_run(bench, batch["run"])
    measurements = batch["measurements"]
    names = {m["source"] for m in measurements} | {m["destination"] for m in measurements}
    nodes = _upsert_nodes(batch.get("nodes") or [], names)
    bench.nodes.add(*nodes.values())

    unique: dict[str, dict[str, Any]] = {}
    for m in measurements:
        unique.setdefault(str(m["id"]), m)
    candidates = [
        Row(id=m["id"], source_id=nodes[m["source"]].id, destination_id=nodes[m["destination"]].id,
            retransmits=_retransmits(m), **{k: m.get(k) for k in MEASUREMENT_FIELDS},
            address_family=m.get("address_family") or "ipv4")  # a batch from before IPv6 ran over IPv4
        for m in unique.values()
    ]
    postgresql = connection.vendor == "postgresql"
    created_ids = _copy_measurements(run, candidates) if postgresql else _insert_measurements(run, candidates)
    rows = [r for r in candidates if str(r.id) in created_ids]
    _store_files([[r.id, *(f.get(k) for k in FILE_FIELDS)] for r in rows for f in unique[str(r.id)].get("files")
                  or []])
    if rows and not postgresql:
        _update_latest(bench, rows)

    if rows:
        transaction.on_commit(analysis.schedule)
    result = IngestResult(created=len(rows), duplicates=len(measurements) - len(rows), ids=[str(r.id) for r in rows])
    metrics.INGESTED.labels(result="created").inc(result.created)
    metrics.INGESTED.labels(result="duplicate").inc(result.duplicates)
    log.info("Ingested run %s of benchmark %s: %d created, %d duplicates", run.name, bench, result.created,
             result.duplicates)
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


def create_api_token(name: str, write: bool = False) -> tuple[ApiToken, str]:
    """Create a token; returns it and its key (shown once, only the hash is stored)."""
    key = ApiToken.generate_key()
    token = ApiToken(name=name, write=write)
    token.set_key(key)
    token.save()
    log.info("Created API token %s (%s)", name, "write" if write else "read-only")
    return token, key


def ensure_api_token(name: str, key: str, write: bool = False) -> str:
    """Make token `name` have exactly this key and write permission (a key from a Kubernetes Secret, set at
    every start); returns "created", "updated" or "unchanged"."""
    token = ApiToken.objects.filter(name=name).first()
    if token is None:
        token = ApiToken(name=name, write=write)
        token.set_key(key)
        token.save()
        log.info("Created API token %s (%s) from a given key", name, "write" if write else "read-only")
        return "created"
    before = (token.key_hash, token.write, token.enabled)
    token.set_key(key)
    token.write, token.enabled = write, True
    if (token.key_hash, token.write, token.enabled) == before:
        return "unchanged"
    token.save()
    log.info("Updated API token %s (%s) from a given key", name, "write" if write else "read-only")
    return "updated"


def touch_token(token: ApiToken) -> None:
    now = timezone.now()
    if token.last_used is None or (now - token.last_used).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)

"""Writes: ingest of a validated batch, API tokens. Reads live in selectors."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from results import metrics
from results.models import ApiToken, Benchmark, FileTransfer, Measurement, Node, PairLatest, Run

log = logging.getLogger(__name__)

MEASUREMENT_FIELDS = [
    "protocol", "streams", "concurrency", "file_size", "file_count", "total_bytes", "throughput_gbps",
    "aggregate_gbps", "peak_gbps", "rtt_ms", "rtt_min_ms", "rtt_max_ms", "status", "error", "checksum",
    "destination_kind", "started_at", "finished_at",
]
FILE_FIELDS = ["name", "size", "bytes", "started_at", "finished_at", "seconds", "error", "checksum_ok"]
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


def _update_latest(bench: Benchmark, rows: list[Measurement]) -> None:
    newest: dict[tuple, Measurement] = {}
    for m in rows:
        key = (m.protocol, m.streams or 0, m.source_id, m.destination_id)
        if key not in newest or m.finished_at > newest[key].finished_at:
            newest[key] = m
    current = {
        (p.protocol, p.streams, p.source_id, p.destination_id): p
        for p in PairLatest.objects.filter(
            benchmark=bench,
            protocol__in={k[0] for k in newest},
            source_id__in={k[2] for k in newest},
            destination_id__in={k[3] for k in newest},
        )
    }
    create, update = [], []
    for key, m in newest.items():
        cell = current.get(key)
        if cell is None:
            create.append(PairLatest(benchmark=bench, protocol=key[0], streams=key[1], source_id=key[2],
                                     destination_id=key[3], measurement=m, finished_at=m.finished_at))
        elif m.finished_at >= cell.finished_at:
            cell.measurement, cell.finished_at = m, m.finished_at
            update.append(cell)
    PairLatest.objects.bulk_create(create, batch_size=2000)
    PairLatest.objects.bulk_update(update, ["measurement", "finished_at"], batch_size=2000)


@transaction.atomic
def ingest(batch: dict[str, Any]) -> IngestResult:
    """Store one validated ingestBatch; idempotent by measurement id, all or nothing."""
    bench = _upsert_benchmark(batch["benchmark"])
    run = _upsert_run(bench, batch["run"])
    measurements = batch["measurements"]
    names = {m["source"] for m in measurements} | {m["destination"] for m in measurements}
    nodes = _upsert_nodes(batch.get("nodes") or [], names)

    seen: set[str] = set()
    unique = []
    for m in measurements:
        key = str(m["id"])
        if key not in seen:
            seen.add(key)
            unique.append(m)
    stored: set[str] = set()
    ids = list(seen)
    for i in range(0, len(ids), 5000):
        stored.update(str(x) for x in Measurement.objects.filter(id__in=ids[i:i + 5000]).values_list("id", flat=True))

    rows, files = [], []
    for m in unique:
        if str(m["id"]) in stored:
            continue
        row = Measurement(
            id=m["id"], run=run, benchmark=bench,
            source=nodes[m["source"]], destination=nodes[m["destination"]],
            **{k: m.get(k) for k in MEASUREMENT_FIELDS},
        )
        rows.append(row)
        for f in m.get("files") or []:
            files.append(FileTransfer(measurement=row, **{k: f.get(k) for k in FILE_FIELDS}))
    Measurement.objects.bulk_create(rows, batch_size=2000)
    FileTransfer.objects.bulk_create(files, batch_size=5000)
    if rows:
        _update_latest(bench, rows)

    result = IngestResult(created=len(rows), duplicates=len(measurements) - len(rows), ids=[str(r.id) for r in rows])
    metrics.INGESTED.labels(result="created").inc(result.created)
    metrics.INGESTED.labels(result="duplicate").inc(result.duplicates)
    log.info("Ingested run %s of benchmark %s: %d created, %d duplicates", run.name, bench, result.created,
             result.duplicates)
    return result


def create_api_token(name: str, write: bool = False) -> tuple[ApiToken, str]:
    """Create a token; returns it and its key (shown once, only the hash is stored)."""
    key = ApiToken.generate_key()
    token = ApiToken(name=name, write=write)
    token.set_key(key)
    token.save()
    log.info("Created API token %s (%s)", name, "write" if write else "read-only")
    return token, key


def touch_token(token: ApiToken) -> None:
    now = timezone.now()
    if token.last_used is None or (now - token.last_used).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)

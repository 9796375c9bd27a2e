"""Ingest of loss summaries (POST /api/v1/loss/ingest/): the batch checked against the contract (lossBatch), the
rules across fields checked here, the summaries stored in one statement, idempotent on (source, destination,
family, period_start)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from results import analysis, contract, rfc3339, scope, services
from results.loss import selectors
from results.models import DEFAULT_CLUSTER, LossSummary

log = logging.getLogger(__name__)

MAX_SUMMARIES = 1000  # per request (the contract's maxItems): more is 413
# The summary's fields that live in columns whole; the rest of it is kept in `detail` as sent.
IN_COLUMNS = ("node", "peer", "family", "period_start", "period_end", "partial", "rate_pps", "sent", "lost",
              "duplicates", "reordered", "rtt_ms")
COLUMNS = ["source_id", "destination_id", "family", "period_start", "period_end", "partial", "rate_pps", "sent",
           "lost", "duplicates", "reordered", "rtt_min_ms", "rtt_median_ms", "rtt_p95_ms", "rtt_max_ms",
           "forward_min_ms", "forward_median_ms", "backward_min_ms", "backward_median_ms", "trusted",
           "untrusted_reason", "ipdv_ms", "ipdv_forward_ms", "ipdv_backward_ms", "detail", "ingested_at"]


@dataclass
class Refused(Exception):
    """A batch refused whole (nothing stored): the HTTP status and an error per item and field at fault."""

    status: int
    detail: str
    errors: list[dict[str, Any]]


@dataclass
class Result:
    accepted: int
    duplicates: int


def _error(path: list[str | int], message: str) -> dict[str, Any]:
    """{index, field, message}: index is the summary's place in the batch (null: the batch itself), field its
    JSON path inside the summary."""
    index = path[1] if len(path) > 1 and path[0] == "summaries" and isinstance(path[1], int) else None
    inner = path[2:] if index is not None else path
    field = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(inner))
    whole = "(body)" if index is None else "(summary)"  # what an error about no field in particular is about
    return {"index": index, "field": field or whole, "message": message}


def contract_errors(body: Any, limit: int = 20) -> list[dict[str, Any]]:
    """What the contract (lossBatch) says is wrong, each naming the summary and the field."""
    try:
        contract.fast_check("lossBatch")(body)
        return []
    except Exception:  # noqa: BLE001 - fastjsonschema's refusal: jsonschema says what and where
        pass
    out = []
    for err in contract.validator("lossBatch").iter_errors(body):
        out.append(_error(list(err.path), err.message))
        if len(out) >= limit:
            break
    return out


def _name(value: str) -> str:
    return value.strip()  # as the measurement ingest reads names (DRF trims them)


def rule_errors(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules JSON Schema cannot state: lost <= sent, the peer is not the node, the period ends after it
    starts (and its times lie in years 1 to 9999 in UTC)."""
    out = []
    for i, s in enumerate(summaries):
        if s["lost"] > s["sent"]:
            out.append(_error(["summaries", i, "lost"], f"lost ({s['lost']}) is more than sent ({s['sent']})"))
        if _name(s["node"]) == _name(s["peer"]):
            out.append(_error(["summaries", i, "peer"], f"the peer is the node itself ({s['node']!r})"))
        try:
            start, end = rfc3339.parse(s["period_start"]), rfc3339.parse(s["period_end"])
        except ValueError as err:
            out.append(_error(["summaries", i, "period_start"], str(err)))
            continue
        if end < start:
            out.append(_error(["summaries", i, "period_end"], "period_end is before period_start"))
    return out


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


def _surrogates(value: Any, path: list[str | int]) -> Iterator[list[str | int]]:
    """Paths of the strings (keys too) holding a lone surrogate: JSON can carry one (\\ud800), UTF-8 and so the
    database cannot (DRF refuses them in the measurement ingest's fields the same way)."""
    if isinstance(value, str) and _has_surrogate(value):
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            shown = k.encode("utf-8", "backslashreplace").decode()  # the error names it, and must encode
            if _has_surrogate(k):
                yield [*path, shown]
            yield from _surrogates(v, [*path, shown])
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _surrogates(v, [*path, i])


def _surrogate_paths(body: Any) -> list[list[str | int]]:
    """_surrogates of a parsed JSON body, walked only when its UTF-8 encoding fails: the encoder looks at every
    string in C, the walk in Python cost more than the rest of a valid batch's checks."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
        return []
    except UnicodeEncodeError:
        return list(_surrogates(body, []))


def check(body: Any) -> list[dict[str, Any]]:
    """Raise Refused for a batch that is too large (413), breaks the contract (400) or a rule across fields
    (422); the summaries otherwise."""
    if isinstance(body, dict) and isinstance(body.get("summaries"), list) and len(body["summaries"]) > MAX_SUMMARIES:
        raise Refused(413, f"{len(body['summaries'])} summaries in one request; at most {MAX_SUMMARIES}: send "
                           "them in several", [_error(["summaries"], f"more than {MAX_SUMMARIES} items")])
    errors = contract_errors(body)
    if errors:
        raise Refused(400, "Loss batch violates measurement.v1.schema.json (lossBatch).", errors)
    errors = [_error(p, "a lone surrogate character (U+D800-U+DFFF) cannot be stored") for p in _surrogate_paths(body)]
    if errors:
        raise Refused(400, "Loss batch holds text that is not valid Unicode.", errors[:20])
    errors = rule_errors(body["summaries"])
    if errors:
        raise Refused(422, "Loss batch breaks a rule across fields.", errors)
    return body["summaries"]


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _row(s: dict[str, Any], source: int, destination: int, now) -> list[Any]:
    one_way = s.get("one_way_ms") or {}
    trusted = one_way.get("trusted") is True
    reason = one_way.get("untrusted_reason") or ("" if trusted else "the agent did not say the clocks were synced")
    return [
        source, destination, s["family"], rfc3339.parse(s["period_start"]), rfc3339.parse(s["period_end"]),
        bool(s.get("partial")), s.get("rate_pps"), s["sent"], s["lost"], s.get("duplicates"), s.get("reordered"),
        *(_get(s, "rtt_ms", k) for k in ("min", "median", "p95", "max")),
        _get(one_way, "forward", "min"), _get(one_way, "forward", "median"),
        _get(one_way, "backward", "min"), _get(one_way, "backward", "median"), trusted, reason[:500],
        *(_get(s, "ipdv_ms", d, "median_abs") for d in ("round_trip", "forward", "backward")),
        json.dumps({k: v for k, v in s.items() if k not in IN_COLUMNS}), now,
    ]


def _insert(rows: list[list[Any]]) -> int:
    """Insert rows whose key is not stored yet (in key order: concurrent batches lock in the same order);
    returns how many were inserted."""
    if not rows:
        return 0
    table = LossSummary._meta.db_table
    if connection.vendor == "postgresql":
        from psycopg2.extras import execute_values

        with connection.cursor() as cur:
            inserted = execute_values(
                cur.cursor, f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES %s "
                            "ON CONFLICT (source_id, destination_id, family, period_start) DO NOTHING RETURNING 1",
                rows, page_size=len(rows), fetch=True)
        return len(inserted)
    before = LossSummary.objects.count()  # the portable path (SQLite): small archives only
    LossSummary.objects.bulk_create([LossSummary(**dict(zip(COLUMNS, r, strict=True))) for r in rows],
                                    ignore_conflicts=True)
    return LossSummary.objects.count() - before


@transaction.atomic
def ingest(body: dict[str, Any], summaries: list[dict[str, Any]], token: object = None) -> Result:
    """Store checked summaries of the batch's cluster (its nodes created when new, as the measurement ingest
    does); with a benchmark, attach the batch's described nodes to it. Raises scope.OtherCluster (nothing
    stored) for a cluster the token may not write."""
    cluster = services.cluster_named(scope.batch_cluster(token, body.get("cluster"), DEFAULT_CLUSTER))
    names = {_name(s["node"]) for s in summaries} | {_name(s["peer"]) for s in summaries}
    members = body.get("nodes") or [] if body.get("benchmark") else []
    nodes = services.upsert_nodes(members, names, cluster, token)
    if body.get("benchmark"):  # the probe mesh's members join its benchmark: its loss grid shows them at once
        bench = services.upsert_benchmark(cluster, body["benchmark"])
        bench.nodes.add(*(nodes[n["name"]] for n in members))
    now = timezone.now()
    unique: dict[tuple, list[Any]] = {}
    for s in summaries:
        row = _row(s, nodes[_name(s["node"])].id, nodes[_name(s["peer"])].id, now)
        unique.setdefault((row[0], row[1], row[2], row[3]), row)  # a summary twice in one batch: once stored
    accepted = _insert([unique[k] for k in sorted(unique)])
    if accepted and connection.vendor == "postgresql":
        selectors.store_cells(sorted({k[:3] for k in unique}))  # the default grid's cells of these pairs
    if accepted:
        transaction.on_commit(analysis.schedule_loss)
    result = Result(accepted=accepted, duplicates=len(summaries) - accepted)
    log.info("Ingested %d loss summaries of cluster %s: %d accepted, %d duplicates", len(summaries), cluster,
             result.accepted, result.duplicates)
    return result

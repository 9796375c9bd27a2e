"""Reads of the loss archive: the windowed loss grid of a benchmark's nodes and a pair's history.

A grid cell is one directed pair over the window (default the last 15 minutes), from its periods' summaries:
loss % = Σlost / Σsent; RTT = the median of the periods' RTT medians; jitter = the median of their round-trip
median |IPDV|; one-way delay each way = the median of the periods' medians, given ONLY when every period in the
window was trusted (both clocks synced within the agent's bound), else null with the reason. CELL_FIELDS is the
cell's one definition: the API (LossGridCellSerializer), the grid page's views and the problem rules read it."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from results.models import Benchmark, LossCell, LossSummary, Node

DEFAULT_WINDOW = timedelta(minutes=15)
FAMILIES = (4, 6)
# The grid page's views of a cell: its value field, unit and colour bounds (lower is better; thresholds.classify)
LOSS_BOUNDS = {"ok": 0.01, "warning": 0.1}  # percent: 0.01 % is about one packet in a 15-minute window at 10/s
JITTER_BOUNDS = {"ok": 1.0, "warning": 5.0}  # ms of median |IPDV|
VIEWS = {"loss": ("loss_percent", "%"), "one-way": ("forward_ms", "ms"), "jitter": ("jitter_ms", "ms")}

CELL_FIELDS = ("source", "destination", "periods", "sent", "lost", "loss_percent", "rtt_ms", "forward_ms",
               "backward_ms", "one_way_trusted", "one_way_reason", "jitter_ms", "newest")
# The aggregates a cell is built from, in this order (the SQL and the Python fallback give the same)
_AGGREGATES = ("source_id", "destination_id", "periods", "sent", "lost", "rtt", "forward", "backward", "trusted",
               "reason", "jitter", "newest")


def view_bounds(view: str, bench: Benchmark) -> dict[str, float]:
    if view == "loss":
        return LOSS_BOUNDS
    if view == "jitter":
        return JITTER_BOUNDS
    latency = bench.effective_thresholds()["latency"]  # one way: half the round trip's bounds
    return {k: v / 2 for k, v in latency.items()}


ISO = "%Y-%m-%dT%H:%M:%S.%fZ"


def cell(agg: dict[str, Any], names: dict[int, str]) -> dict[str, Any]:
    """A cell from its window's aggregates (the portable path; CELL_SQL is its PostgreSQL twin, held to it by
    tests/integration/dashboard/test_loss.py): where an untrusted one-way delay becomes null."""
    trusted = bool(agg["trusted"])
    sent, lost = agg["sent"] or 0, agg["lost"] or 0
    return {
        "source": names[agg["source_id"]], "destination": names[agg["destination_id"]], "periods": agg["periods"],
        "sent": sent, "lost": lost, "loss_percent": round(100 * lost / sent, 6) if sent else None,
        "rtt_ms": agg["rtt"],
        "forward_ms": agg["forward"] if trusted else None, "backward_ms": agg["backward"] if trusted else None,
        "one_way_trusted": trusted, "one_way_reason": None if trusted else (agg["reason"] or "not trusted"),
        "jitter_ms": agg["jitter"], "newest": agg["newest"].astimezone(UTC).strftime(ISO),
    }


# The aggregates of a pair's summaries (alias l) over a window, by name (_AGGREGATES' order)
AGGREGATES_SQL = {
    "periods": "count(*)", "sent": "sum(l.sent)", "lost": "sum(l.lost)",
    "rtt": "percentile_cont(0.5) WITHIN GROUP (ORDER BY l.rtt_median_ms)",
    "forward": "percentile_cont(0.5) WITHIN GROUP (ORDER BY l.forward_median_ms)",
    "backward": "percentile_cont(0.5) WITHIN GROUP (ORDER BY l.backward_median_ms)",
    "trusted": "bool_and(l.trusted)", "reason": "min(nullif(l.untrusted_reason, '')) FILTER (WHERE NOT l.trusted)",
    "jitter": "percentile_cont(0.5) WITHIN GROUP (ORDER BY l.ipdv_ms)", "newest": "max(l.period_start)",
}
# A cell's fields from those aggregates (alias a) and its nodes (s, d), in SQL: the twin of cell()
CELL_SQL = {
    "source": "s.name", "destination": "d.name", "periods": "a.periods", "sent": "a.sent", "lost": "a.lost",
    "loss_percent": "CASE WHEN a.sent > 0 THEN round(100.0 * a.lost / a.sent, 6)::float8 END",
    "rtt_ms": "a.rtt",
    "forward_ms": "CASE WHEN a.trusted THEN a.forward END", "backward_ms": "CASE WHEN a.trusted THEN a.backward END",
    "one_way_trusted": "a.trusted",
    "one_way_reason": "CASE WHEN NOT a.trusted THEN coalesce(a.reason, 'not trusted') END",
    "jitter_ms": "a.jitter", "newest": """to_char(a.newest AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')""",
}
assert tuple(CELL_SQL) == CELL_FIELDS and tuple(AGGREGATES_SQL) == _AGGREGATES[2:]
CELL_JSON_SQL = "json_build_object(" + ", ".join(f"'{k}', {v}" for k, v in CELL_SQL.items()) + ")::text"
_AGGS = ", ".join(f"{v} AS {k}" for k, v in AGGREGATES_SQL.items())
_NODES = Node._meta.db_table
_TABLE = LossSummary._meta.db_table
# every pair's cell over a window [since, until), of the nodes in two id arrays
_LIVE_SQL = f"""
    SELECT coalesce(string_agg({CELL_JSON_SQL}, ',' ORDER BY a.source_id, a.destination_id), '') FROM (
        SELECT l.source_id, l.destination_id, {_AGGS} FROM {_TABLE} l
        WHERE l.family = %s AND l.period_start >= %s AND l.period_start < %s
            AND l.source_id = ANY(%s) AND l.destination_id = ANY(%s)
        GROUP BY l.source_id, l.destination_id) a
    JOIN {_NODES} s ON s.id = a.source_id JOIN {_NODES} d ON d.id = a.destination_id"""
# the stored default cells (LossCell) of those nodes whose newest period is inside the default window
_STORED_SQL = f"""
    SELECT coalesce(string_agg(c.cell_json, ',' ORDER BY c.source_id, c.destination_id), '')
    FROM {LossCell._meta.db_table} c
    WHERE c.family = %s AND c.newest >= %s AND c.source_id = ANY(%s) AND c.destination_id = ANY(%s)"""
# ingest: the default cells of the pairs a batch touched, each over DEFAULT_WINDOW up to its newest period
STORE_CELLS_SQL = f"""
    WITH touched AS (
        SELECT t.source_id, t.destination_id, t.family,
            (SELECT max(x.period_start) FROM {_TABLE} x WHERE x.source_id = t.source_id
             AND x.destination_id = t.destination_id AND x.family = t.family) AS newest
        FROM (SELECT DISTINCT * FROM unnest(%s::int[], %s::int[], %s::int[])) AS t(source_id, destination_id, family)
    ), a AS (
        SELECT l.source_id, l.destination_id, l.family, {_AGGS} FROM {_TABLE} l JOIN touched n
            ON l.source_id = n.source_id AND l.destination_id = n.destination_id AND l.family = n.family
            AND l.period_start > n.newest - %s AND l.period_start <= n.newest
        GROUP BY l.source_id, l.destination_id, l.family
    )
    INSERT INTO {LossCell._meta.db_table} (source_id, destination_id, family, newest, cell_json)
    SELECT a.source_id, a.destination_id, a.family, a.newest, {CELL_JSON_SQL}
    FROM a JOIN {_NODES} s ON s.id = a.source_id JOIN {_NODES} d ON d.id = a.destination_id
    ORDER BY a.source_id, a.destination_id, a.family
    ON CONFLICT (source_id, destination_id, family) DO UPDATE
        SET newest = EXCLUDED.newest, cell_json = EXCLUDED.cell_json"""


def store_cells(pairs: list[tuple[int, int, int]]) -> None:
    """Rewrite the default cells of these (source id, destination id, family) pairs (PostgreSQL; ingest)."""
    if pairs:
        with connection.cursor() as cur:
            cur.execute(STORE_CELLS_SQL, [[p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs],
                                          DEFAULT_WINDOW])


def _median(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _aggregates_in_python(family: int, since: datetime, until: datetime, ids: list[int]) -> list[dict[str, Any]]:
    """The portable path (SQLite): the same aggregates as AGGREGATES_SQL."""
    groups: dict[tuple[int, int], list[LossSummary]] = defaultdict(list)
    for s in LossSummary.objects.filter(family=family, period_start__gte=since, period_start__lt=until,
                                        source_id__in=ids, destination_id__in=ids):
        groups[(s.source_id, s.destination_id)].append(s)
    return [{"source_id": src, "destination_id": dst, "periods": len(rows), "sent": sum(r.sent for r in rows),
             "lost": sum(r.lost for r in rows), "rtt": _median([r.rtt_median_ms for r in rows]),
             "forward": _median([r.forward_median_ms for r in rows]),
             "backward": _median([r.backward_median_ms for r in rows]),
             "trusted": all(r.trusted for r in rows),
             "reason": min((r.untrusted_reason for r in rows if not r.trusted and r.untrusted_reason), default=None),
             "jitter": _median([r.ipdv_ms for r in rows]), "newest": max(r.period_start for r in rows)}
            for (src, dst), rows in groups.items()]


def grid(bench: Benchmark, family: int = 4, window: timedelta | None = None,
         now: datetime | None = None) -> dict[str, Any]:
    """The loss grid of a benchmark's nodes, its cells as one JSON array text (``cells_json``: pairs with a
    summary in the window, by source and destination node id: the stored cells' index order, no sort by name).
    No window: the default, each pair's DEFAULT_WINDOW up to its newest period (LossCell, kept by ingest; pairs
    whose newest period is older are left out); a window: [now - window, now), aggregated at request."""
    now = now or timezone.now()
    nodes = list(bench.nodes.select_related("cluster").order_by("name"))
    names = {n.id: n.name for n in nodes}
    ids = list(names)
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            if window is None:
                cur.execute(_STORED_SQL, [family, now - DEFAULT_WINDOW, ids, ids])
            else:
                cur.execute(_LIVE_SQL, [family, now - window, now, ids, ids])
            cells_json = "[" + cur.fetchone()[0] + "]"
    else:
        aggregates = _aggregates_in_python(family, now - (window or DEFAULT_WINDOW), now, ids)
        cells = [cell(a, names) for a in sorted(aggregates, key=lambda a: (a["source_id"], a["destination_id"]))]
        cells_json = json.dumps(cells)
    return {"benchmark": str(bench), "cluster": bench.cluster.name, "family": family,
            "window_seconds": int((window or DEFAULT_WINDOW).total_seconds()), "generated_at": now,
            "nodes": [{"name": n.name, "site": n.site} for n in nodes], "cells_json": cells_json}


def pair_history(a: Node, b: Node, since: datetime, family: int | None = None) -> list[LossSummary]:
    """Both directions' summaries of a pair since a time, oldest first (the unique key's index, each way; a
    summary's ends always differ)."""
    rows = LossSummary.objects.filter(source__in=[a, b], destination__in=[a, b], period_start__gte=since)
    if family is not None:
        rows = rows.filter(family=family)
    return list(rows.select_related("source", "destination").order_by("period_start", "id"))


# What the problem rules read (results.loss.rules): every pair measured in the window, and the recent periods of
# the pairs that lost in their newest ones (a healthy mesh loads no history at all).
_MEASURED_SQL = f"""
    SELECT source_id, destination_id, family,
        bool_or(sent > 0 AND lost * 100.0 >= %s * sent AND period_start >= %s)
    FROM {LossSummary._meta.db_table}
    WHERE period_start >= %s AND period_start < %s AND source_id = ANY(%s) AND destination_id = ANY(%s)
    GROUP BY source_id, destination_id, family"""
# the lossy pairs' periods, each pair by its own key (the unique index): asking for their sources × their
# destinations instead read the whole mesh's LOOKBACK as soon as the lossy pairs touched every node (one bad node)
_LOSSY_PERIODS_SQL = f"""
    SELECT l.source_id, l.destination_id, l.family, l.period_start, l.sent, l.lost
    FROM {LossSummary._meta.db_table} l
    JOIN unnest(%s::int[], %s::int[], %s::int[]) AS w(source_id, destination_id, family)
        ON l.source_id = w.source_id AND l.destination_id = w.destination_id AND l.family = w.family
    WHERE l.period_start >= %s AND l.period_start < %s
    ORDER BY l.period_start"""


def rule_input(bench: Benchmark, now: datetime, skip: Any = None) -> tuple[dict, set, dict[str, str]]:
    """(periods per lossy pair, measured pairs, node sites) of a benchmark's nodes, pairs as (source name,
    destination name, family); ``skip(source_id, destination_id)``: pairs to leave out (maintenance)."""
    from results.loss import rules

    nodes = {n.id: n for n in bench.nodes.all()}
    ids = list(nodes)
    recent = now - rules.RECENT
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(_MEASURED_SQL, [rules.LOSS_PERCENT, recent, now - DEFAULT_WINDOW, now, ids, ids])
            rows = cur.fetchall()
    else:
        seen: dict[tuple, bool] = {}
        for s in LossSummary.objects.filter(period_start__gte=now - DEFAULT_WINDOW, period_start__lt=now,
                                            source_id__in=ids, destination_id__in=ids):
            lossy = s.sent > 0 and s.lost * 100 >= rules.LOSS_PERCENT * s.sent and s.period_start >= recent
            seen[(s.source_id, s.destination_id, s.family)] = seen.get((s.source_id, s.destination_id, s.family),
                                                                       False) or lossy
        rows = [(*k, v) for k, v in seen.items()]
    rows = [r for r in rows if not (skip and skip(r[0], r[1]))]

    def named(src: int, dst: int, family: int) -> tuple[str, str, int]:
        return (nodes[src].name, nodes[dst].name, family)

    measured = {named(*r[:3]) for r in rows}
    lossy = [r[:3] for r in rows if r[3]]
    found: list[tuple] = []
    if lossy and connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(_LOSSY_PERIODS_SQL, [[r[0] for r in lossy], [r[1] for r in lossy], [r[2] for r in lossy],
                                             now - rules.LOOKBACK, now])
            found = cur.fetchall()
    elif lossy:
        wanted = set(lossy)
        found = [r for r in LossSummary.objects.filter(
            period_start__gte=now - rules.LOOKBACK, period_start__lt=now, source_id__in={r[0] for r in lossy},
            destination_id__in={r[1] for r in lossy}).order_by("period_start").values_list(
            "source_id", "destination_id", "family", "period_start", "sent", "lost") if r[:3] in wanted]
    periods: dict[tuple, list] = defaultdict(list)
    for src, dst, family, start, sent, lost in found:
        periods[named(src, dst, family)].append((start, sent, lost))
    return dict(periods), measured, {n.name: n.site for n in nodes.values()}

"""Reads of the loss archive: the windowed loss grid of a benchmark's nodes and a pair's history.

A grid cell is one directed pair over the window (default the last 15 minutes), from its periods' summaries:
loss % = Σlost / Σsent; RTT = the median of the periods' RTT medians; jitter = the median of their round-trip
median |IPDV|; one-way delay each way = the median of the periods' medians, given ONLY when every period in the
window was trusted (both clocks synced within the agent's bound), else null with the reason. CELL_FIELDS is the
cell's one definition: the API (LossGridCellSerializer), the grid page's views and the problem rules read it."""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from results.models import Benchmark, LossSummary, Node

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


def cell(agg: dict[str, Any], names: dict[int, str]) -> dict[str, Any]:
    """A cell from its window's aggregates: the one place where an untrusted one-way delay becomes null."""
    trusted = bool(agg["trusted"])
    sent, lost = agg["sent"] or 0, agg["lost"] or 0
    return {
        "source": names[agg["source_id"]], "destination": names[agg["destination_id"]], "periods": agg["periods"],
        "sent": sent, "lost": lost, "loss_percent": round(100 * lost / sent, 6) if sent else None,
        "rtt_ms": agg["rtt"],
        "forward_ms": agg["forward"] if trusted else None, "backward_ms": agg["backward"] if trusted else None,
        "one_way_trusted": trusted, "one_way_reason": None if trusted else (agg["reason"] or "not trusted"),
        "jitter_ms": agg["jitter"], "newest": agg["newest"],
    }


_GRID_SQL = f"""
    SELECT source_id, destination_id, count(*), sum(sent), sum(lost),
        percentile_cont(0.5) WITHIN GROUP (ORDER BY rtt_median_ms),
        percentile_cont(0.5) WITHIN GROUP (ORDER BY forward_median_ms),
        percentile_cont(0.5) WITHIN GROUP (ORDER BY backward_median_ms),
        bool_and(trusted), min(nullif(untrusted_reason, '')) FILTER (WHERE NOT trusted),
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ipdv_ms),
        max(period_start)
    FROM {LossSummary._meta.db_table}
    WHERE family = %s AND period_start >= %s AND period_start < %s
        AND source_id = ANY(%s) AND destination_id = ANY(%s)
    GROUP BY source_id, destination_id"""


def _median(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _aggregates_in_python(family: int, since: datetime, until: datetime, ids: list[int]) -> list[dict[str, Any]]:
    """The portable path (SQLite): the same aggregates as _GRID_SQL."""
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


def grid(bench: Benchmark, family: int = 4, window: timedelta = DEFAULT_WINDOW,
         now: datetime | None = None) -> dict[str, Any]:
    """The loss grid of a benchmark's nodes: its cells (pairs with a summary in the window) and nodes."""
    now = now or timezone.now()
    nodes = list(bench.nodes.select_related("cluster").order_by("name"))
    names = {n.id: n.name for n in nodes}
    ids = list(names)
    since = now - window
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(_GRID_SQL, [family, since, now, ids, ids])
            aggregates = [dict(zip(_AGGREGATES, row, strict=True)) for row in cur.fetchall()]
    else:
        aggregates = _aggregates_in_python(family, since, now, ids)
    cells = sorted((cell(a, names) for a in aggregates), key=lambda c: (c["source"], c["destination"]))
    return {"benchmark": str(bench), "cluster": bench.cluster.name, "family": family,
            "window_seconds": int(window.total_seconds()), "generated_at": now,
            "nodes": [{"name": n.name, "site": n.site} for n in nodes], "cells": cells}


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


def rule_input(bench: Benchmark, now: datetime, skip: Any = None) -> tuple[dict, set, dict[str, str]]:
    """(periods per lossy pair, measured pairs, node sites) of a benchmark's nodes, pairs as (source name,
    destination name, family); ``skip(source_id, destination_id)``: pairs to leave out (maintenance)."""
    from results.loss import rules

    nodes = {n.id: n for n in bench.nodes.all()}
    ids = list(nodes)
    recent = now - rules.ONSET_PERIODS * timedelta(minutes=1) - timedelta(minutes=1)
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
    periods: dict[tuple, list] = defaultdict(list)
    if lossy:
        q = LossSummary.objects.filter(period_start__gte=now - rules.LOOKBACK, period_start__lt=now,
                                       source_id__in={r[0] for r in lossy}, destination_id__in={r[1] for r in lossy})
        wanted = set(lossy)
        for src, dst, family, start, sent, lost in q.order_by("period_start").values_list(
                "source_id", "destination_id", "family", "period_start", "sent", "lost"):
            if (src, dst, family) in wanted:
                periods[named(src, dst, family)].append((start, sent, lost))
    return dict(periods), measured, {n.name: n.site for n in nodes.values()}

"""Reads: the grid, a pair's history, the comparison figures. Writes live in services."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg2.extensions
from django.conf import settings
from django.contrib.postgres.aggregates import ArrayAgg
from django.db import connection, transaction
from django.db.models import Aggregate, Avg, Count, F, FloatField, Max, Q
from django.db.models.functions import TruncDate
from django.utils import timezone

from results import celljson, gridcell, maintenance, params, rfc3339, storage, thresholds, windows
from results.models import (
    AUTH_MODES,
    STORAGE_SETTINGS,
    ArchiveHorizon,
    Benchmark,
    CellDiagnosis,
    DailyRollup,
    FileTransfer,
    Measurement,
    Node,
    PairLatest,
    Path,
    Run,
    WindowCell,
)
from results.protocols import TOKEN_PROTOCOLS, TPC_PROTOCOLS
from results.stats import daily
from results.stats.advice import Observation

GRID_MODES = ("latest", "mean", "median")
T = TypeVar("T")
# The streams pick of a tuned benchmark (spec.optimize): per link, the newest cell whatever its stream count.
NEWEST = params.NEWEST_STREAMS
NEWEST_ORDER = ("source_id", "destination_id", "address_family", "congestion_control", "auth", "storage_setting")


@dataclass(frozen=True)
class Pick:
    """Which settings of a protocol a grid shows; None: every one. Like streams, the address family, the
    congestion control ("" = the nodes' default), the auth mode ("" = a protocol without modes) and the storage
    (models.STORAGE_SETTINGS) are settings of their own: each is a cell of its own.

    ``streams=NEWEST`` ("newest"): for a benchmark with spec.optimize, whose links each run the streams × files the
    optimizer chose for them, so that one stream count shows part of the mesh only. Each link (source →
    destination, under each family, congestion control and auth mode picked) shows its newest cell whatever its
    streams (of equally new ones the most streams), and the cell names the concurrency (files at once) its
    measurement ran too (``concurrency``, latest mode; null in a window, whose measurements may mix them). In a
    window (mean, median) each link shows the aggregate of that newest cell's stream count: the level of the
    setting it runs now."""

    streams: int | str | None = None
    address_family: str | None = None
    congestion_control: str | None = None
    auth: str | None = None
    storage: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.streams, str) and self.streams != NEWEST:
            raise ValueError(f"streams must be a stream count, None or {NEWEST!r}, not {self.streams!r}")

    @property
    def newest(self) -> bool:
        return self.streams == NEWEST

    @property
    def stream_count(self) -> int | None:
        """The one stream count picked; None for every one, and for newest (each link's own)."""
        return None if isinstance(self.streams, str) else self.streams

    def sql(self, alias: str) -> str:
        """The condition on a PairLatest row ``alias`` (arguments: self.args())."""
        return (f"(%(streams)s::int IS NULL OR {alias}.streams = %(streams)s::int)"
                f" AND (%(family)s::text IS NULL OR {alias}.address_family = %(family)s::text)"
                f" AND (%(cc)s::text IS NULL OR {alias}.congestion_control = %(cc)s::text)"
                f" AND (%(auth)s::text IS NULL OR {alias}.auth = %(auth)s::text)"
                f" AND (%(storage)s::text IS NULL OR {alias}.storage_setting = %(storage)s::text)")

    def args(self) -> dict[str, Any]:
        return {"streams": self.stream_count, "family": self.address_family, "cc": self.congestion_control,
                "auth": self.auth, "storage": self.storage}

    def measurement_sql(self, alias: str) -> str:
        """The settings but streams (filter_measurements' conditions) on a Measurement row ``alias``, written only
        for the settings picked, each on its raw column: PostgreSQL estimates them from the column's statistics
        (a condition on coalesce(column, '') gets a guessed 0.5 % of the rows, and the window's plan with it)."""
        out = []
        for column, value, arg in (("address_family", self.address_family, "family"),
                                   ("congestion_control", self.congestion_control, "cc"), ("auth", self.auth, "auth"),
                                   ("storage_setting", self.storage, "storage")):
            if value == "" and column in ("congestion_control", "auth"):
                out.append(f"({alias}.{column} IS NULL OR {alias}.{column} = '')")
            elif value is not None:
                out.append(f"{alias}.{column} = %({arg})s")
        return " AND ".join(out) or "true"

    def filter_latest(self, qs: Any) -> Any:
        if self.stream_count is not None:
            qs = qs.filter(streams=self.stream_count)
        if self.address_family is not None:
            qs = qs.filter(address_family=self.address_family)
        if self.congestion_control is not None:
            qs = qs.filter(congestion_control=self.congestion_control)
        if self.auth is not None:
            qs = qs.filter(auth=self.auth)
        if self.storage is not None:
            qs = qs.filter(storage_setting=self.storage)
        return qs

    def filter_measurements(self, qs: Any) -> Any:
        streams = self.stream_count
        if streams is not None:
            qs = qs.filter(streams__isnull=True) if streams == 0 else qs.filter(streams=streams)
        if self.address_family is not None:
            qs = qs.filter(address_family=self.address_family)
        if self.congestion_control:
            qs = qs.filter(congestion_control=self.congestion_control)
        elif self.congestion_control == "":
            qs = qs.filter(Q(congestion_control__isnull=True) | Q(congestion_control=""))
        if self.auth:
            qs = qs.filter(auth=self.auth)
        elif self.auth == "":
            qs = qs.filter(Q(auth__isnull=True) | Q(auth=""))
        if self.storage is not None:
            qs = qs.filter(storage_setting=self.storage)
        return qs


def newest_per_link(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of cells (source, destination, address_family, congestion_control, auth, storage, finished_at, streams), each
    link's
    newest whatever its streams; of equally new ones the most streams (Pick's NEWEST, the portable path; the SQL
    paths' DISTINCT ON orders the same way)."""
    best: dict[tuple, dict[str, Any]] = {}
    for c in cells:
        key = (c["source"], c["destination"], c["address_family"], c["congestion_control"], c["auth"], c["storage"])
        if key not in best or (c["finished_at"], c["streams"]) > (best[key]["finished_at"], best[key]["streams"]):
            best[key] = c
    return list(best.values())


# the same key in rows named as a cell's fields (gridcell: the storage setting's column is the field "storage")
NEWEST_ORDER_CELLS = tuple("storage" if c == "storage_setting" else c for c in NEWEST_ORDER)


def _newest_sql(inner: str, order: tuple[str, ...] = NEWEST_ORDER) -> str:
    """SQL keeping each link's newest row of ``inner`` (rows with PairLatest's key columns, or ``order``'s,
    finished_at and streams), as newest_per_link does."""
    return (f"SELECT DISTINCT ON ({', '.join(order)}) * FROM ({inner}) n "
            f"ORDER BY {', '.join(order)}, finished_at DESC, streams DESC")


def metric_for(protocol: str) -> str:
    return "rtt_ms" if protocol == "rtt" else "throughput_gbps"


def kind_for(protocol: str) -> str:
    return "latency" if protocol == "rtt" else "throughput"


def raw_horizon() -> datetime | None:
    """Where the raw archive begins (results.retention moves it): the days before it are read from the daily
    rollups (DailyRollup), never from raw rows; None before the first prune."""
    return ArchiveHorizon.objects.order_by("pk").values_list("raw_since", flat=True).first()


def _reaches_rollups(since: datetime | None) -> datetime | None:
    """The raw horizon when a span starting at ``since`` (None: the beginning) reaches before it, else None."""
    horizon = raw_horizon()
    return horizon if horizon is not None and (since is None or since < horizon) else None


def get_benchmark(ref: str, cluster: str | None = None) -> Benchmark:
    """A benchmark by "namespace/name" (or by name alone when unique), of one cluster when given (else unique
    across clusters)."""
    qs = Benchmark.objects.select_related("cluster")
    if cluster:
        qs = qs.filter(cluster__name=cluster)
    if "/" in ref:
        namespace, name = ref.split("/", 1)
        return qs.get(namespace=namespace, name=name)
    return qs.get(name=ref)


def benchmarks_named(namespace: str, name: str, cluster: str | None = None) -> list[Benchmark]:
    """Every cluster's benchmark namespace/name (one cluster's when given), by cluster name."""
    qs = Benchmark.objects.select_related("cluster").filter(namespace=namespace, name=name)
    if cluster:
        qs = qs.filter(cluster__name=cluster)
    return list(qs.order_by("cluster__name"))


CLUSTER_SEPARATOR = ":"  # "cluster:node" names a node of one cluster (a Kubernetes node name has no colon)


def get_node(ref: str, cluster: str | None = None) -> Node:
    """A node by name, of one cluster: given, or in the reference ("cluster:node"); else unique across clusters
    (Node.MultipleObjectsReturned when several clusters have that name)."""
    if cluster is None and CLUSTER_SEPARATOR in ref:
        cluster, ref = ref.rsplit(CLUSTER_SEPARATOR, 1)
    qs = Node.objects.select_related("cluster").filter(name=ref)
    return qs.get(cluster__name=cluster) if cluster else qs.get()


# PairLatest's unique key after the benchmark, in its index's order (pairlatest_storage_cell): a cell's setting
SETTING_KEY = ("protocol", "auth", "streams", "address_family", "congestion_control", "storage_setting")


def cell_setting_rows(bench: Benchmark, protocol: str | None = None) -> list[tuple]:
    """The distinct settings (SETTING_KEY) of a benchmark's cells (of one protocol when given). PostgreSQL: a
    skip scan of the cell key's index, one probe per setting, instead of reading every cell (a 100-node mesh has
    ~10 000 per setting; a DISTINCT over them cost the grid page more than its grid)."""
    qs = PairLatest.objects.filter(benchmark=bench)
    if protocol is not None:
        qs = qs.filter(protocol=protocol)
    if connection.vendor != "postgresql":
        return sorted(set(qs.values_list(*SETTING_KEY).distinct()))
    key = ", ".join(SETTING_KEY)
    where = "benchmark_id = %(bench)s" + (" AND protocol = %(protocol)s" if protocol is not None else "")
    first = f"SELECT {key} FROM {PairLatest._meta.db_table} WHERE {where} ORDER BY {key} LIMIT 1"
    sql = f"""
        WITH RECURSIVE s AS (
            ({first})
            UNION ALL
            SELECT n.* FROM s CROSS JOIN LATERAL (
                SELECT {key} FROM {PairLatest._meta.db_table}
                WHERE {where} AND ({key}) > ({", ".join(f"s.{c}" for c in SETTING_KEY)})
                ORDER BY {key} LIMIT 1) n
        ) SELECT {key} FROM s"""
    with connection.cursor() as cur:
        cur.execute(sql, {"bench": bench.id, "protocol": protocol})
        return sorted(cur.fetchall())


def benchmark_protocols(bench: Benchmark) -> dict[str, list[int]]:
    """Protocols measured by a benchmark with their stream settings (0 = no stream count)."""
    out: dict[str, list[int]] = defaultdict(list)
    for protocol, streams in sorted({(r[0], r[2]) for r in cell_setting_rows(bench)}):
        out[protocol].append(streams)
    return dict(out)


def cell_settings(bench: Benchmark, protocol: str) -> dict[str, list[str]]:
    """The address families, congestion controls ("" = the nodes' default), auth modes ("" = none: a protocol
    without modes, or cells from before modes were recorded) and storage settings a protocol's cells have."""
    rows = {(family, cc, auth, store) for _, auth, _, family, cc, store in cell_setting_rows(bench, protocol)}
    return {"address_family": sorted({r[0] for r in rows}), "congestion_control": sorted({r[1] for r in rows}),
            "auth": sorted({r[2] for r in rows}),
            "storage": [s for s in STORAGE_SETTINGS if s in {r[3] for r in rows}]}


def newest_auth(benches: list[Benchmark], protocol: str) -> str:
    """The grid's default auth mode for a protocol of these benchmarks: its only mode, or of several the one of the
    newest cell (a benchmark whose spec.auth changed shows its current mode); "" when its cells have none. Cells
    without a mode (older records) count only when no cell has one. Each mode's presence is one index probe
    (PairLatest's key leads with benchmark, protocol, auth); only several modes cost a read of their cells."""
    cells = PairLatest.objects.filter(benchmark__in=benches, protocol=protocol)
    modes = [m for m in AUTH_MODES if cells.filter(auth=m).exists()]
    if len(modes) <= 1:
        return modes[0] if modes else ""
    newest = dict(cells.filter(auth__in=modes).values_list("auth").annotate(at=Max("finished_at")))
    return max(modes, key=lambda m: newest[m])


def benchmark_nodes(bench: Benchmark) -> list[Node]:
    return list(bench.nodes.select_related("cluster").order_by("name"))


def grid(
    bench: Benchmark,
    protocol: str,
    streams: int | str | None = None,
    mode: str = "latest",
    window: timedelta = timedelta(days=7),
    now: datetime | None = None,
    cells_json: bool = False,
    with_cells: bool = True,
    address_family: str | None = None,
    congestion_control: str | None = None,
    auth: str | None = None,
    binding_limits: tuple[str, ...] | None = None,
    storage: str | None = None,
) -> dict[str, Any]:
    """Per source × destination cells of one protocol: the latest value, or mean/median over a window.

    Each cell: source, destination, streams, address_family, congestion_control ("" = the default), auth (token,
    x509, none; "" for a protocol without modes), value
    (Gbit/s or ms), finished_at, age_seconds, stale, status, error, count (latest: the run's repeats the value is
    the median of), low/high (that median's 95 % interval, 3+ repeats; else null), state (ok / warning / critical /
    failed / none by the benchmark's thresholds; maintenance for a node or pair in a maintenance window).
    `streams=None` returns every stream setting (so do address_family, congestion_control, auth and storage);
    `streams=NEWEST` each link's newest cell whatever its streams, with the concurrency it ran (Pick). `cells_json`
    (PostgreSQL only): the cells as one JSON array built
    by the database (`cells_json`, UTF-8 bytes, instead of `cells`). `with_cells=False`: the rest only (cells empty).
    Each cell ends with its diagnosis (gridcell.DIAGNOSIS); ``binding_limits`` keeps the cells diagnosed with one
    of those limits (not with ``cells_json``: a filtered grid is a part of one, its rows filtered in Python).
    """
    if binding_limits is not None and cells_json:
        raise ValueError("binding_limits filters cells, not the database-built JSON")
    if mode not in GRID_MODES:
        raise ValueError(f"mode must be one of {', '.join(GRID_MODES)}, not {mode!r}")
    now = now or timezone.now()
    metric, kind = metric_for(protocol), kind_for(protocol)
    bounds = bench.effective_thresholds()[kind]
    cover = maintenance.overlay(now)
    nodes = benchmark_nodes(bench)
    names = {n.id: n.name for n in nodes}
    pick = Pick(streams, address_family, congestion_control, auth, storage)
    cells: list[dict[str, Any]] = []
    # a window that reaches before the raw horizon: its older days from the rollups (both databases, in Python)
    horizon = _reaches_rollups(now - window) if mode != "latest" and with_cells else None
    if horizon is not None:
        cells = _cells_in_python(bench, protocol, pick, now, bounds, mode, window, names, cover, horizon)
        cells_text = json.dumps([{**c, "finished_at": rfc3339.format_utc(c["finished_at"])} for c in cells]).encode()
    elif cells_json:
        cells_text = grid_cells_json(bench, protocol, pick, now, bounds, mode, window, cover) if with_cells else b"[]"
    elif not with_cells:
        pass  # the page's latest grid: its cells come from drawn_cells
    elif connection.vendor == "postgresql" and mode != "latest":
        # aggregated by the database, with state, age and staleness (the JSON path's own query); the latest
        # cells are one narrow row each, which Python classifies faster than the database
        def read(stored: bool) -> list[tuple]:
            sql, args = _cells_sql(bench, protocol, pick, now, bounds, mode, window, cover, iso_times=False,
                                   stored=stored)
            with connection.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall()

        columns = cell_columns(pick)
        cells = [dict(zip(columns, row, strict=True)) for row in _in_window(bench, protocol, pick, now, window, read)]
    else:
        cells = _cells_in_python(bench, protocol, pick, now, bounds, mode, window, names, cover)
    if binding_limits is not None:
        cells = [c for c in cells if c["binding_limit"] in binding_limits]
    out = {
        "benchmark": str(bench),
        "clusters": [bench.cluster.name],
        "protocol": protocol,
        "kind": kind,
        "metric": metric,
        "unit": "ms" if protocol == "rtt" else "Gbit/s",
        "mode": mode,
        "window_seconds": int(window.total_seconds()),
        "thresholds": bounds,
        "efficiency_thresholds": thresholds.effective_efficiency(bench.thresholds),
        "generated_at": now,
        "nodes": [{"name": n.name, "cluster": n.cluster.name, "site": n.site, "loopback_gbps": n.loopback_gbps,
                   "disk_read_gbps": n.disk_read_gbps, "disk_write_gbps": n.disk_write_gbps, "external": n.external}
                  for n in nodes],
        "cells": cells,
    }
    if cells_json:
        del out["cells"]
        out["cells_json"] = cells_text
    return out


def _cells_in_python(bench: Benchmark, protocol: str, pick: Pick, now: datetime, bounds: dict[str, float],
                     mode: str, window: timedelta, names: dict[int, str],
                     cover: maintenance.Overlay, horizon: datetime | None = None) -> list[dict[str, Any]]:
    """The cells without PostgreSQL (SQLite, the zero-setup default): the same fields as _cells_sql's rows.
    ``horizon``: a window reaching before the raw horizon, whose days before it come from the rollups (from the
    start of its first day) and are combined with the raw ones day by day (stats.daily: count and mean exact, the
    median the weighted median of the days' medians)."""
    metric, kind = metric_for(protocol), kind_for(protocol)
    cells: list[dict[str, Any]] = []
    diagnoses = cell_diagnoses(bench, protocol, names)
    if mode == "latest":
        qs = pick.filter_latest(PairLatest.objects.filter(benchmark=bench, protocol=protocol))
        # newest: the concurrency its measurement ran (a grid cell has no column of it)
        extra = ["measurement__concurrency"] if pick.newest else []
        columns = [f.latest_column(metric) for f in gridcell.STORED]
        for row in qs.values_list(*columns, *extra):
            cell = dict(zip(gridcell.STORED_NAMES, row[:len(columns)], strict=True))  # in gridcell's order
            src, dst = cell["source"], cell["destination"]
            cell["source"], cell["destination"] = names.get(src), names.get(dst)
            cell["maintenance"] = cover.covers(src, dst)
            if pick.newest:
                cell["concurrency"] = row[-1]
            cells.append(cell)
    else:
        qs = pick.filter_measurements(
            Measurement.objects.filter(benchmark=bench, protocol=protocol, finished_at__gte=horizon or now - window))
        groups: dict[tuple, list] = defaultdict(list)
        if horizon is not None and connection.vendor == "postgresql":
            # up to the raw retention's days of rows: summarised per cell and day by the database, not here
            raw_days = _raw_days_sql(qs, metric)
        else:
            for src, dst, st, family, cc, auth, storage, finished, value, status in qs.values_list(
                "source_id", "destination_id", "streams", "address_family", "congestion_control", "auth",
                "storage_setting", "finished_at", metric, "status"
            ).iterator(chunk_size=20000):
                groups[(src, dst, st or 0, family, cc or "", auth or "", storage)].append((finished, value, status))
            raw_days = _summarised_days(groups) if horizon is not None else {}
        spans = (_window_spans(groups, mode) if horizon is None
                 else _combined_days(raw_days, _rollup_days(bench, protocol, pick, now - window, horizon), mode))
        for (src, dst, st, family, cc, auth, storage), (value, count, finished_at, status) in spans.items():
            cell = gridcell.stored_cell(source=names.get(src), destination=names.get(dst), streams=st,
                                        address_family=family, congestion_control=cc, auth=auth, storage=storage,
                                        value=value,
                                        finished_at=finished_at, status=status, error=None,
                                        count=count, low=None, high=None)
            cell["maintenance"] = cover.covers(src, dst)
            if pick.newest:
                cell["concurrency"] = None
            cells.append(cell)
    if pick.newest:
        cells = newest_per_link(cells)
    stale_after = settings.STALE_SECONDS
    for cell in cells:
        age = (now - cell["finished_at"]).total_seconds()
        cell["age_seconds"] = round(age, 1)
        cell["stale"] = age > stale_after
        in_maintenance = cell.pop("maintenance")
        cell["state"] = "maintenance" if in_maintenance else thresholds.classify(cell["value"], cell["status"],
                                                                                 kind, bounds)
        cell.update(diagnoses.get(_cell_key(cell), gridcell.NOT_DIAGNOSED))
    return cells


Span = tuple[float | None, int, datetime, str]  # a window cell's value, count, newest finished_at, status


def _window_spans(groups: dict[tuple, list], mode: str) -> dict[tuple, Span]:
    """Each cell's window from its raw (finished_at, value, status) rows: exact mean or median."""
    out = {}
    for key, items in groups.items():
        values = [v for _, v, s in items if s == "succeeded" and v is not None]
        last = max(items, key=lambda x: x[0])
        value = None
        if values:
            value = statistics.fmean(values) if mode == "mean" else statistics.median(values)
        out[key] = (value, len(items), last[0], "succeeded" if values else last[2])
    return out


def _rollup_days(bench: Benchmark, protocol: str, pick: Pick, since: datetime,
                 horizon: datetime) -> dict[tuple, list[dict[str, Any]]]:
    """Each cell's daily figures from the rollups, from the day ``since`` falls on to before the horizon."""
    qs = pick.filter_latest(DailyRollup.objects.filter(benchmark=bench, protocol=protocol,
                                                       day__gte=since.astimezone(UTC).date(),
                                                       day__lt=horizon.astimezone(UTC).date()))
    out: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in qs.values("source_id", "destination_id", "streams", "address_family", "congestion_control", "auth",
                         "storage_setting", *daily.FIGURES):
        key = tuple(row.pop(k) for k in ("source_id", "destination_id", "streams", "address_family",
                                          "congestion_control", "auth", "storage_setting"))
        out[key].append(row)
    return out


def _summarised_days(groups: dict[tuple, list]) -> dict[tuple, list[dict[str, Any]]]:
    """Each cell's raw (finished_at, value, status) rows summarised per UTC day (stats.daily)."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    for key, items in groups.items():
        by_day: dict[Any, list] = defaultdict(list)
        for item in items:
            by_day[item[0].astimezone(UTC).date()].append(item)
        out[key] = [daily.summarise(day) for day in by_day.values()]
    return out


class _PercentileCont(Aggregate):
    """PostgreSQL's percentile_cont(q) over an expression (rollups write the same figure)."""

    template = "percentile_cont(%(q)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: str, q: float, **extra: Any) -> None:
        super().__init__(expression, q=float(q), **extra)


def _raw_days_sql(qs: Any, metric: str) -> dict[tuple, list[dict[str, Any]]]:
    """PostgreSQL: the figures (stats.daily.FIGURES) of each cell's raw days in ``qs``, aggregated by the
    database (one row per cell and day)."""
    ok = Q(status="succeeded", **{f"{metric}__isnull": False})
    rows = (qs.order_by().annotate(day=TruncDate("finished_at", tzinfo=UTC))
            .values("source_id", "destination_id", "streams", "address_family", "congestion_control", "auth",
                    "storage_setting", "day")
            .annotate(count=Count("id"), failures=Count("id", filter=~Q(status="succeeded")),
                      succeeded=Count("id", filter=ok), mean=Avg(metric, filter=ok),
                      median=_PercentileCont(metric, 0.5, filter=ok), last_at=Max("finished_at"),
                      statuses=ArrayAgg("status", order_by="-finished_at")))
    out: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        key = (r["source_id"], r["destination_id"], r["streams"] or 0, r["address_family"],
               r["congestion_control"] or "", r["auth"] or "", r["storage_setting"])
        out[key].append({**{k: r[k] for k in ("count", "failures", "succeeded", "mean", "median", "last_at")},
                         "last_status": r["statuses"][0]})
    return out


def _combined_days(raw: dict[tuple, list[dict[str, Any]]], rolled: dict[tuple, list[dict[str, Any]]],
                   mode: str) -> dict[tuple, Span]:
    """Each cell's window from its rollup days and its raw days, combined (stats.daily)."""
    out = {}
    for key in raw.keys() | rolled.keys():
        span = daily.combine([*rolled.get(key, ()), *raw.get(key, ())])
        value = span["mean"] if mode == "mean" else span["median"]
        out[key] = (value, span["count"], span["last_at"], "succeeded" if span["succeeded"] else span["last_status"])
    return out


def _cell_key(cell: dict[str, Any]) -> tuple:
    return tuple(cell[k] for k in ("source", "destination", "streams", "address_family", "congestion_control", "auth",
                                   "storage"))


def cell_diagnoses(bench: Benchmark, protocol: str, names: dict[int, str]) -> dict[tuple, dict[str, Any]]:
    """The diagnosis fields (gridcell.DIAGNOSIS) of a protocol's cells whose newest measurement the analysis has
    judged, by (source name, destination name, streams, address family, congestion control, auth, storage): the
    portable
    path's join of CellDiagnosis."""
    if protocol == "rtt":  # nothing to judge: no rows, no query
        return {}
    rows = CellDiagnosis.objects.filter(cell__benchmark=bench, cell__protocol=protocol,
                                        cell__measurement_id=F("measurement_id")).values_list(
        "cell__source_id", "cell__destination_id", "cell__streams", "cell__address_family",
        "cell__congestion_control", "cell__auth", "cell__storage_setting", "binding_limit", "efficiency",
        "evidence", "fix")
    return {(names.get(src), names.get(dst), st, family, cc, auth, storage):
            {"binding_limit": limit, "efficiency": efficiency, "evidence": evidence or None, "fix": fix or None}
            for src, dst, st, family, cc, auth, storage, limit, efficiency, evidence, fix in rows}


def _latest_cells_sql(bench: Benchmark, protocol: str, pick: Pick) -> tuple[str, dict[str, Any]]:
    """The grid's cells in the latest mode, from the PairLatest summary (one row per cell; newest: each link's
    newest, with its measurement's concurrency)."""
    metric = metric_for(protocol)
    rows, concurrency, join = _latest_rows_sql(pick, "l")
    columns = gridcell.select_sql({f.name: f"l.{f.latest_column(metric)}" for f in gridcell.STORED},
                                  gridcell.STORED, as_rows=True)
    return f"""
        SELECT {columns}, {CELL_REF.format(alias="l")}{concurrency}
        FROM ({rows}) l{join}
    """, {"bench": bench.id, "protocol": protocol, **pick.args()}


def _latest_rows_sql(pick: Pick, alias: str) -> tuple[str, str, str]:
    """The picked PairLatest rows of %(bench)s and %(protocol)s (SQL for a subquery to name ``alias``); for
    newest also the select list's tail and the join that give each row's concurrency, "" otherwise."""
    rows = (f"SELECT * FROM {PairLatest._meta.db_table} p "
            f"WHERE p.benchmark_id = %(bench)s AND p.protocol = %(protocol)s AND {pick.sql('p')}")
    if not pick.newest:
        return rows, "", ""
    return (_newest_sql(rows), ", m.concurrency",
            f" LEFT JOIN {Measurement._meta.db_table} m ON m.id = {alias}.measurement_id")


def _window_settings(bench: Benchmark, protocol: str, pick: Pick) -> list[int]:
    """The stream settings (ranges of the index meas_window) a window's grid reads: the picked one, else every one
    the protocol's cells have (0: none)."""
    if pick.stream_count is not None:
        return [pick.stream_count]
    return sorted(set(PairLatest.objects.filter(benchmark=bench, protocol=protocol).values_list("streams", flat=True)))


def _window_cells_sql(bench: Benchmark, protocol: str, pick: Pick, now: datetime, mode: str,
                      window: timedelta, stored: bool = False) -> tuple[str, dict[str, Any]]:
    """PostgreSQL: the grid's cells as a window's mean or median, aggregated by the database from the covering
    index meas_window (no table reads), so the cost follows the window's measurements, not the archive's. One
    index range per stream setting (a condition on streams that the index cannot use would scan the protocol's
    whole history); the other settings picked on their raw columns (Pick.measurement_sql). The cells are grouped by
    hashing (no sort of the window's rows); a median gathers each cell's values and takes percentile_cont of that
    cell's few: the same figure as percentile_cont over the rows. A cell's newest measurement in the window is its
    PairLatest row (a window always ends now), which gives its status when no measurement in the window succeeded.
    ``stored``: the same figures read from WindowCell (results.windows), one row per cell, the caller having made
    sure they are this window's."""
    column = f"m.{metric_for(protocol)}"
    ok = f"m.status = 'succeeded' AND {column} IS NOT NULL"
    settings_ = _window_settings(bench, protocol, pick)
    if stored:
        inner = windows.stored_cells_sql(pick.sql("c"), "mean" if mode == "mean" else "median")
    else:
        if mode == "mean":
            gathered, value, median = f"avg({column}) FILTER (WHERE {ok})", "w.gathered", ""
        else:
            gathered, value = f"array_agg({column}) FILTER (WHERE {ok})", "med.value"
            median = ("CROSS JOIN LATERAL (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) AS value "
                      "FROM unnest(w.gathered) x) med")
        ranges = " OR ".join(f"m.streams = {int(st)}" if st else "m.streams IS NULL" for st in settings_) or "false"
        inner = f"""
            SELECT w.source_id, w.destination_id, w.streams, w.address_family, w.congestion_control, w.auth,
                   w.storage_setting, {value} AS value, w.succeeded, w.count, w.finished_at
            FROM (
                SELECT m.source_id, m.destination_id, coalesce(m.streams, 0) AS streams, m.address_family,
                       coalesce(m.congestion_control, '') AS congestion_control, coalesce(m.auth, '') AS auth,
                       m.storage_setting, {gathered} AS gathered, count(*) FILTER (WHERE {ok}) AS succeeded,
                       count(*) AS count, max(m.finished_at) AS finished_at
                FROM {Measurement._meta.db_table} m
                WHERE m.benchmark_id = %(bench)s AND m.protocol = %(protocol)s AND m.finished_at >= %(since)s
                  AND ({ranges}) AND {pick.measurement_sql("m")}
                GROUP BY 1, 2, 3, 4, 5, 6, 7
            ) w
            {median}"""
    columns = gridcell.select_sql({
        **{f.name: f"w.{f.row_name}" for f in gridcell.STORED}, "storage": "w.storage_setting", "value": "w.value",
        "status": "CASE WHEN w.succeeded > 0 THEN 'succeeded' ELSE coalesce(l.status, 'failed') END",
        "error": "NULL", "low": "NULL::float8", "high": "NULL::float8",
    }, gridcell.STORED, as_rows=True)
    cell = "l.id = w.cell_id" if stored else """l.benchmark_id = %(bench)s AND l.protocol = %(protocol)s
            AND l.streams = w.streams AND l.address_family = w.address_family
            AND l.congestion_control = w.congestion_control AND l.auth = w.auth
            AND l.storage_setting = w.storage_setting
            AND l.source_id = w.source_id AND l.destination_id = w.destination_id"""
    sql = f"""
        SELECT {columns}, {CELL_REF.format(alias="l")}
        FROM ({inner}) w
        LEFT JOIN {PairLatest._meta.db_table} l ON {cell}
    """
    if pick.newest:  # each link's cell of its newest measurement's streams; no one concurrency over a window
        sql = f"SELECT n.*, NULL::int AS concurrency FROM ({_newest_sql(sql, NEWEST_ORDER_CELLS)}) n"
    return sql, _window_args(bench, protocol, pick, now, window, settings_)


def _window_args(bench: Benchmark, protocol: str, pick: Pick, now: datetime, window: timedelta,
                 settings_: list[int] | None = None) -> dict[str, Any]:
    """The parameters of a window's cells' SQL (raw or stored)."""
    return {"bench": bench.id, "protocol": protocol, "since": now - window, **pick.args(),
            "seconds": int(window.total_seconds()),
            "settings": _window_settings(bench, protocol, pick) if settings_ is None else settings_}


def _in_window(bench: Benchmark, protocol: str, pick: Pick, now: datetime, window: timedelta,
               read: Callable[[bool], T]) -> T:
    """Run ``read(stored)``, a windowed grid's query: from the stored window cells (results.windows) when they
    are this window's (checked in the read's own snapshot), after computing the ranges that were not; from the
    rows for a window not kept (or a range that changed again meanwhile)."""
    settings_ = _window_settings(bench, protocol, pick)
    if not windows.kept(window) or not settings_:  # none: a protocol without cells, an empty grid
        return read(False)
    bench_id, column = bench.id, f"m.{metric_for(protocol)}"
    for attempt in range(2):
        with windows.snapshot():
            stale = windows.stale_ranges(bench_id, protocol, column, settings_, window, now)
            if not stale or attempt:
                return read(not stale)
        for streams in stale:  # outside the snapshot: a refresh is a write of its own
            windows.refresh(bench_id, protocol, column, streams, window, now)
    raise AssertionError("unreachable")


def _state_sql(value: str, protocol: str, cover: maintenance.Overlay, as_json: bool = False) -> str:
    """SQL for a cell's state (thresholds.classify's rule) from its ``value`` column, ``p.status`` and the ends
    ``p.source_id``, ``p.destination_id`` (maintenance first, written in only when a window is active); the
    thresholds come as the %(ok)s and %(warning)s parameters. ``as_json``: the state as its JSON text (each state
    a quoted literal: no to_json per cell)."""

    def state(name: str) -> str:
        return f"""'"{name}"'""" if as_json else f"'{name}'"

    better = ">=" if thresholds.HIGHER_IS_BETTER[kind_for(protocol)] else "<="
    in_maintenance = ""
    if cover.nodes or cover.pairs:  # integers from the database: safe to write into the statement
        nodes = "ARRAY[" + ",".join(map(str, sorted(cover.nodes))) + "]::bigint[]"
        pairs = "ARRAY[" + ",".join(map(str, sorted(cover.pairs))) + "]::bigint[]"
        in_maintenance = (f"WHEN p.source_id = ANY({nodes}) OR p.destination_id = ANY({nodes}) OR "
                          f"p.source_id::bigint * {maintenance.PAIR_SHIFT} + p.destination_id = ANY({pairs}) "
                          f"THEN {state('maintenance')} ")
    sql = (f"CASE {in_maintenance}WHEN p.status <> 'succeeded' THEN {state('failed')} "
           f"WHEN {value} IS NULL THEN {state('none')} WHEN {value} {better} %(ok)s THEN {state('ok')} "
           f"WHEN {value} {better} %(warning)s THEN {state('warning')} ELSE {state('critical')} END")
    return celljson.JsonText(sql) if as_json else sql


CELL_COLUMNS = gridcell.NAMES
# The cell's PairLatest row (a window's: its newest measurement's) for the diagnosis join
CELL_REF = "{alias}.id AS cell_id, {alias}.measurement_id AS cell_measurement_id"


def _diagnosis_join(cell: str, measurement: str) -> str:
    """The LEFT JOIN of a cell's diagnosis (alias ``cd``): by primary key, and only while it judged the cell's
    newest measurement. A probe of its primary key per cell (OFFSET 0 keeps the subquery a subquery): as a plain
    join PostgreSQL hashes the whole table, every benchmark's cells, for each grid."""
    return (f"LEFT JOIN LATERAL (SELECT * FROM {CellDiagnosis._meta.db_table} cd WHERE cd.cell_id = {cell} "
            f"AND cd.measurement_id = {measurement} OFFSET 0) cd ON true")


def _diagnosis_json(cell: str) -> str:
    """SQL for the JSON members of gridcell.DIAGNOSIS of a PairLatest row ``cell``: the analysis' text on the row
    while it judged the row's measurement, else not diagnosed (so too a window's cell without a latest row)."""
    return (f"CASE WHEN {cell}.diagnosis_of = {cell}.measurement_id THEN {cell}.diagnosis_json "
            f"ELSE '{gridcell.NOT_DIAGNOSED_MEMBERS}' END")


# gridcell.DIAGNOSIS from the joined ``cd`` (none: "" and nulls, as gridcell.NOT_DIAGNOSED)
DIAGNOSIS_SQL = {"binding_limit": "coalesce(cd.binding_limit, '')", "efficiency": "cd.efficiency",
                 "evidence": "nullif(cd.evidence, '')", "fix": "nullif(cd.fix, '')"}
DIAGNOSIS_COLUMNS = gridcell.select_sql(DIAGNOSIS_SQL, gridcell.DIAGNOSIS)


def cell_columns(pick: Pick) -> tuple[str, ...]:
    """_cells_sql's columns: CELL_COLUMNS, and concurrency for newest."""
    return gridcell.names(pick.newest)


def _per_request_sql(value: str, protocol: str, cover: maintenance.Overlay,
                     as_json: bool = False) -> dict[str, str]:
    """SQL for the fields computed per request (gridcell.PER_REQUEST) of a row ``p`` joined to ``age``, with its
    ``value`` column (parameters: %(stale)s, %(ok)s, %(warning)s); ``as_json``: the state as its JSON text."""
    return {"age_seconds": "round(age.seconds * 10) / 10", "stale": "age.seconds > %(stale)s",
            "state": _state_sql(value, protocol, cover, as_json)}


def _cells_sql(bench: Benchmark, protocol: str, pick: Pick, now: datetime, bounds: dict[str, float],
               mode: str, window: timedelta, cover: maintenance.Overlay, iso_times: bool,
               stored: bool = False) -> tuple[str, dict[str, Any]]:
    """PostgreSQL: the grid's cells (cell_columns) with their state, age and staleness; ``iso_times`` writes
    finished_at as RFC 3339 text (for JSON) instead of a timestamp; ``stored``: a window's from WindowCell."""
    if mode == "latest":
        inner, args = _latest_cells_sql(bench, protocol, pick)
    else:
        inner, args = _window_cells_sql(bench, protocol, pick, now, mode, window, stored)
    finished = ("""to_char(p.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')""" if iso_times
                else "p.finished_at")
    columns = gridcell.select_sql({
        **{f.name: f"p.{f.name}" for f in gridcell.FIELDS}, "source": "s.name", "destination": "d.name",
        "finished_at": finished, **_per_request_sql("p.value", protocol, cover),
    })
    sql = f"""
        SELECT {columns}{", p.concurrency" if pick.newest else ""}, {DIAGNOSIS_COLUMNS}
        FROM ({inner}) p
        JOIN {Node._meta.db_table} s ON s.id = p.source_id
        JOIN {Node._meta.db_table} d ON d.id = p.destination_id
        {_diagnosis_join("p.cell_id", "p.cell_measurement_id")}
        CROSS JOIN LATERAL (SELECT %(now)s - date_part('epoch', p.finished_at) AS seconds) age
    """  # float8 arithmetic: extract(epoch ...) is numeric, several times slower per cell
    return sql, {**args, "now": now.timestamp(), "stale": settings.STALE_SECONDS, "ok": bounds["ok"],
                 "warning": bounds["warning"]}


def grid_cells_json(bench: Benchmark, protocol: str, pick: Pick, now: datetime,
                    bounds: dict[str, float], mode: str = "latest", window: timedelta = timedelta(days=7),
                    cover: maintenance.Overlay | None = None) -> bytes:
    """PostgreSQL only: the grid's cells as one JSON array built by the database (same fields as
    grid()["cells"]), as UTF-8 bytes: the response's, never decoded into text and encoded again (a 100×100 grid of
    every setting is ~12 MB); spares Python ~10 µs per cell, which matters at 100×100.

    Latest: each cell's stored JSON body (celljson.py) with its age, staleness and state joined in front, about
    2.5 times less database time than converting the rows. A window's aggregates: each row's members written
    as text (celljson) and joined, as the latest cells' are (json_agg over the rows cost as much again as the
    window's aggregation); from a kept window's stored cells (results.windows), their stored members joined with
    the read's own (streams=newest: the stored rows' members).
    """
    if mode == "latest":
        return _json_array(*_latest_json_sql(bench, protocol, pick, now, bounds, cover or maintenance.Overlay()))
    fields = (*gridcell.FIELDS, *((gridcell.CONCURRENCY,) if pick.newest else ()), *gridcell.DIAGNOSIS)
    members = celljson.json_members_sql({f.name: f"c.{f.name}" for f in fields}, fields)

    def read(stored: bool) -> bytes:
        if stored and not pick.newest:
            return _json_array(*_stored_window_json_sql(bench, protocol, pick, now, bounds, mode, window,
                                                        cover or maintenance.Overlay()))
        sql, args = _cells_sql(bench, protocol, pick, now, bounds, mode, window, cover or maintenance.Overlay(),
                               iso_times=False, stored=stored)
        return _json_array(f"SELECT '{{' || {members} || '}}' AS cell FROM ({sql}) c", args)

    return _in_window(bench, protocol, pick, now, window, read)


def _stored_window_json_sql(bench: Benchmark, protocol: str, pick: Pick, now: datetime, bounds: dict[str, float],
                            mode: str, window: timedelta, cover: maintenance.Overlay) -> tuple[str, dict[str, Any]]:
    """A window's cells as JSON from their stored members (WindowCell's texts, results.windows.JSON_PARTS) with
    those of the read between them (age, staleness, status, state, diagnosis), in gridcell's order: the same text
    as the rows' JSON (grid_cells_json), without encoding the stored fields again per read."""
    per = {**_per_request_sql("p.value", protocol, cover, as_json=True), "status": "p.status"}
    run = tuple(f for f in gridcell.FIELDS if f.name in ("age_seconds", "stale", "status"))
    state = tuple(f for f in gridcell.FIELDS if f.name == "state")
    value = "c.mean_json" if mode == "mean" else "c.median_json"
    sql = f"""
        SELECT '{{' || p.key_json || ',' || p.value_json || ',' || p.last_json
            || ',' || {celljson.json_members_sql({f.name: per[f.name] for f in run}, run)}
            || ',' || p.tail_json || ',' || {celljson.json_members_sql({"state": per["state"]}, state)}
            || ',' || p.diagnosis || '}}' AS cell
        FROM (
            SELECT c.key_json, {value} AS value_json, c.last_json, c.tail_json, c.{mode} AS value,
                   c.source_id, c.destination_id, c.last_at AS finished_at,
                   CASE WHEN c.succeeded > 0 THEN 'succeeded' ELSE coalesce(l.status, 'failed') END AS status,
                   {_diagnosis_json("l")} AS diagnosis
            FROM {WindowCell._meta.db_table} c LEFT JOIN {PairLatest._meta.db_table} l ON l.id = c.cell_id
            WHERE c.benchmark_id = %(bench)s AND c.protocol = %(protocol)s AND c.window_seconds = %(seconds)s
              AND c.streams = ANY(%(settings)s) AND {pick.sql("c")}
        ) p
        CROSS JOIN LATERAL (SELECT %(now)s - date_part('epoch', p.finished_at) AS seconds) age
    """
    return sql, {**_window_args(bench, protocol, pick, now, window), "now": now.timestamp(),
                 "stale": settings.STALE_SECONDS, "ok": bounds["ok"], "warning": bounds["warning"]}


JSON_CHUNK = 500  # cells per row of _json_array's answer


def _json_array(cells: str, args: dict[str, Any]) -> bytes:
    """The JSON array of the rows of ``cells`` (a query of one text column ``cell``, each a cell's JSON object),
    in their order. The database joins them in chunks of JSON_CHUNK cells, Python the chunks: one text of the
    whole grid (~12 MB for 100×100 of every setting) cost the database a growing buffer, and the client library
    another, each copied again at every doubling (a third more server CPU than the chunks). Read as bytes (the
    response's; a text would be decoded and encoded again) and without JIT, whose compilation (~10 ms, planned for
    the latest grid's diagnosis probes) saves nothing on string joins."""
    sql = (f"SELECT c, string_agg(cell, ',') FROM (SELECT (row_number() OVER () - 1) / {JSON_CHUNK} AS c, cell "
           f"FROM ({cells}) cells) x GROUP BY c")
    with transaction.atomic(), connection.cursor() as cur:
        psycopg2.extensions.register_type(psycopg2.extensions.BYTES, cur.cursor)  # text as bytes
        cur.execute("SET LOCAL jit = off")
        cur.execute(sql, args)
        chunks = sorted(cur.fetchall())
    pieces = [b"["]
    for i, (_, chunk) in enumerate(chunks):
        pieces += (b",", chunk) if i else (chunk,)
    pieces.append(b"]")
    return b"".join(pieces)  # one copy (a + b + c of 12 MB took ~10 ms)


def _latest_json_sql(bench: Benchmark, protocol: str, pick: Pick, now: datetime,
                     bounds: dict[str, float], cover: maintenance.Overlay) -> tuple[str, dict[str, Any]]:
    metric = metric_for(protocol)
    rows, _, join = _latest_rows_sql(pick, "p")
    # the fields computed per request, then concurrency (newest), then the stored body (celljson)
    members = celljson.json_members_sql(_per_request_sql("p." + metric, protocol, cover, as_json=True),
                                        gridcell.PER_REQUEST)
    if pick.newest:
        members += f" || ',' || {celljson.json_members_sql({'concurrency': 'm.concurrency'}, (gridcell.CONCURRENCY,))}"
    return f"""
        SELECT '{{' || {members} || ',' || p.cell_json || ',' || {_diagnosis_json("p")} || '}}' AS cell
        FROM ({rows}) p{join}
        CROSS JOIN LATERAL (SELECT %(now)s - date_part('epoch', p.finished_at) AS seconds) age
    """, {"bench": bench.id, "protocol": protocol, **pick.args(), "now": now.timestamp(),
          "stale": settings.STALE_SECONDS, "ok": bounds["ok"], "warning": bounds["warning"]}


def drawn_cells(grid_data: dict[str, Any] | None, bench: Benchmark, protocol: str, streams: int | str | None,
                now: datetime, address_family: str | None = None, congestion_control: str | None = None,
                auth: str | None = None,
                storage: str | None = None) -> dict[tuple[str, str, int | str], tuple[str, bool, str]]:
    """What the grid page draws per cell: (state, stale, tooltip JSON) by (source, destination, streams) of one
    address family, congestion control, auth mode and storage (the page picks one of each); the
    tooltip is [value to 3 decimals, finished epoch] plus [status, error] when it did not succeed. With
    ``streams=NEWEST`` the key's streams is NEWEST (one cell per link) and the tooltip is always
    [value, finished epoch, status or null, error or null, streams, concurrency or null]: the setting it ran.
    ``grid_data`` (grid()'s output) gives them for any mode and database; without it (PostgreSQL, latest) the
    database writes them from PairLatest, sparing a dict, a classification and a JSON encoding per cell."""
    newest = streams == NEWEST
    if grid_data is not None:
        out: dict[tuple[str, str, int | str], tuple[str, bool, str]] = {}
        for c in grid_data["cells"]:
            info = [None if c["value"] is None else round(c["value"], 3), int(c["finished_at"].timestamp())]
            failed = c["status"] != "succeeded"
            if failed or newest:
                info += [c["status"], (c["error"] or "")[:200]] if failed else [None, None]
            if newest:
                info += [c["streams"], c["concurrency"]]
            key = (c["source"], c["destination"], NEWEST if newest else c["streams"])
            out[key] = (c["state"], c["stale"], json.dumps(info))
        return out
    metric, kind = metric_for(protocol), kind_for(protocol)
    bounds = bench.effective_thresholds()[kind]
    pick = Pick(streams, address_family, congestion_control, auth, storage)
    rows, _, join = _latest_rows_sql(pick, "p")
    failure = "',' || to_json(p.status)::text || ',' || to_json(coalesce(p.error, ''))::text"
    if newest:
        tail = (f"|| CASE WHEN p.status <> 'succeeded' THEN {failure} ELSE ',null,null' END"
                " || ',' || p.streams || ',' || coalesce(m.concurrency::text, 'null')")
    else:
        tail = f"|| CASE WHEN p.status <> 'succeeded' THEN {failure} ELSE '' END"
    sql = f"""
        SELECT s.name, d.name, p.streams,
            {_state_sql("p." + metric, protocol, maintenance.overlay(now))},
            %(now)s - date_part('epoch', p.finished_at) > %(stale)s,
            '[' || coalesce(round(p.{metric}::numeric, 3)::float8::text, 'null') || ','
                || floor(date_part('epoch', p.finished_at))::bigint
                {tail}
                || ']'
        FROM ({rows}) p{join}
        JOIN {Node._meta.db_table} s ON s.id = p.source_id JOIN {Node._meta.db_table} d ON d.id = p.destination_id
    """
    with connection.cursor() as cur:
        cur.execute(sql, {"bench": bench.id, "protocol": protocol, **pick.args(), "now": now.timestamp(),
                          "stale": settings.STALE_SECONDS, "ok": bounds["ok"], "warning": bounds["warning"]})
        return {(src, dst, NEWEST if newest else st): (state, stale, info)
                for src, dst, st, state, stale, info in cur.fetchall()}


GRID_VIEWS = ("value", "efficiency", "why")  # the page's colouring: thresholds, efficiency bounds, binding limit


def diagnosed_cells(grid_data: dict[str, Any], streams: int | str | None, view: str,
                    efficiency_bounds: dict[str, float]) -> dict[tuple[str, str, int | str], tuple]:
    """What the grid page draws per cell in its efficiency and why views, from grid()'s cells (their diagnosis
    fields): (state, stale, tooltip JSON, the efficiency figure in %) by (source, destination, streams) as
    drawn_cells keys them. The state is the binding limit (why; "none" not diagnosed) or the efficiency's state
    by ``efficiency_bounds`` (efficiency); failed and maintenance cells stay so. The tooltip is an object: value,
    finished epoch, status and error when it did not succeed, limit, efficiency, evidence, fix (and streams,
    concurrency for streams=NEWEST)."""
    newest = streams == NEWEST
    out: dict[tuple[str, str, int | str], tuple[str, bool, str, str]] = {}
    for c in grid_data["cells"]:
        failed = c["status"] != "succeeded"
        if c["state"] == "maintenance" or (failed and view == "why"):
            state = "maintenance" if c["state"] == "maintenance" else "failed"
        elif view == "why":
            state = c["binding_limit"] or "none"
        else:
            state = thresholds.classify_efficiency(c["efficiency"], c["status"], efficiency_bounds)
        info: dict[str, Any] = {"value": None if c["value"] is None else round(c["value"], 3),
                                "t": int(c["finished_at"].timestamp()),
                                "status": c["status"] if failed else None,
                                "error": (c["error"] or "")[:200] if failed else None,
                                "limit": c["binding_limit"] or None, "efficiency": c["efficiency"],
                                "evidence": c["evidence"], "fix": c["fix"]}
        if newest:
            info |= {"streams": c["streams"], "concurrency": c["concurrency"]}
        figure = "" if c["efficiency"] is None else f"{c['efficiency'] * 100:.0f}"
        key = (c["source"], c["destination"], NEWEST if newest else c["streams"])
        out[key] = (state, c["stale"], json.dumps(info), figure)
    return out


def _pair_q(a: Node, b: Node) -> Q:
    return Q(source=a, destination=b) | Q(source=b, destination=a)


def pair_history(
    a: Node, b: Node, bench: Benchmark | None = None, since: datetime | None = None
) -> list[dict[str, Any]]:
    """Every measurement between two nodes (both directions, every protocol and stream setting), oldest first.
    Before the raw horizon (results.retention), one point per cell and day from the rollups (``day``: its count,
    failures, p10 and p90; the value its median, finished_at its newest measurement's; id null)."""
    horizon = _reaches_rollups(since)
    qs = Measurement.objects.filter(_pair_q(a, b))
    if bench is not None:
        qs = qs.filter(benchmark=bench)
    if since is not None or horizon is not None:
        qs = qs.filter(finished_at__gte=horizon or since)
    names = {a.id: a.name, b.id: b.name}
    out = _pair_days(a, b, bench, since, horizon, names) if horizon is not None else []
    for row in qs.order_by("finished_at").values(
        "id", "source_id", "destination_id", "protocol", "streams", "concurrency", "throughput_gbps",
        "aggregate_gbps", "rtt_ms", "retransmits", "congestion_control", "address_family", "auth", "status", "error",
        "finished_at", "implementation", "storage_setting",
    ):
        row["storage"] = row.pop("storage_setting")
        row["source"] = names[row.pop("source_id")]
        row["destination"] = names[row.pop("destination_id")]
        row["day"] = None
        out.append(row)
    return out


def _pair_days(a: Node, b: Node, bench: Benchmark | None, since: datetime | None, horizon: datetime,
               names: dict[int, str]) -> list[dict[str, Any]]:
    """pair_history's points before the raw horizon: a cell's day each, from the rollups (from since's day)."""
    qs = DailyRollup.objects.filter(_pair_q(a, b), day__lt=horizon.astimezone(UTC).date())
    if bench is not None:
        qs = qs.filter(benchmark=bench)
    if since is not None:
        qs = qs.filter(day__gte=since.astimezone(UTC).date())
    out = []
    for r in qs.order_by("last_at").values("source_id", "destination_id", "protocol", "streams", "address_family",
                                            "congestion_control", "auth", "storage_setting", *daily.FIGURES):
        metric = metric_for(r["protocol"])
        out.append({
            "id": None, "source": names[r["source_id"]], "destination": names[r["destination_id"]],
            "protocol": r["protocol"], "streams": r["streams"] or None, "concurrency": None,
            "throughput_gbps": r["median"] if metric == "throughput_gbps" else None, "aggregate_gbps": None,
            "rtt_ms": r["median"] if metric == "rtt_ms" else None, "retransmits": None,
            "congestion_control": r["congestion_control"] or None, "address_family": r["address_family"],
            "auth": r["auth"] or None, "status": "succeeded" if r["succeeded"] else r["last_status"], "error": None,
            "finished_at": r["last_at"], "implementation": None, "storage": r["storage_setting"],
            "day": {k: r[k] for k in ("count", "failures", "p10", "p90")},
        })
    return out


def measurement_telemetry(ids: list[Any]) -> dict[Any, dict[str, Any]]:
    """The host telemetry and TCP view of a few measurements (the pair page's newest rows): id -> {host, tcp}.
    Apart from pair_history, so that its every-row query does not read these JSON documents."""
    return {row["id"]: row for row in Measurement.objects.filter(id__in=ids).values("id", "host", "tcp")}


def measurement_diagnoses(ids: list[Any]) -> dict[Any, dict[str, Any]]:
    """The limit model's answer on a few measurements (the pair page's newest per setting): id -> {binding_limit,
    efficiency, diagnosis}."""
    rows = Measurement.objects.filter(id__in=ids).values("id", "binding_limit", "efficiency", "diagnosis")
    return {row["id"]: row for row in rows}


def link_observations(source: Node, destination: Node, protocol: str, bench: Benchmark | None = None,
                      since: datetime | None = None) -> list[Observation]:
    """One direction's runs of one protocol, oldest first, as the advice reads them (Observation.of: failures as
    0 Gbit/s, cancelled runs left out): memory to memory only, the network link's own rate (a disk mode run's is
    its disks' too, and would pull the climb down)."""
    qs = Measurement.objects.filter(source=source, destination=destination, protocol=protocol,
                                    storage_setting="memory")
    if bench is not None:
        qs = qs.filter(benchmark=bench)
    if since is not None:
        qs = qs.filter(finished_at__gte=since)
    rows = qs.order_by("finished_at").values_list("streams", "concurrency", "throughput_gbps", "status")
    return [o for o in (Observation.of(*row) for row in rows) if o is not None]


def _variant(family: str, cc: str | None, auth: str | None, store: str = "memory") -> dict[str, Any]:
    """The settings beside protocol and streams that make a cell a cell of its own: comparisons never mix them."""
    return {"address_family": family, "congestion_control": cc or "", "auth": auth or "", "storage": store}


def setting_label(row: dict[str, Any]) -> str:
    """'xrootd-https ×8', then what else sets the row apart: ' IPv6', a congestion control, an auth mode, a disk
    storage."""
    store = row.get("storage") or row.get("storage_setting") or "memory"
    extra = ["IPv6" if row.get("address_family") == "ipv6" else "", row.get("congestion_control") or "",
             row.get("auth") or "", store if store != "memory" else ""]
    return " ".join([f'{row["protocol"]} ×{row.get("streams") or 1}', *filter(None, extra)])


def pair_repeated_cells(a: Node, b: Node, bench: Benchmark | None = None) -> list[dict[str, Any]]:
    """The pair's grid cells (both directions) whose value is a median of a run's repeats (spec.repeats)."""
    qs = PairLatest.objects.filter(Q(source=a, destination=b) | Q(source=b, destination=a), repeats__gt=1)
    if bench is not None:
        qs = qs.filter(benchmark=bench)
    rows = qs.order_by("protocol", "streams", "address_family", "congestion_control", "auth", "storage_setting",
                       "source__name").values(
        "source__name", "destination__name", "protocol", "streams", "address_family", "congestion_control", "auth",
        "storage_setting", "throughput_gbps", "low", "high", "repeats", "finished_at")
    return [{**r, "setting": setting_label(r)} for r in rows]


def pair_storage_tax(a: Node, b: Node, bench: Benchmark | None = None) -> list[dict[str, Any]]:
    """What each end's storage costs the pair (disk mode, #28): per direction and setting measured memory to memory
    and in a disk mode, the newest rate of each storage setting and each end's tax (results.storage.tax)."""
    qs = PairLatest.objects.filter(_pair_q(a, b), status="succeeded", throughput_gbps__isnull=False).exclude(
        protocol__in=["rtt", "iperf3"])
    if bench is not None:
        qs = qs.filter(benchmark=bench)
    rates: dict[tuple, dict[str, float]] = defaultdict(dict)
    for src, dst, protocol, st, family, cc, auth, store, gbps in qs.values_list(
            "source__name", "destination__name", "protocol", "streams", "address_family", "congestion_control",
            "auth", "storage_setting", "throughput_gbps"):
        rates[(src, dst, protocol, st, family, cc, auth)][store] = gbps
    out = []
    for (src, dst, protocol, st, family, cc, auth), by_storage in sorted(rates.items()):
        figures = storage.tax(by_storage)
        if figures is not None:
            row = {"protocol": protocol, "streams": st, **_variant(family, cc, auth)}
            out.append({"source": src, "destination": dst, "setting": setting_label(row), **figures,
                        "taxes": [figures["source_tax"], figures["destination_tax"], figures["both_tax"]]})
    return out


def pair_latest_run_files(a: Node, b: Node, bench: Benchmark | None = None) -> dict[str, Any] | None:
    """Per-file durations of the latest run that has per-file results for this pair: one group per direction
    and setting (protocol, streams, address family, congestion control, auth mode) of that run, each with its
    files' seconds and a summary. None without any."""
    qs = Measurement.objects.filter(_pair_q(a, b))
    if bench is not None:
        qs = qs.filter(benchmark=bench)
    latest = qs.filter(files__isnull=False).order_by("-finished_at").values("run_id").first()
    if latest is None:
        return None
    run = Run.objects.get(pk=latest["run_id"])
    names = {a.id: a.name, b.id: b.name}
    groups: dict[tuple, dict[str, Any]] = {}
    files = FileTransfer.objects.filter(measurement__in=qs.filter(run=run)).order_by("name").values_list(
        "measurement__source_id", "measurement__destination_id", "measurement__protocol", "measurement__streams",
        "measurement__address_family", "measurement__congestion_control", "measurement__auth",
        "measurement__storage_setting", "name", "seconds", "error")
    for src, dst, protocol, streams, family, cc, auth, store, name, seconds, error in files:
        key = (names[src], names[dst], protocol, streams or 0, family, cc or "", auth or "", store)
        if key not in groups:
            groups[key] = {"source": names[src], "destination": names[dst], "protocol": protocol, "streams": streams,
                           **_variant(family, cc, auth, store), "files": [], "failed": 0}
            groups[key]["setting"] = setting_label(groups[key])
        g = groups[key]
        if seconds is None or error:
            g["failed"] += 1
        else:
            g["files"].append({"name": name, "seconds": seconds})
    out = []
    for _, g in sorted(groups.items()):
        seconds = [f["seconds"] for f in g["files"]]
        g["summary"] = {"n": len(seconds), "min": min(seconds, default=None), "max": max(seconds, default=None),
                        "median": statistics.median(seconds) if seconds else None,
                        "mean": statistics.fmean(seconds) if seconds else None}
        out.append(g)
    return {"run": run.name, "finished_at": run.finished_at, "groups": out}


def pair_paths(a: Node, b: Node, bench: Benchmark | None = None, since: datetime | None = None,
               limit: int = 50) -> list[Path]:
    """The pair's traced paths (both directions), newest first."""
    qs = Path.objects.filter(_pair_q(a, b)).select_related("source", "destination")
    if bench is not None:
        qs = qs.filter(benchmark=bench)
    if since is not None:
        qs = qs.filter(at__gte=since)
    return list(qs.order_by("-at", "-id")[:limit])


def pair_errors(a: Node, b: Node, bench: Benchmark | None = None, limit: int = 20) -> list[Measurement]:
    qs = Measurement.objects.filter(_pair_q(a, b)).exclude(status="succeeded").select_related("source", "destination")
    if bench is not None:
        qs = qs.filter(benchmark=bench)
    return list(qs.order_by("-finished_at")[:limit])


def _pair_rtts(bench: Benchmark) -> dict[tuple[int, int, str], float]:
    """The latest RTT per (source, destination, address family): an IPv6 path is not the IPv4 one's."""
    rows = PairLatest.objects.filter(benchmark=bench, protocol="rtt").values_list(
        "source_id", "destination_id", "address_family", "rtt_ms"
    )
    return {(s, d, f): v for s, d, f, v in rows if v is not None}




def throughput_vs_rtt(bench: Benchmark) -> dict[str, list[dict[str, Any]]]:
    """Latest throughput of every pair against its RTT (of the same address family), per protocol (the 003 paper's
    figure 7)."""
    rtts = _pair_rtts(bench)
    names = dict(Node.objects.values_list("id", "name"))
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rows = PairLatest.objects.filter(benchmark=bench).exclude(protocol="rtt").values_list(
        "protocol", "streams", "address_family", "congestion_control", "auth", "storage_setting", "source_id",
        "destination_id", "throughput_gbps", "rtt_ms"
    )
    for protocol, st, family, cc, auth, store, src, dst, gbps, own_rtt in rows:
        # RTT is symmetric: a direction without its own probe takes the other's
        rtt = own_rtt if own_rtt is not None else rtts.get((src, dst, family), rtts.get((dst, src, family)))
        if gbps is None or rtt is None:
            continue
        out[protocol].append({"source": names[src], "destination": names[dst], "streams": st, "rtt_ms": rtt,
                              "throughput_gbps": gbps, **_variant(family, cc, auth, store)})
    return dict(out)


def streams_pairs(bench: Benchmark, protocol: str | None = None, low: int = 1, high: int = 8) -> list[dict[str, Any]]:
    """Pairs measured with `low` and `high` streams: both latest throughputs (the 003 paper's figure 8), each
    address family, congestion control and auth mode a pair of its own."""
    qs = PairLatest.objects.filter(benchmark=bench, streams__in=[low, high]).exclude(protocol__in=["rtt", "iperf3"])
    if protocol:
        qs = qs.filter(protocol=protocol)
    names = dict(Node.objects.values_list("id", "name"))
    by_key: dict[tuple, dict[int, float]] = defaultdict(dict)
    for p, st, family, cc, auth, store, src, dst, gbps in qs.values_list(
        "protocol", "streams", "address_family", "congestion_control", "auth", "storage_setting", "source_id",
        "destination_id", "throughput_gbps"
    ):
        if gbps is not None:
            by_key[(p, family, cc or "", auth or "", store, src, dst)][st] = gbps
    out = []
    for (p, family, cc, auth, store, src, dst), values in sorted(by_key.items()):
        if low in values and high in values:
            out.append({"protocol": p, "source": names[src], "destination": names[dst],
                        "low_streams": low, "high_streams": high, "low_gbps": values[low], "high_gbps": values[high],
                        **_variant(family, cc, auth, store)})
    return out


def auth_pairs(bench: Benchmark, since: datetime) -> list[dict[str, Any]]:
    """Pairs of the token-capable protocols measured in more than one auth mode (token, x509, none) since ``since``:
    each mode's mean throughput and run count, per protocol, stream setting, address family, congestion control and
    direction (grouped by the database)."""
    rows = (Measurement.objects
            # memory to memory only: a disk's cost is the storage tax's (pair page), not the auth mode's
            .filter(benchmark=bench, protocol__in=TOKEN_PROTOCOLS, status="succeeded", auth__isnull=False,
                    throughput_gbps__isnull=False, finished_at__gte=since, storage_setting="memory")
            .values_list("protocol", "streams", "address_family", "congestion_control", "source_id",
                         "destination_id", "auth")
            .annotate(mean=Avg("throughput_gbps"), runs=Count("id")))
    by_key: dict[tuple, dict[str, tuple[float, int]]] = defaultdict(dict)
    for protocol, st, family, cc, src, dst, auth, mean, runs in rows:
        # '' and NULL are the same default congestion control; their groups are one pair's
        modes = by_key[(protocol, st or 0, family, cc or "", src, dst)]
        m0, r0 = modes.get(auth, (0.0, 0))
        modes[auth] = ((m0 * r0 + mean * runs) / (r0 + runs), r0 + runs)
    names = dict(Node.objects.values_list("id", "name"))
    return [{"protocol": p, "streams": st, "address_family": family, "congestion_control": cc, "source": names[src],
             "destination": names[dst], "gbps": {a: v[0] for a, v in modes.items()},
             "runs": {a: v[1] for a, v in modes.items()}}
            for (p, st, family, cc, src, dst), modes in sorted(by_key.items()) if len(modes) > 1]


def auth_summary(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per protocol, stream setting and mode: the median over pairs of the mode's throughput relative to x509 on
    the same pair, family and congestion control (x509, the mode every install has, is the reference)."""
    ratios: dict[tuple, list[float]] = defaultdict(list)
    for p in pairs:
        ref = p["gbps"].get("x509")
        for mode, gbps in p["gbps"].items():
            if mode != "x509" and ref:
                ratios[(p["protocol"], p["streams"], mode)].append(gbps / ref)
    return [{"protocol": p, "streams": st, "mode": mode, "pairs": len(r), "median_ratio": statistics.median(r)}
            for (p, st, mode), r in sorted(ratios.items())]


def tpc_protocols() -> list[str]:
    return list(TPC_PROTOCOLS)

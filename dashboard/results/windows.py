"""The windowed grid's figures kept per cell (PostgreSQL): WindowCell and WindowStamp.

A window's mean or median grid aggregates the window's raw rows (~14 per cell over 7 days at two runs a day): about
0.2 s of database CPU for 100×100 cells, every read. Instead each range of the index meas_window (a benchmark,
protocol and stream setting) keeps its cells' figures over the standard windows (STANDARD), with a fingerprint of
the rows they were computed from (WindowStamp: their count and the sum of a hash of each one's finish time, pair and
value). A read fingerprints the same range's rows in its own window (an index-only scan of that window,
no grouping) and, while that matches the stamp, reads one stored row per cell instead; otherwise (an ingest, a late
or deleted measurement, or the oldest measurement aging out of the window) it computes the range again from its rows,
stores it, and reads that. The stored figures are the raw aggregation's own (the same SQL), so the answers are the
same; the fingerprint check makes them follow whatever changed the window's rows, without ingest taking part.
SQLite's grid (the ORM path) computes every window from the rows, as before."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.db import connection, transaction

from results import celljson, gridcell
from results.models import Measurement, Node, PairLatest, WindowCell, WindowStamp

STANDARD = (timedelta(days=1), timedelta(days=7), timedelta(days=30))  # the windows kept; others are aggregated
KEY = ("source_id", "destination_id", "streams", "address_family", "congestion_control", "auth", "storage_setting")
_FIELD = {f.name: f for f in gridcell.FIELDS}
# WindowCell's stored JSON members: runs of gridcell.FIELDS (in its order) whose text does not change with the read
JSON_PARTS = {"key_json": ("source", "destination", "streams", "address_family", "congestion_control", "auth",
                           "storage"),
              "value_json": ("value",), "last_json": ("finished_at",), "tail_json": ("error", "count", "low", "high")}


def json_sql(part: str, exprs: dict[str, str]) -> str:
    """SQL for one run of JSON_PARTS' members from an SQL expression per field (celljson's encoding)."""
    fields = tuple(_FIELD[n] for n in JSON_PARTS[part])
    return celljson.json_members_sql({f.name: exprs[f.name] for f in fields}, fields)


def kept(window: timedelta) -> bool:
    return connection.vendor == "postgresql" and window in STANDARD


@contextmanager
def snapshot() -> Iterator[None]:
    """A transaction whose statements share one snapshot (REPEATABLE READ): the stamp checked and the cells read
    are of one moment. Inside a transaction already (a test's, a caller's), that one."""
    if connection.in_atomic_block:
        with transaction.atomic():
            yield
        return
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # one backend: the fingerprint's scan is planned parallel, and its workers cost more CPU than they save
        cur.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        yield


def range_sql(streams: int) -> str:
    """The rows ``m`` of one range in a window: the index meas_window's condition (%(bench)s, %(protocol)s,
    %(since)s)."""
    st = f"m.streams = {int(streams)}" if streams else "m.streams IS NULL"
    return (f"m.benchmark_id = %(bench)s AND m.protocol = %(protocol)s AND {st} "
            "AND m.finished_at >= %(since)s")


def _row_hash(column: str) -> str:
    """Per row ``m``: a 32-bit hash of its finish time, pair and value (``column``; NULL as 7), the fingerprint's
    term (summed as bigint: no overflow below ~4e9 rows). A row's settings and status are not hashed: a window
    that lost a row and gained one of the same time, pair and value in another setting at once would pass."""
    return ("(timestamp_hash(m.finished_at AT TIME ZONE 'UTC') # hashint8(m.source_id::bigint * 4294967296 "
            f"+ m.destination_id) # coalesce(hashfloat8({column}), 7))")


def _fingerprint(count: str, hashes: str) -> str:
    return f"({count})::bigint || ':' || coalesce(({hashes})::bigint, 0)"


def fingerprint_sql(column: str) -> str:
    """SQL for the fingerprint of a range's rows ``m`` (an aggregate over them): their count and hash sum."""
    return _fingerprint("count(*)", f"sum({_row_hash(column)})")


def cells_sql(column: str, streams: int) -> str:
    """The aggregation of one range's rows in a window per cell (the window's raw figures: the same as the grid
    reads, for every setting beside streams), with each cell's partial fingerprint sums."""
    ok = f"m.status = 'succeeded' AND {column} IS NOT NULL"
    return f"""
        SELECT w.*, (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(w.gathered) x) AS median
        FROM (
            SELECT m.source_id, m.destination_id, coalesce(m.streams, 0) AS streams, m.address_family,
                   coalesce(m.congestion_control, '') AS congestion_control, coalesce(m.auth, '') AS auth,
                   m.storage_setting, avg({column}) FILTER (WHERE {ok}) AS mean,
                   array_agg({column}) FILTER (WHERE {ok}) AS gathered, count(*) FILTER (WHERE {ok}) AS succeeded,
                   count(*) AS count, max(m.finished_at) AS last_at,
                   sum({_row_hash(column)}) AS hashes
            FROM {Measurement._meta.db_table} m
            WHERE {range_sql(streams)}
            GROUP BY 1, 2, 3, 4, 5, 6, 7
        ) w"""


def _lock_key(bench_id: int, protocol: str, streams: int, seconds: int) -> int:
    return zlib.crc32(f"windowcell:{bench_id}:{protocol}:{streams}:{seconds}".encode())


def refresh(bench_id: int, protocol: str, column: str, streams: int, window: timedelta, now: datetime) -> None:
    """Compute one range's cells over ``window`` ending ``now`` from its rows and store them with their stamp, in
    one statement (one snapshot: the stamp fingerprints exactly the rows the cells were computed from). Refreshers
    of one range take turns (an advisory lock), so a range's cells and stamp are always one refresh's."""
    seconds = int(window.total_seconds())
    key = ", ".join(KEY)
    table, stamps = WindowCell._meta.db_table, WindowStamp._meta.db_table
    exprs = {"source": "s.name", "destination": "d.name", **{k: f"a.{k}" for k in KEY[2:]},
             "storage": "a.storage_setting", "finished_at": "a.last_at", "error": "NULL::text", "count": "a.count",
             "low": "NULL::float8", "high": "NULL::float8"}
    texts = {"key_json": json_sql("key_json", exprs), "mean_json": json_sql("value_json", {"value": "a.mean"}),
             "median_json": json_sql("value_json", {"value": "a.median"}), "last_json": json_sql("last_json", exprs),
             "tail_json": json_sql("tail_json", exprs)}
    figures = ("count", "succeeded", "mean", "median", "last_at", *texts)
    sql = f"""
        WITH a AS MATERIALIZED ({cells_sql(column, streams)}),
        stored AS (
            INSERT INTO {table} (benchmark_id, protocol, window_seconds, {key}, {", ".join(figures)}, cell_id)
            SELECT %(bench)s, %(protocol)s, %(seconds)s, {", ".join(f"a.{k}" for k in KEY)},
                   {", ".join(texts.get(f, f"a.{f}") for f in figures)}, l.id
            FROM a JOIN {Node._meta.db_table} s ON s.id = a.source_id
            JOIN {Node._meta.db_table} d ON d.id = a.destination_id
            LEFT JOIN {PairLatest._meta.db_table} l ON l.benchmark_id = %(bench)s AND l.protocol = %(protocol)s
                AND {" AND ".join(f"l.{k} = a.{k}" for k in KEY)}
            ON CONFLICT ON CONSTRAINT windowcell_cell DO UPDATE SET
                {", ".join(f"{f} = EXCLUDED.{f}" for f in (*figures, "cell_id"))}
        ), gone AS (
            DELETE FROM {table} c
            WHERE c.benchmark_id = %(bench)s AND c.protocol = %(protocol)s AND c.streams = %(streams)s
              AND c.window_seconds = %(seconds)s
              AND NOT EXISTS (SELECT 1 FROM a WHERE {" AND ".join(f"a.{k} = c.{k}" for k in KEY)})
        )
        INSERT INTO {stamps} (benchmark_id, protocol, streams, window_seconds, computed_for, fingerprint)
        SELECT %(bench)s, %(protocol)s, %(streams)s, %(seconds)s, %(now)s,
               {_fingerprint("coalesce(sum(a.count), 0)", "sum(a.hashes)")} FROM a
        ON CONFLICT ON CONSTRAINT windowstamp_range DO UPDATE SET
            computed_for = EXCLUDED.computed_for, fingerprint = EXCLUDED.fingerprint"""
    args = {"bench": bench_id, "protocol": protocol, "streams": streams, "seconds": seconds, "now": now,
            "since": now - window}
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_key(bench_id, protocol, streams, seconds)])
        cur.execute(sql, args)


def stale_ranges(bench_id: int, protocol: str, column: str, settings: list[int], window: timedelta,
                 now: datetime) -> list[int]:
    """The stream settings among ``settings`` whose stored cells are not the window's (no stamp, or the rows in the
    window ending ``now`` fingerprint otherwise): an index-only scan of each range's window, no grouping."""
    seconds = int(window.total_seconds())
    parts = " UNION ALL ".join(
        f"""SELECT {int(st)} AS streams, (SELECT {fingerprint_sql(column)} FROM {Measurement._meta.db_table} m
                                          WHERE {range_sql(st)}) AS fingerprint""" for st in settings)
    sql = f"""
        SELECT r.streams FROM ({parts}) r
        LEFT JOIN {WindowStamp._meta.db_table} s ON s.benchmark_id = %(bench)s AND s.protocol = %(protocol)s
            AND s.streams = r.streams AND s.window_seconds = %(seconds)s
        WHERE s.fingerprint IS DISTINCT FROM r.fingerprint"""
    with connection.cursor() as cur:
        cur.execute(sql, {"bench": bench_id, "protocol": protocol, "seconds": seconds, "since": now - window})
        return [r[0] for r in cur.fetchall()]


def stored_cells_sql(pick_sql: str, value: str) -> str:
    """The stored cells of the ranges %(settings)s over %(seconds)s, picked (``pick_sql`` on alias c), in the raw
    aggregation's row shape: the cell's key, ``value`` (mean or median), succeeded, count, finished_at, and its
    PairLatest row's id (cell_id)."""
    return f"""
        SELECT c.source_id, c.destination_id, c.streams, c.address_family, c.congestion_control, c.auth,
               c.storage_setting, c.{value} AS value, c.succeeded, c.count, c.last_at AS finished_at, c.cell_id
        FROM {WindowCell._meta.db_table} c
        WHERE c.benchmark_id = %(bench)s AND c.protocol = %(protocol)s AND c.window_seconds = %(seconds)s
          AND c.streams = ANY(%(settings)s) AND {pick_sql}"""


def refresh_stale(bench_id: int, metric: Callable[[str], str], now: datetime) -> int:
    """Compute again the kept ranges of a benchmark (those read before: with a stamp) whose rows changed, so the
    next read finds them current (the analysis after an ingest; a read would otherwise do it). ``metric``: a
    protocol's value column. How many ranges were computed."""
    done = 0
    stamps = WindowStamp.objects.filter(benchmark_id=bench_id).values_list("protocol", "streams", "window_seconds")
    for protocol, streams, seconds in sorted(stamps):
        window, column = timedelta(seconds=seconds), f"m.{metric(protocol)}"
        if window in STANDARD and stale_ranges(bench_id, protocol, column, [streams], window, now):
            refresh(bench_id, protocol, column, streams, window, now)
            done += 1
    return done

"""The partitioned archive's two heavy moments, on a generated archive (default 1 M measurements over 180 days):

1. the upgrade (migration 0020_measurement_partitions) of an unpartitioned archive, in place: its time, and how
   long a reader and a writer were blocked meanwhile (a probe each, every 20 ms, on connections of their own);
2. retention dropping that old table once all of it is past the age (results.partitions.retire): the same.

Goal: a reader is never blocked 250 ms or more by either (the exclusive locks are the short swap and DETACH; the
index build blocks writes only). `make bench-partitions`; the figures go to BENCHMARKS.md (not with --no-write).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from section import publish  # noqa: E402
from tpcmesh_lab.postgres import start_postgres  # noqa: E402

GOAL_MS = 250  # a reader blocked at most this long


class Probe(threading.Thread):
    """Runs ``sql`` every 20 ms on a connection of its own; the longest one took is how long it was blocked."""

    def __init__(self, url: str, sql: str):
        super().__init__(daemon=True)
        import psycopg2

        self.conn = psycopg2.connect(url)
        self.conn.autocommit = True
        self.sql, self.longest, self.stop = sql, 0.0, threading.Event()

    def run(self) -> None:
        with self.conn.cursor() as cur:
            while not self.stop.is_set():
                t = time.perf_counter()
                cur.execute(self.sql)
                self.longest = max(self.longest, time.perf_counter() - t)
                time.sleep(0.02)

    def done(self) -> float:
        self.stop.set()
        self.join()
        self.conn.close()
        return self.longest


def probed(url: str, what):
    reader = Probe(url, "SELECT count(*) FROM (SELECT 1 FROM results_measurement "
                        "WHERE finished_at > now() - interval '1 day' LIMIT 10) x")
    writer = Probe(url, "UPDATE results_measurement SET error = NULL WHERE id = (SELECT id FROM results_measurement "
                        "WHERE finished_at > now() - interval '1 day' LIMIT 1)")
    reader.start()
    writer.start()
    t = time.perf_counter()
    what()
    elapsed = time.perf_counter() - t
    return elapsed, reader.done(), writer.done()


def generate(rows: int, days: int) -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("INSERT INTO results_cluster (name, created) VALUES ('default', now()) "
                    "ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id")
        cluster = cur.fetchone()[0]
        cur.execute("INSERT INTO results_node (cluster_id, name, site, address, labels, first_seen, last_seen) "
                    "SELECT %s, 'n' || i, '', '', '{}', now(), now() FROM generate_series(0, 9) i", [cluster])
        cur.execute("INSERT INTO results_benchmark (cluster_id, namespace, name, uid, spec, thresholds, created, "
                    "updated) VALUES (%s, 'mesh', 'nightly', '', '{}', '{}', now(), now()) RETURNING id", [cluster])
        bench = cur.fetchone()[0]
        cur.execute("INSERT INTO results_run (benchmark_id, uid, name, state, counts) VALUES (%s, 'u', 'r', '', "
                    "'{}') RETURNING id", [bench])
        run = cur.fetchone()[0]
        cur.execute("SELECT min(id) FROM results_node")
        n0 = cur.fetchone()[0]
        cur.execute(f"""
            INSERT INTO results_measurement (id, run_id, benchmark_id, source_id, destination_id, protocol, streams,
                throughput_gbps, status, started_at, finished_at, ingested_at)
            SELECT gen_random_uuid(), {run}, {bench}, {n0} + i % 10, {n0} + (i + 1 + i / 10 % 9) % 10,
                   'xrootd-https', 1, 10 + i % 7, 'succeeded', t - interval '10 s', t, t
            FROM generate_series(1, {rows}) i,
                 LATERAL (SELECT now() - interval '1 second' * ({days} * 86400.0 * i / {rows})) s(t)""")
        cur.execute("ANALYZE results_measurement")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--days", type=int, default=180)
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    lines: list[str] = []
    server, base = start_postgres({"shared_buffers": "256MB", "maintenance_work_mem": "256MB",
                                   "max_wal_size": "4GB"})
    try:
        os.environ.update(DATABASE_URL=server.url, DJANGO_SETTINGS_MODULE="config.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", "results", "0019_storage_disk_mode", verbosity=0)
        t = time.perf_counter()
        generate(args.rows, args.days)
        lines.append(f"Generated {args.rows:,} measurements over {args.days} days (unpartitioned, as before "
                     f"0020) in {time.perf_counter() - t:.0f} s. Probes every 20 ms: a read of recent rows and an "
                     "update of one, each on its own connection.\n")

        from results import partitions

        start = time.perf_counter()
        upgrade = partitions.partition_table  # the migration's, with each step's time printed
        partitions.partition_table = lambda now: upgrade(
            now, log=lambda s: lines.append(f"- {time.perf_counter() - start:5.2f} s: {s}"))
        took, read, write = probed(server.url, lambda: call_command("migrate", "results",
                                                                   "0020_measurement_partitions", verbosity=0))
        lines.append(f"\n| step | took | a reader blocked at most | a writer blocked at most |\n|---|---|---|---|\n"
                     f"| upgrade (migrate 0020, in place) | {took:.1f} s | {read * 1000:.0f} ms | "
                     f"{write * 1000:.0f} ms |")
        worst = read

        from results import rollups

        t = time.perf_counter()
        today = datetime.now(UTC).date()
        rollups.roll_up(today - timedelta(days=args.days + 1), today)  # retire keeps what no rollup holds
        rolled = time.perf_counter() - t
        legacy = next(p for p in partitions.partitions() if p.name == partitions.LEGACY)
        result = []
        took, read, write = probed(server.url, lambda: result.append(partitions.retire(legacy)))
        r = result[0]
        lines.append(f"| drop of the old table once past the age (retire: {r.dropped:,} dropped, {r.moved} kept "
                     f"moved out) | {took:.1f} s | {read * 1000:.0f} ms | {write * 1000:.0f} ms |")
        lines.append(f"\n(Rolling up its {args.days} days first: {rolled:.1f} s.) Goal: a reader blocked < "
                     f"{GOAL_MS} ms: {'met' if max(worst, read) * 1000 < GOAL_MS else 'MISSED'}. Load average at the "
                     f"end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores).")
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    return publish("partitions", "\n".join(lines), max(worst, read) * 1000 < GOAL_MS)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""make bench-dashboard: the dashboard at archive scale, on a PostgreSQL this script starts itself.

Generates (with INSERT ... SELECT over generate_series, in the database) 100 nodes × 90 days × 2 runs/day ×
4 protocol/stream settings (xrootd-https ×1, xrootd-https ×8, iperf3, rtt): 9 900 pairs each, ~7.1 M
measurements at --scale 1 (--scale 0.1 keeps 100 nodes and 9 days). Serves the dashboard with gunicorn on
loopback and times over HTTP: the grid API (latest; median over 7 days), the 100×100 grid page, a pair's
90-day history, and bulk ingest through POST /api/v1/ingest/ (batches of 5 000). Writes the numbers into
BENCHMARKS.md between <!-- bench-dashboard:start --> and <!-- bench-dashboard:end -->.
Goals: grid p95 < 100 ms (API, one and every setting; the HTML page), the 7-day median grid p95 < 150 ms, the
pair history p95 < 100 ms, ingest >= 5 000 measurements/s; the reads are timed while the loss mesh of the 100 nodes
delivers its summaries to the same server at its rate (LossFeed). --scales 0.1,3 also times the median grid at those
scales in the same run (the archive grown from the smallest), to show it flat with the archive's size.
With --baseline REF (default: BASELINE) the same reads are timed side by side against the dashboard of that
commit (a git worktree, a second gunicorn on the same database), in alternating blocks, and the new/old ratios
are written too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "dashboard"
sys.path[:0] = [str(REPO), str(DASHBOARD)]

from tpcmesh_lab.postgres import free_port, start_postgres  # noqa: E402

NODES = 100  # per cluster
WORKERS = 2  # gunicorn's


def cluster_name(c: int, clusters: int) -> str:
    """One cluster: the dashboard's default cluster (as an unfederated install has); several: c00, c01, ..."""
    return "default" if clusters == 1 else f"c{c:02d}"
SETTINGS = [("xrootd-https", 1), ("xrootd-https", 8), ("iperf3", 1), ("rtt", None)]
GRID_GOAL_MS, MEDIAN_GOAL_MS, HISTORY_GOAL_MS, INGEST_GOAL = 100.0, 150.0, 100.0, 5000.0
BASELINE = "11c049e"  # the grid before the covering index, the database-side window aggregates and the page's loop
# The requests judged against the grid goal (p95): the API for one setting and for every setting, and the page.
GRID_ONE = "grid API, latest (100×100, one setting)"
GRID_EVERY = "grid API, latest (100×100, every setting)"
GRID_PAGE = "grid page, HTML 100×100"
GRID_MEDIAN = "grid API, median over 7 days"
PROBLEMS_PAGE = "problems page, HTML"
CHANGES_API = "changes API, a benchmark's newest 100"
CHANGES_NODE = "changes API, one node's"
HISTORY = "pair history API (every day of the archive, both directions)"
COMBINED = "combined grid API, every cluster ({n} nodes, one setting)"
WATCH_GOAL_MS = 300.0
START, END = "<!-- bench-dashboard:start -->", "<!-- bench-dashboard:end -->"
FEDERATION_START = "<!-- bench-dashboard-federation:start -->"
FEDERATION_END = "<!-- bench-dashboard-federation:end -->"


def log(msg: str) -> None:
    print(f"{datetime.now():%H:%M:%S} {msg}", flush=True)


NEWEST_HOUR = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)  # the newest run's hour, for every stage


def generate(days: int, clusters: int = 1, after: int = 0) -> int:
    """Fill the archive in the database itself; returns the number of measurements. With clusters > 1 (a
    federation) every cluster has the benchmark bench/mesh of its own NODES nodes, named alike in each.
    ``after``: the archive already has the newest ``after`` days (an earlier, smaller scale of this run); only
    the older days up to ``days`` are added, so the newest days (every window read) stay the same rows."""
    from django.db import connection
    from results.celljson import fill_sql
    from results.models import Benchmark, Cluster, Node, Run

    end = NEWEST_HOUR
    benches = []
    for c in range(clusters):
        cluster = Cluster.objects.get_or_create(name=cluster_name(c, clusters))[0]
        if after:
            bench = Benchmark.objects.get(cluster=cluster, namespace="bench", name="mesh")
        else:
            bench = Benchmark.objects.create(cluster=cluster, namespace="bench", name="mesh", uid=f"bench-uid-{c}",
                                             thresholds={"goodGbps": 30, "warnGbps": 10})
            nodes = Node.objects.bulk_create([
                Node(cluster=cluster, name=f"dtn{i:03d}", site=f"site{i % 17:02d}",
                     address=f"10.{c}.{i // 250}.{i % 250}", nic_speed_gbps=100, loopback_gbps=40 + i % 20)
                for i in range(NODES)
            ])
            bench.nodes.set(nodes)
        # run j started j half-days before the end (j = 1 the newest)
        Run.objects.bulk_create([
            Run(benchmark=bench, uid=f"run-{c}-{j}", name=f"mesh-{j}", state="Succeeded",
                started_at=end - timedelta(hours=12 * j),
                finished_at=end - timedelta(hours=12 * j) + timedelta(minutes=50))
            for j in range(2 * after + 1, 2 * days + 1)])
        benches.append(bench)
    settings_sql = ", ".join(f"('{p}', {s if s is not None else 'NULL'}::smallint)" for p, s in SETTINGS)
    with connection.cursor() as cur:
        # Secondary indexes are rebuilt after the load (much faster than maintaining them row by row).
        cur.execute("""SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'results_measurement'
                       AND indexname NOT LIKE '%%_pkey'""")
        indexes = cur.fetchall()
        for name, _ in indexes:
            cur.execute(f'DROP INDEX "{name}"')
        t0 = time.perf_counter()
        for k, run in enumerate(Run.objects.filter(benchmark__in=benches, started_at__lt=end - timedelta(days=after))
                                .select_related("benchmark").order_by("started_at", "uid")):
            cur.execute(
                f"""
                INSERT INTO results_measurement (id, run_id, benchmark_id, source_id, destination_id, protocol,
                    streams, concurrency, file_size, file_count, total_bytes, throughput_gbps, aggregate_gbps,
                    rtt_ms, status, error, started_at, finished_at, ingested_at)
                SELECT gen_random_uuid(), %(run)s, %(bench)s, s.id, d.id, st.protocol, st.streams, 1,
                    CASE WHEN st.protocol = 'rtt' THEN NULL ELSE 1000000000 END,
                    CASE WHEN st.protocol = 'rtt' THEN NULL ELSE 11 END,
                    CASE WHEN st.protocol = 'rtt' THEN NULL ELSE 11000000000 END,
                    g.gbps, g.gbps * 0.9,
                    CASE WHEN st.protocol = 'rtt' THEN 0.2 + (s.id + d.id) %% 90 + random() ELSE NULL END,
                    CASE WHEN f.failed THEN 'failed' ELSE 'succeeded' END,
                    CASE WHEN f.failed THEN 'connection reset by peer' ELSE NULL END,
                    %(t)s, %(t)s + interval '5 minutes', now()
                FROM results_node s JOIN results_node d ON d.cluster_id = s.cluster_id
                CROSS JOIN (VALUES {settings_sql}) st(protocol, streams)
                CROSS JOIN LATERAL (SELECT random() + 0 * s.id * d.id < 0.01 AS failed) f  -- correlated: once per row
                CROSS JOIN LATERAL (SELECT CASE WHEN st.protocol = 'rtt' OR f.failed THEN NULL
                    ELSE (2 + (s.id * 7 + d.id * 13) %% 45) * (CASE WHEN st.streams = 8 THEN 1.3 ELSE 1 END)
                         + random() * 4 END AS gbps) g
                WHERE s.id <> d.id AND s.cluster_id = %(cluster)s
                """,
                {"run": run.id, "bench": run.benchmark_id, "t": run.started_at,
                 "cluster": run.benchmark.cluster_id},
            )
            if k % (20 * clusters) == 0:
                log(f"Generated run {k + 1}/{2 * (days - after) * clusters}")
        log(f"Loaded measurements in {time.perf_counter() - t0:.0f} s; rebuilding {len(indexes)} indexes")
        for _, definition in indexes:
            # the partitioned table's definitions read "ON ONLY" (the parent alone, left invalid): build them on
            # every partition, as CREATE INDEX on the parent does
            cur.execute(definition.replace(" ON ONLY ", " ON "))
        if after:
            cur.execute("VACUUM ANALYZE")
            cur.execute("SELECT count(*) FROM results_measurement")
            return cur.fetchone()[0]
        # The grid's summary (services.ingest keeps it on ingest): every run measures every cell, so the
        # newest cell is the newest run's row.
        cur.execute("""
            INSERT INTO results_pairlatest (benchmark_id, protocol, streams, source_id, destination_id,
                                            measurement_id, finished_at, throughput_gbps, rtt_ms, status, error)
            SELECT DISTINCT ON (benchmark_id, protocol, COALESCE(streams, 0), source_id, destination_id)
                   benchmark_id, protocol, COALESCE(streams, 0), source_id, destination_id, id, finished_at,
                   throughput_gbps, rtt_ms, status, left(error, 200)
            FROM results_measurement WHERE finished_at >= %s
            ORDER BY benchmark_id, protocol, COALESCE(streams, 0), source_id, destination_id, finished_at DESC
        """, [end - timedelta(days=1)])
        cur.execute(fill_sql())  # the cells' stored JSON, as ingest writes it
        cur.execute("INSERT INTO results_analysismark (cell_id, analysed_at) "  # as if analysed on ingest
                    "SELECT id, finished_at FROM results_pairlatest")
        # step changes: one in about 2 % of the cells (the analysis' own speed is timed apart, analysis_costs)
        cur.execute("""
            INSERT INTO results_change (benchmark_id, source_id, destination_id, protocol, streams, metric,
                                        measurement_id, at, before, after, worse, detected_at, runs_to_detect)
            SELECT p.benchmark_id, p.source_id, p.destination_id, p.protocol, p.streams,
                   CASE WHEN p.protocol = 'rtt' THEN 'rtt_ms' ELSE 'throughput_gbps' END, p.measurement_id,
                   p.finished_at, 20, 14, true, p.finished_at, 2
            FROM results_pairlatest p WHERE random() < 0.02
        """)
    # the limit model's answers on the newest cells, as the analysis stores them after ingest: the grids join them
    from results.diagnosis.cells import diagnose_benchmark

    t0 = time.perf_counter()
    diagnosed = sum(diagnose_benchmark(bench) for bench in benches)
    log(f"Diagnosed {diagnosed:,} cells in {time.perf_counter() - t0:.0f} s")
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
        # the load's dirty pages written now: else the checkpoint after it runs beside the first timed reads (the
        # 7-day median timed at the first scale cost 184 ms of server CPU per request, 117 at the next)
        cur.execute("CHECKPOINT")
        cur.execute("SELECT count(*) FROM results_measurement")
        return cur.fetchone()[0]


def analysis_costs(cells: int = 300) -> tuple[float, float, int]:
    """ms per cell of change detection (its newest 40 runs read and tested), seconds for the problem rules over
    the whole 100-node benchmark, and how many problems they found."""
    from django.utils import timezone
    from results import analysis
    from results.models import Benchmark, PairLatest

    sample = list(PairLatest.objects.exclude(protocol="rtt").order_by("?")[:cells])
    t0 = time.perf_counter()
    histories = analysis._histories(sample)  # as detect_changes reads them: one statement per batch
    for cell in sample:
        analysis.detect_cell(cell, timezone.now(), histories[cell.id])
    per_cell = (time.perf_counter() - t0) / len(sample) * 1000
    t0 = time.perf_counter()
    found = analysis.evaluate_problems(Benchmark.objects.filter(namespace="bench", name="mesh").order_by("uid")[0])
    return per_cell, time.perf_counter() - t0, len(found)


def tree_cpu_seconds(*roots: int) -> float:
    """User+system CPU seconds of these processes and their descendants (from /proc): the server side's cost,
    which unlike wall time does not grow with the machine's load from other work."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # utime + stime + cutime + cstime: a child that exited and was reaped (a PostgreSQL backend
            # closing its connection) moves its CPU into its parent's cutime/cstime, so the sum keeps it.
            stats[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    wanted, frontier = set(roots), list(roots)
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in wanted:
                wanted.add(pid)
                frontier.append(pid)
    return sum(stats[pid][1] for pid in wanted if pid in stats)


def get(url: str, headers: dict[str, str] | None = None) -> tuple[float, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    return (time.perf_counter() - t0) * 1000, body


SERVER_PIDS: list[int] = []  # gunicorn master and postmaster, set in main()


def warm(url: str) -> None:
    """Every gunicorn worker answers the request before it is timed: concurrent requests, so that each worker's
    first (its database connection, Django's first-use caches) is not a timed one. One request warmed one worker;
    the other's first answer then fell inside the 7-day median's timed requests (its p95)."""
    for _ in range(2):
        threads = [threading.Thread(target=get, args=(url,)) for _ in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def timings(url: str, n: int, pids: list[int] | None = None) -> dict[str, float]:
    pids = pids or SERVER_PIDS
    warm(url)
    cpu0 = tree_cpu_seconds(*pids)
    ms = sorted(get(url)[0] for _ in range(n))
    cpu_ms = (tree_cpu_seconds(*pids) - cpu0) * 1000 / n
    return summary(ms, cpu_ms)


def summary(ms: list[float], cpu_ms: float) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50": statistics.median(ms), "p95": ms[min(len(ms) - 1, int(round(0.95 * len(ms))) - 1)], "n": len(ms),
            "cpu": cpu_ms}


def side_by_side(urls: dict[str, str], n: int, new: tuple[str, list[int]], old: tuple[str, list[int]],
                 blocks: int = 4) -> tuple[dict[str, float], dict[str, float]]:
    """The same request against the new and the old server, in alternating blocks (so load from elsewhere on the
    machine falls on both); each server's CPU (its gunicorn and the PostgreSQL it is alone to use meanwhile)."""
    got: dict[str, tuple[list[float], float]] = {"new": ([], 0.0), "old": ([], 0.0)}
    for which, (base, _) in (("new", new), ("old", old)):
        warm(base + urls[which])
    per_block = max(1, n // blocks)
    for _ in range(blocks):
        for which, (base, pids) in (("new", new), ("old", old)):
            cpu0 = tree_cpu_seconds(*pids)
            ms = [get(base + urls[which])[0] for _ in range(per_block)]
            times, cpu = got[which]
            got[which] = (times + ms, cpu + tree_cpu_seconds(*pids) - cpu0)
    return tuple(summary(t, cpu * 1000 / len(t)) for t, cpu in (got["new"], got["old"]))  # type: ignore[return-value]


def comparable(grid_body: bytes) -> list[dict]:
    """A grid's cells without their age (the two servers answer a moment apart), values to 12 digits (a median
    computed by PostgreSQL and by Python may differ in the last bit), in one order."""
    cells = [{k: (float(f"{v:.12g}") if k == "value" and v is not None else v) for k, v in c.items()
              if k != "age_seconds"} for c in json.loads(grid_body)["cells"]]
    return sorted(cells, key=lambda c: (c["source"], c["destination"], c["streams"]))


def baseline_checkout(ref: str) -> Path:
    """The dashboard of commit ``ref`` in a temporary git worktree (removed by the caller)."""
    where = Path(tempfile.mkdtemp(prefix="tpcmesh-bench-baseline-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), ref], check=True,
                   capture_output=True)
    return where


def start_gunicorn(dashboard: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "config.wsgi", "-b", f"127.0.0.1:{port}", "-w", str(WORKERS),
         "--timeout", "300", "--log-level", "warning"], cwd=dashboard, env={**env, "PYTHONPATH": str(dashboard)})
    base = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            get(f"{base}/healthz")
            return proc, base
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the dashboard in {dashboard} did not start")


def make_batch(b: int, size: int, tag: str) -> bytes:
    end = datetime.now(UTC)
    names = [f"dtn{i:03d}" for i in range(NODES)]
    pairs = [(s, d) for s in names for d in names if s != d]
    ms = []
    for k in range(size):
        s, d = pairs[(b * size + k) % len(pairs)]
        t = end - timedelta(minutes=b)
        ms.append({"id": str(uuid.uuid4()), "source": s, "destination": d, "protocol": "xrootd-https",
                   "streams": 8, "concurrency": 11, "file_size": 1_000_000_000, "file_count": 11,
                   "total_bytes": 11_000_000_000, "throughput_gbps": 20.5, "aggregate_gbps": 18.1,
                   "peak_gbps": 25.0, "rtt_ms": 12.0, "status": "succeeded", "error": None, "checksum": "ok",
                   "destination_kind": "store", "started_at": (t - timedelta(seconds=40)).isoformat(),
                   "finished_at": t.isoformat()})
    return json.dumps({"benchmark": {"namespace": "bench", "name": f"ingest-{tag}"},
                       "run": {"uid": f"ingest-{tag}-{b}", "name": f"ingest-{tag}-{b}"},
                       "measurements": ms}).encode()


def post_rate(url: str, key: str, bodies: list[bytes], clients: int,
              count: Callable[[dict], int]) -> tuple[float, int, float]:
    """Items/s POSTed to `url` by `clients` concurrent posters: by wall time, and per second of server CPU
    (gunicorn + PostgreSQL). `count` checks a response and says how many items it took."""
    from concurrent.futures import ThreadPoolExecutor

    def post(body: bytes) -> int:
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Authorization": f"Token {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return count(json.loads(r.read()))

    t0, cpu0 = time.perf_counter(), tree_cpu_seconds(*SERVER_PIDS)
    with ThreadPoolExecutor(clients) as pool:
        total = sum(pool.map(post, bodies))
    rate = total / (time.perf_counter() - t0)
    return rate, total, total / max(1e-9, tree_cpu_seconds(*SERVER_PIDS) - cpu0)


LOSS_RATE = NODES * (NODES - 1) / 60  # summaries/s: every directed pair's one-minute period (~165/s at 100 nodes)


class LossFeed:
    """The loss mesh's summaries of one cluster's NODES agents at their rate (LOSS_RATE), POSTed to
    /api/v1/loss/ingest/ in one batch a second from a thread, as the agents' senders deliver them while people read
    the grids: each pair's next minute in turn. Counts what was accepted and what failed (a failure is not retried:
    the figure is whether the dashboard keeps up)."""

    def __init__(self, base: str, key: str, cluster: str, start: datetime):
        from tests.support.dashboard import loss_summary

        self.summary, self.url, self.key, self.cluster, self.start = loss_summary, base, key, cluster, start
        names = [f"dtn{i:03d}" for i in range(NODES)]
        self.pairs = [(s, d) for s in names for d in names if s != d]
        self.accepted = self.failed = self.sent = 0
        self.late = 0.0  # the worst lag behind the schedule, s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loss-feed", daemon=True)

    def _batch(self, n: int) -> bytes:
        items = [self.summary(*self.pairs[i % len(self.pairs)],
                              self.start + timedelta(minutes=i // len(self.pairs)))
                 for i in range(self.sent, self.sent + n)]
        self.sent += n
        return json.dumps({"cluster": self.cluster, "summaries": items}).encode()

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            due = round(LOSS_RATE * (time.monotonic() - t0)) - self.sent
            if due > 0:
                req = urllib.request.Request(f"{self.url}/api/v1/loss/ingest/", data=self._batch(due),
                                             method="POST", headers={"Authorization": f"Token {self.key}",
                                                                     "Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=60) as r:
                        self.accepted += json.loads(r.read())["accepted"]
                except (OSError, ValueError, KeyError):
                    self.failed += due
            self.late = max(self.late, time.monotonic() - t0 - self.sent / LOSS_RATE)
            self._stop.wait(1.0)
        self.seconds = time.monotonic() - t0

    def __enter__(self) -> LossFeed:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def rate(self) -> float:
        return self.accepted / self.seconds


def loss_feed_cost(base: str, key: str, cluster: str, start: datetime, seconds: float = 30.0) -> tuple[float, int]:
    """The feed alone for ``seconds``: the server CPU it costs per second of feeding (ms/s) and what it delivered."""
    cpu0 = tree_cpu_seconds(*SERVER_PIDS)
    with LossFeed(base, key, cluster, start) as feed:
        time.sleep(seconds)
    return (tree_cpu_seconds(*SERVER_PIDS) - cpu0) * 1000 / feed.seconds, feed.accepted


def drain_analysis(timeout: float = 1800.0) -> tuple[float, float]:
    """Wait for the dashboard's background analysis (change detection, diagnosis, problem rules) to finish what
    ingest left it: every cell marked seen, then the server's CPU at rest. Returns the seconds waited and the
    server CPU seconds spent meanwhile (the analysis' cost, apart from the ingest requests')."""
    from results import analysis

    t0, cpu0 = time.perf_counter(), tree_cpu_seconds(*SERVER_PIDS)
    while analysis._pending(0) and time.perf_counter() - t0 < timeout:
        time.sleep(0.5)
    last = tree_cpu_seconds(*SERVER_PIDS)
    while time.perf_counter() - t0 < timeout:  # the round's diagnosis and rules after the last mark
        time.sleep(1.0)
        now = tree_cpu_seconds(*SERVER_PIDS)
        if now - last < 0.05:
            break
        last = now
    return time.perf_counter() - t0, tree_cpu_seconds(*SERVER_PIDS) - cpu0


def ingest_rate(base: str, key: str, batches: int, size: int, clients: int) -> tuple[float, int, float]:
    """Measurements/s through POST /api/v1/ingest/ (post_rate)."""
    def created(result: dict) -> int:
        assert result["created"] == size, result
        return size

    bodies = [make_batch(b, size, f"c{clients}") for b in range(batches)]
    return post_rate(f"{base}/api/v1/ingest/", key, bodies, clients, created)


def write_section(text: str, start: str = START, end: str = END) -> None:
    path = REPO / "BENCHMARKS.md"
    current = "# Benchmarks\n\nWritten by `make bench-*`; each owns its section.\n"
    if path.exists():
        current = path.read_text()
    block = f"{start}\n{text.rstrip()}\n{end}"
    if start in current and end in current:
        head, rest = current.split(start, 1)
        current = head + block + rest.split(end, 1)[1]
    else:
        current = current.rstrip() + "\n\n" + block + "\n"
    path.write_text(current)


def start_archive():
    """PostgreSQL tuned for a bulk load (started here), Django set up on it and migrated: (server, its directory).
    The caller stops the server."""
    server, base_dir = start_postgres({"shared_buffers": "512MB", "maintenance_work_mem": "512MB",
                                       "max_wal_size": "4GB", "work_mem": "64MB", "autovacuum": "off"})
    try:
        os.environ["DATABASE_URL"] = server.url
        os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    except BaseException:
        server.stop()
        raise
    return server, base_dir


def days_of(scale: float) -> int:
    return max(1, round(90 * scale))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the 90 days to generate (default 1)")
    ap.add_argument("--requests", type=int, default=60, help="timed requests per read endpoint")
    ap.add_argument("--ingest-batches", type=int, default=8, help="ingest batches of 5 000 measurements per run")
    ap.add_argument("--baseline", default=BASELINE, help="commit to time side by side ('' for none)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    ap.add_argument("--scales", default="",
                    help="comma-separated further scales (e.g. 0.1,3) at which the 7-day median grid is timed too, in "
                         "the same run: the archive grows from the smallest to the largest, its newest days (every "
                         "window) the same rows, so the rows show how the windowed read depends on the archive's size")
    ap.add_argument("--clusters", type=int, default=1,
                    help="a federation: this many clusters of NODES nodes each in one archive (reads ask for one "
                         "cluster's, plus the combined grid); written to its own section")
    args = ap.parse_args()
    if args.clusters > 1 and args.baseline:
        ap.error("--clusters needs --baseline '' (the baseline predates federation)")
    days = days_of(args.scale)
    try:
        others = sorted({float(x) for x in args.scales.split(",") if x.strip()} - {args.scale})
    except ValueError:
        ap.error(f"--scales must be numbers separated by commas, not {args.scales!r}")
    if any(days_of(s) < 7 for s in [args.scale, *others]):
        ap.error("every scale needs at least 7 days (0.08 or more) for the 7-day window")

    server, base_dir = start_archive()
    servers: list[subprocess.Popen] = []
    old_tree = None
    by_scale: dict[float, tuple[int, int, dict[str, float]]] = {}  # scale: days, measurements, median grid
    try:
        from results import services

        env = {**os.environ, "TPCMESH_DASHBOARD_MAX_BODY_BYTES": str(64 << 20),
               "TPCMESH_DASHBOARD_SECRET_KEY": secrets.token_urlsafe(50)}
        gunicorn, base = start_gunicorn(DASHBOARD, env)
        servers.append(gunicorn)
        postmaster = int((server.datadir / "postmaster.pid").read_text().split()[0])
        SERVER_PIDS[:] = [gunicorn.pid, postmaster]
        old: tuple[str, list[int]] | None = None
        if args.baseline:
            old_tree = baseline_checkout(args.baseline)
            old_server, old_base = start_gunicorn(old_tree / "dashboard", env)
            servers.append(old_server)
            old = (old_base, [old_server.pid, postmaster])
            log(f"Baseline {args.baseline} serving from {old_tree}")
        # a federation's reads: one cluster's benchmark (?cluster=) and nodes (cluster:node), and the combined grid
        one = cluster_name(3 % args.clusters, args.clusters)
        of = f"&cluster={one}" if args.clusters > 1 else ""
        ref = f"{one}:" if args.clusters > 1 else ""
        grid = f"/api/v1/grid/?benchmark=bench/mesh&protocol=xrootd-https&streams=8{of}"
        # as many as the other reads: with 15, the p95 was the second-slowest request, and one that waited for a
        # core (p50 101 ms, p95 160 ms at the same 109 ms of server CPU per request) decided the row
        median = (grid + "&mode=median&window=7d", args.requests)
        gen_s = 0.0
        done = 0  # days in the archive so far

        def grow(scale: float) -> int:
            """The archive at ``scale`` (its older days added); the median grid timed on it."""
            nonlocal gen_s, done
            log(f"Generating {days_of(scale) - done} more days × 2 runs × {len(SETTINGS)} settings × "
                f"{NODES * (NODES - 1)} pairs (scale {scale:g})")
            t0 = time.perf_counter()
            count = generate(days_of(scale), args.clusters, after=done)
            gen_s += time.perf_counter() - t0
            done = days_of(scale)
            log(f"Generated {count:,} measurements in {gen_s:.0f} s so far")
            by_scale[scale] = (done, count, timings(base + median[0], median[1]))
            log(f"Scale {scale:g}: {GRID_MEDIAN} p95 {by_scale[scale][2]['p95']:.1f} ms")
            return count

        for scale in (s for s in others if s < args.scale):
            grow(scale)
        count = grow(args.scale)
        _, key = services.create_api_token("bench", write=True)
        detect_ms, rules_s, problem_count = analysis_costs()
        log(f"Change detection {detect_ms:.1f} ms/cell; problem rules {rules_s:.1f} s, {problem_count} problems")
        reads = {
            GRID_ONE: (grid, args.requests),
            GRID_EVERY: (f"/api/v1/grid/?benchmark=bench/mesh&protocol=xrootd-https{of}", args.requests),
            GRID_MEDIAN: median,
            GRID_PAGE: (f"/grid/bench/mesh/?protocol=xrootd-https{of}", args.requests // 2),
            PROBLEMS_PAGE: (f"/problems/bench/mesh/?{of[1:]}", args.requests // 2),
            CHANGES_API: (f"/api/v1/changes/?benchmark=bench/mesh{of}", args.requests),
            CHANGES_NODE: (f"/api/v1/changes/?benchmark=bench/mesh&node=dtn003{of}", args.requests),
            HISTORY:
                (f"/api/v1/pairs/history/?source={ref}dtn003&destination={ref}dtn042&benchmark=bench/mesh{of}",
                 args.requests),
        }
        if args.clusters > 1:
            reads[COMBINED.format(n=args.clusters * NODES)] = (
                "/api/v1/grid/?benchmark=bench/mesh&protocol=xrootd-https&streams=8", max(6, args.requests // 10))
        results: dict[str, dict[str, float]] = {}
        baseline: dict[str, dict[str, float]] = {}
        new_only = {PROBLEMS_PAGE, CHANGES_API, CHANGES_NODE}  # the baseline has no such pages
        feed_cost, _ = loss_feed_cost(base, key, one, NEWEST_HOUR - timedelta(days=1))
        log(f"Loss feed alone: {feed_cost:.0f} ms of server CPU per second")
        with LossFeed(base, key, one, NEWEST_HOUR) as feed:  # the loss mesh delivers while the grids are read
            for name, (path, n) in reads.items():
                if old is None or name in new_only:
                    results[name] = timings(base + path, n)
                else:
                    results[name], baseline[name] = side_by_side({"new": path, "old": path}, n,
                                                                 (base, SERVER_PIDS), old)
                log(f"{name}: p95 {results[name]['p95']:.1f} ms" +
                    (f" (baseline {baseline[name]['p95']:.1f} ms)" if name in baseline else ""))
        log(f"Loss feed during the reads: {feed.accepted:,} accepted in {feed.seconds:.0f} s ({feed.rate:.0f}/s), "
            f"{feed.failed} failed, at most {feed.late:.1f} s late")
        _, body = get(base + grid)
        assert len(json.loads(body)["cells"]) == NODES * (NODES - 1)
        if old is not None:  # the same cells from both (values and states; ages differ by the time between)
            _, old_body = get(old[0] + grid + "&mode=median&window=7d")
            _, new_body = get(base + grid + "&mode=median&window=7d")
            new_cells, old_cells = comparable(new_body), comparable(old_body)
            # an older baseline's cells have fewer fields (no setting keys, no diagnosis): compare the ones it has
            shared = set(old_cells[0]) & set(new_cells[0]) if old_cells and new_cells else set()
            new_cells, old_cells = ([{k: c[k] for k in sorted(shared)} for c in cells] for cells in (new_cells,
                                                                                                     old_cells))
            if new_cells != old_cells:
                differ = [(n, o) for n, o in zip(new_cells, old_cells, strict=False) if n != o][:3]
                raise AssertionError(f"the new and the old median grids differ ({len(new_cells)} and "
                                     f"{len(old_cells)} cells); the first that differ, new then old: "
                                     + "; ".join(f"{n} | {o}" for n, o in differ))
        load_reads = os.getloadavg()[0]
        log("Timed reads; timing ingest")
        drain_analysis()  # the reads' era at rest
        rate1, ingested1, per_cpu1 = ingest_rate(base, key, args.ingest_batches, 5000, 1)
        drained1 = drain_analysis()
        rate2, ingested2, per_cpu2 = ingest_rate(base, key, args.ingest_batches, 5000, 2)
        drained2 = drain_analysis()
        log(f"Ingest {rate1:,.0f}/s and {rate2:,.0f}/s; analysis after it {drained1[0]:.0f} s and {drained2[0]:.0f} s")
        load_ingest = os.getloadavg()[0]
        for scale in (s for s in others if s > args.scale):
            grow(scale)
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=30)
        server.stop()
        shutil.rmtree(base_dir, ignore_errors=True)
        if old_tree is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old_tree)],
                           capture_output=True)

    rate = max(rate1, rate2)
    # the loss mesh kept up: everything due delivered (the last second's batch may be in flight at the end)
    feed_ok = feed.failed == 0 and feed.accepted >= LOSS_RATE * (feed.seconds - 2)
    goals = ((GRID_ONE, GRID_GOAL_MS), (GRID_EVERY, GRID_GOAL_MS), (GRID_PAGE, GRID_GOAL_MS),
             (GRID_MEDIAN, MEDIAN_GOAL_MS), (HISTORY, HISTORY_GOAL_MS), (PROBLEMS_PAGE, WATCH_GOAL_MS),
             (CHANGES_API, WATCH_GOAL_MS))
    verdicts = "; ".join(f"{name} < {goal:.0f} ms **{'met' if results[name]['p95'] < goal else 'NOT met'}** "
                         f"({results[name]['p95']:.1f} ms)" for name, goal in goals)
    if baseline:
        table = ["| request | p50 ms | p95 ms | server CPU ms/request | n | baseline p95 ms | baseline CPU ms "
                 "| new / old p95 | new / old CPU |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        table += [f"| {name} | {r['p50']:.1f} | {r['p95']:.1f} | {r['cpu']:.1f} | {r['n']} | "
                  + (f"{baseline[name]['p95']:.1f} | {baseline[name]['cpu']:.1f} | "
                     f"{r['p95'] / baseline[name]['p95']:.2f} | {r['cpu'] / baseline[name]['cpu']:.2f} |"
                     if name in baseline else "– | – | – | – |")
                  for name, r in results.items()]
        how = (f"Side by side in this run with the dashboard of commit `{args.baseline}` (a git worktree, a second "
               "gunicorn on the same database), each request in alternating blocks of the two servers; both answer "
               "the same median grid (checked).")
    else:
        table = ["| request | p50 ms | p95 ms | server CPU ms/request | n |", "|---|---:|---:|---:|---:|"]
        table += [f"| {name} | {r['p50']:.1f} | {r['p95']:.1f} | {r['cpu']:.1f} | {r['n']} |"
                  for name, r in results.items()]
        how = "No baseline (--baseline '')."
    lines = [
        "## Dashboard (`make bench-dashboard`)" if args.clusters == 1 else
        f"## Dashboard for a federation: {args.clusters} clusters × {NODES} nodes (`make bench-dashboard "
        f"CLUSTERS={args.clusters}`)",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node() and 'this machine'}: {os.cpu_count()} cores, "
        f"PostgreSQL from Debian started by the script, gunicorn with {WORKERS} workers on loopback, timed over HTTP. "
        f"Scale {args.scale:g}: {NODES} nodes{f' in each of {args.clusters} clusters' if args.clusters > 1 else ''}"
        f", {days} days, 2 runs/day, {len(SETTINGS)} protocol/stream settings "
        f"= **{count:,} measurements** (generated in {gen_s:.0f} s). {how}"
        + (f" Each cluster has its own benchmark bench/mesh and nodes dtn000-dtn{NODES - 1:03d} (the names repeat "
           f"across clusters, as they do in a federation); the reads ask for cluster {one}'s (?cluster=, nodes as "
           "cluster:node) except the combined grid, every cluster's nodes in one grid (no goal: it is "
           f"{args.clusters} times the cells)." if args.clusters > 1 else ""),
        "",
        *table,
        "",
        f"While these reads were timed the loss mesh of cluster {one}'s {NODES} agents was delivered beside them at "
        f"its rate, to the same server (POST /api/v1/loss/ingest/, one batch a second, each pair's one-minute "
        f"summary): **{feed.accepted:,} summaries in {feed.seconds:.0f} s ({feed.rate:.0f}/s of the "
        f"{LOSS_RATE:.0f}/s due)**, {feed.failed} failed, at most {feed.late:.1f} s behind its schedule. Fed alone "
        f"for 30 s it cost {feed_cost:.0f} ms of server CPU per second (ingest, and the loss rules at most once a "
        "minute), which the CPU column includes.",
        "",
        "Server CPU = user+system time of gunicorn and PostgreSQL per request: what a request costs regardless of",
        "other load on the machine (wall-clock p50/p95 include waiting for a core). The latest grid reads one "
        "summary row per cell (PairLatest); a standard window's mean/median cells are kept per range and read "
        "while a fingerprint of the window's rows (an index-only scan of the covering index meas_window: "
        "benchmark, protocol, streams, finished_at, including the pair, value and status) still matches, else "
        "aggregated again from those rows (results.windows), so a read costs the window's index entries and one "
        "row per cell, whatever the archive's length.",
        "",
        *(["The 7-day median grid as the archive grows (in this run: the older days added to the same newest "
            "ones, so every window holds the same rows; the rows above are at scale "
            f"{args.scale:g}):", "",
            "| scale | days | measurements | p50 ms | p95 ms | server CPU ms/request | n |",
            "|---:|---:|---:|---:|---:|---:|---:|",
            *(f"| {s:g} | {d} | {n:,} | {r['p50']:.1f} | {r['p95']:.1f} | {r['cpu']:.1f} | {r['n']} |"
              for s, (d, n, r) in sorted(by_scale.items())), ""] if len(by_scale) > 1 else []),
        f"Watching over time: about 2 % of the cells carry a stored step change; the problem rules over the whole "
        f"benchmark (every setting, {NODES} nodes) took {rules_s:.1f} s and found {problem_count} problems (the "
        f"generated 1 % of random failures make one-direction problems); change detection costs {detect_ms:.1f} ms "
        "per cell (its newest 40 runs read and tested), i.e. a run of this mesh keeps one core of the background "
        f"thread busy for about {detect_ms * NODES * (NODES - 1) * (len(SETTINGS) - 1) / 1000:.0f} s after ingest.",
        "",
        "Bulk ingest through `POST /api/v1/ingest/` (batches of 5 000 measurements without per-file rows, each "
        "checked against the JSON schema and by its serializer compiled (results.api.compiled), stored in one "
        "transaction with COPY):",
        f"one client **{rate1:,.0f} measurements/s** ({ingested1:,}); two concurrent clients (the two gunicorn "
        f"workers) **{rate2:,.0f} measurements/s** ({ingested2:,}). Per second of server CPU: "
        f"{per_cpu1:,.0f} and {per_cpu2:,.0f} measurements, i.e. about {min(per_cpu1, per_cpu2) * os.cpu_count():,.0f}"
        f"/s when the {os.cpu_count()} cores are free for the dashboard. That is the requests' CPU: "
        f"{1e6 / per_cpu1:,.0f} and {1e6 / per_cpu2:,.0f} µs per measurement. The background analysis of the cells "
        "they moved (change detection, the limit model, the problem rules; waited for after each, so it does not "
        f"fall on the next) then took {drained1[0]:.0f} s and {drained2[0]:.0f} s, "
        f"{drained1[1] * 1e6 / ingested1:,.0f} and {drained2[1] * 1e6 / ingested2:,.0f} µs of server CPU per "
        "measurement.",
        "",
        f"1-minute load average after the reads {load_reads:.1f}, after ingest {load_ingest:.1f} on {os.cpu_count()} "
        "cores: the machine is shared with other work, so these numbers are upper bounds.",
        "",
        f"Goals (p95): {verdicts}. Ingest ≥ {INGEST_GOAL:,.0f}/s: "
        f"**{'met' if rate >= INGEST_GOAL else 'NOT met'}** ({rate:,.0f}/s). Loss summaries at the {NODES}-node "
        f"rate ingested during the reads: **{'met' if feed_ok else 'NOT met'}** ({feed.rate:.0f}/s, "
        f"{feed.failed} failed).",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        if args.clusters > 1:
            write_section(text, FEDERATION_START, FEDERATION_END)
        else:
            write_section(text)
        log("Wrote BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

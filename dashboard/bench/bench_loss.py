#!/usr/bin/env python
"""make bench-loss: the loss mesh's scale figures at 100 agents, in one run.

First an agent's probe CPU at 10 and 100 peers simulated on loopback (tpcmesh_lab.lossbench.measure), before the
archive starts, so nothing else of the bench runs beside it. Then the archive, on a PostgreSQL this script starts:
100 nodes (9 900 directed pairs) of one benchmark, HOURS of one-minute TWAMP-light summaries per pair generated in
the database (INSERT ... SELECT over generate_series; 0.3 % of pairs lose 1 %, a few periods are untrusted). Served
by gunicorn (2 workers) on loopback, timed over HTTP: POST /api/v1/loss/ingest/ in batches of 1 000 (the agents'
~165 summaries/s at 100 agents, 10 packets/s, a 1-minute period) with 1 and 2 clients, by wall time and per second
of server CPU (gunicorn + PostgreSQL); the loss grid API and its page at 100 × 100 over the default 15 minutes
(goal p95 < 100 ms); the loss problem rules over the benchmark. Writes BENCHMARKS.md between
<!-- bench-loss:start --> and <!-- bench-loss:end -->."""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from section import publish  # first: it puts the repository on the path

# isort: split
from bench_dashboard import DASHBOARD, SERVER_PIDS, get, post_rate, start_archive, start_gunicorn, timings

NODES = 100
GRID_GOAL_MS = 100.0
RATE_GOAL = 165.0  # summaries/s of 100 agents
BATCH = 1000
SECTION = "bench-loss"
DEFAULT_GRID = "loss grid API, 100 × 100, default (15 minutes, kept at ingest)"


def log(msg: str) -> None:
    print(f"{datetime.now():%H:%M:%S} {msg}", flush=True)


def generate(hours: int, end: datetime) -> int:
    """The benchmark bench/loss of NODES nodes and `hours` of one-minute summaries per directed pair."""
    from django.db import connection
    from results.models import Benchmark, LossSummary, Node

    bench = Benchmark.objects.create(namespace="bench", name="loss", uid="bench-loss")
    Node.objects.bulk_create([Node(name=f"dtn{i:03d}", site=f"site{i // 10}") for i in range(NODES)])
    nodes = list(Node.objects.filter(name__startswith="dtn"))
    bench.nodes.add(*nodes)
    table = LossSummary._meta.db_table
    detail = json.dumps({"peer_port": 863, "packet_bytes": 64, "dscp": 0, "received": 600, "ttl_min": 61})
    with connection.cursor() as cur:
        cur.execute(f"""
            INSERT INTO {table} (source_id, destination_id, family, period_start, period_end, partial, rate_pps,
                sent, lost, duplicates, reordered, rtt_min_ms, rtt_median_ms, rtt_p95_ms, rtt_max_ms,
                forward_min_ms, forward_median_ms, backward_min_ms, backward_median_ms, trusted, untrusted_reason,
                ipdv_ms, ipdv_forward_ms, ipdv_backward_ms, detail, ingested_at)
            SELECT s.id, d.id, 4, t, t + interval '1 minute', false, 10, 600,
                CASE WHEN (s.id * 7 + d.id) %% 331 = 0 THEN 6 ELSE 0 END, 0, 0,
                9 + (s.id + d.id) %% 40, 10 + (s.id + d.id) %% 40, 12 + (s.id + d.id) %% 40, 15 + (s.id + d.id) %% 40,
                4.5 + (s.id + d.id) %% 20, 5 + (s.id + d.id) %% 20, 4.5 + (s.id + d.id) %% 20, 5 + (s.id + d.id) %% 20,
                (s.id + d.id + extract(minute FROM t)::int) %% 97 <> 0,
                CASE WHEN (s.id + d.id + extract(minute FROM t)::int) %% 97 = 0
                     THEN 'the reflector''s clock is not synchronised' ELSE '' END,
                0.05, 0.04, 0.04, %s, now()
            FROM {Node._meta.db_table} s CROSS JOIN {Node._meta.db_table} d
            CROSS JOIN generate_series(%s::timestamptz - %s * interval '1 hour', %s::timestamptz - interval '1 minute',
                                       interval '1 minute') AS t
            WHERE s.id <> d.id AND s.name LIKE 'dtn%%' AND d.name LIKE 'dtn%%'""", [detail, end, hours, end])
        count = cur.rowcount
        cur.execute(f"ANALYZE {table}")
    from results.loss import selectors

    ids = [n.id for n in nodes]  # the default grid's cells, as ingest keeps them
    selectors.store_cells([(s, d, 4) for s in ids for d in ids if s != d])
    return count


def make_batches(n: int, start: datetime) -> list[bytes]:
    """n batches of BATCH summaries as the agents send them: each pair's next minutes after the history."""
    from tests.support.dashboard import loss_summary

    names = [f"dtn{i:03d}" for i in range(NODES)]
    pairs = [(s, d) for s in names for d in names if s != d]
    out = []
    for b in range(n):
        items = []
        for k in range(BATCH):
            i = b * BATCH + k
            s, d = pairs[i % len(pairs)]
            items.append(loss_summary(s, d, start + timedelta(minutes=i // len(pairs))))
        out.append(json.dumps({"summaries": items}).encode())
    return out


def ingest_rate(base: str, key: str, bodies: list[bytes], clients: int) -> tuple[float, int, float]:
    """Summaries/s through POST /api/v1/loss/ingest/ (post_rate)."""
    def accepted(result: dict) -> int:
        assert result == {"accepted": BATCH, "duplicates": 0}, result
        return BATCH

    return post_rate(f"{base}/api/v1/loss/ingest/", key, bodies, clients, accepted)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=int, default=3, help="hours of summaries per pair to generate (default 3)")
    ap.add_argument("--requests", type=int, default=60, help="timed requests per read")
    ap.add_argument("--batches", type=int, default=12, help="ingest batches of 1 000 per client setting")
    ap.add_argument("--peers", default="10,100", help="the agent's CPU: comma-separated simulated peer counts")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()

    from tpcmesh_lab import lossbench
    probe_rows = []
    for peers in map(int, args.peers.split(",")):
        probe_rows.append(lossbench.measure(peers, rate=10.0, period=20.0, periods=3))
        log(f"Agent probe at {peers} peers: {100 * probe_rows[-1]['cpu_s'] / probe_rows[-1]['wall_s']:.1f} % of a "
            "core")
    load_probe = os.getloadavg()[0]

    server, base_dir = start_archive()
    gunicorn = None
    try:
        from django.utils import timezone
        from results import analysis, services
        from results.models import Benchmark

        end = datetime.now(UTC).replace(second=0, microsecond=0)
        t0 = time.perf_counter()
        count = generate(args.hours, end)
        log(f"Generated {count:,} loss summaries ({args.hours} h × {NODES * (NODES - 1):,} pairs) in "
            f"{time.perf_counter() - t0:.0f} s")
        bench = Benchmark.objects.get(namespace="bench", name="loss")
        t0 = time.perf_counter()
        found = analysis.evaluate_problems(bench, timezone.now())
        rules_s = time.perf_counter() - t0
        log(f"Problem rules over the benchmark: {rules_s:.2f} s, {len(found)} problems")
        _, key = services.create_api_token("bench", write=True)
        env = {**os.environ, "TPCMESH_DASHBOARD_SECRET_KEY": secrets.token_urlsafe(50)}
        gunicorn, base = start_gunicorn(DASHBOARD, env)
        postmaster = int((server.datadir / "postmaster.pid").read_text().split()[0])
        SERVER_PIDS[:] = [gunicorn.pid, postmaster]

        grid = "/api/v1/loss/grid/?benchmark=bench/loss"
        _, body = get(base + grid)
        cells, grid_bytes = json.loads(body)["cells"], len(body)
        assert len(cells) == NODES * (NODES - 1), len(cells)
        untrusted = sum(1 for c in cells if not c["one_way_trusted"])
        assert all(c["forward_ms"] is None for c in cells if not c["one_way_trusted"])
        reads = {DEFAULT_GRID: (grid, args.requests),
                 "loss grid API, 100 × 100, window=15m (aggregated at request)": (grid + "&window=15m",
                                                                                   args.requests // 2),
                 "loss grid page, HTML 100 × 100 (loss view)": ("/grid/bench/loss/?view=loss",
                                                                 args.requests // 2),
                 "loss list API, a pair's newest 100": ("/api/v1/loss/?source=dtn003&destination=dtn042",
                                                        args.requests)}
        results = {}
        for name, (path, n) in reads.items():
            results[name] = timings(base + path, n)
            log(f"{name}: p95 {results[name]['p95']:.1f} ms")
        load_reads = os.getloadavg()[0]

        bodies = make_batches(2 * args.batches, end)
        rate1, n1, cpu1 = ingest_rate(base, key, bodies[:args.batches], 1)
        log(f"Ingest, 1 client: {rate1:,.0f} summaries/s ({cpu1:,.0f} per CPU second)")
        rate2, n2, cpu2 = ingest_rate(base, key, bodies[args.batches:], 2)
        log(f"Ingest, 2 clients: {rate2:,.0f} summaries/s ({cpu2:,.0f} per CPU second)")
        load_ingest = os.getloadavg()[0]
    finally:
        if gunicorn is not None:
            gunicorn.terminate()
            gunicorn.wait(timeout=30)
        server.stop()
        shutil.rmtree(base_dir, ignore_errors=True)

    grid_p95 = results[DEFAULT_GRID]["p95"]
    ok = grid_p95 < GRID_GOAL_MS and min(rate1, rate2) >= RATE_GOAL
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [
        "## Loss mesh: scale at 100 agents (`make bench-loss`)",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at {rev}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}: the three scale figures of one run, the agent's first, then the archive's.",
        "",
        "**An agent's CPU.** " + lossbench.CPU_METHOD + f". 1-minute load average after it {load_probe:.1f}.",
        "",
        *lossbench.cpu_table(probe_rows),
        "",
        "**The archive.** PostgreSQL started by the script, gunicorn with 2 workers on loopback, timed over HTTP. "
        "100 nodes, "
        f"{NODES * (NODES - 1):,} directed pairs, {args.hours} h of one-minute summaries each = **{count:,} "
        f"summaries** in the archive before the ingest (generated in the database). Goals: the loss grid at "
        f"100 × 100 p95 < {GRID_GOAL_MS:.0f} ms; ingest ≥ {RATE_GOAL:.0f} summaries/s (100 agents at 10 packets/s "
        "per peer and a 1-minute period) with room to spare.",
        "",
        "| request | p50 ms | p95 ms | server CPU ms/request | n |",
        "|---|---:|---:|---:|---:|",
        *(f"| {name} | {r['p50']:.1f} | {r['p95']:.1f} | {r['cpu']:.1f} | {r['n']} |" for name, r in results.items()),
        "",
        f"The default grid reads one stored cell per pair (LossCell: its 15 minutes up to its newest period, "
        f"rewritten by ingest for every pair a batch touches); an asked window aggregates "
        f"{NODES * (NODES - 1) * 15:,} summaries per request for 15 minutes (Σlost/Σsent, the medians of RTT, "
        f"one-way delays and |IPDV| per pair). {untrusted:,} of the cells had an untrusted period in the window "
        "and answered no one-way delay.",
        "",
        f"Ingest through POST /api/v1/loss/ingest/, batches of {BATCH:,}: 1 client **{rate1:,.0f} summaries/s** "
        f"({n1:,}), 2 clients **{rate2:,.0f} summaries/s** ({n2:,}); per second of server CPU (gunicorn + "
        f"PostgreSQL) {cpu1:,.0f} and {cpu2:,.0f} summaries, i.e. 165 summaries/s cost about "
        f"{165 / min(cpu1, cpu2):.2f} of a core. 1-minute load average after the reads {load_reads:.1f}, after "
        f"ingest {load_ingest:.1f}.",
        "",
        f"The problem rules over the benchmark (the transfer grid's and the loss rules, results/loss/rules.py, "
        f"{len(found)} problems from the pairs that lose 1 %): {rules_s:.2f} s; after loss ingest the loss rules "
        f"alone run, at most once a minute per dashboard process.",
        "",
        f"Goals: loss grid p95 {grid_p95:.0f} ms ({'met' if grid_p95 < GRID_GOAL_MS else 'MISSED'}; "
        f"{results[DEFAULT_GRID]['cpu']:.0f} ms of server CPU per request, gunicorn and PostgreSQL together; "
        f"the client reads {grid_bytes / 1e6:.1f} MB; load average {load_reads:.1f} on "
        f"{os.cpu_count()} cores); ingest {min(rate1, rate2):,.0f} summaries/s "
        f"({'met' if min(rate1, rate2) >= RATE_GOAL else 'MISSED'}, {min(rate1, rate2) / RATE_GOAL:.1f} × the "
        "100 agents' rate).",
    ]
    return publish(SECTION, "\n".join(lines), ok)


if __name__ == "__main__":
    sys.exit(main())

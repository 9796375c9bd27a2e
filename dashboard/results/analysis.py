"""After ingest: change detection on each cell that got a new measurement, then the problem rules on each
benchmark that changed. Writes Change and Problem rows.

What is left to analyse lives in the database (a cell's AnalysisMark behind its finished_at), so nothing is lost
when a process stops: ``schedule()`` (called when an ingest commits) wakes one background thread per process that
analyses until nothing is left; ``manage.py analyse`` does the same in the foreground. TPCMESH_DASHBOARD_ANALYSIS
= "inline" analyses inside the request instead (tests; the default on SQLite, which has one writer at a time),
"off" leaves it to the command.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from results import maintenance, models, partitions, problems, thresholds, windows
from results.diagnosis.cells import diagnose_benchmark
from results.loss import rules as loss_rules
from results.loss import selectors as loss_selectors
from results.selectors import kind_for, metric_for
from results.stats import changes

log = logging.getLogger(__name__)

BATCH = 500  # cells read and tested at a time


def _per_run(rows: list[tuple]) -> list[tuple]:
    """(id, finished_at, value, run_id) rows, oldest first -> one (id, finished_at, value) per run: a benchmark
    with spec.repeats measures a setting K times in a run, and detection counts runs (one disturbed run is an
    outlier, not a step), so a run is its repeats' median at its newest measurement."""
    runs: dict[Any, list[tuple]] = {}
    for row in rows:
        runs.setdefault(row[3], []).append(row)
    out = []
    for group in runs.values():
        newest = max(group, key=lambda r: r[1])
        out.append((newest[0], newest[1], statistics.median(r[2] for r in group)))
    out.sort(key=lambda r: r[1])
    return out


def _history(cell: models.PairLatest) -> list[tuple]:
    """The cell's runs among its newest changes.WINDOW succeeded measurements, oldest first: (id, finished_at,
    value), a run's repeats as one (_per_run)."""
    metric = metric_for(cell.protocol)
    qs = models.Measurement.objects.filter(
        source_id=cell.source_id, destination_id=cell.destination_id, benchmark_id=cell.benchmark_id,
        protocol=cell.protocol, status="succeeded", **{f"{metric}__gt": 0},
    )
    qs = qs.filter(streams__isnull=True) if cell.streams == 0 else qs.filter(streams=cell.streams)
    qs = qs.filter(address_family=cell.address_family)
    qs = (qs.filter(congestion_control=cell.congestion_control) if cell.congestion_control
          else qs.filter(Q(congestion_control__isnull=True) | Q(congestion_control="")))
    # the cell's own auth mode: a benchmark switching from x509 to token is two cells, not a step
    qs = qs.filter(auth=cell.auth) if cell.auth else qs.filter(Q(auth__isnull=True) | Q(auth=""))
    qs = qs.filter(storage_setting=cell.storage_setting)  # disk to disk is a cell of its own, not a step
    rows = list(qs.order_by("-finished_at").values_list("id", "finished_at", metric, "run_id")[: changes.WINDOW])
    return _per_run(rows)


def _histories(cells: list[models.PairLatest]) -> dict[int, list[tuple]]:
    """_history of each cell; on PostgreSQL in one statement (an index range per cell), not a round trip each."""
    if connection.vendor != "postgresql":
        return {c.id: _history(c) for c in cells}
    value = "CASE WHEN c.p = 'rtt' THEN m.rtt_ms ELSE m.throughput_gbps END"
    sql = f"""
        SELECT c.id, h.id, h.finished_at, h.value, h.run_id
        FROM (VALUES {", ".join(["(%s::bigint, %s::bigint, %s::bigint, %s::bigint, %s, %s::int, %s, %s, %s, %s)"]
                                * len(cells))})
             AS c(id, s, d, b, p, st, af, cc, au, sto)
        CROSS JOIN LATERAL (
            SELECT m.id, m.finished_at, {value} AS value, m.run_id
            FROM {models.Measurement._meta.db_table} m
            WHERE m.source_id = c.s AND m.destination_id = c.d AND m.benchmark_id = c.b AND m.protocol = c.p
              AND coalesce(m.streams, 0) = c.st AND m.address_family = c.af
              AND coalesce(m.congestion_control, '') = c.cc AND coalesce(m.auth, '') = c.au
              AND m.storage_setting = c.sto
              AND m.status = 'succeeded' AND {value} > 0
            ORDER BY m.finished_at DESC LIMIT {changes.WINDOW}
        ) h"""
    args = [x for c in cells for x in (c.id, c.source_id, c.destination_id, c.benchmark_id, c.protocol, c.streams,
                                       c.address_family, c.congestion_control, c.auth, c.storage_setting)]
    out: dict[int, list[tuple]] = {c.id: [] for c in cells}
    with connection.cursor() as cur:
        cur.execute(sql, args)
        for cell_id, mid, finished, v, run_id in cur.fetchall():
            out[cell_id].append((mid, finished, v, run_id))
    return {cell_id: _per_run(rows) for cell_id, rows in out.items()}


def detect_cell(cell: models.PairLatest, now: datetime, rows: list[tuple] | None = None) -> list[models.Change]:
    """New step changes in one cell's recent history (``rows``, else read here); a break near a stored one is
    that one."""
    rows = _history(cell) if rows is None else rows
    if len(rows) < changes.MIN_HISTORY:  # too short to hold a step: no test, no look-up of known changes
        return []
    found = changes.detect([v for _, _, v in rows])
    if not found:
        return []
    metric = metric_for(cell.protocol)
    known = set(models.Change.objects.filter(measurement_id__in=[r[0] for r in rows], metric=metric)
                .values_list("measurement_id", flat=True))
    known_at = [i for i, r in enumerate(rows) if r[0] in known]
    higher_is_better = thresholds.HIGHER_IS_BETTER[kind_for(cell.protocol)]
    out = []
    for c in found:
        if any(abs(c.index - k) <= changes.MERGE_RUNS for k in known_at):
            continue
        mid, at, _ = rows[c.index]
        out.append(models.Change(benchmark_id=cell.benchmark_id, source_id=cell.source_id,
                                 destination_id=cell.destination_id, protocol=cell.protocol, streams=cell.streams,
                                 address_family=cell.address_family, congestion_control=cell.congestion_control,
                                 auth=cell.auth, storage_setting=cell.storage_setting, metric=metric,
                                 measurement_id=mid, at=at, before=c.before, after=c.after,
                                 worse=(c.after < c.before) == higher_is_better, detected_at=now,
                                 runs_to_detect=len(rows) - c.index))
    return out


def _pending(after: int) -> list[models.PairLatest]:
    """The next BATCH cells (by id, after ``after``) whose newest measurement change detection has not seen."""
    return list(models.PairLatest.objects.filter(id__gt=after)
                .filter(Q(mark__isnull=True) | Q(mark__analysed_at__lt=F("finished_at")))
                .defer("cell_json").order_by("id")[:BATCH])


def _mark(cells: list[models.PairLatest]) -> None:
    """Mark the cells analysed up to the measurement each was read at: one upsert for the batch, in id order (two
    analysers marking overlapping batches lock in the same order), on AnalysisMark only."""
    models.AnalysisMark.objects.bulk_create(
        [models.AnalysisMark(cell_id=c.id, analysed_at=c.finished_at) for c in sorted(cells, key=lambda c: c.id)],
        update_conflicts=True, unique_fields=["cell"], update_fields=["analysed_at"])


def detect_changes(limit: int | None = None) -> set[int]:
    """Change detection on every cell with a measurement it has not seen; returns the benchmarks touched.

    No lock is held while it reads and tests, and it writes no row ingest writes: an ingest moving the same cells
    forward never waits for it. Each cell is then marked analysed up to the measurement it saw; a newer measurement
    that came meanwhile leaves the cell to analyse again, and two processes analysing one cell store its change
    once (unique per measurement and metric)."""
    touched: set[int] = set()
    done, after = 0, 0
    while limit is None or done < limit:
        cells = _pending(after)
        if not cells:
            break
        after = cells[-1].id
        now = timezone.now()
        histories = _histories(cells)
        found = [c for cell in cells for c in detect_cell(cell, now, histories[cell.id])]
        models.Change.objects.bulk_create(found, ignore_conflicts=True)
        _mark(cells)
        touched |= {c.benchmark_id for c in cells}
        done += len(cells)
        if found:
            log.info("Found %d step change(s) in %d cells", len(found), len(cells))
    return touched


def _runs_without_result(bench: models.Benchmark) -> dict[str, int]:
    """Node name -> how many of the newest runs with measurements (up to SILENT_RUNS) had none of it."""
    newest_first = F("started_at").desc(nulls_last=True)
    runs = list(models.Run.objects.filter(benchmark=bench, measurements__isnull=False).distinct()
                .order_by(newest_first, "-id").values_list("id", flat=True)[: problems.SILENT_RUNS])
    if len(runs) < problems.SILENT_RUNS:
        return {}
    seen: dict[str, int] = defaultdict(int)
    for run_id in runs:
        ids = models.Measurement.objects.filter(run_id=run_id)
        present = set(ids.values_list("source__name", flat=True)) | set(ids.values_list("destination__name",
                                                                                           flat=True))
        for name in present:
            seen[name] += 1
    return {n.name: len(runs) - seen[n.name] for n in bench.nodes.all() if seen[n.name] < len(runs)}


def grid_cells(bench: models.Benchmark, now: datetime) -> list[problems.Cell]:
    """Every latest cell of the benchmark with its state; cells in maintenance get the state "maintenance"."""
    bounds = bench.effective_thresholds()
    names = dict(models.Node.objects.filter(benchmarks=bench).values_list("id", "name"))
    cover = maintenance.overlay(now)
    out = []
    cells = models.PairLatest.objects.filter(benchmark=bench).annotate(
        fix=KeyTextTransform("fix", "measurement__diagnosis"))  # the diagnosis' fix alone, not its bounds
    for src, dst, protocol, streams, family, cc, auth, store, tput, rtt, status, limit, fix in cells.values_list(
            "source_id", "destination_id", "protocol", "streams", "address_family", "congestion_control", "auth",
            "storage_setting", "throughput_gbps", "rtt_ms", "status", "measurement__binding_limit", "fix"):
        if cover.covers(src, dst):
            state = "maintenance"
        else:
            kind = kind_for(protocol)
            state = thresholds.classify(rtt if protocol == "rtt" else tput, status, kind, bounds[kind])
        if src in names and dst in names:
            setting = " ".join(x for x in (family if family != "ipv4" else "", cc, auth,
                                           store if store != "memory" else "") if x)
            out.append(problems.Cell(names[src], names[dst], protocol, streams, state, setting, limit or "",
                                     fix or ""))
    return out


def evaluate_problems(bench: models.Benchmark, now: datetime | None = None, *,
                      loss_only: bool = False) -> list[models.Problem]:
    """Run the rules on the benchmark's grid and store what they find: a problem found again keeps its first
    sighting and acknowledgement; one no longer found is resolved; nodes in maintenance raise none. `loss_only`:
    the loss mesh's rules only, the grid's problems left as they are (they change with the
    grid's measurements, not with the loss summaries that come every minute)."""
    now = now or timezone.now()
    cover = maintenance.overlay(now)
    findings: list[problems.Finding] = []
    kinds = problems.LOSS_KINDS if loss_only else problems.KINDS
    if not loss_only:
        # the benchmark's own nodes: another cluster's node of the same name is another node
        in_maintenance = set(models.Node.objects.filter(id__in=cover.nodes, benchmarks=bench)
                             .values_list("name", flat=True))
        silent = {n: k for n, k in _runs_without_result(bench).items() if n not in in_maintenance}
        sites = dict(models.Node.objects.filter(benchmarks=bench).values_list("name", "site"))
        findings = problems.find(grid_cells(bench, now), sites, silent)
    # the loss mesh's rules (results.loss.rules) on the same benchmark's nodes, pairs in maintenance left out
    periods, measured, loss_sites = loss_selectors.rule_input(bench, now, cover.covers)
    findings += loss_rules.find(periods, measured, loss_sites)
    with transaction.atomic():
        stored = {p.key: p for p in models.Problem.objects.select_for_update().filter(benchmark=bench,
                                                                                      kind__in=kinds)}
        for f in findings:
            p = stored.get(f.key)
            if p is None or p.resolved_at is not None:
                p = p or models.Problem(benchmark=bench, key=f.key)
                p.first_seen, p.resolved_at = now, None
                p.ack_by, p.ack_at, p.ack_note, p.ack_fingerprint = "", None, "", ""
            p.kind, p.severity, p.summary, p.cells = f.kind, f.severity, f.summary[:1000], [list(c) for c in f.cells]
            p.fingerprint, p.last_seen = f.fingerprint, now
            p.save()
            stored[f.key] = p
        gone = [p.id for k, p in stored.items() if p.resolved_at is None and k not in {f.key for f in findings}]
        models.Problem.objects.filter(id__in=gone).update(resolved_at=now)
    return [stored[f.key] for f in findings]


def evaluate(bench: models.Benchmark) -> list[models.Problem]:
    """One benchmark now: its newest cells diagnosed, then the problem rules; its open problems."""
    diagnose_benchmark(bench)
    return evaluate_problems(bench)


AHEAD_EVERY = 3600.0  # seconds: the month partitions ahead are checked at most this often per process
_ahead_last = [float("-inf")]


def months_ahead() -> list[str]:
    """The measurement partitions of the months ahead (PostgreSQL), made after ingest at most hourly: they exist
    with retention off too (its prune makes them as well), so new rows never pile up in the default partition."""
    if time.monotonic() - _ahead_last[0] < AHEAD_EVERY or not partitions.enabled():
        return []
    _ahead_last[0] = time.monotonic()
    try:
        return partitions.create_ahead(timezone.now(), log=log.info)
    except DatabaseError as e:  # another replica made the month first: the next hour looks again
        log.warning("Month partitions ahead not made (tried again in an hour): %s", e)
        return []


def analyse(limit: int | None = None) -> set[int]:
    """The months ahead made (hourly), change detection on what is new, then the newest cells diagnosed
    (results.diagnosis), the problem rules run and the windowed grids' kept cells (results.windows) computed again
    on the benchmarks it touched."""
    months_ahead()
    touched = detect_changes(limit)
    for bench in models.Benchmark.objects.filter(id__in=touched):
        evaluate(bench)  # the problem rules read each cell's binding limit
        if connection.vendor == "postgresql":  # the windowed grids' kept cells, current for the next read
            windows.refresh_stale(bench.id, metric_for, timezone.now())
    return touched


class _Worker:
    """One background thread per process; a wake-up while it runs makes it go round once more."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = False
        self._loss = False
        self._thread: threading.Thread | None = None

    def wake(self, loss: bool = False) -> None:
        with self._lock:
            self._pending = True
            self._loss |= loss
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tpcmesh-analysis", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._pending:
                        self._thread = None
                        return
                    self._pending = False
                    loss, self._loss = self._loss, False
                try:
                    analyse()
                    if loss:
                        evaluate_loss()
                except Exception:  # the next ingest wakes it again; what is left stays marked in the database
                    log.exception("Analysis failed; it is retried on the next ingest or by `manage.py analyse`")
        finally:
            connection.close()  # this thread's own connection


_worker = _Worker()


def _mode() -> str:
    mode = settings.ANALYSIS
    if mode == "auto":
        mode = "background" if connection.vendor == "postgresql" else "inline"
    return mode


def schedule() -> None:
    mode = _mode()
    if mode == "inline":
        analyse()
    elif mode == "background":
        _worker.wake()


LOSS_EVERY = 60.0  # seconds: the loss rules run at most this often per process (summaries come ~165/s)
_loss_last = [float("-inf")]


def evaluate_loss(now: datetime | None = None) -> None:
    """The loss mesh's problem rules on every benchmark with a node that sent loss summaries lately."""
    now = now or timezone.now()
    since = now - timedelta(seconds=2 * LOSS_EVERY)
    senders = models.LossSummary.objects.filter(period_start__gte=since - timedelta(minutes=5)).values("source_id")
    for bench in models.Benchmark.objects.filter(nodes__in=senders).distinct():
        evaluate_problems(bench, now, loss_only=True)


def schedule_loss() -> None:
    """Loss summaries were stored: the loss rules run (inline: now; background: once per LOSS_EVERY)."""
    mode = _mode()
    if mode == "inline":
        evaluate_loss()
    elif mode == "background" and time.monotonic() - _loss_last[0] >= LOSS_EVERY:
        _loss_last[0] = time.monotonic()
        _worker.wake(loss=True)

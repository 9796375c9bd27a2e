"""The limit model (limits.py) applied to a benchmark's grid: each newest transfer cell is diagnosed with what the
grid holds about its pair and what its measurement recorded, and the answer is kept on the measurement
(``binding_limit``, ``efficiency``, ``diagnosis``) and, in the grid's shape, on the cell's CellDiagnosis, with its JSON
on the cell's PairLatest row for the latest grid's JSON (rows an ingest holds skipped, not waited for: see
_store_cell_json). The analysis runs it after each ingest (results.analysis), so a measurement is diagnosed while it
is its cell's newest.

What a cell is judged with:
- the pair's path capacity: the pair's newest iperf3 cell with the most streams, same address family (its run
  said, ``same_run``);
- the built-in mover on the same pair, streams, family and storage (the protocol bound);
- both ends' loopback ceilings (Node.loopback_gbps, the grid's diagonal);
- disk mode (#28): which ends were on disk (the cell's storage setting), their disk ceilings (Node.disk_read_gbps of
  the source, disk_write_gbps of the destination) and the same pair's cells of the other storage settings (same
  protocol, streams, family, congestion control and auth mode), for the storage tax;
- from the measurement: its aggregate rate (the throughput when it has none), streams, files in flight, RTT, the
  senders' TCP view (cwnd, retransmits over data segments, the receive-window / send-buffer shares of busy time),
  both ends' host telemetry (the kernel's TCP limits and release, MTU, the busiest core).
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from django.db import connection, transaction
from psycopg2.extras import execute_values

from results import gridcell, storage
from results.diagnosis import limits
from results.models import Benchmark, CellDiagnosis, Measurement, Node, PairLatest

log = logging.getLogger(__name__)
TRANSFER_EXCLUDED = ("rtt",)  # cells with no rate to judge
Key = tuple[int, int, str]  # (source id, destination id, address family)


def host_end(end: Mapping[str, Any] | None, name: str, node: Mapping[str, Any] | None = None,
             store: str = storage.MEMORY) -> limits.Host:
    """One end's figures: its host telemetry over the test, its node's ceilings (Node's loopback_gbps,
    disk_read_gbps, disk_write_gbps), and where it kept the files."""
    end, node = end or {}, node or {}
    lim = end.get("limits") or {}
    cpu = end.get("cpu") or {}
    quota = cpu.get("quota") or {}
    return limits.Host(
        name=name, kernel=lim.get("kernel"), tcp_rmem_max=lim.get("tcp_rmem_max_bytes"),
        tcp_wmem_max=lim.get("tcp_wmem_max_bytes"), rmem_max=lim.get("rmem_max_bytes"),
        wmem_max=lim.get("wmem_max_bytes"), tcp_adv_win_scale=lim.get("tcp_adv_win_scale"),
        congestion_control=lim.get("congestion_control"), mtu=lim.get("mtu"), loopback_gbps=node.get("loopback_gbps"),
        busiest_core_percent=cpu.get("busiest_core_pct"), cores_shared=bool(cpu.get("shared")),
        cpu_quota_used_percent=quota.get("used_pct"), cpu_throttled_percent=quota.get("throttled_pct"),
        storage=store, disk_read_gbps=node.get("disk_read_gbps"), disk_write_gbps=node.get("disk_write_gbps"))


def _tcp(view: Mapping[str, Any] | None, source: Mapping[str, Any] | None) -> limits.Tcp:
    """The senders' side of the test's TCP view (only a sender has a cwnd, retransmits and waits): the record's
    (the built-in mover's), else what the source's host telemetry read of its sending sockets (``tcp_sent``:
    XRootD's, GridFTP's, iperf3's)."""
    view = view or {}
    sender = view.get("sender") or (source or {}).get("tcp_sent") or {}
    retransmits = sender.get("retransmits", view.get("retransmits"))
    return limits.Tcp(cwnd_max_bytes=sender.get("cwnd_max_bytes"), retransmits=retransmits,
                      data_segs_out=sender.get("data_segs_out"),
                      rwnd_limited=sender.get("rwnd_limited_fraction"),
                      sndbuf_limited=sender.get("sndbuf_limited_fraction"))


def model_input(row: Mapping[str, Any], names: Mapping[int, str], nodes: Mapping[int, Mapping[str, Any]],
                path: limits.PathCapacity | None, builtin_gbps: float | None,
                storages: Mapping[str, float] | None = None) -> limits.Measurement | None:
    """A cell's row (its measurement's figures) and its pair's context -> the model's input; None: nothing to
    judge (a failed test, no rate). ``nodes``: each node's ceilings (loopback_gbps, disk_read_gbps,
    disk_write_gbps); ``storages``: the same pair and setting's rate per storage setting (disk mode)."""
    gbps = row["aggregate_gbps"] or row["throughput_gbps"]
    if row["status"] != "succeeded" or not gbps or gbps <= 0:
        return None
    host = row["host"] or {}
    src, dst = row["source_id"], row["destination_id"]
    src_store, dst_store = storage.ends(row.get("storage_setting") or storage.MEMORY)
    rates = storages or {}
    return limits.Measurement(
        gbps=gbps, protocol=row["protocol"], streams=row["streams"] or 1, files=row["file_count"] or 1,
        concurrency=row["concurrency"], rtt_ms=row["rtt_ms"],
        source=host_end(host.get("source"), names.get(src, ""), nodes.get(src, {}), src_store),
        destination=host_end(host.get("destination"), names.get(dst, ""), nodes.get(dst, {}), dst_store),
        tcp=_tcp(row["tcp"], host.get("source")), path=path,
        builtin_gbps=builtin_gbps if row["protocol"] != "builtin" else None,
        memory_gbps=rates.get(storage.MEMORY),
        source_disk_gbps=rates.get(storage.setting(storage.DISK, storage.MEMORY)),
        destination_disk_gbps=rates.get(storage.setting(storage.MEMORY, storage.DISK)))


ROW_FIELDS = ("id", "protocol", "streams", "address_family", "congestion_control", "auth", "storage_setting",
              "source_id", "destination_id", "measurement_id",
              "measurement__run_id", "measurement__status", "measurement__aggregate_gbps",
              "measurement__throughput_gbps", "measurement__concurrency", "measurement__file_count",
              "measurement__rtt_ms", "measurement__tcp", "measurement__host")


def _rows(bench: Benchmark) -> list[dict[str, Any]]:
    rows = []
    for values in PairLatest.objects.filter(benchmark=bench).exclude(protocol__in=TRANSFER_EXCLUDED).values_list(
            *ROW_FIELDS):
        row = dict(zip((f.removeprefix("measurement__") for f in ROW_FIELDS), values, strict=True))
        rows.append(row)
    return rows


def _but_storage(row: Mapping[str, Any]) -> tuple:
    """A cell's setting but its storage: the cells of one pair that differ in storage alone share it."""
    return (row["source_id"], row["destination_id"], row["protocol"], row["streams"], row["address_family"],
            row["congestion_control"], row["auth"])


def _store_answers(measurements: list[Measurement]) -> None:
    """Each measurement's binding_limit, efficiency and diagnosis written, its row locked in id order (two
    analysers updating overlapping rows lock them in the same order). PostgreSQL: one UPDATE from a VALUES list per
    page; Django's bulk_update builds a CASE of every row for every column, which cost the analysis more than the
    limit model."""
    measurements = sorted(measurements, key=lambda m: str(m.id))
    if connection.vendor != "postgresql":
        Measurement.objects.bulk_update(measurements, ["binding_limit", "efficiency", "diagnosis"], batch_size=500)
        return
    with transaction.atomic(), connection.cursor() as cur:
        # The rows locked in id order first: the UPDATE's own order is its plan's (a hash join goes in the table's
        # order, a nested loop in the list's), and two analysers updating overlapping rows each their own way
        # deadlocked (a CI run)
        cur.execute(f"SELECT 1 FROM {Measurement._meta.db_table} WHERE id = ANY(%s::uuid[]) ORDER BY id "
                    "FOR NO KEY UPDATE", [[str(m.id) for m in measurements]])
        execute_values(cur.cursor, f"""
            UPDATE {Measurement._meta.db_table} m SET binding_limit = v.limit_, efficiency = v.efficiency,
                   diagnosis = v.diagnosis
            FROM (VALUES %s) AS v(id, limit_, efficiency, diagnosis) WHERE m.id = v.id""",
                       [(str(m.id), m.binding_limit, m.efficiency, json.dumps(m.diagnosis)) for m in measurements],
                       template="(%s::uuid, %s, %s::float8, %s::jsonb)", page_size=2000)


def diagnose_benchmark(bench: Benchmark) -> int:
    """Diagnose every newest transfer cell of ``bench`` and store the answers; how many were diagnosed."""
    rows = _rows(bench)
    nodes = {n["id"]: n for n in Node.objects.filter(benchmarks=bench).values(
        "id", "name", "loopback_gbps", "disk_read_gbps", "disk_write_gbps")}
    names = {i: n["name"] for i, n in nodes.items()}
    paths: dict[Key, dict[str, Any]] = {}  # the pair's iperf3 with the most streams
    builtin: dict[tuple[Key, int, str], float] = {}
    storages: dict[tuple, dict[str, float]] = defaultdict(dict)  # a setting but storage's rate per storage setting
    for r in rows:
        key = (r["source_id"], r["destination_id"], r["address_family"])
        rate = r["aggregate_gbps"] or r["throughput_gbps"]
        if r["status"] != "succeeded" or not rate:
            continue
        storages[_but_storage(r)][r["storage_setting"]] = rate
        if r["protocol"] == "iperf3" and (key not in paths or r["streams"] > paths[key]["streams"]):
            paths[key] = r
        elif r["protocol"] == "builtin":
            at = (key, r["streams"], r["storage_setting"])
            builtin[at] = max(rate, builtin.get(at, 0.0))
    measurements, cells, members = [], [], []
    for r in rows:
        key = (r["source_id"], r["destination_id"], r["address_family"])
        iperf3 = paths.get(key)
        path = None if iperf3 is None or iperf3["id"] == r["id"] else limits.PathCapacity(
            gbps=iperf3["throughput_gbps"] or iperf3["aggregate_gbps"], streams=iperf3["streams"] or 1,
            same_run=iperf3["run_id"] == r["run_id"])
        model = model_input(r, names, nodes, path, builtin.get((key, r["streams"], r["storage_setting"])),
                            storages.get(_but_storage(r)))
        if model is None:
            continue
        d = limits.diagnose(model)
        efficiency = round(d.efficiency, 4) if d.efficiency is not None else None
        measurements.append(Measurement(id=r["measurement_id"], binding_limit=d.limit, efficiency=efficiency,
                                        diagnosis=d.to_dict()))
        fields = {"binding_limit": d.limit, "efficiency": efficiency, "evidence": d.reason, "fix": d.fix or None}
        text = gridcell.diagnosis_members(fields)
        cells.append(CellDiagnosis(cell_id=r["id"], measurement_id=r["measurement_id"], binding_limit=d.limit,
                                   efficiency=efficiency, evidence=d.reason, fix=d.fix or "", members=text))
        members.append((r["id"], r["measurement_id"], text))
    _store_answers(measurements)
    # in cell id order: two analysers upserting overlapping cells lock them in the same order
    CellDiagnosis.objects.bulk_create(
        sorted(cells, key=lambda c: c.cell_id), update_conflicts=True, unique_fields=["cell"],
        update_fields=["measurement_id", "binding_limit", "efficiency", "evidence", "fix", "members"],
        batch_size=500)
    _store_cell_json(members)
    return len(measurements)


LOCKED_RETRIES = (0.2, 0.5, 1.0, 2.0)  # seconds before each retry of the cells an ingest held


def _store_cell_json(members: list[tuple[int, Any, str]]) -> None:
    """Each (cell id, measurement judged, JSON members) written on the cell's PairLatest row while the cell still
    holds that measurement. PostgreSQL: the rows are locked with SKIP LOCKED, so the analysis never waits for an
    ingest holding a row (an ingest upserts many rows in its own order: waiting could deadlock it, and a deadlock
    aborts one of the two); the rows skipped are tried again after a pause, those whose ingest moved them on to a
    new measurement drop out by the WHERE (the next analysis judges that one)."""
    if connection.vendor != "postgresql":  # one writer at a time
        for cell, measurement, text in members:
            PairLatest.objects.filter(id=cell, measurement_id=measurement).update(diagnosis_json=text,
                                                                                 diagnosis_of=measurement)
        return
    wanted = {cell: (cell, str(measurement), text) for cell, measurement, text in members}
    for pause in (0.0, *LOCKED_RETRIES):
        if not wanted:
            return
        time.sleep(pause)
        with connection.cursor() as cur:
            done = execute_values(cur.cursor, f"""
                WITH v(id, measurement, members) AS (VALUES %s),
                free AS (SELECT p.id FROM {PairLatest._meta.db_table} p JOIN v ON v.id = p.id
                         WHERE p.measurement_id = v.measurement ORDER BY p.id FOR UPDATE OF p SKIP LOCKED)
                UPDATE {PairLatest._meta.db_table} p SET diagnosis_json = v.members, diagnosis_of = v.measurement
                FROM v JOIN free ON free.id = v.id WHERE p.id = v.id RETURNING p.id""",
                                  sorted(wanted.values()), template="(%s::bigint, %s::uuid, %s)", page_size=2000,
                                  fetch=True)
            for (cell,) in done:
                del wanted[cell]
            if not wanted:  # the usual case: nothing held
                return
            # the rest: moved on to a new measurement (nothing to write), or held by an ingest (try again)
            cur.execute(f"SELECT p.id FROM {PairLatest._meta.db_table} p JOIN unnest(%s::bigint[], %s::uuid[]) "
                        "v(id, measurement) ON v.id = p.id AND p.measurement_id = v.measurement",
                        [list(wanted), [m for _, m, _ in wanted.values()]])
            still = {cell for (cell,) in cur.fetchall()}
        wanted = {cell: row for cell, row in wanted.items() if cell in still}
    if wanted:
        log.warning("%d cells' diagnosis JSON not written: their rows stayed locked; the next analysis writes them",
                    len(wanted))

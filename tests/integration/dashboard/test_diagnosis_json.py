"""The cells' diagnosis JSON on their PairLatest rows (PairLatest.diagnosis_json, read by the latest grid's JSON):
the analysis writes it beside CellDiagnosis without ever waiting for a row an ingest holds (it skips it and tries
again), writes nothing on a cell whose measurement moved on meanwhile, and migration 0022 copies the answers already
kept there."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import psycopg2
import pytest
from django.db import connection
from results import gridcell

from tests.support.dashboard import batch, measurement, post_batch
from tests.support.migrations import latest, migrate

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
NODES = ["a", "b", "c"]


def _ingest(client, key) -> None:
    """builtin and iperf3 between every pair: every builtin cell gets a diagnosis (its iperf3 is its capacity)."""
    t = datetime.now(UTC) - timedelta(minutes=10)
    ms = [measurement(s, d, protocol=p, streams=st, finished=t, gbps=g)
          for s in NODES for d in NODES if s != d for p, st, g in (("builtin", 1, 3.0), ("iperf3", 8, 9.0))]
    post_batch(client, key, batch(ms, nodes=[{"name": n} for n in NODES]))


def _cells():
    from results.models import Benchmark, PairLatest

    bench = Benchmark.objects.get()
    cells = list(PairLatest.objects.filter(benchmark=bench, protocol="builtin").order_by("id"))
    PairLatest.objects.filter(benchmark=bench).update(diagnosis_json=None, diagnosis_of=None)
    return bench, cells


def _expected(cell_id: int) -> str:
    from results.models import CellDiagnosis

    d = CellDiagnosis.objects.get(cell_id=cell_id)
    return gridcell.diagnosis_members({"binding_limit": d.binding_limit, "efficiency": d.efficiency,
                                       "evidence": d.evidence or None, "fix": d.fix or None})


class Holder:
    """A second connection holding one PairLatest row's lock, as an ingest's transaction does while it upserts;
    ``then`` runs in that transaction before it commits (e.g. the ingest moving the cell to a new measurement)."""

    def __init__(self, cell_id: int, then: str | None = None):
        self.conn = psycopg2.connect(**{k: v for k, v in connection.get_connection_params().items()
                                        if k in ("dbname", "user", "password", "host", "port")})
        self.cur = self.conn.cursor()
        self.cur.execute("SELECT id FROM results_pairlatest WHERE id = %s FOR UPDATE", [cell_id])
        self.then, self.cell_id = then, cell_id

    def release(self) -> None:
        if self.then:
            self.cur.execute(self.then, [self.cell_id])
        self.conn.commit()
        self.conn.close()


def test_a_row_an_ingest_holds_is_skipped_not_waited_for(client, write_key, caplog):
    from results.diagnosis.cells import LOCKED_RETRIES, diagnose_benchmark
    from results.models import PairLatest

    _ingest(client, write_key)
    bench, cells = _cells()
    held = Holder(cells[0].id)
    # never released while the analysis runs: waiting for it would hang here until the timer let it go
    timer = threading.Timer(sum(LOCKED_RETRIES) + 30, held.release)
    timer.start()
    try:
        assert diagnose_benchmark(bench) >= len(cells)
    finally:
        timer.cancel()
        held.release()
    rows = {p.id: p for p in PairLatest.objects.filter(id__in=[c.id for c in cells])}
    assert rows[cells[0].id].diagnosis_json is None  # skipped: the next analysis writes it
    for cell in cells[1:]:
        assert rows[cell.id].diagnosis_json == _expected(cell.id)
        assert rows[cell.id].diagnosis_of == cell.measurement_id
    assert "diagnosis JSON not written" in caplog.text


def test_a_row_released_during_the_retries_is_written(client, write_key):
    from results.diagnosis.cells import LOCKED_RETRIES, diagnose_benchmark
    from results.models import PairLatest

    _ingest(client, write_key)
    bench, cells = _cells()
    held = Holder(cells[0].id)
    timer = threading.Timer(LOCKED_RETRIES[0] / 2, held.release)  # an ingest committing without moving the cell
    timer.start()
    diagnose_benchmark(bench)
    timer.join()
    row = PairLatest.objects.get(id=cells[0].id)
    assert (row.diagnosis_json, row.diagnosis_of) == (_expected(cells[0].id), cells[0].measurement_id)


def test_a_cell_moved_on_by_the_ingest_holding_it_gets_no_stale_diagnosis(client, write_key):
    from results.diagnosis.cells import LOCKED_RETRIES, diagnose_benchmark
    from results.models import PairLatest

    _ingest(client, write_key)
    bench, cells = _cells()
    newer = uuid.uuid4()
    held = Holder(cells[0].id, then=f"UPDATE results_pairlatest SET measurement_id = '{newer}' WHERE id = %s")
    timer = threading.Timer(LOCKED_RETRIES[0] / 2, held.release)
    timer.start()
    diagnose_benchmark(bench)
    timer.join()
    row = PairLatest.objects.get(id=cells[0].id)
    assert row.measurement_id == newer and row.diagnosis_json is None
    cell = next(c for c in client.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=builtin").json()["cells"]
                if (c["source"], c["destination"]) == (cells[0].source.name, cells[0].destination.name))
    assert {k: cell[k] for k in gridcell.DIAGNOSIS_NAMES} == gridcell.NOT_DIAGNOSED


def test_migration_0022_copies_the_kept_answers_to_the_cells(client, write_key):
    """Upgrading from 0021: each cell's kept answer (CellDiagnosis.members, which 0021's code wrote and read) is on
    its row before any analysis runs; members stays, for the previous release's pods."""
    from results.diagnosis.cells import diagnose_benchmark

    _ingest(client, write_key)
    bench, cells = _cells()
    diagnose_benchmark(bench)
    expected = {c.id: (_expected(c.id), c.measurement_id) for c in cells}
    try:
        old = migrate([("results", "0021_window_cells")])  # the columns go, the members stay
        members = dict(old.get_model("results", "CellDiagnosis").objects.filter(
            cell_id__in=expected).values_list("cell_id", "members"))
        assert members == {c: text for c, (text, _) in expected.items()}
        new = migrate([("results", "0022_diagnosis_json")])
        rows = new.get_model("results", "PairLatest").objects.filter(id__in=expected)
        assert {r.id: (r.diagnosis_json, r.diagnosis_of) for r in rows} == expected
    finally:
        latest()

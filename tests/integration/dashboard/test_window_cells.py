"""The windowed grid's stored cells (results.windows) on the suite's real PostgreSQL: a standard window's mean and
median grid read from WindowCell answer what the window's rows answer, and follow every change of those rows: a
late measurement delivered out of order, the oldest aging out of the window, a deleted one. SQLite (the ORM path)
computes every window from the rows."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from results import maintenance, selectors, windows
from results.models import Benchmark, Measurement, WindowCell, WindowStamp

from tests.support.dashboard import batch, ingest, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
NOW = datetime.now(UTC).replace(microsecond=0)
H = timedelta(hours=1)
WEEK = timedelta(days=7)
MODES = ("mean", "median")


@pytest.fixture
def bench(db):
    if connection.vendor != "postgresql":
        pytest.skip("the stored window cells are PostgreSQL's")
    ms = []
    for k, hours in enumerate((150, 100, 50, 20, 3)):  # five runs over the week, two stream settings, one failure
        at = NOW - hours * H
        ms += [measurement("a", "b", streams=1, gbps=10.0 + k, finished=at),
               measurement("b", "a", streams=1, gbps=20.0 - k, finished=at),
               measurement("a", "b", streams=8, gbps=30.0 + k * k, finished=at)]
    ms.append(measurement("b", "a", streams=8, status="failed", gbps=None, error="refused", finished=NOW - 2 * H))
    ingest(batch(ms, name="windows"))
    return Benchmark.objects.get(name="windows")


def _raw(bench, mode: str, now: datetime, streams=None) -> list[tuple]:
    """The window's cells aggregated from its rows (the path without stored cells)."""
    pick = selectors.Pick(streams)
    bounds = bench.effective_thresholds()["throughput"]
    sql, args = selectors._cells_sql(bench, "xrootd-https", pick, now, bounds, mode, WEEK, maintenance.Overlay(),
                                     iso_times=False, stored=False)
    with connection.cursor() as cur:
        cur.execute(sql, args)
        return sorted(cur.fetchall(), key=str)


def _grid(bench, mode: str, now: datetime, streams=None) -> list[tuple]:
    cells = selectors.grid(bench, "xrootd-https", streams=streams, mode=mode, now=now)["cells"]
    return sorted((tuple(c.values()) for c in cells), key=str)


def _json(bench, mode: str, now: datetime) -> list[dict]:
    import json
    bounds = bench.effective_thresholds()["throughput"]
    return sorted(json.loads(selectors.grid_cells_json(bench, "xrootd-https", selectors.Pick(), now, bounds, mode)),
                  key=lambda c: (c["source"], c["streams"]))


@pytest.mark.parametrize("mode", MODES)
def test_the_stored_cells_answer_what_the_rows_answer(bench, mode):
    assert _grid(bench, mode, NOW) == _raw(bench, mode, NOW)  # computed and stored by the first read
    assert set(WindowStamp.objects.values_list("streams", flat=True)) == {1, 8}
    assert WindowCell.objects.count() == 4
    assert windows.stale_ranges(bench.id, "xrootd-https", "m.throughput_gbps", [1, 8], WEEK, NOW) == []
    assert _grid(bench, mode, NOW) == _raw(bench, mode, NOW)  # read from them
    assert _grid(bench, mode, NOW, streams=8) == _raw(bench, mode, NOW, streams=8)
    assert _grid(bench, mode, NOW, streams=selectors.NEWEST) == _raw(bench, mode, NOW, streams=selectors.NEWEST)
    assert [c["value"] for c in _json(bench, mode, NOW)] == pytest.approx([v[7] for v in sorted(
        _raw(bench, mode, NOW), key=lambda r: (r[0], r[2]))])


def test_reads_use_the_stored_cells_while_the_rows_are_the_same(bench):
    """Proof that the read is the stored one: a stored figure altered by hand is what the grid answers."""
    _grid(bench, "median", NOW)
    WindowCell.objects.filter(streams=8, source__name="a").update(median=-1.0)
    assert -1.0 in [c["value"] for c in selectors.grid(bench, "xrootd-https", streams=8, mode="median",
                                                        now=NOW)["cells"]]


@pytest.mark.parametrize("mode", MODES)
def test_a_late_measurement_in_the_window_is_counted(bench, mode):
    before = _grid(bench, mode, NOW)
    # delivered now, finished two days ago: older than each cell's newest, so no grid cell moves
    ingest(batch([measurement("a", "b", streams=1, gbps=99.0, finished=NOW - 48 * H)], name="windows", run="late"))
    after = _grid(bench, mode, NOW)
    assert after == _raw(bench, mode, NOW)
    assert after != before


@pytest.mark.parametrize("mode", MODES)
def test_the_oldest_aging_out_of_the_window_is_left_out(bench, mode):
    _grid(bench, mode, NOW)
    later = NOW + 20 * H  # the run of 150 h ago has left the window
    assert _grid(bench, mode, later) == _raw(bench, mode, later)
    assert _grid(bench, mode, later) != _raw(bench, mode, NOW)


def test_a_deleted_measurement_is_left_out(bench):
    _grid(bench, "median", NOW)
    Measurement.objects.filter(streams=8, source__name="a", finished_at=NOW - 50 * H).delete()
    assert _grid(bench, "median", NOW) == _raw(bench, "median", NOW)
    assert [c for c in _grid(bench, "median", NOW) if c[2] == 8 and c[0] == "a"][0][13] == 4  # count


def test_a_window_not_kept_is_aggregated_from_the_rows(bench):
    cells = selectors.grid(bench, "xrootd-https", mode="median", window=timedelta(days=2), now=NOW)["cells"]
    assert cells and not WindowStamp.objects.exists()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("streams", [None, 8])
def test_the_stored_json_is_the_rows_json_byte_for_byte(bench, mode, streams):
    """The JSON built from the stored members (WindowCell's texts) is the text the rows' JSON is."""
    bounds = bench.effective_thresholds()["throughput"]
    pick = selectors.Pick(streams)
    from results.diagnosis.cells import diagnose_benchmark
    from results.models import CellDiagnosis
    diagnose_benchmark(bench)  # as the analysis after ingest: the diagnosis members are in both
    assert CellDiagnosis.objects.exists()
    stored = selectors.grid_cells_json(bench, "xrootd-https", pick, NOW, bounds, mode)  # computes, stores, reads
    sql, args = selectors._cells_sql(bench, "xrootd-https", pick, NOW, bounds, mode, WEEK, maintenance.Overlay(),
                                     iso_times=False)
    from results import celljson, gridcell
    fields = (*gridcell.FIELDS, *gridcell.DIAGNOSIS)
    members = celljson.json_members_sql({f.name: f"c.{f.name}" for f in fields}, fields)
    rows = selectors._json_array(f"SELECT '{{' || {members} || '}}' AS cell FROM ({sql}) c", args)
    assert WindowStamp.objects.exists()
    # each cell's text alike; the cells' order is neither path's promise (the API keys them by pair)
    assert sorted(stored[2:-2].split(b"},{")) == sorted(rows[2:-2].split(b"},{"))


def test_the_analysis_after_ingest_computes_the_kept_ranges_again(bench):
    """A range read before is made current by the analysis of the ingest that changed it, before any read."""
    from results import analysis
    _grid(bench, "median", NOW)
    ingest(batch([measurement("a", "b", streams=8, gbps=77.0, finished=NOW - H)], name="windows", run="newer"))
    column = "m.throughput_gbps"
    assert windows.stale_ranges(bench.id, "xrootd-https", column, [1, 8], WEEK, NOW) == [8]
    analysis.analyse()
    now = datetime.now(UTC)  # the analysis computed them for its own now
    assert windows.stale_ranges(bench.id, "xrootd-https", column, [1, 8], WEEK, now) == []
    assert _grid(bench, "median", now) == _raw(bench, "median", now)


@pytest.mark.parametrize("mode", MODES)
def test_a_protocol_without_cells_is_an_empty_window(bench, mode):
    assert selectors.grid(bench, "xrootd-root", mode=mode, now=NOW)["cells"] == []
    bounds = bench.effective_thresholds()["throughput"]
    assert selectors.grid_cells_json(bench, "xrootd-root", selectors.Pick(), NOW, bounds, mode) == b"[]"


def test_outside_a_transaction_the_check_and_the_read_share_one_snapshot(transactional_db, client):
    """As a server reads (no transaction around the request): the API's median grid from the rows, then from the
    stored cells in a REPEATABLE READ transaction of its own, the same cells both times."""
    if connection.vendor != "postgresql":
        pytest.skip("the stored window cells are PostgreSQL's")
    ingest(batch([measurement("a", "b", streams=1, gbps=10.0 + k, finished=NOW - k * H) for k in range(3)],
                 name="snap"))
    url = "/api/v1/grid/?benchmark=mesh/snap&protocol=xrootd-https&mode=median"
    first = client.get(url, HTTP_ACCEPT="application/json")
    assert first.status_code == 200, first.content
    assert WindowStamp.objects.filter(benchmark__name="snap").exists()
    second = client.get(url, HTTP_ACCEPT="application/json")
    assert [c["value"] for c in second.json()["cells"]] == [c["value"] for c in first.json()["cells"]] == [11.0]

"""A grid cell's fields have one definition (results.gridcell): every builder of a cell answers exactly its fields,
in its order, and the API's serializer (the OpenAPI contract) documents them. Each path places the fields computed
per request (age_seconds, stale, state) where it always has: the database's latest JSON before the stored body,
the Python cells after the stored fields, the database's rows where the definition has them; within the stored
and the per-request fields the order is the definition's. PostgreSQL checks every builder;
TPCMESH_TEST_DB=sqlite the portable ones."""

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from results import celljson, federation, gridcell, selectors, services
from results.api.serializers import GridCellSerializer
from results.models import Benchmark, PairLatest

from tests.support.dashboard import batch, ingest, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
NOW = datetime.now(UTC).replace(microsecond=0)
H = timedelta(hours=1)
PICKS = [None, selectors.NEWEST]  # every stream setting; each link's newest (with concurrency)
PROTOCOLS = ["builtin", "rtt"]
CONCURRENCY = [gridcell.CONCURRENCY.name]


def _extra(streams) -> list[str]:
    return CONCURRENCY if streams == selectors.NEWEST else []


# each builder's order, from the definition
def database_json_latest(streams) -> list[str]:
    return [*gridcell.PER_REQUEST_NAMES, *_extra(streams), *gridcell.STORED_NAMES, *gridcell.DIAGNOSIS_NAMES]


def database_rows(streams) -> list[str]:
    return [*gridcell.NAMES, *_extra(streams), *gridcell.DIAGNOSIS_NAMES]


def python_cells(streams) -> list[str]:
    return [*gridcell.STORED_NAMES, *_extra(streams), *gridcell.PER_REQUEST_NAMES, *gridcell.DIAGNOSIS_NAMES]


@pytest.fixture
def benches(db):
    """Two clusters' benchmark: succeeded, failed (with an error) and rtt cells, a tuned link at two settings."""
    for cluster in ("east", "west"):
        ingest(batch([
            measurement("a", "b", protocol="builtin", streams=1, gbps=10, finished=NOW - 3 * H),
            measurement("a", "b", protocol="builtin", streams=4, concurrency=2, gbps=20, finished=NOW - 2 * H),
            measurement("b", "a", protocol="builtin", status="failed", gbps=None, error="refused",
                        finished=NOW - H),
            measurement("a", "b", protocol="rtt", rtt_ms=12.5, finished=NOW - H),
        ], name="fields", cluster=cluster))
    return list(Benchmark.objects.filter(name="fields").order_by("cluster__name"))


def _keys(cells) -> list[list[str]]:
    assert cells
    return [list(c) for c in cells]


def test_the_serializer_documents_the_definition():
    """GridCellSerializer (the OpenAPI contract's GridCell) names the definition's fields in its order."""
    assert list(GridCellSerializer().fields) == list(gridcell.names(newest=True))


def test_the_stored_json_body_names_the_stored_fields():
    assert re.findall(r'"(\w+)":', celljson.cell_json_sql("p", "s.name", "d.name")) == list(gridcell.STORED_NAMES)


def test_ingest_writes_every_column_a_cell_reads():
    """The PairLatest columns a stored field reads (either metric) are ones ingest writes (LATEST_COLUMNS)."""
    read = {f.latest_column(metric) for f in gridcell.STORED for metric in ("throughput_gbps", "rtt_ms")}
    assert read <= set(services.LATEST_COLUMNS)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("streams", PICKS)
@pytest.mark.parametrize("mode", selectors.GRID_MODES)
def test_the_python_cells_have_the_definitions_fields(benches, protocol, streams, mode):
    """The portable path (SQLite's grid; on PostgreSQL the latest grid's rows too), and the combined grid of
    several clusters built from it."""
    bench, now = benches[0], NOW
    pick = selectors.Pick(streams)
    bounds = bench.effective_thresholds()[selectors.kind_for(protocol)]
    names = {n.id: n.name for n in selectors.benchmark_nodes(bench)}
    cells = selectors._cells_in_python(bench, protocol, pick, now, bounds, mode, timedelta(days=7), names,
                                       selectors.maintenance.Overlay())
    assert _keys(cells) == [python_cells(streams)] * len(cells)
    expected = python_cells if mode == "latest" or connection.vendor != "postgresql" else database_rows
    for grid in (selectors.grid(bench, protocol, streams=streams, mode=mode, now=now),
                 federation.combined_grid(benches, protocol, streams=streams, mode=mode, now=now)):
        assert _keys(grid["cells"]) == [expected(streams)] * len(grid["cells"])


@pytest.fixture
def postgresql(benches):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's builders")
    return benches[0]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("streams", PICKS)
@pytest.mark.parametrize("mode", selectors.GRID_MODES)
def test_the_database_cells_have_the_definitions_fields(postgresql, protocol, streams, mode):
    """PostgreSQL: the JSON the database builds (latest: the stored bodies with the per-request fields; a window:
    json_agg of _cells_sql's rows) and, for a window, _cells_sql's rows as grid() reads them."""
    bench = postgresql
    data = selectors.grid(bench, protocol, streams=streams, mode=mode, now=NOW, cells_json=True)
    expected = database_json_latest if mode == "latest" else database_rows
    cells = json.loads(data["cells_json"])
    assert _keys(cells) == [expected(streams)] * len(cells)
    if mode != "latest":
        cells = selectors.grid(bench, protocol, streams=streams, mode=mode, now=NOW)["cells"]
        assert _keys(cells) == [database_rows(streams)] * len(cells)


def test_the_stored_json_is_the_stored_fields_and_what_the_last_migration_of_them_wrote(postgresql):
    """PostgreSQL: the body ingest stores has the stored fields in order, fill_sql writes it again unchanged, and
    so did the migration that last changed its fields (0019_storage_disk_mode keeps its own copy of the SQL)."""
    from importlib import import_module
    frozen = import_module("results.migrations.0019_storage_disk_mode").FILL_CELL_JSON

    def stored() -> dict[int, str]:
        return dict(PairLatest.objects.values_list("id", "cell_json"))

    ingested = stored()
    assert {tuple(json.loads("{" + body + "}")) for body in ingested.values()} == {gridcell.STORED_NAMES}
    for sql in (celljson.fill_sql(), frozen):
        PairLatest.objects.update(cell_json=None)
        with connection.cursor() as cur:
            cur.execute(sql)
        assert stored() == ingested

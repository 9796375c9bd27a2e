"""The partitioned measurement archive on PostgreSQL (results.partitions, migration 0020_measurement_partitions):
the schema after migrate; an unpartitioned archive with rows upgraded in place (rows, the rows pointing at them and
ingest's idempotency intact); retention dropping the months all past their age, and only those, keeping a grid
cell's newest and a late row, with the pair history answering as before."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from tests.support.dashboard import batch, measurement
from tests.support.migrations import latest, migrate

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BEFORE = [("results", "0019_storage_disk_mode")]
AFTER = [("results", "0020_measurement_partitions")]
CHILDREN = ("results_filetransfer", "results_pairlatest", "results_change", "results_path")


@pytest.fixture(autouse=True)
def postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("partitions are PostgreSQL's (SQLite keeps one table)")


def layout():
    from results import partitions

    return {p.name: (p.lower, p.upper) for p in partitions.partitions()}


def where(ids) -> dict[str, str]:
    """The partition each measurement is stored in."""
    with connection.cursor() as cur:
        cur.execute("SELECT id::text, tableoid::regclass::text FROM results_measurement WHERE id::text = ANY(%s)",
                    [list(ids)])
        return dict(cur.fetchall())


def ingest(client, key, ms, ingested_at=None):
    from django.db.models import F
    from results.models import Measurement

    r = client.post("/api/v1/ingest/", json.dumps(batch(ms)), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {key}")
    assert r.status_code == 200, r.content
    rows = Measurement.objects.filter(id__in=[m["id"] for m in ms])
    rows.update(ingested_at=ingested_at or F("finished_at"))  # delivered when measured unless said
    return r.json()


def test_schema_after_migrate():
    from results import partitions

    now = datetime.now(UTC)
    with connection.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE relname = 'results_measurement'")
        assert cur.fetchone()[0] == "p"
        cur.execute("SELECT a.attname FROM pg_index x JOIN pg_attribute a ON a.attrelid = x.indrelid "
                    "AND a.attnum = ANY(x.indkey) WHERE x.indrelid = 'results_measurement'::regclass "
                    "AND x.indisprimary ORDER BY a.attname")
        assert [r[0] for r in cur.fetchall()] == ["finished_at", "id"]
        # no database foreign key into the partitioned table: Django's delete and retire() keep them
        cur.execute("SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' "
                    "AND confrelid = 'results_measurement'::regclass")
        assert cur.fetchall() == []
        # its own keys to runs, benchmarks and nodes stay (every partition has them)
        cur.execute("SELECT confrelid::regclass::text FROM pg_constraint WHERE contype = 'f' "
                    "AND conrelid = 'results_measurement'::regclass")
        assert sorted(r[0] for r in cur.fetchall()) == ["results_benchmark", "results_node", "results_node",
                                                       "results_run"]
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'results_measurement'")
        assert {"meas_pair_finished", "meas_window", "meas_finished"} <= {r[0] for r in cur.fetchall()}
    first = partitions.at(partitions.add_months(partitions.month_of(now), 2))
    months = [partitions.add_months(partitions.month_of(first), k) for k in range(2)]
    assert layout() == {
        partitions.LEGACY: (None, first), partitions.DEFAULT: (None, None),
        **{partitions.month_name(m): (partitions.at(m), partitions.at(partitions.add_months(m, 1))) for m in months}}


@pytest.mark.parametrize("wrong_clock", [False, True], ids=["in-place", "a-row-far-ahead"])
def test_upgrade_of_an_unpartitioned_archive(client, write_key, wrong_clock):
    """Rows stored before the migration are all there after it, in the old table attached as a partition (a row
    from a wrong clock far ahead moved to the default partition), the rows pointing at them still find them, and
    ingest goes on: new ids are stored in their month, an id stored already is a duplicate."""
    from results import partitions

    now = datetime.now(UTC).replace(microsecond=0)
    old = migrate(BEFORE)
    try:
        Node, Benchmark, Run, Measurement, FileTransfer, PairLatest, Change, Path = (
            old.get_model("results", m) for m in ("Node", "Benchmark", "Run", "Measurement", "FileTransfer",
                                                  "PairLatest", "Change", "Path"))
        with connection.cursor() as cur:
            cur.execute("SELECT relkind FROM pg_class WHERE relname = 'results_measurement'")
            assert cur.fetchone()[0] == "r"  # the reverse made it one table again
        a, b = Node.objects.create(name="a"), Node.objects.create(name="b")
        bench = Benchmark.objects.create(namespace="mesh", name="nightly")
        run = Run.objects.create(benchmark=bench, uid="u", name="r")
        times = [now - timedelta(days=d) for d in (400, 90, 31, 1)]
        if wrong_clock:
            times.append(now + timedelta(days=3 * 365))
        ms = [Measurement.objects.create(run=run, benchmark=bench, source=a, destination=b, protocol="xrootd-https",
                                         streams=1, throughput_gbps=float(k), status="succeeded",
                                         started_at=t - timedelta(seconds=10), finished_at=t)
              for k, t in enumerate(times)]
        FileTransfer.objects.create(measurement=ms[1], name="f", size=1, bytes=1, started_at=times[1],
                                    finished_at=times[1])
        PairLatest.objects.create(benchmark=bench, protocol="xrootd-https", streams=1, source=a, destination=b,
                                  measurement=ms[-1], finished_at=ms[-1].finished_at, status="succeeded")
        Change.objects.create(benchmark=bench, source=a, destination=b, protocol="xrootd-https", streams=1,
                              metric="throughput_gbps", measurement=ms[2], at=times[2], before=2, after=1,
                              worse=True, detected_at=now, runs_to_detect=3)
        Path.objects.create(measurement=ms[0], benchmark=bench, source=a, destination=b, at=times[0], hops=[],
                            hop_count=0, reached=True)
        before = sorted(Measurement.objects.values_list("id", "finished_at", "throughput_gbps"))

        # the models of that state: today's have columns of later migrations
        M, F, P, C, Pa = (migrate(AFTER).get_model("results", m) for m in (
            "Measurement", "FileTransfer", "PairLatest", "Change", "Path"))

        assert sorted(M.objects.values_list("id", "finished_at", "throughput_gbps")) == before
        stored = where(str(m.id) for m in ms)
        assert {stored[str(m.id)] for m in ms[:4]} == {partitions.LEGACY}
        if wrong_clock:
            assert stored[str(ms[-1].id)] == partitions.DEFAULT
        for model in (F, P, C, Pa):  # the rows pointing at measurements find theirs
            row = model.objects.get()
            assert row.measurement.finished_at == M.objects.get(id=row.measurement_id).finished_at

        # ingest goes on: a new measurement lands in its month's partition; a stored id is a duplicate, even
        # with another finished_at (the key is (id, finished_at): ingest checks the id itself). Today's code
        # (ingest and the analysis after it) on today's schema: the migrations after this one too.
        latest()
        new = measurement("a", "b", finished=now)
        again = measurement("a", "b", finished=now - timedelta(days=2), id=str(ms[3].id))
        got = ingest(client, write_key, [new, again])
        assert (got["created"], got["duplicates"]) == (1, 1)
        assert M.objects.filter(id=ms[3].id).count() == 1
        first = partitions.at(partitions.add_months(partitions.month_of(now), 2))
        assert where([new["id"]])[new["id"]] == partitions.LEGACY  # the old table holds up to `first`
        ahead = measurement("a", "b", finished=first + timedelta(days=1))
        assert ingest(client, write_key, [ahead])["created"] == 1
        assert where([ahead["id"]])[ahead["id"]] == partitions.month_name(partitions.month_of(first))
    finally:
        latest()


def test_retention_drops_only_the_months_past_their_age(client, write_key):
    """Months all past the age go whole with their partitions: a grid cell's newest and a measurement delivered
    after its day was rolled up move to the default partition; the rows of a month partly past the age stay until
    it is all past; the months ahead are created (a row waiting in the default partition moves into its month);
    the pair history answers as before."""
    from results import partitions, retention, selectors
    from results.models import FileTransfer, Measurement, Node, PairLatest, Path

    first = min(p.lower for p in partitions.partitions() if p.lower)  # the first month partition's start
    second = partitions.at(partitions.add_months(first.date(), 1))
    now = second + timedelta(days=40)  # raw_days 30: the cutoff is ten days into the second month
    policy = retention.Policy(raw_days=30, file_days=30)
    cutoff = policy.raw_cutoff(now)
    assert second < cutoff < partitions.at(partitions.add_months(first.date(), 2))
    try:
        old = [measurement("a", "b", finished=first + timedelta(days=d, hours=3)) for d in (0, 5, 20)]
        dead = measurement("c", "d", finished=first + timedelta(days=10))  # its cell's newest: stays
        partly = [measurement("a", "b", finished=second + timedelta(days=d)) for d in (2, 15)]  # either side
        far = measurement("a", "b", finished=partitions.at(partitions.add_months(first.date(), 4)))  # no month yet
        # delivered before the rollups are made (their rolled_at is the real clock's, these times are ahead of it)
        ingest(client, write_key, [*old, dead, *partly, far], ingested_at=datetime.now(UTC) - timedelta(hours=1))
        assert where([far["id"]])[far["id"]] == partitions.DEFAULT
        Path.objects.create(measurement_id=old[0]["id"], benchmark_id=Measurement.objects.get(
            id=old[0]["id"]).benchmark_id, source=Node.objects.get(name="a"), destination=Node.objects.get(name="b"),
            at=first, hops=[], hop_count=0, reached=True)
        a, b = Node.objects.get(name="a"), Node.objects.get(name="b")

        def history():
            return [(p["finished_at"], p["throughput_gbps"]) for p in
                    selectors.pair_history(a, b, since=first - timedelta(days=1))]

        raw = history()
        dry = retention.prune(now, policy, dry_run=True)
        assert dry.partitions == [partitions.LEGACY, partitions.month_name(first.date())]
        assert Measurement.objects.count() == 7  # a dry run drops nothing

        report = retention.prune(now, policy)
        assert report.partitions == [partitions.LEGACY, partitions.month_name(first.date())]
        assert report.measurements == 3  # old's three; the dead cell's newest moved out
        assert report.awaiting == 1  # partly[0]: past the age, in a month not all past it
        ids = {str(i) for i in Measurement.objects.values_list("id", flat=True)}
        assert ids == {dead["id"], *(m["id"] for m in partly), far["id"]}
        assert where([dead["id"]])[dead["id"]] == partitions.DEFAULT
        assert where([far["id"]])[far["id"]] == partitions.month_name(partitions.month_of(
            partitions.add_months(first.date(), 4)))  # created ahead, moved out of the default partition
        assert PairLatest.objects.filter(measurement_id=dead["id"]).exists()
        assert not Path.objects.exists() and not FileTransfer.objects.filter(measurement_id__in=[
            m["id"] for m in old]).exists()
        assert set(layout()) >= {partitions.DEFAULT, *(partitions.month_name(partitions.add_months(first.date(), k))
                                                        for k in range(1, 4))}
        assert partitions.LEGACY not in layout() and partitions.month_name(first.date()) not in layout()
        # the first month is read from its rollups now: the same points, one per day, the same values
        assert [(t, g) for t, g in history()] == raw

        # a late delivery into the dropped month lands in the default partition; the next prune keeps it (no
        # rollup holds it) and drops nothing more
        late = measurement("a", "b", finished=first + timedelta(days=6))
        ingest(client, write_key, [late], ingested_at=datetime.now(UTC) + timedelta(hours=1))
        again = retention.prune(now, policy)
        assert (again.partitions, again.measurements, again.late) == ([], 0, 1)
        assert Measurement.objects.filter(id=late["id"]).exists()
    finally:
        migrate(BEFORE)  # the next tests find the layout migrate makes
        latest()


def test_a_detached_partition_left_by_a_stopped_prune_is_finished(client, write_key):
    """A prune stopped after detaching a month: the next one moves its kept rows back and drops it."""
    from results import partitions
    from results.models import Measurement

    first = min(p.lower for p in partitions.partitions() if p.lower)
    ms = [measurement("a", "b", finished=first + timedelta(days=1)),
          measurement("c", "d", finished=first + timedelta(days=2))]
    ingest(client, write_key, ms)
    month = next(p for p in partitions.partitions() if p.lower == first)
    detached = month.name + partitions.RETIRING
    try:
        with connection.cursor() as cur:
            cur.execute(f"ALTER TABLE results_measurement DETACH PARTITION {month.name}")
            cur.execute(f"ALTER TABLE {month.name} RENAME TO {detached}")
            cur.execute(f"COMMENT ON TABLE {detached} IS %s", [partitions._bound_comment(month)])
        assert Measurement.objects.count() == 0
        done = partitions.resume()
        assert [(r.name, r.moved, r.dropped) for r in done] == [(month.name, 2, 0)]  # both cells' newest
        assert {str(i) for i in Measurement.objects.values_list("id", flat=True)} == {m["id"] for m in ms}
        assert set(where(m["id"] for m in ms).values()) == {partitions.DEFAULT} and partitions._retiring() == []
    finally:
        migrate(BEFORE)
        latest()


def test_a_busy_table_postpones_the_drop_to_the_next_prune(client, write_key, monkeypatch):
    """A query holding the measurement table past LOCK_TIMEOUT: the prune drops nothing and fails nothing; the
    next one, the table free, drops the month."""
    import psycopg2
    from results import partitions, retention

    monkeypatch.setattr(partitions, "LOCK_TIMEOUT", "200ms")
    first = min(p.lower for p in partitions.partitions() if p.lower)
    now = partitions.at(partitions.add_months(first.date(), 1)) + timedelta(days=40)
    policy = retention.Policy(raw_days=30, file_days=30)
    ingest(client, write_key, [measurement("a", "b", finished=first + timedelta(days=3)),
                               measurement("a", "b", finished=now)], ingested_at=datetime.now(UTC) - timedelta(hours=1))
    s = connection.settings_dict
    reader = psycopg2.connect(dbname=s["NAME"], user=s["USER"], host=s["HOST"], port=s["PORT"],
                              password=s["PASSWORD"] or None)
    try:
        with reader.cursor() as cur:  # a long read, in a transaction still open
            cur.execute("SELECT count(*) FROM results_measurement")
        busy = retention.prune(now, policy)
        assert busy.partitions == [] and partitions.month_name(first.date()) in layout()
        reader.rollback()
        done = retention.prune(now, policy)
        assert done.partitions == [partitions.LEGACY, partitions.month_name(first.date())]
        assert done.measurements == 1
    finally:
        reader.close()
        migrate(BEFORE)
        latest()


def test_the_months_ahead_are_made_after_ingest_with_retention_off(client, write_key, monkeypatch):
    """The prune makes them, and so does the analysis after an ingest (hourly): with retention off (no prune),
    next months' rows still get a month of their own, not the default partition."""
    from results import analysis, partitions

    newest = max((p for p in partitions.partitions() if p.lower), key=lambda p: p.lower)
    with connection.cursor() as cur:
        cur.execute(f"DROP TABLE {newest.name}")  # ahead of now: empty
    assert newest.name not in layout()
    monkeypatch.setattr(analysis, "_ahead_last", [float("-inf")])
    monkeypatch.setattr(analysis, "_mode", lambda: "inline")
    ingest(client, write_key, [measurement("a", "b", finished=datetime.now(UTC) - timedelta(hours=1))])
    assert layout()[newest.name] == (newest.lower, newest.upper)
    with connection.cursor() as cur:
        cur.execute(f"DROP TABLE {newest.name}")
    ingest(client, write_key, [measurement("a", "b", finished=datetime.now(UTC) - timedelta(minutes=5))])
    assert newest.name not in layout()  # within the hour: not looked at again
    partitions.create_ahead(datetime.now(UTC))

"""Migration 0011_auth_cells on the suite's real PostgreSQL (and SQLite: TPCMESH_TEST_DB=sqlite), with rows from
before it: a pair measured in x509, then in token mode, had one cell (the token one had overwritten x509's). After
it: each cell has its measurement's mode, the x509 cell is back (its newest measurement), changes know their mode,
every cell's stored JSON names it. And back: one cell per setting again, the newest."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from tests.support.migrations import latest, migrate

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BEFORE = [("results", "0010_address_family")]
AFTER = [("results", "0011_auth_cells")]


def test_cells_get_their_mode_and_the_overwritten_modes_come_back():
    old = migrate(BEFORE)
    try:
        Node, Benchmark, Run = (old.get_model("results", m) for m in ("Node", "Benchmark", "Run"))
        Measurement, PairLatest, Change = (old.get_model("results", m) for m in ("Measurement", "PairLatest",
                                                                                  "Change"))
        a, b = Node.objects.create(name="a"), Node.objects.create(name="b")
        bench = Benchmark.objects.create(namespace="ns", name="mesh")
        now = datetime.now(UTC).replace(microsecond=0)
        made = {}
        for k, (protocol, auth, gbps) in enumerate([("xrootd-https", "x509", 2.0), ("xrootd-https", "x509", 2.1),
                                                     ("xrootd-https", "token", 1.0), ("xrootd-https", "token", 1.1),
                                                     ("gridftp", None, 3.0)]):
            at = now - timedelta(hours=5 - k)
            run = Run.objects.create(benchmark=bench, uid=f"u{k}", name=f"r{k}")
            made[k] = Measurement.objects.create(run=run, benchmark=bench, source=a, destination=b, protocol=protocol,
                                                 streams=8, throughput_gbps=gbps, status="succeeded", auth=auth,
                                                 started_at=at - timedelta(seconds=10), finished_at=at)
        for k in (3, 4):  # what ingest kept: the newest per (protocol, streams, family, cc, pair)
            m = made[k]
            PairLatest.objects.create(benchmark=bench, protocol=m.protocol, streams=8, source=a, destination=b,
                                      measurement=m, finished_at=m.finished_at, throughput_gbps=m.throughput_gbps,
                                      status="succeeded")
        Change.objects.create(benchmark=bench, source=a, destination=b, protocol="xrootd-https", streams=8,
                              metric="throughput_gbps", measurement=made[2], at=made[2].finished_at, before=2.05,
                              after=1.05, worse=True, detected_at=now, runs_to_detect=2)

        new = migrate(AFTER)
        PairLatest, Change = new.get_model("results", "PairLatest"), new.get_model("results", "Change")
        cells = {(c.protocol, c.auth): c for c in PairLatest.objects.all()}
        assert sorted(cells) == [("gridftp", ""), ("xrootd-https", "token"), ("xrootd-https", "x509")]
        x509 = cells[("xrootd-https", "x509")]
        assert (x509.measurement_id, x509.throughput_gbps, x509.repeats) == (made[1].id, 2.1, 1)
        assert cells[("xrootd-https", "token")].measurement_id == made[3].id
        for (_, auth), cell in cells.items():
            if connection.vendor == "postgresql":  # the stored JSON is PostgreSQL's (celljson.py)
                stored = json.loads("{" + cell.cell_json + "}")
                assert stored["auth"] == auth and stored["value"] == cell.throughput_gbps
        assert Change.objects.get().auth == "token"

        back = migrate(BEFORE)
        PairLatest = back.get_model("results", "PairLatest")
        assert sorted(PairLatest.objects.values_list("protocol", "measurement_id")) == [
            ("gridftp", made[4].id), ("xrootd-https", made[3].id)]
    finally:
        latest()

"""The implementation and versions a measurement was made with: stored at ingest (PostgreSQL's COPY path and
SQLite's), served by the measurements API, shown per row on the pair page with a version change between a cell's
consecutive runs marked, also beside a step it may explain; records without it stay valid."""

from datetime import UTC, datetime, timedelta

import pytest
from results.models import Measurement

from tests.integration.dashboard.test_api import post, results
from tests.integration.dashboard.test_sqlite_smoke import PREAMBLE, run_on_sqlite
from tests.support.dashboard import batch, measurement, page_table

pytestmark = [pytest.mark.integration]
T0 = datetime.now(UTC) - timedelta(days=2)


def impl(version: str, peer: str | None = "5.5.3", agent: str = "0.1.0") -> dict:
    return {"name": "xrootd", "version": version, "peer_version": peer, "agent_version": agent}


@pytest.mark.django_db
def test_the_implementation_is_stored_and_served(client, write_key):
    new, old = measurement("a", "b", files=1), measurement("b", "a")
    new["implementation"] = impl("5.5.3")
    r = post(client, batch([new, old]), write_key)
    assert r.status_code == 200, r.content
    assert Measurement.objects.get(id=new["id"]).implementation == new["implementation"]  # JSON through COPY
    assert Measurement.objects.get(id=old["id"]).implementation is None  # a record from before the field
    listed = {m["id"]: m for m in results(client.get("/api/v1/measurements/"))}
    assert listed[new["id"]]["implementation"] == new["implementation"]
    assert listed[old["id"]]["implementation"] is None
    assert client.get(f"/api/v1/measurements/{new['id']}/").json()["implementation"] == new["implementation"]
    bad = measurement("a", "b")
    bad["implementation"] = {"name": "xrootd", "version": "5.5.3 (patched)"}
    r = post(client, batch([bad]), write_key)
    assert r.status_code == 400 and "measurements[0].implementation.version" in r.content.decode()


@pytest.mark.django_db
def test_the_pair_page_shows_each_rows_versions_and_marks_a_change(client, write_key):
    # 8 runs: 10 Gbit/s with XRootD 5.5.3 at this end, then 5 Gbit/s after an upgrade to 5.6.1; a failed run (no
    # record of its versions) in between marks nothing
    rows = []
    for i in range(8):
        m = measurement("a", "b", gbps=10.0 if i < 4 else 5.0, finished=T0 + timedelta(hours=i))
        m["implementation"] = impl("5.5.3" if i < 4 else "5.6.1")
        rows.append(m)
    failed = measurement("a", "b", gbps=None, status="failed", error="agent b vanished",
                         finished=T0 + timedelta(hours=8))
    r = post(client, batch([*rows, failed]), write_key)
    assert r.status_code == 200, r.content
    newest = page_table(client, "/pair/a/b/", "newest")
    assert newest.count("<tr") == 1 + 9  # header + every run
    assert newest.count("xrootd 5.6.1, source 5.5.3, agent 0.1.0") == 4
    assert newest.count("xrootd 5.5.3, source 5.5.3, agent 0.1.0") == 4
    assert newest.count("version changed: xrootd 5.5.3 → 5.6.1") == 1  # at the first run of 5.6.1 only
    steps = page_table(client, "/pair/a/b/", "changes")
    assert "-50 %" in steps and "version changed: xrootd 5.5.3 → 5.6.1" in steps


SCRIPT = PREAMBLE + r"""
IMPL = {"name": "iperf3", "version": "3.12", "peer_version": "3.11", "agent_version": "0.1.0"}
m, old = measurement("a", "b"), measurement("b", "a")
m["implementation"] = IMPL
r = c.post("/api/v1/ingest/", json.dumps(batch([m, old])), content_type="application/json",
           HTTP_AUTHORIZATION="Token " + key)
assert r.status_code == 200 and r.json()["created"] == 2, r.content
got = {x["id"]: x["implementation"] for x in c.get("/api/v1/measurements/").json()["results"]}
assert got == {m["id"]: IMPL, old["id"]: None}, got
assert "iperf3 3.12, source 3.11" in c.get("/pair/a/b/").content.decode()
print("VERSIONS OK")
"""


def test_the_implementation_is_stored_and_served_on_sqlite(tmp_path):
    assert "VERSIONS OK" in run_on_sqlite(tmp_path, SCRIPT)

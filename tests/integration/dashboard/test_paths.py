"""Paths per pair through the API on the suite's PostgreSQL: stored from the rtt rows' `path`, a hop list that
differs from the pair's previous one is a Change of metric "path" (a silent hop is no change), a path MTU below the
source interface's is flagged, /api/v1/paths/ filters them, and the pair page shows them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.dashboard import batch, measurement, post_batch

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

DIRECT = ["198.18.2.2"]
VIA_ROUTER = ["198.18.1.1", "198.18.2.2"]


def probe(source, destination, t, hops, pmtu=1500, interface_mtu=1500, error=None):
    m = measurement(source, destination, protocol="rtt", finished=t, gbps=None)
    m["path"] = {"hops": hops, "pmtu": pmtu, "interface_mtu": interface_mtu, "reached": bool(hops), "error": error}
    return m


def ingest(client, key, ms, run):
    post_batch(client, key, batch(ms, run=run))


def test_a_route_change_is_a_path_change_and_a_small_pmtu_is_flagged(client, write_key):
    t0 = datetime.now(UTC) - timedelta(days=1)
    runs = [(DIRECT, 1500), ([None], 1500), (DIRECT, 1500), ([], None), (VIA_ROUTER, 1400), (VIA_ROUTER, 1400)]
    for k, (hops, pmtu) in enumerate(runs):
        error = None if hops else "path probe on a: tracepath is not installed"
        ingest(client, write_key, [probe("a", "b", t0 + timedelta(hours=k), hops, pmtu, error=error),
                                   probe("b", "a", t0 + timedelta(hours=k), ["198.18.0.1"])], f"r{k}")
    listed = client.get("/api/v1/paths/?source=a&destination=b&ordering=at").json()
    assert listed["count"] == 6
    rows = listed["results"]
    assert [r["changed"] for r in rows] == [None, False, False, None, True, False]  # a silent hop matches
    assert rows[4]["hops"] == VIA_ROUTER and rows[4]["pmtu_reduced"] is True and rows[0]["pmtu_reduced"] is False
    assert rows[3]["error"].startswith("path probe on a") and rows[3]["hop_count"] == 0
    assert rows[4]["run"] == "uid-r4"

    (c,) = client.get("/api/v1/changes/?metric=path").json()["results"]
    assert (c["source"], c["destination"], c["protocol"], c["before"], c["after"], c["worse"]) == (
        "a", "b", "rtt", 1.0, 2.0, True)
    assert c["measurement"] == rows[4]["measurement"]
    assert client.get("/api/v1/paths/?changed=true").json()["count"] == 1
    assert client.get("/api/v1/paths/?pmtu_reduced=true&node=a").json()["count"] == 2
    assert client.get("/api/v1/paths/?run=uid-r5&source=b").json()["count"] == 1
    assert client.get("/api/v1/paths/?changed=maybe").status_code == 400

    page = client.get("/pair/a/b/").content.decode()
    assert 'id="paths"' in page and "198.18.1.1" in page and "PMTU 1400 &lt; interface MTU 1500" in page
    assert '"paths"' in page  # the path changes go to the time axis' plot data
    problems = client.get("/problems/mesh/nightly/").content.decode()
    assert "1 hops" in problems and "2 hops" in problems and "route changed" in problems


def test_a_hop_that_is_not_an_address_is_refused(client, write_key):
    m = probe("a", "b", datetime.now(UTC), ["no reply"])
    r = client.post("/api/v1/ingest/", json.dumps(batch([m], run="bad")), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 400 and "hops" in json.dumps(r.json())

"""The grid keyed by the auth mode (issue #13, the dashboard's side), on the suite's real PostgreSQL: like the
address family, each mode (token, x509, none; "" for a protocol without modes) is a cell of its own, so a benchmark
whose spec.auth changed no longer mixes modes in one cell where the newest won silently. The API and the page show
one mode (the newest unless asked), the pair page and history name each, change detection and the problem rules
keep them apart, and the database's paths (JSON, window aggregates) equal the portable one. TPCMESH_TEST_DB=sqlite
runs them on SQLite (the portable paths of ingest, the grid and change detection)."""

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from results.models import Change, Measurement, PairLatest, Problem

from tests.support.dashboard import batch, measurement, post_batch

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
BENCH = "mesh/modes"
GRID = f"/api/v1/grid/?benchmark={BENCH}&protocol=xrootd-https"


def _measurement(auth: str | None, gbps: float, finished: datetime, src="a", dst="b", protocol="xrootd-https",
                 **kwargs) -> dict:
    m = measurement(src, dst, protocol=protocol, streams=8, gbps=gbps, finished=finished, **kwargs)
    m["auth"] = auth
    return m


def _ingest(client, key, ms, run):
    post_batch(client, key, batch(ms, name="modes", run=run))


def _grid(client, query: str = "") -> list[dict]:
    r = client.get(GRID + query, HTTP_ACCEPT="application/json")
    assert r.status_code == 200, r.content
    return r.json()["cells"]


def _cells(client, query: str = "") -> dict[tuple, float]:
    return {(c["source"], c["destination"], c["auth"]): c["value"] for c in _grid(client, query)}


@pytest.fixture
def switched(client, write_key):
    """A benchmark that ran with spec.auth x509, then switched to token: a→b in both modes (x509 first), b→a in
    x509 only, and a gridftp cell with no mode; two runs per mode."""
    now = datetime.now(UTC).replace(microsecond=0)
    for k, (auth, hours) in enumerate([("x509", 4), ("x509", 3), ("token", 2), ("token", 1)]):
        at = now - timedelta(hours=hours)
        ms = [_measurement(auth, (2.0 if auth == "x509" else 1.0) + 0.1 * k, at),
              _measurement(None, 3.0 + k, at, protocol="gridftp")]
        if auth == "x509":
            ms.append(_measurement("x509", 4.0 + k, at, src="b", dst="a"))
        _ingest(client, write_key, ms, f"r{k}")
    return now


def test_each_auth_mode_is_a_cell_of_its_own(client, switched):
    cells = PairLatest.objects.filter(benchmark__name="modes")
    assert sorted(cells.values_list("protocol", "source__name", "auth")) == [
        ("gridftp", "a", ""), ("xrootd-https", "a", "token"), ("xrootd-https", "a", "x509"),
        ("xrootd-https", "b", "x509")]
    # default: the newest mode of the protocol (the benchmark's spec.auth now), cells carry it
    assert _cells(client) == {("a", "b", "token"): pytest.approx(1.3)}
    assert _cells(client, "&auth=x509") == {("a", "b", "x509"): pytest.approx(2.1), ("b", "a", "x509"): 5.0}
    assert _cells(client, "&auth=none") == {}
    # a protocol without modes: its cells, auth ""
    r = client.get(f"/api/v1/grid/?benchmark={BENCH}&protocol=gridftp", HTTP_ACCEPT="application/json")
    assert [(c["auth"], c["value"]) for c in r.json()["cells"]] == [("", 6.0)]
    # a window's mean and median per mode (two runs each)
    assert _cells(client, "&mode=mean&window=1d&auth=x509") == {("a", "b", "x509"): pytest.approx(2.05),
                                                                ("b", "a", "x509"): pytest.approx(4.5)}
    assert _cells(client, "&mode=median&window=1d") == {("a", "b", "token"): pytest.approx(1.25)}


def _postgresql_only() -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the database-built JSON is PostgreSQL's (TPCMESH_TEST_DB=sqlite runs the portable paths)")


def test_the_stored_cell_json_carries_the_mode(switched):
    _postgresql_only()
    stored = json.loads("{" + PairLatest.objects.get(auth="token").cell_json + "}")
    assert stored["auth"] == "token" and stored["value"] == pytest.approx(1.3)


def test_the_combined_grid_of_clusters_keeps_modes_and_families_apart(client, write_key):
    """Two clusters' mesh/modes in one grid (no cluster=): one mode at a time like one cluster's grid, and a
    pair's IPv4 and IPv6 cells (no address_family=) both shown, not the newer one alone."""
    now = datetime.now(UTC).replace(microsecond=0)
    for cluster, auth, hours in (("east", "x509", 3), ("west", "token", 1)):
        v6 = _measurement(auth, 7.0, now - timedelta(hours=hours))
        v6["address_family"] = "ipv6"
        body = batch([_measurement(auth, 5.0 if auth == "x509" else 6.0, now - timedelta(hours=hours)), v6],
                     name="modes", run=f"c-{cluster}", cluster=cluster)
        r = client.post("/api/v1/ingest/", body, format="json", HTTP_AUTHORIZATION=f"Token {write_key}")
        assert r.status_code == 200, r.content
    got = {(c["source"], c["address_family"], c["auth"]): c["value"] for c in _grid(client)}
    assert got == {("west:a", "ipv4", "token"): 6.0, ("west:a", "ipv6", "token"): 7.0}
    got = {(c["source"], c["address_family"], c["auth"]): c["value"] for c in _grid(client, "&auth=x509")}
    assert got == {("east:a", "ipv4", "x509"): 5.0, ("east:a", "ipv6", "x509"): 7.0}


def test_database_paths_equal_the_portable_one(client, switched):
    from results import maintenance, selectors
    from results.api.views import grid_json
    from results.models import Benchmark

    _postgresql_only()
    bench = Benchmark.objects.get(name="modes")
    key = lambda c: (c["source"], c["destination"], c["auth"])  # noqa: E731
    for mode in selectors.GRID_MODES:
        for pick in (selectors.Pick(), selectors.Pick(auth="x509"), selectors.Pick(8, auth="token"),
                     selectors.Pick(auth="none")):
            rows = selectors.grid(bench, "xrootd-https", streams=pick.streams, mode=mode, window=timedelta(days=1),
                                  auth=pick.auth)
            at = rows["generated_at"]
            bounds = bench.effective_thresholds()["throughput"]
            names = {n.id: n.name for n in selectors.benchmark_nodes(bench)}
            portable = selectors._cells_in_python(bench, "xrootd-https", pick, at, bounds, mode, timedelta(days=1),
                                                  names, maintenance.overlay(at))
            fast = json.loads(selectors.grid_cells_json(bench, "xrootd-https", pick, at, bounds, mode,
                                                        timedelta(days=1)))
            want = sorted(grid_json({**rows, "cells": portable})["cells"], key=key)
            assert bool(want) == (pick.auth != "none"), (mode, pick)
            for got in (sorted(grid_json(rows)["cells"], key=key), sorted(fast, key=key)):
                assert [key(c) for c in got] == [key(c) for c in want], (mode, pick)
                assert [c["value"] for c in got] == pytest.approx([c["value"] for c in want]), (mode, pick)


def test_a_bad_mode_is_refused_naming_the_allowed_ones(client, switched):
    r = client.get(GRID + "&auth=kerberos", HTTP_ACCEPT="application/json")
    assert r.status_code == 400, r.content
    assert r.json()["errors"] == [{"field": "auth", "message": "'kerberos' is not one of token, x509, none"}]
    page = client.get(f"/grid/{BENCH}/?protocol=xrootd-https&auth=kerberos")
    assert page.status_code == 400 and "token, x509, none" in page.content.decode()


def test_the_page_draws_one_mode_and_links_the_comparison(client, switched):
    page = client.get(f"/grid/{BENCH}/?protocol=xrootd-https").content.decode()
    assert 'name="auth"' in page
    assert '<option value="token" selected>token</option>' in page and '<option value="x509">x509</option>' in page
    assert 'href="/compare/mesh/modes/' in page and "compare token vs x509" in page
    # tooltips carry [value, finished]: the newest token value (1.3) by default, x509's (2.1 and 5) when asked
    assert "[1.3," in page and "[2.1," not in page
    x509 = client.get(f"/grid/{BENCH}/?protocol=xrootd-https&auth=x509").content.decode()
    assert '<option value="x509" selected>x509</option>' in x509
    assert "[2.1," in x509 and re.search(r"\[5(\.0)?,", x509) and "[1.3," not in x509  # 5.0 is 5 on PostgreSQL
    # one mode only: no selector, no comparison link
    gridftp = client.get(f"/grid/{BENCH}/?protocol=gridftp").content.decode()
    assert 'name="auth"' not in gridftp and "compare-auth" not in gridftp and re.search(r"\[6(\.0)?,", gridftp)


def test_the_pair_page_and_history_name_each_mode(client, switched):
    page = client.get("/pair/a/b/?benchmark=mesh/modes").content.decode()
    data = json.loads(re.search(r'<script id="pair-data" type="application/json">(.*?)</script>', page, re.S)[1])
    assert sorted(data["throughput"]) == ["gridftp ×8 a → b", "xrootd-https ×8 token a → b",
                                          "xrootd-https ×8 x509 a → b", "xrootd-https ×8 x509 b → a"]
    assert [v for _, v in data["throughput"]["xrootd-https ×8 x509 a → b"]] == [2.0, 2.1]
    r = client.get("/api/v1/pairs/history/?source=a&destination=b&benchmark=mesh/modes",
                   HTTP_ACCEPT="application/json")
    assert r.status_code == 200, r.content
    seen = sorted((p["protocol"], p["source"], p["auth"]) for p in r.json())
    assert seen == sorted([("xrootd-https", "a", "x509")] * 2 + [("xrootd-https", "a", "token")] * 2
                          + [("xrootd-https", "b", "x509")] * 2 + [("gridftp", "a", None)] * 4)


def test_a_mode_switch_is_two_cells_not_a_step(client, write_key):
    """x509 at 2 Gbit/s, then token at 1 Gbit/s on the same pair and setting: two cells, each steady, no change.
    The same halving within one mode is a change (the detection still works on a mode's own history)."""
    from results import analysis

    now = datetime.now(UTC).replace(microsecond=0)
    for k in range(16):
        at = now - timedelta(hours=16 - k)
        noise = 0.01 * (k % 3)
        _ingest(client, write_key, [
            _measurement("x509" if k < 8 else "token", (2.0 if k < 8 else 1.0) + noise, at),
            _measurement("none", (2.0 if k < 8 else 1.0) + noise, at, src="b", dst="a")], f"s{k}")
    analysis.detect_changes()
    cells = PairLatest.objects.filter(benchmark__name="modes", source__name="a")
    assert sorted(cells.values_list("auth", flat=True)) == ["token", "x509"]
    found = list(Change.objects.filter(benchmark__name="modes"))
    assert [(c.source.name, c.auth, c.worse) for c in found] == [("b", "none", True)], found
    assert Measurement.objects.filter(benchmark__name="modes", auth="token").count() == 8
    r = client.get("/api/v1/changes/?benchmark=mesh/modes", HTTP_ACCEPT="application/json")
    assert [(c["source"], c["protocol"], c["auth"], c["address_family"], c["congestion_control"])
            for c in r.json()["results"]] == [("b", "xrootd-https", "none", "ipv4", "")]
    for query, found_count in (("auth=none", 1), ("auth=token", 0), ("auth=token&auth=x509", 0)):
        r = client.get(f"/api/v1/changes/?benchmark=mesh/modes&{query}", HTTP_ACCEPT="application/json")
        assert (r.status_code, r.json()["count"]) == (200, found_count), (query, r.content)
    r = client.get("/api/v1/changes/?benchmark=mesh/modes&auth=bearer", HTTP_ACCEPT="application/json")
    assert r.status_code == 400 and "auth" in r.json()["errors"][0]["field"], r.content
    assert "<td>xrootd-https ×8 none</td>" in client.get("/problems/mesh/modes/").content.decode()


def test_problems_compare_cells_within_their_mode(client, write_key):
    """a→b failed in token mode and fine in x509; b→a fine in token mode: the one-direction rule compares a→b's
    token cell with b→a's token cell (a finding naming the mode), never with the x509 one."""
    from results import analysis
    from results.models import Benchmark

    now = datetime.now(UTC).replace(microsecond=0)
    _ingest(client, write_key, [_measurement("x509", 40.0, now - timedelta(hours=2))], "p0")
    _ingest(client, write_key, [
        _measurement("token", None, now - timedelta(hours=1), status="failed", error="403 token expired"),
        _measurement("token", 40.0, now - timedelta(hours=1), src="b", dst="a")], "p1")
    analysis.evaluate_problems(Benchmark.objects.get(name="modes"))  # the ingest's own runs after a commit
    found = list(Problem.objects.filter(benchmark__name="modes", resolved_at__isnull=True))
    assert [(p.kind, p.key, p.cells) for p in found] == [
        ("one-direction", "one-direction:a|b|xrootd-https|8|token", [["a", "b", "xrootd-https", 8, "token"]])], found
    assert "xrootd-https ×8 token" in found[0].summary


def test_cells_without_a_mode_are_not_the_default_when_some_have_one(client, write_key):
    """Older records (a failure from before the operator named its mode, a measurement from before modes were
    recorded) make cells of no mode; the default stays the newest real mode even when such a cell is newer."""
    now = datetime.now(UTC).replace(microsecond=0)
    _ingest(client, write_key, [_measurement("x509", 2.0, now - timedelta(hours=3)),
                                _measurement("token", 1.0, now - timedelta(hours=2))], "o0")
    _ingest(client, write_key, [_measurement(None, None, now - timedelta(hours=1), status="failed",
                                             error="agent b vanished")], "o1")
    assert sorted(PairLatest.objects.values_list("auth", flat=True)) == ["", "token", "x509"]
    assert _cells(client) == {("a", "b", "token"): 1.0}

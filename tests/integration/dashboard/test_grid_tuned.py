"""The grid of a tuned benchmark (spec.optimize, issue #14's follow-up), on the suite's real PostgreSQL: the
optimizer gives each link its own streams × files, so one stream count shows part of the mesh only. The pick
streams=newest shows each link's newest cell whatever its streams, naming the streams and concurrency it ran; an
older measurement at another stream count never wins; integer picks are as before; the database's paths (JSON,
window aggregates, the page's drawn cells) equal the portable one. TPCMESH_TEST_DB=sqlite runs them on SQLite (the
portable paths)."""

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from results.models import PairLatest

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
BENCH = "mesh/tuned"
GRID = f"/api/v1/grid/?benchmark={BENCH}&protocol=builtin"
OPTIMIZE = {"optimize": True, "optimizeBounds": {"streamsMax": 16, "concurrencyMax": 8}}

# the links' settings (streams, files) and Gbit/s per run: the climb's start, then each link's tuned setting
START = {link: (1, 1, 1.0) for link in ("ab", "ac", "ba", "bc", "ca", "cb")}
TUNED = {"ab": (4, 2, 4.2), "ac": (8, 1, 8.1), "ba": (16, 4, 16.4), "bc": (4, 1, 4.1), "ca": (8, 2, 8.2),
         "cb": (16, 1, 16.1)}
# the newest run moves two links (a→b to 8 streams, c→b down to 4) and measures b→a at its setting again
NEWER = {"ab": (8, 2, 8.3), "ba": (16, 4, 17.0), "cb": (4, 2, 4.5)}
NEWEST = {**TUNED, **NEWER}  # each link's newest setting and value


def _measurements(settings: dict, at: datetime) -> list[dict]:
    return [measurement(link[0], link[1], protocol="builtin", streams=st, concurrency=files, gbps=gbps, finished=at)
            for link, (st, files, gbps) in settings.items()]


def _ingest(client, key, ms, run, spec=None, cluster=None):
    body = batch(ms, name="tuned", run=run, cluster=cluster)
    body["benchmark"]["spec"] = OPTIMIZE if spec is None else spec
    r = client.post("/api/v1/ingest/", body, format="json", HTTP_AUTHORIZATION=f"Token {key}")
    assert r.status_code == 200, r.content


def _grid(client, query: str = "") -> list[dict]:
    r = client.get(GRID + query, HTTP_ACCEPT="application/json")
    assert r.status_code == 200, r.content
    return r.json()["cells"]


def _links(cells: list[dict]) -> dict[str, tuple]:
    """link -> (streams, concurrency, value); one cell per link or the test fails."""
    out = {c["source"] + c["destination"]: (c["streams"], c.get("concurrency"), c["value"]) for c in cells}
    assert len(out) == len(cells), cells
    return out


@pytest.fixture
def tuned(client, write_key):
    now = datetime.now(UTC).replace(microsecond=0)
    for run, (settings, hours) in enumerate(((START, 4), (TUNED, 3), (NEWER, 1))):
        _ingest(client, write_key, _measurements(settings, now - timedelta(hours=hours)), f"t{run}")
    return now


def test_a_tuned_mesh_shows_every_link_in_one_grid_with_its_own_setting(client, tuned):
    newest = _links(_grid(client, "&streams=newest"))
    assert newest == {link: pytest.approx(s) for link, s in NEWEST.items()}
    assert {st for st, _, _ in newest.values()} == {4, 8, 16}  # no one stream count shows this mesh
    # each cell is the link's newest PairLatest row, with the state and age of any cell
    cells = {c["source"] + c["destination"]: c for c in _grid(client, "&streams=newest")}
    assert cells["ab"]["state"] in ("ok", "warning", "critical") and cells["ab"]["age_seconds"] < 2 * 3600
    assert cells["ac"]["age_seconds"] > 2 * 3600  # a→c was not measured in the newest run: its r1 cell


def test_integer_picks_are_unchanged(client, tuned):
    assert PairLatest.objects.filter(benchmark__name="tuned").count() == 6 + 6 + 2  # start, tuned, two moved
    every = _grid(client)
    assert len(every) == 14 and all("concurrency" not in c for c in every)
    eight = {(c["source"] + c["destination"], c["streams"]): c["value"] for c in _grid(client, "&streams=8")}
    assert eight == {("ab", 8): pytest.approx(8.3), ("ac", 8): pytest.approx(8.1), ("ca", 8): pytest.approx(8.2)}
    one = _grid(client, "&streams=1")
    assert len(one) == 6 and {c["value"] for c in one} == {1.0}


def test_an_older_measurement_at_another_stream_count_never_wins(client, write_key, tuned):
    """A late batch of an older run (2 h ago, between the tuned and the newest run) at 32 streams: its own cells
    exist, but the newest pick keeps each link's newer cells; a link whose newest it is (a→c, b→c) shows it."""
    late = {"ab": (32, 1, 32.0), "ac": (32, 1, 32.1), "ba": (32, 1, 32.2), "bc": (32, 8, 32.3)}
    _ingest(client, write_key, _measurements(late, tuned - timedelta(hours=2)), "late")
    assert len(_grid(client, "&streams=32")) == 4
    want = {**NEWEST, "ac": late["ac"], "bc": late["bc"]}
    assert _links(_grid(client, "&streams=newest")) == {link: pytest.approx(s) for link, s in want.items()}


def test_equally_new_cells_show_the_most_streams(client, write_key, tuned):
    at = tuned - timedelta(minutes=30)
    _ingest(client, write_key, [
        measurement("a", "c", protocol="builtin", streams=st, concurrency=2, gbps=st + 0.5, finished=at)
        for st in (2, 12, 6)], "tie")
    assert _links(_grid(client, "&streams=newest"))["ac"] == (12, 2, 12.5)


def test_a_failed_newest_measurement_shows_as_the_links_cell(client, write_key, tuned):
    _ingest(client, write_key, [measurement("c", "a", protocol="builtin", streams=8, concurrency=2, gbps=None,
                                            status="failed", error="agent c gone", finished=tuned)], "fail")
    cell = next(c for c in _grid(client, "&streams=newest") if c["source"] + c["destination"] == "ca")
    assert (cell["state"], cell["error"], cell["streams"], cell["concurrency"]) == ("failed", "agent c gone", 8, 2)


def test_a_window_aggregates_each_links_newest_streams(client, tuned):
    """mean/median with streams=newest: per link, the window's aggregate of its newest cell's stream count (b→a
    ran 16 streams twice; a→b's 4-stream run is another setting than its newest, 8), no single concurrency."""
    mean = _links(_grid(client, "&streams=newest&mode=mean&window=1d"))
    assert mean == {**{link: (st, None, pytest.approx(g)) for link, (st, _, g) in NEWEST.items()},
                    "ba": (16, None, pytest.approx((16.4 + 17.0) / 2))}
    median = {c["source"] + c["destination"]: c["count"] for c in _grid(client, "&streams=newest&mode=median")}
    assert median == {"ab": 1, "ac": 1, "ba": 2, "bc": 1, "ca": 1, "cb": 1}


def test_a_bad_streams_value_is_refused_naming_the_allowed_ones(client, tuned):
    for bad in ("most", "101", "-1", "Newest"):
        r = client.get(GRID + f"&streams={bad}", HTTP_ACCEPT="application/json")
        assert r.status_code == 400, (bad, r.content)
        [error] = r.json()["errors"]
        assert error["field"] == "streams" and "0 to 100" in error["message"] and "newest" in error["message"], error
    page = client.get(f"/grid/{BENCH}/?protocol=builtin&streams=most")
    assert page.status_code == 400 and "nor newest" in page.content.decode()


def _tips(page: str) -> dict:
    return json.loads(re.search(r'<script id="grid-data" type="application/json">(.*?)</script>', page, re.S)[1])


def test_the_page_defaults_to_newest_for_a_tuned_benchmark(client, tuned):
    page = client.get(f"/grid/{BENCH}/?protocol=builtin").content.decode()
    assert '<option value="newest" selected>newest (tuned)</option>' in page
    assert '<option value="16">16</option>' in page and 'value="streams"' not in page  # no "N vs M streams"
    data = _tips(page)
    assert data["high"] == "newest"
    # rows and columns a, b, c; each half [value, epoch, status, error, streams, concurrency]
    names = ["a", "b", "c"]
    halves = {names[r] + names[c]: cell[0] for r, row in enumerate(data["cells"]) for c, cell in enumerate(row)
              if cell is not None}
    assert {link: (h[2], h[3], h[4], h[5]) for link, h in halves.items()} == {
        link: (None, None, st, files) for link, (st, files, _) in NEWEST.items()}
    assert {link: h[0] for link, h in halves.items()} == {link: pytest.approx(g) for link, (_, _, g) in NEWEST.items()}
    # an integer pick draws that stream count's cells only, as before
    four = _tips(client.get(f"/grid/{BENCH}/?protocol=builtin&streams=4").content.decode())
    drawn = {names[r] + names[c]: cell[0] for r, row in enumerate(four["cells"]) for c, cell in enumerate(row)
             if cell is not None and cell[0] is not None}
    assert four["high"] == 4 and sorted(drawn) == ["ab", "bc", "cb"] and all(len(h) == 2 for h in drawn.values())


def test_the_page_defaults_to_the_largest_streams_when_not_tuned(client, write_key, tuned):
    # the operator's next batch carries the spec without optimize (a measurement older than every cell's)
    _ingest(client, write_key, [measurement("a", "b", protocol="builtin", finished=tuned - timedelta(days=1))],
            "untuned", spec={"streams": [1, 16]})
    page = client.get(f"/grid/{BENCH}/?protocol=builtin").content.decode()
    assert '<option value="16" selected>16</option>' in page
    assert '<option value="newest">newest (tuned)</option>' in page
    assert _tips(page)["high"] == 16
    newest = client.get(f"/grid/{BENCH}/?protocol=builtin&streams=newest&split=streams").content.decode()
    assert '<option value="newest" selected>' in newest and _tips(newest)["split"] == "direction"


def test_the_combined_grid_of_clusters_shows_each_links_newest(client, write_key):
    """Two clusters' mesh/tuned in one grid (no cluster=): each cluster's links at their newest setting."""
    now = datetime.now(UTC).replace(microsecond=0)
    for cluster, settings in (("east", [(4, 2, 1.0, 3), (8, 2, 2.0, 1)]), ("west", [(16, 4, 3.0, 2), (4, 1, 4.0, 3)])):
        for k, (st, files, gbps, hours) in enumerate(settings):
            _ingest(client, write_key, [measurement("a", "b", protocol="builtin", streams=st, concurrency=files,
                                                    gbps=gbps, finished=now - timedelta(hours=hours))],
                    f"{cluster}{k}", cluster=cluster)
    assert _links(_grid(client, "&streams=newest")) == {"east:aeast:b": (8, 2, 2.0), "west:awest:b": (16, 4, 3.0)}
    assert len(_grid(client, "&streams=4")) == 2


def _postgresql_only() -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the database-built JSON is PostgreSQL's (TPCMESH_TEST_DB=sqlite runs the portable paths)")


def test_database_paths_equal_the_portable_one(client, write_key, tuned):
    from django.utils import timezone
    from results import maintenance, selectors
    from results.api.views import grid_json
    from results.models import Benchmark

    _postgresql_only()
    # a tie and a failure too: the SQL's DISTINCT ON orders as the portable path does
    _ingest(client, write_key, [
        *[measurement("a", "c", protocol="builtin", streams=st, concurrency=3, gbps=st + 0.5, finished=tuned)
          for st in (2, 12, 6)],
        measurement("c", "a", protocol="builtin", streams=8, concurrency=2, gbps=None, status="failed",
                    error="agent c gone", finished=tuned)], "more")
    bench = Benchmark.objects.get(name="tuned")
    key = lambda c: (c["source"], c["destination"])  # noqa: E731
    window = timedelta(days=1)
    for mode in selectors.GRID_MODES:
        for pick in (selectors.Pick(selectors.NEWEST), selectors.Pick(selectors.NEWEST, "ipv4", "", "")):
            rows = selectors.grid(bench, "builtin", streams=pick.streams, mode=mode, window=window,
                                  address_family=pick.address_family, congestion_control=pick.congestion_control,
                                  auth=pick.auth)
            at = rows["generated_at"]
            bounds = bench.effective_thresholds()["throughput"]
            names = {n.id: n.name for n in selectors.benchmark_nodes(bench)}
            portable = selectors._cells_in_python(bench, "builtin", pick, at, bounds, mode, window, names,
                                                  maintenance.overlay(at))
            fast = json.loads(selectors.grid_cells_json(bench, "builtin", pick, at, bounds, mode, window))
            want = sorted(grid_json({**rows, "cells": portable})["cells"], key=key)
            assert len(want) == 6, (mode, pick)
            assert [(c["streams"], c["concurrency"]) for c in want if key(c) == ("a", "c")] == [
                (12, 3 if mode == "latest" else None)]
            for got in (sorted(grid_json(rows)["cells"], key=key), sorted(fast, key=key)):
                assert [(key(c), c["streams"], c["concurrency"], c["status"], c["state"], c["count"])
                        for c in got] == [(key(c), c["streams"], c["concurrency"], c["status"], c["state"],
                                           c["count"]) for c in want], (mode, pick)
                assert [c["value"] for c in got] == pytest.approx([c["value"] for c in want]), (mode, pick)
    # the page's cells, drawn by the database from PairLatest (lean) and from grid() (portable)
    at = timezone.now()
    lean = selectors.drawn_cells(None, bench, "builtin", selectors.NEWEST, at, "ipv4", "", "")
    portable_drawn = selectors.drawn_cells(selectors.grid(bench, "builtin", selectors.NEWEST, now=at,
                                                          address_family="ipv4", congestion_control="", auth=""),
                                           bench, "builtin", selectors.NEWEST, at, "ipv4", "", "")
    assert lean.keys() == portable_drawn.keys() and len(lean) == 6
    assert all(k[2] == selectors.NEWEST for k in lean)
    for k, (state, stale, info) in portable_drawn.items():
        have, want_info = json.loads(lean[k][2]), json.loads(info)
        assert lean[k][:2] == (state, stale) and have[1:] == want_info[1:], k
        assert have[0] == (None if want_info[0] is None else pytest.approx(want_info[0], abs=0.0011)), k
    assert json.loads(lean[("c", "a", selectors.NEWEST)][2])[2:] == ["failed", "agent c gone", 8, 2]

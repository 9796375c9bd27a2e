"""The grid keyed by address family and congestion control (issue #15), on the suite's real PostgreSQL: each is a
setting of its own like streams, so an IPv6 or a bbr result never overwrites the IPv4 or cubic one of its pair;
the API and the page filter by them; the database's paths (JSON, window aggregates) equal the portable one."""

from datetime import UTC, datetime, timedelta

import pytest
from results.models import Change, Measurement, PairLatest

from tests.support.dashboard import batch, measurement, post_batch

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
GRID = "/api/v1/grid/?benchmark=mesh/settings&protocol=builtin"
SETTINGS = [("ipv4", None, 10.0), ("ipv4", "cubic", 11.0), ("ipv4", "bbr", 12.0), ("ipv6", "cubic", 21.0),
            ("ipv6", "bbr", 22.0)]


def _measurement(family: str | None, cc: str | None, gbps: float, finished: datetime, src="a", dst="b") -> dict:
    m = measurement(src, dst, protocol="builtin", streams=8, gbps=gbps, finished=finished)
    if family is not None:
        m["address_family"] = family
    m["congestion_control"] = cc
    return m


def _ingest(client, key, ms, run):
    post_batch(client, key, batch(ms, name="settings", run=run))


def _cells(client, query: str = "") -> dict[tuple, float]:
    r = client.get(GRID + query, HTTP_ACCEPT="application/json")
    assert r.status_code == 200, r.content
    return {(c["source"], c["destination"], c["address_family"], c["congestion_control"]): c["value"]
            for c in r.json()["cells"]}


@pytest.fixture
def mesh(client, write_key):
    now = datetime.now(UTC).replace(microsecond=0)
    # two runs: the newer one's values are the older one's + 1; each setting its own cell
    for k, at in enumerate((now - timedelta(hours=3), now - timedelta(hours=1))):
        ms = [_measurement(f, cc, g + k, at) for f, cc, g in SETTINGS]
        ms.append(_measurement(None, None, 5.0 + k, at, src="b", dst="a"))  # a batch from before IPv6: ipv4
        _ingest(client, write_key, ms, f"r{k}")
    return now


def test_each_family_and_congestion_control_is_a_cell_of_its_own(client, mesh):
    assert PairLatest.objects.filter(benchmark__name="settings").count() == len(SETTINGS) + 1
    assert Measurement.objects.filter(address_family="ipv6").count() == 4
    assert Measurement.objects.get(source__name="b", finished_at__gt=mesh - timedelta(hours=2)).address_family == "ipv4"
    every = _cells(client)
    want = {("a", "b", f, cc or ""): g + 1 for f, cc, g in SETTINGS} | {("b", "a", "ipv4", ""): 6.0}
    assert every == want
    assert _cells(client, "&address_family=ipv6") == {k: v for k, v in want.items() if k[2] == "ipv6"}
    assert _cells(client, "&congestion_control=bbr") == {k: v for k, v in want.items() if k[3] == "bbr"}
    assert _cells(client, "&address_family=ipv4&congestion_control=default") == {
        ("a", "b", "ipv4", ""): 11.0, ("b", "a", "ipv4", ""): 6.0}
    # a window's mean, per setting (two runs each)
    mean = _cells(client, "&mode=mean&window=1d&address_family=ipv6")
    assert mean == {("a", "b", "ipv6", "cubic"): 21.5, ("a", "b", "ipv6", "bbr"): 22.5}


def test_database_paths_equal_the_portable_one(client, mesh):
    from results import maintenance, selectors
    from results.api.views import grid_json
    from results.models import Benchmark

    bench = Benchmark.objects.get(name="settings")
    key = lambda c: (c["source"], c["destination"], c["address_family"], c["congestion_control"])  # noqa: E731
    for mode in selectors.GRID_MODES:
        for pick in (selectors.Pick(), selectors.Pick(8, "ipv6"), selectors.Pick(None, "ipv4", ""),
                     selectors.Pick(None, None, "bbr")):
            rows = selectors.grid(bench, "builtin", streams=pick.streams, mode=mode, window=timedelta(days=1),
                                  address_family=pick.address_family, congestion_control=pick.congestion_control)
            at = rows["generated_at"]
            bounds = bench.effective_thresholds()["throughput"]
            names = {n.id: n.name for n in selectors.benchmark_nodes(bench)}
            portable = selectors._cells_in_python(bench, "builtin", pick, at, bounds, mode, timedelta(days=1), names,
                                                  maintenance.overlay(at))
            import json
            fast = json.loads(selectors.grid_cells_json(bench, "builtin", pick, at, bounds, mode, timedelta(days=1)))
            want = sorted(grid_json({**rows, "cells": portable})["cells"], key=key)
            assert want, (mode, pick)
            for got in (sorted(grid_json(rows)["cells"], key=key), sorted(fast, key=key)):
                assert [key(c) for c in got] == [key(c) for c in want], (mode, pick)
                assert [c["value"] for c in got] == pytest.approx([c["value"] for c in want]), (mode, pick)



@pytest.mark.parametrize("mode", ["latest", "median"])
def test_the_database_json_joined_in_chunks_is_the_whole_array(mesh, monkeypatch, mode):
    """grid_cells_json's rows of JSON_CHUNK cells each, joined by Python, are the one array the database would
    join: every cell once, in the database's order, byte for byte (here 6 cells in chunks of 4, and of 1)."""
    from results import selectors
    from results.models import Benchmark

    bench = Benchmark.objects.get(name="settings")
    bounds = bench.effective_thresholds()["throughput"]

    def cells(chunk: int) -> bytes:
        monkeypatch.setattr(selectors, "JSON_CHUNK", chunk)
        return selectors.grid_cells_json(bench, "builtin", selectors.Pick(), mesh, bounds, mode, timedelta(days=1))

    whole = cells(10**6)
    import json
    assert len(json.loads(whole)) == len(SETTINGS) + 1
    assert cells(4) == whole
    assert cells(1) == whole

def test_bad_settings_are_refused_with_the_parameter_named(client, mesh):
    r = client.get(GRID + "&address_family=ipv5", HTTP_ACCEPT="application/json")
    assert r.status_code == 400 and "address_family" in r.content.decode()
    r = client.get(GRID + "&congestion_control=Bad-Name", HTTP_ACCEPT="application/json")
    assert r.status_code == 400 and "congestion_control" in r.content.decode()


def test_measurements_filter_by_family(client, mesh):
    r = client.get("/api/v1/measurements/?benchmark=mesh/settings&address_family=ipv6", HTTP_ACCEPT="application/json")
    assert r.status_code == 200, r.content
    rows = r.json()["results"]
    assert len(rows) == 4 and {m["address_family"] for m in rows} == {"ipv6"}


def test_page_draws_one_family_and_congestion_control_at_a_time(client, mesh):
    page = client.get("/grid/mesh/settings/?protocol=builtin").content.decode()
    assert 'name="address_family"' in page and 'name="congestion_control"' in page
    assert '<option value="default" selected>default</option>' in page  # ipv4 + the nodes' default first
    v6 = client.get("/grid/mesh/settings/?protocol=builtin&address_family=ipv6&congestion_control=bbr").content.decode()
    assert '<option value="ipv6" selected>' in v6 and '<option value="bbr" selected>' in v6
    # the tooltips carry [value, finished]: the newest ipv4/default value (11) on the default page, bbr/IPv6's (23)
    assert "[11," in page and "[23," not in page
    assert "[23," in v6 and "[11," not in v6
    assert client.get("/grid/mesh/settings/?protocol=builtin&address_family=ipv9").status_code == 400


def test_changes_are_found_per_setting(client, write_key):
    """Change detection reads a cell's own history: a bbr cell stepping down is not mixed with a steady cubic one."""
    from results import analysis

    now = datetime.now(UTC).replace(microsecond=0)
    for k in range(16):
        at = now - timedelta(hours=16 - k)
        bbr = 20.0 if k < 8 else 5.0
        _ingest(client, write_key, [_measurement("ipv4", "bbr", bbr + 0.01 * (k % 3), at),
                                    _measurement("ipv4", "cubic", 10.0 + 0.01 * (k % 3), at)], f"c{k}")
    analysis.detect_changes()
    found = list(Change.objects.filter(benchmark__name="settings"))
    assert [(c.congestion_control, c.address_family, c.worse) for c in found] == [("bbr", "ipv4", True)], found
    for query, found_count in (("congestion_control=bbr", 1), ("congestion_control=cubic", 0),
                               ("address_family=ipv4", 1), ("address_family=ipv6", 0)):
        r = client.get(f"/api/v1/changes/?benchmark=mesh/settings&{query}", HTTP_ACCEPT="application/json")
        assert (r.status_code, r.json()["count"]) == (200, found_count), (query, r.content)


def test_the_pair_page_and_history_name_each_family_and_congestion_control(client, mesh):
    import json
    import re

    page = client.get("/pair/a/b/?benchmark=mesh/settings").content.decode()
    data = json.loads(re.search(r'<script id="pair-data" type="application/json">(.*?)</script>', page, re.S)[1])
    assert sorted(k for k in data["throughput"] if "a → b" in k) == sorted(
        f"builtin ×8{' ' + cc if cc else ''} a → b{' IPv6' if f == 'ipv6' else ''}" for f, cc, _ in SETTINGS)
    r = client.get("/api/v1/pairs/history/?source=a&destination=b&benchmark=mesh/settings",
                   HTTP_ACCEPT="application/json")
    assert r.status_code == 200, r.content
    seen = {(p["address_family"], p["congestion_control"]) for p in r.json() if p["source"] == "a"}
    assert seen == {(f, cc) for f, cc, _ in SETTINGS}

"""Pages against the real PostgreSQL: grid cells and their classes, pair page data, comparison, index."""

import html
import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture
def seeded(client, write_key):
    now = datetime.now(UTC)
    ms = [
        measurement("n1", "n2", streams=8, gbps=45, finished=now - timedelta(hours=1), files=3),
        measurement("n2", "n1", streams=8, gbps=5, finished=now - timedelta(hours=1)),
        measurement("n1", "n3", streams=8, gbps=15, finished=now - timedelta(days=5)),  # stale
        measurement("n3", "n1", streams=8, gbps=None, status="failed", error="TLS handshake failed", finished=now),
        measurement("n1", "n2", streams=1, gbps=12, finished=now - timedelta(hours=1)),
        measurement("n1", "n2", protocol="rtt", rtt_ms=90, finished=now),
    ]
    nodes = [{"name": "n1", "site": "zeta", "loopback_gbps": 50}, {"name": "n2", "site": "alpha"},
             {"name": "n3", "site": "beta"}]
    r = client.post("/api/v1/ingest/", json.dumps(batch(ms, nodes=nodes)), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200


def grid_rows(html: str) -> dict[str, list[str]]:
    rows = {}
    for name, cells in re.findall(r'<tr><th class="rh" data-n="([^"]+)"[^>]*>[^<]*</th>(.*?)</tr>', html):
        rows[name] = re.findall(r'<td class="([^"]*)"', cells)
    return rows


def legend(page: str) -> str:
    block = re.search(r'<div class="legend" id="legend">(.*?)</div>', page, re.S).group(1)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", block)).split())


def test_grid_page_classes(client, seeded):
    r = client.get("/grid/mesh/nightly/?protocol=xrootd-https")
    assert r.status_code == 200
    rows = grid_rows(r.content.decode())
    assert list(rows) == ["n1", "n2", "n3"]
    # n1 row: diagonal (loopback 50 -> ok), n1->n2 ok / n2->n1 critical, n1->n3 warning stale / n3->n1 failed
    assert rows["n1"][0] == "diag a-ok b-ok"
    assert rows["n1"][1] == "a-ok b-critical"
    assert rows["n1"][2] == "a-warning b-failed sa"
    assert rows["n2"] == ["a-critical b-ok", "diag", "a-none b-none"]
    by_site = grid_rows(client.get("/grid/mesh/nightly/?protocol=xrootd-https&sort=site").content.decode())
    assert list(by_site) == ["n2", "n3", "n1"]
    streams = grid_rows(client.get("/grid/mesh/nightly/?protocol=xrootd-https&split=streams").content.decode())
    assert streams["n1"][1] == "a-ok b-warning"  # 8 streams 45, 1 stream 12
    page = client.get("/grid/mesh/nightly/?protocol=xrootd-https").content.decode()
    assert "ok ≥ 30 Gbit/s warning ≥ 10 Gbit/s critical < 10 Gbit/s" in legend(page)
    latency = client.get("/grid/mesh/nightly/?protocol=rtt").content.decode()
    assert grid_rows(latency)["n1"][1] == "a-critical b-none"  # 90 ms
    assert "ok ≤ 20 ms warning ≤ 80 ms critical > 80 ms" in legend(latency)
    assert client.get("/grid/mesh/nightly/?protocol=warp").status_code == 400
    assert client.get("/grid/mesh/missing/").status_code == 404


def test_grid_page_follows_the_benchmarks_thresholds(client, seeded, write_key):
    given = {"goodGbps": 50, "warnGbps": 4, "goodRttMs": 100, "warnRttMs": 200}
    r = client.post("/api/v1/ingest/", json.dumps(batch([], thresholds=given)), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200, r.content
    page = client.get("/grid/mesh/nightly/?protocol=xrootd-https").content.decode()
    rows = grid_rows(page)
    assert rows["n1"][:2] == ["diag a-ok b-ok", "a-warning b-warning"]  # loopback 50; 45 and 5 Gbit/s
    assert rows["n2"][0] == "a-warning b-warning"
    assert "ok ≥ 50 Gbit/s warning ≥ 4 Gbit/s critical < 4 Gbit/s" in legend(page)
    streams = grid_rows(client.get("/grid/mesh/nightly/?protocol=xrootd-https&split=streams").content.decode())
    assert streams["n1"][1] == "a-warning b-warning"  # 8 streams 45, 1 stream 12
    latency = client.get("/grid/mesh/nightly/?protocol=rtt").content.decode()
    assert grid_rows(latency)["n1"][1] == "a-ok b-none"  # 90 ms
    assert "ok ≤ 100 ms warning ≤ 200 ms critical > 200 ms" in legend(latency)


def test_pair_page(client, seeded):
    r = client.get("/pair/n1/n2/?benchmark=mesh/nightly")
    assert r.status_code == 200
    body = r.content.decode()
    data = json.loads(re.search(r'<script id="pair-data" type="application/json">(.*?)</script>', body).group(1))
    assert set(data["throughput"]) == {"xrootd-https ×8 n1 → n2", "xrootd-https ×8 n2 → n1",
                                       "xrootd-https ×1 n1 → n2"}
    assert list(data["rtt"]) == ["RTT n1 → n2"]
    assert data["files"] == [{"label": ["n1 → n2", "xrootd-https ×8"], "median": 2.0,
                              "points": [[1.0, "f000"], [2.0, "f001"], [3.0, "f002"]]}]
    summary = re.search(r'<table class="list" id="file-summary">(.*?)</table>', body, re.S).group(1)
    assert re.sub(r"<[^>]+>", " ", summary.split("</tr>")[1]).split() == [
        "n1", "→", "n2", "xrootd-https", "×8", "3", "1.00", "2.00", "2.00", "3.00", "0"]
    assert "vendor/chart.umd.min.js" in body
    errors = client.get("/pair/n1/n3/").content.decode()
    assert "TLS handshake failed" in errors
    assert client.get("/pair/n1/nope/").status_code == 404


def test_compare_and_index(client, seeded):
    body = client.get("/compare/mesh/nightly/").content.decode()
    data = json.loads(re.search(r'<script id="compare-data" type="application/json">(.*?)</script>', body).group(1))
    assert {(p["streams"], p["rtt_ms"]) for p in data["rtt"]["xrootd-https"]} == {(8, 90), (1, 90)}
    assert data["streams"][0]["low_gbps"] == 12 and data["streams"][0]["high_gbps"] == 45
    index = client.get("/").content.decode()
    assert "mesh/nightly" in index and "/grid/mesh/nightly/?protocol=rtt" in index


def test_compare_page_sets_token_against_x509_on_the_same_pairs(client, write_key):
    """Token vs x509 vs none: per pair and mode a mean over the window; pairs seen in one mode only are left out;
    the summary gives each mode's median throughput relative to x509."""
    now = datetime.now(UTC)

    def m(src, dst, auth, gbps, hours=1, protocol="xrootd-https"):
        return {**measurement(src, dst, protocol=protocol, streams=8, gbps=gbps, finished=now - timedelta(hours=hours)),
                "auth": auth}

    ms = [m("a", "b", "x509", 40), m("a", "b", "x509", 20, hours=2), m("a", "b", "token", 27),
          m("b", "a", "x509", 10), m("b", "a", "token", 9), m("b", "a", "none", 11),
          m("a", "c", "token", 30),  # one mode only: nothing to compare
          m("c", "a", "x509", 5, hours=24 * 40), m("c", "a", "token", 5)]  # x509 outside the 30 days
    r = client.post("/api/v1/ingest/", json.dumps(batch(ms)), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200, r.content
    body = client.get("/compare/mesh/nightly/").content.decode()
    data = json.loads(re.search(r'<script id="compare-data" type="application/json">(.*?)</script>', body).group(1))
    got = {(p["source"], p["destination"]): p["gbps"] for p in data["auth"]}
    assert got == {("a", "b"): {"x509": 30, "token": 27}, ("b", "a"): {"x509": 10, "token": 9, "none": 11}}
    rows = re.findall(r"<tr><td>xrootd-https</td><td>8</td><td>(\w+)</td><td>(\d+)</td><td>([\d.]+)</td></tr>", body)
    assert rows == [("none", "1", "1.100"), ("token", "2", "0.900")]
    assert "<canvas id=\"auth\">" in body
    assert client.get("/compare/mesh/nightly/?days=0").status_code == 400
    wider = client.get("/compare/mesh/nightly/?days=60").content.decode()
    assert "<td>token</td><td>3</td>" in wider  # c -> a joins once its x509 run is in the window


def test_static_chart_library_is_served(client):
    from django.contrib.staticfiles import finders

    assert finders.find("vendor/chart.umd.min.js"), "run hack/setup.sh (npm ci + dashboard/hack-assets.sh)"
    assert finders.find("results/grid.js")


def test_the_pages_latest_cells_written_by_postgresql_match_the_portable_ones(client, write_key):
    """The latest grid page reads its cells' state, staleness and tooltip straight from PostgreSQL; they equal
    what the portable path (any mode, SQLite) derives from grid(), failures, stale cells and RTT included."""
    import random

    from django.utils import timezone
    from results import selectors
    from results.models import Benchmark

    rng = random.Random(3)
    now = datetime.now(UTC)
    ms = []
    for src in ("a", "b", "c", "d"):
        for dst in ("a", "b", "c", "d"):
            if src == dst:
                continue
            failed = rng.random() < 0.3
            t = now - timedelta(hours=rng.choice([1, 30, 80]))
            ms.append(measurement(src, dst, streams=8, gbps=None if failed else rng.uniform(0.5, 60),
                                  status="failed" if failed else "succeeded",
                                  error="refused <by> peer & more" if failed else None, finished=t))
            ms.append(measurement(src, dst, protocol="rtt", rtt_ms=rng.uniform(0.1, 120), finished=t))
    r = client.post("/api/v1/ingest/", json.dumps(batch(ms, name="drawn")), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200
    bench = Benchmark.objects.get(name="drawn")
    at = timezone.now()
    for protocol, streams in (("xrootd-https", 8), ("xrootd-https", None), ("rtt", None)):
        lean = selectors.drawn_cells(None, bench, protocol, streams, at)
        portable = selectors.drawn_cells(selectors.grid(bench, protocol, streams, now=at), bench, protocol, streams, at)
        assert lean.keys() == portable.keys() and len(lean) == 12
        for key, (state, stale, info) in portable.items():
            got = lean[key]
            assert got[:2] == (state, stale), (protocol, key)
            want, have = json.loads(info), json.loads(got[2])
            assert have[1:] == want[1:] and (have[0] is None) == (want[0] is None), (protocol, key)
            assert want[0] is None or abs(have[0] - want[0]) <= 0.0011, (protocol, key)
    page = client.get("/grid/mesh/drawn/?protocol=xrootd-https").content.decode()
    data = json.loads(re.search(r'<script id="grid-data" type="application/json">(.*?)</script>', page, re.S)[1])
    assert len(data["cells"]) == 4 and all(len(row) == 4 for row in data["cells"])
    assert "refused <by> peer & more" in json.dumps(data) and "<by>" not in page  # escaped inside the script


def test_the_pair_page_shows_a_step_change_and_the_levels(client, write_key):
    """A pair whose throughput fell from ~20 to ~10 Gbit/s and stayed there: the page lists the step (when, before,
    after, -50 %) and plots the two levels; the other direction, steady with an outlier, has none."""
    import random

    rng = random.Random(5)
    now = datetime.now(UTC)
    ms = []
    for k in range(20):
        t = now - timedelta(hours=12 * (20 - k))
        level = 20 if k < 12 else 10
        ms.append(measurement("s1", "s2", gbps=level * rng.uniform(0.95, 1.05), finished=t))
        ms.append(measurement("s2", "s1", gbps=(3 if k == 7 else 15) * rng.uniform(0.95, 1.05), finished=t))
    r = client.post("/api/v1/ingest/", json.dumps(batch(ms, name="steps")), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200
    page = client.get("/pair/s1/s2/?benchmark=mesh/steps").content.decode()
    rows = re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td><td class=\"(\w+)\">"
                      r"([^<]+)</td><td></td></tr>", page)  # the last cell: no version change
    assert len(rows) == 1, rows
    when, series, before, after, cls, change = rows[0]
    assert html.unescape(series) == "xrootd-https ×1 s1 → s2" and cls == "worse"
    assert float(before) == pytest.approx(20, rel=0.06) and float(after) == pytest.approx(10, rel=0.06)
    assert change.replace("\u2009", " ").strip() in ("-50 %", "-49 %", "-51 %", "-48 %", "-52 %")
    data = json.loads(re.search(r'<script id="pair-data" type="application/json">(.*?)</script>', page, re.S)[1])
    line = data["levels"]["xrootd-https ×1 s1 → s2"]
    assert len([p for p in line if p is None]) == 1  # two levels, one gap
    assert len(data["levels"]["xrootd-https ×1 s2 → s1"]) == 2  # the steady direction: one level
    levels = re.search(r'<table class="list" id="levels">(.*?)</table>', page, re.S)[1]
    recent = re.findall(r"<tr><td>([^<]+)</td><td>([\d.]+)</td><td>([\d.]+) – ([\d.]+)</td><td>(\d+)</td></tr>",
                        levels)
    by_series = {html.unescape(s): (float(m), float(lo), float(hi), int(n)) for s, m, lo, hi, n in recent}
    m, lo, hi, n = by_series["xrootd-https ×1 s1 → s2"]
    assert n == 8 and lo <= m <= hi and m == pytest.approx(10, rel=0.06)  # since the step: 8 runs at ~10


def test_the_pair_page_plots_the_retransmits_under_the_throughput(client, write_key):
    now = datetime.now(UTC)
    ms = []
    for k, retrans in enumerate([0, 3, 812]):
        m = measurement("r1", "r2", protocol="builtin", gbps=5 - k, finished=now - timedelta(hours=3 - k))
        m["tcp"] = {"retransmits": retrans, "srtt_median_ms": 51.0, "sender": None, "receiver": None}
        ms.append(m)
    ms.append(measurement("r1", "r2", protocol="gridftp", finished=now - timedelta(hours=1)))  # no TCP view
    ms.append(measurement("r3", "r4", protocol="gridftp", finished=now - timedelta(hours=1)))
    r = client.post("/api/v1/ingest/", json.dumps(batch(ms, name="tcp")), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200, r.content
    page = client.get("/pair/r1/r2/?benchmark=mesh/tcp").content.decode()
    data = json.loads(re.search(r'<script id="pair-data" type="application/json">(.*?)</script>', page, re.S)[1])
    assert data["retransmits"] == {"builtin ×1 r1 → r2": [[p[0], v] for p, v in zip(
        data["throughput"]["builtin ×1 r1 → r2"], [0, 3, 812], strict=True)]}
    assert '<canvas id="retransmits">' in page
    # the history canvas comes first: the retransmits sit under the throughput
    assert page.index('<canvas id="history">') < page.index('<canvas id="retransmits">')
    plain = client.get("/pair/r3/r4/").content.decode()
    assert '<canvas id="retransmits">' not in plain and "No TCP view in this history" in plain


def test_external_endpoints_are_marked_in_the_grid_and_the_api(client, write_key):
    """A batch's node with external: true (an operator's spec.externalEndpoints) is stored as such; the grid marks
    its row and column header, the nodes API says so; agents' nodes stay unmarked."""
    now = datetime.now(UTC)
    ms = [measurement("n1", "site-x", streams=8, gbps=3, finished=now),
          measurement("site-x", "n1", streams=8, gbps=4, finished=now)]
    nodes = [{"name": "n1", "site": "zeta"},
             {"name": "site-x", "site": "storage.site-x.example", "external": True,
              "labels": {"tpcmesh.io/external": "true", "tpcmesh.io/external-url": "davs://storage.site-x.example"}}]
    r = client.post("/api/v1/ingest/", json.dumps(batch(ms, nodes=nodes)), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200, r.content
    page = client.get("/grid/mesh/nightly/?protocol=xrootd-https").content.decode()
    assert re.search(r'<th class="rh ext" data-n="site-x" title="external endpoint at storage.site-x.example">',
                     page), page
    assert re.search(r'<th class="ch ext" data-n="site-x"', page)
    assert '<th class="rh" data-n="n1"' in page and '<th class="ch" data-n="n1"' in page
    api = client.get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Token {write_key}").json()
    flags = {n["name"]: n["external"] for n in api.get("results", api)}
    assert flags == {"n1": False, "site-x": True}

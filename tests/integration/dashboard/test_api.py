"""The REST API against the suite's real PostgreSQL: ingest (idempotency, validation, auth, size), reads
(filters, ordering, pagination, CSV), aggregates, schema, health and metrics."""

import csv
import io
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import override_settings
from results.models import Benchmark, FileTransfer, Measurement, Node, PairLatest

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
INGEST = "/api/v1/ingest/"
T0 = datetime(2026, 2, 1, tzinfo=UTC)


def post(client, body, key=None, raw=None):
    headers = {"HTTP_AUTHORIZATION": f"Token {key}"} if key else {}
    return client.post(INGEST, raw if raw is not None else json.dumps(body), content_type="application/json",
                       **headers)


def test_runs_on_postgresql():
    assert connection.vendor == "postgresql"


def test_ingest_is_idempotent_by_measurement_id(client, write_key):
    ms = [measurement("a", "b", files=3), measurement("b", "a"), measurement("a", "b", protocol="rtt", rtt_ms=4)]
    body = batch(ms, nodes=[{"name": "a", "site": "siteA", "nic_speed_gbps": 100, "loopback_gbps": 55}])
    r = post(client, body, write_key)
    assert r.status_code == 200, r.content
    assert r.json()["created"] == 3 and r.json()["duplicates"] == 0
    assert sorted(r.json()["ids"]) == sorted(m["id"] for m in ms)
    again = post(client, body, write_key)
    assert again.status_code == 200 and again.json() == {"created": 0, "duplicates": 3, "ids": []}
    assert Measurement.objects.count() == 3 and FileTransfer.objects.count() == 3
    a = Node.objects.get(name="a")
    assert (a.site, a.nic_speed_gbps, a.loopback_gbps) == ("siteA", 100, 55)
    # A batch repeating one id inside itself, plus one already stored, plus one new.
    new = measurement("b", "a")
    r = post(client, batch([new, new, ms[0]]), write_key)
    assert r.json() == {"created": 1, "duplicates": 2, "ids": [new["id"]]}
    assert Measurement.objects.count() == 4


def test_ingest_keeps_the_latest_cell(client, write_key):
    old = measurement("a", "b", gbps=1, finished=T0)
    new = measurement("a", "b", gbps=2, finished=T0 + timedelta(hours=1))
    post(client, batch([new]), write_key)
    post(client, batch([old]), write_key)  # arrives late: must not replace the newer cell
    assert PairLatest.objects.get().measurement_id == uuid.UUID(new["id"])


def test_ingest_is_transactional(client, write_key, monkeypatch):
    from results import services

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    # Nodes, measurements and (on PostgreSQL) their grid cells are written before the files: a failure there must
    # undo them all.
    monkeypatch.setattr(services, "_store_files", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        post(client, batch([measurement("a", "b", files=2), measurement("b", "a")]), write_key)
    assert Measurement.objects.count() == 0 and Node.objects.count() == 0 and PairLatest.objects.count() == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"throughput_gbps": -1.0}, "measurements[0].throughput_gbps"),
        ({"protocol": "warp"}, "measurements[0].protocol"),
        ({"destination": "a"}, "measurements[0].destination"),
        ({"finished_at": "2020-01-01T00:00:00Z"}, "measurements[0].finished_at"),
        ({"id": "not-a-uuid"}, "measurements[0].id"),
        ({"status": "meh"}, "measurements[0].status"),
        ({"streams": 0}, "measurements[0].streams"),
        ({"started_at": "2026-01-01T00:00:00"}, "measurements[0].started_at"),  # no UTC offset
        ({"started_at": "yesterday"}, "measurements[0].started_at"),
    ],
)
def test_ingest_validation_names_the_field(client, write_key, change, field):
    m = measurement("a", "b")
    m.update(change)
    r = post(client, batch([m]), write_key)
    assert r.status_code == 400
    assert field in [e["field"] for e in r.json()["errors"]], r.json()
    assert Measurement.objects.count() == 0


@pytest.mark.parametrize(
    ("given", "field", "words"),
    [
        ({"goodGbps": 5}, "benchmark.thresholds.goodGbps", "below warnGbps (10.0) with the defaults filled in"),
        ({"goodGbps": "30"}, "benchmark.thresholds.goodGbps", "must be a number"),
        ({"warnRttMs": False}, "benchmark.thresholds.warnRttMs", "must be a number"),
        ({"warnGbps": -2}, "benchmark.thresholds.warnGbps", "negative"),
        ({"goodGbps": 5, "warnGbps": 10}, "benchmark.thresholds.goodGbps", "below warnGbps"),
        ({"goodRttMs": 100, "warnRttMs": 80}, "benchmark.thresholds.goodRttMs", "above warnRttMs"),
        ({"efficiency": {"warning": 0.4}}, "benchmark.thresholds.efficiency.warning", "must be above critical"),
        ({"efficiency": {"critical": 0}}, "benchmark.thresholds.efficiency.critical", "must be in (0, 1]"),
        ([30, 10], "benchmark.thresholds", "dictionary"),
    ],
)
def test_ingest_thresholds_validation_names_the_field(client, write_key, given, field, words):
    r = post(client, batch([measurement("a", "b")], thresholds=given), write_key)
    assert r.status_code == 400, r.content
    errors = {e["field"]: e["message"] for e in r.json()["errors"]}
    assert field in errors and words in errors[field], errors
    assert Measurement.objects.count() == 0


def test_unknown_threshold_keys_are_ignored_and_the_batch_stored(client, write_key, caplog):
    given = {"goodGbps": 40, "good": 5, "throughput": {"ok": 30}}  # e.g. a newer operator's key: additive
    assert post(client, batch([measurement("a", "b")], thresholds=given), write_key).status_code == 200
    assert Benchmark.objects.get().thresholds == {"goodGbps": 40}
    assert Measurement.objects.count() == 1
    assert "Ignored unknown benchmark thresholds good, throughput" in caplog.text


def test_efficiency_thresholds_are_stored_and_answered_with_the_grid(client, write_key):
    given = {"efficiency": {"warning": 0.95, "later": 1}}  # a key it does not know is ignored, as above
    assert post(client, batch([measurement("a", "b", streams=8)], thresholds=given), write_key).status_code == 200
    assert Benchmark.objects.get().thresholds == {"efficiency": {"warning": 0.95}}
    grid = client.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=xrootd-https").json()
    assert grid["efficiency_thresholds"] == {"warning": 0.95, "critical": 0.5}


def test_custom_thresholds_colour_the_grid_api(client, write_key):
    ms = [measurement("a", "b", streams=8, gbps=45), measurement("b", "a", streams=8, gbps=5),
          measurement("a", "c", streams=8, gbps=3), measurement("c", "a", streams=8, gbps=None, status="failed"),
          measurement("a", "b", protocol="iperf3", gbps=45), measurement("a", "b", protocol="rtt", rtt_ms=90),
          measurement("a", "c", protocol="rtt", rtt_ms=150), measurement("b", "c", protocol="rtt", rtt_ms=300)]
    given = {"goodGbps": 50, "warnGbps": 4, "goodRttMs": 100, "warnRttMs": 200}
    assert post(client, batch(ms, thresholds=given), write_key).status_code == 200
    assert Benchmark.objects.get().thresholds == given

    def states(protocol, **extra):
        query = "&".join(f"{k}={v}" for k, v in {"protocol": protocol, **extra}.items())
        g = client.get(f"/api/v1/grid/?benchmark=mesh/nightly&{query}").json()
        return g["thresholds"], {(c["source"], c["destination"]): c["state"] for c in g["cells"]}

    # With the defaults (30/10 Gbit/s, 20/80 ms) these would be ok, critical, critical, critical, critical.
    throughput = ({"ok": 50, "warning": 4}, {("a", "b"): "warning", ("b", "a"): "warning", ("a", "c"): "critical",
                                             ("c", "a"): "failed"})
    assert states("xrootd-https") == throughput  # PostgreSQL builds these cells
    assert states("xrootd-https", mode="median", window="1d") == throughput  # Python builds these
    assert states("iperf3") == ({"ok": 50, "warning": 4}, {("a", "b"): "warning"})
    latency = ({"ok": 100, "warning": 200}, {("a", "b"): "ok", ("a", "c"): "warning", ("b", "c"): "critical"})
    assert states("rtt") == latency
    assert states("rtt", mode="mean", window="1d") == latency
    bench = client.get("/api/v1/benchmarks/").json()["results"][0]
    assert bench["thresholds_effective"] == {"throughput": {"ok": 50, "warning": 4},
                                             "latency": {"ok": 100, "warning": 200}}
    # A later batch without thresholds leaves them; the operator's empty dict (spec without thresholds) resets.
    assert post(client, batch([measurement("a", "b")]), write_key).status_code == 200
    assert Benchmark.objects.get().thresholds == given
    assert post(client, batch([measurement("a", "b")], thresholds={}), write_key).status_code == 200
    assert states("rtt")[1][("a", "b")] == "critical"


@pytest.mark.parametrize("junk", ["fast", [1], {"goodGbps": "x", "warnGbps": None}, {"throughput": {"ok": "a"}}])
def test_stored_junk_thresholds_never_fail_a_read(client, write_key, junk):
    post(client, batch([measurement("a", "b", gbps=20), measurement("a", "b", protocol="rtt", rtt_ms=50)]),
         write_key)
    Benchmark.objects.update(thresholds=junk)  # a hand-edited or pre-contract row
    for url in ["/api/v1/grid/?benchmark=mesh/nightly&protocol=xrootd-https",
                "/api/v1/grid/?benchmark=mesh/nightly&protocol=rtt&mode=median",
                "/api/v1/benchmarks/", "/grid/mesh/nightly/?protocol=rtt", "/grid/mesh/nightly/", "/"]:
        assert client.get(url).status_code == 200, url
    g = client.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=xrootd-https").json()
    assert g["thresholds"] == {"ok": 30, "warning": 10} and g["cells"][0]["state"] == "warning"


def test_ingest_contract_check_catches_what_fields_do_not(client, write_key):
    # DRF's fields coerce "8" to 8, "35.5" to 35.5 and 5 to "5"; the contract wants an integer, a number, a
    # string: only the JSON schema check refuses these.
    m = measurement("a", "b")
    m.update(streams="8", throughput_gbps="35.5")
    body = batch([m])
    body["run"]["state"] = 5
    r = post(client, body, write_key)
    assert r.status_code == 400, r.content
    assert r.json()["detail"] == "Ingest batch violates measurement.v1.schema.json."
    assert {e["field"] for e in r.json()["errors"]} == {"measurements[0].streams", "measurements[0].throughput_gbps",
                                                        "run.state"}
    assert Measurement.objects.count() == 0
    # A missing benchmark name is already a field error; a body that is not JSON a parse error.
    del body["benchmark"]["name"]
    r = post(client, body, write_key)
    assert r.status_code == 400 and "benchmark.name" in [e["field"] for e in r.json()["errors"]]
    assert r.json()["detail"] == "Invalid ingest batch."
    r = post(client, None, write_key, raw="{not json")
    assert r.status_code == 400


def test_ingest_oversized_body_is_refused(client, write_key):
    with override_settings(MAX_BODY_BYTES=2000):
        r = post(client, batch([measurement("a", "b", files=20)]), write_key)
    assert r.status_code == 413 and "exceeds" in r.json()["detail"]
    assert Measurement.objects.count() == 0


def test_ingest_auth(client, write_key, read_key):
    body = batch([measurement("a", "b")])
    assert post(client, body).status_code == 401
    assert post(client, body, "wrong-key").status_code == 401
    r = post(client, body, read_key)
    assert r.status_code == 403 and "read-only" in r.json()["detail"]
    r = client.post(INGEST, json.dumps(body), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {write_key}")
    assert r.status_code == 200
    assert Measurement.objects.count() == 1


def test_read_access_open_or_token(client, read_key):
    assert client.get("/api/v1/measurements/").status_code == 200
    with override_settings(READ_ACCESS="token"):
        assert client.get("/api/v1/measurements/").status_code == 401
        assert client.get("/api/v1/measurements/", HTTP_AUTHORIZATION="Token nope").status_code == 401
        assert client.get("/api/v1/measurements/", HTTP_AUTHORIZATION=f"Token {read_key}").status_code == 200
    assert client.post("/api/v1/nodes/", {}, HTTP_AUTHORIZATION=f"Token {read_key}").status_code in (403, 405)


@pytest.fixture
def archive(client, write_key):
    ms = [measurement("a", "b", protocol="builtin", streams=s, gbps=g, finished=T0 + timedelta(hours=i))
          for i, (s, g) in enumerate([(1, 10), (8, 40), (1, 12), (8, 44), (1, 14)])]
    ms += [measurement("b", "a", protocol="gridftp", gbps=None, status="failed", error="refused", finished=T0),
           measurement("a", "b", protocol="rtt", rtt_ms=20, finished=T0)]
    assert post(client, batch(ms, name="bench1", run="r1"), write_key).status_code == 200
    return ms


def results(r):
    assert r.status_code == 200, r.content
    return r.json()["results"]


def test_filters_ordering_pagination(client, archive):
    assert len(results(client.get("/api/v1/measurements/"))) == 7
    assert len(results(client.get("/api/v1/measurements/?protocol=builtin&streams=8"))) == 2
    assert len(results(client.get("/api/v1/measurements/?source=b&status=failed"))) == 1
    assert len(results(client.get("/api/v1/measurements/?benchmark=mesh/bench1&destination=b"))) == 6
    after = (T0 + timedelta(hours=3)).isoformat().replace("+00:00", "Z")
    assert len(results(client.get(f"/api/v1/measurements/?finished_after={after}"))) == 2
    ordered = results(client.get("/api/v1/measurements/?protocol=builtin&ordering=throughput_gbps"))
    assert [m["throughput_gbps"] for m in ordered] == [10, 12, 14, 40, 44]
    page = client.get("/api/v1/measurements/?limit=3&offset=3").json()
    assert page["count"] == 7 and len(page["results"]) == 3 and page["next"] and page["previous"]
    assert client.get("/api/v1/measurements/?protocol=warp").status_code == 400
    detail = client.get(f"/api/v1/measurements/{archive[0]['id']}/").json()
    assert detail["source"] == "a" and "files" in detail
    assert results(client.get("/api/v1/nodes/?site="))[0]["name"] == "a"
    assert results(client.get("/api/v1/runs/?benchmark=bench1"))[0]["name"] == "r1"
    assert results(client.get("/api/v1/benchmarks/"))[0]["thresholds_effective"]["throughput"]["ok"] == 30


@pytest.fixture
def many(client, write_key):
    """1 001 measurements: more than one page at the maximum limit (1 000)."""
    ms = [measurement(f"n{i % 40}", f"n{i % 40 + 1}", gbps=float(i), finished=T0 + timedelta(minutes=i))
          for i in range(1001)]
    assert post(client, batch(ms, run="many"), write_key).json()["created"] == 1001
    return ms


def test_pagination_default_and_maximum(client, many):
    first = client.get("/api/v1/measurements/").json()
    assert first["count"] == 1001 and len(first["results"]) == 100
    big = client.get("/api/v1/measurements/?limit=5000").json()
    assert len(big["results"]) == 1000  # capped at the maximum
    assert "limit=1000" in big["next"] and "offset=1000" in big["next"]
    rest = client.get(big["next"]).json()
    assert len(rest["results"]) == 1 and rest["next"] is None
    assert {m["id"] for m in big["results"] + rest["results"]} == {m["id"] for m in many}


def csv_rows(r) -> list[list[str]]:
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(r.streaming_content).decode())))


def test_csv_export(client, archive):
    rows = csv_rows(client.get("/api/v1/measurements/?format=csv&protocol=builtin&ordering=finished_at"))
    header = rows[0]
    assert "throughput_gbps" in header and "files" not in header
    assert len(rows) == 6
    assert [r[header.index("throughput_gbps")] for r in rows[1:]] == ["10.0", "40.0", "12.0", "44.0", "14.0"]
    nodes = csv_rows(client.get("/api/v1/nodes/?format=csv"))
    assert nodes[0][:3] == ["id", "name", "site"] and [r[1] for r in nodes[1:]] == ["a", "b"]
    one = client.get(f"/api/v1/measurements/{archive[0]['id']}/?format=csv")
    assert one.status_code == 200 and archive[0]["id"] in one.content.decode()


def test_csv_export_streams_the_whole_filtered_set(client, many):
    r = client.get("/api/v1/measurements/?format=csv&ordering=finished_at")
    assert r.streaming and r["X-CSV-Max-Rows"] == "100000"
    rows = csv_rows(r)
    assert len(rows) == 1 + 1001 and not rows[-1][0].startswith("#")
    gbps = rows[0].index("throughput_gbps")
    assert [float(row[gbps]) for row in rows[1:]] == [float(i) for i in range(1001)]
    filtered = csv_rows(client.get("/api/v1/measurements/?format=csv&source=n0"))
    assert len(filtered) - 1 == sum(m["source"] == "n0" for m in many) == 26
    assert len(csv_rows(client.get("/api/v1/measurements/?format=csv&offset=1000"))) == 2
    assert len(csv_rows(client.get("/api/v1/measurements/?format=csv&limit=10"))) == 11  # asked for: no trailer
    assert client.get("/api/v1/measurements/?format=csv&limit=-3").status_code == 400


def test_csv_export_says_when_it_hits_the_cap(client, many):
    with override_settings(CSV_MAX_ROWS=300):
        r = client.get("/api/v1/measurements/?format=csv&ordering=finished_at")
        assert r["X-CSV-Max-Rows"] == "300"
        rows = csv_rows(r)
        assert len(rows) == 1 + 300 + 1
        assert rows[-1][0].startswith("# truncated: this export stops at 300 rows") and "offset=300" in rows[-1][0]
        gbps = rows[0].index("throughput_gbps")
        assert float(rows[300][gbps]) == 299
        rest = csv_rows(client.get("/api/v1/measurements/?format=csv&ordering=finished_at&offset=900"))
        assert [float(row[gbps]) for row in rest[1:]] == [float(i) for i in range(900, 1001)]  # no trailer


def test_csv_cells_cannot_run_as_spreadsheet_formulas(client, write_key):
    errors = ["=HYPERLINK(\"http://evil\",\"x\")", "+1+2", "-2+3", "@SUM(A1)", "plain = text"]
    ms = [measurement("=cmd", "b", gbps=None, status="failed", error=e) for e in errors]
    assert post(client, batch(ms), write_key).status_code == 200
    rows = csv_rows(client.get("/api/v1/measurements/?format=csv"))
    header = rows[0]
    assert {r[header.index("error")] for r in rows[1:]} == {"'" + e for e in errors[:4]} | {"plain = text"}
    assert {r[header.index("source")] for r in rows[1:]} == {"'=cmd"}
    assert csv_rows(client.get("/api/v1/nodes/?format=csv&name=%3Dcmd"))[1][1] == "'=cmd"


def test_aggregates(client, archive):
    g = client.get("/api/v1/grid/?benchmark=mesh/bench1&protocol=builtin&streams=1").json()
    assert [(c["source"], c["destination"], c["value"]) for c in g["cells"]] == [("a", "b", 14)]
    assert g["thresholds"] == {"ok": 30, "warning": 10}
    m = client.get("/api/v1/grid/?benchmark=mesh/bench1&protocol=builtin&streams=1&mode=median&window=3650d").json()
    assert m["cells"][0]["value"] == 12 and m["cells"][0]["count"] == 3
    assert client.get("/api/v1/grid/?benchmark=mesh/bench1&protocol=builtin&window=soon").json()["errors"] == [
        {"field": "window", "message": "'soon' is not a duration like 3600, 30m, 12h or 7d"}]
    assert client.get("/api/v1/grid/?benchmark=mesh/nope&protocol=builtin").status_code == 404
    assert "protocol" in [e["field"] for e in client.get("/api/v1/grid/?benchmark=mesh/bench1").json()["errors"]]
    h = client.get("/api/v1/pairs/history/?source=b&destination=a&since=3650d").json()
    assert len(h) == 7 and h[0]["finished_at"] <= h[-1]["finished_at"]
    rtt = client.get("/api/v1/compare/rtt/?benchmark=mesh/bench1").json()
    assert {(p["streams"], p["rtt_ms"], p["throughput_gbps"]) for p in rtt["builtin"]} == {(1, 20, 14), (8, 20, 44)}
    s = client.get("/api/v1/compare/streams/?benchmark=mesh/bench1").json()
    assert s == [{"protocol": "builtin", "source": "a", "destination": "b", "low_streams": 1, "high_streams": 8,
                  "low_gbps": 14, "high_gbps": 44, "address_family": "ipv4", "congestion_control": "", "auth": "",
                  "storage": "memory"}]


def test_schema_ui_health_metrics(client, write_key):
    schema = client.get("/api/schema/?format=json")
    assert schema.status_code == 200 and "/api/v1/ingest/" in schema.json()["paths"]
    ui = client.get("/api/schema/swagger-ui/")
    assert ui.status_code == 200 and b"/static/drf_spectacular_sidecar/" in ui.content and b"cdn" not in ui.content
    assert client.get("/api/schema/redoc/").status_code == 200
    assert client.get("/healthz").json() == {"status": "ok"}
    post(client, batch([measurement("a", "b")]), write_key)
    text = client.get("/metrics").content.decode()
    assert 'tpcmesh_dashboard_ingested_measurements_total{result="created"}' in text
    assert 'tpcmesh_dashboard_http_requests_total{code="200",method="POST",route="api/v1/ingest/"}' in text


def test_grid_cells_built_by_postgresql_match_the_python_path(client, archive):
    from results import selectors
    from results.api.views import grid_json
    from results.models import Benchmark

    bench = Benchmark.objects.get(name="bench1")
    for protocol, streams in [("builtin", None), ("builtin", 8), ("gridftp", None), ("rtt", None)]:
        url = f"/api/v1/grid/?benchmark=mesh/bench1&protocol={protocol}" + (f"&streams={streams}" if streams else "")
        api = client.get(url).json()
        python = grid_json(selectors.grid(bench, protocol, streams=streams))
        key = lambda c: (c["source"], c["destination"], c["streams"])  # noqa: E731
        got, want = sorted(api["cells"], key=key), sorted(python["cells"], key=key)
        assert len(got) == len(want) > 0
        for g, w in zip(got, want, strict=True):
            assert abs(g.pop("age_seconds") - w.pop("age_seconds")) < 5
            assert g == w
        assert {k: v for k, v in api.items() if k not in ("cells", "generated_at")} == {
            k: v for k, v in python.items() if k not in ("cells", "generated_at")}


def test_every_grid_mode_built_by_postgresql_matches_the_portable_path(client, write_key):
    """Latest, mean and median, one setting and every setting, throughput and RTT: the cells PostgreSQL builds
    (the API's JSON, and grid()'s rows) equal the portable Python path's (SQLite's), with a run ingested late
    (older than what is stored), cells whose window holds only failures, and measurements outside the window."""
    import random

    from results import maintenance, selectors
    from results.api.views import grid_json
    from results.models import Benchmark

    rng = random.Random(7)
    now = datetime.now(UTC).replace(microsecond=0)
    nodes = ["a", "b", "c", "d"]
    runs = []
    for k in range(9):  # every 20 h: the 7-day window holds the newest ones
        t = now - timedelta(hours=20 * k + 1)
        ms = []
        for src in nodes:
            for dst in nodes:
                if src == dst:
                    continue
                failed = (src, dst) == ("d", "a") or rng.random() < 0.15  # d->a never succeeds
                for streams in (1, 8):
                    ms.append(measurement(src, dst, protocol="builtin", streams=streams, finished=t,
                                          gbps=None if failed else round(rng.uniform(1, 50), 3),
                                          status="failed" if failed else "succeeded",
                                          error="refused" if failed else None))
                ms.append(measurement(src, dst, protocol="rtt", rtt_ms=round(rng.uniform(0.2, 90), 3), finished=t))
        runs.append(batch(ms, name="modes", run=f"r{k}"))
    for body in [runs[0], *runs[2:], runs[1]]:  # the second newest run arrives last
        assert post(client, body, write_key).status_code == 200
    bench = Benchmark.objects.get(name="modes")
    key = lambda c: (c["source"], c["destination"], c["streams"])  # noqa: E731

    def compare() -> list[dict]:
        """Every mode and setting: the API and grid() (PostgreSQL's SQL) equal the portable path."""
        seen = []
        for protocol in ("builtin", "rtt"):
            bounds = bench.effective_thresholds()[selectors.kind_for(protocol)]
            for mode in selectors.GRID_MODES:
                for streams in ([None, 8] if protocol == "builtin" else [None]):
                    url = f"/api/v1/grid/?benchmark=mesh/modes&protocol={protocol}&mode={mode}&window=7d"
                    api = client.get(url + (f"&streams={streams}" if streams else "")).json()
                    rows = selectors.grid(bench, protocol, streams=streams, mode=mode)
                    at = rows["generated_at"]
                    names = {n.id: n.name for n in selectors.benchmark_nodes(bench)}
                    portable = selectors._cells_in_python(bench, protocol, selectors.Pick(streams), at, bounds, mode,
                                                          timedelta(days=7), names, maintenance.overlay(at))
                    want = sorted(grid_json({**rows, "cells": portable})["cells"], key=key)
                    assert len(want) == 12 * (2 if streams is None and protocol == "builtin" else 1)
                    for got in (sorted(api["cells"], key=key), sorted(grid_json(rows)["cells"], key=key)):
                        assert len(got) == len(want), (protocol, mode, streams)
                        for g, w in zip(got, want, strict=True):
                            assert abs(g.pop("age_seconds") - w["age_seconds"]) < 5, (protocol, mode, g, w)
                            value = g.pop("value")
                            assert value == (w["value"] if w["value"] is None else pytest.approx(w["value"], rel=1e-12))
                            assert g == {k: v for k, v in w.items() if k not in ("age_seconds", "value")}, (mode, g, w)
                    if mode != "latest":  # d->a: only failures in the window
                        da = next(c for c in want if (c["source"], c["destination"]) == ("d", "a"))
                        assert (da["value"], da["status"]) == ((None, "failed") if protocol == "builtin"
                                                               else (da["value"], "succeeded"))
                seen += want
        return seen

    assert not [c for c in compare() if c["state"] == "maintenance"]
    # maintenance windows: node c, and the pair a-b (both directions); the SQL paths draw them as the portable one
    from results.models import Maintenance, Node
    n = {x.name: x for x in Node.objects.all()}
    Maintenance.objects.create(node=n["c"], reason="NIC swap", starts_at=now - timedelta(hours=1),
                               ends_at=now + timedelta(hours=5), created_by="test")
    Maintenance.objects.create(source=n["a"], destination=n["b"], reason="fibre", starts_at=now - timedelta(hours=1),
                               ends_at=now + timedelta(hours=5), created_by="test")
    Maintenance.objects.create(node=n["d"], reason="over", starts_at=now - timedelta(hours=9),
                               ends_at=now - timedelta(hours=2), created_by="test")
    for c in compare():
        covered = "c" in (c["source"], c["destination"]) or {c["source"], c["destination"]} == {"a", "b"}
        assert (c["state"] == "maintenance") == covered, c


@pytest.mark.django_db(transaction=True)
def test_concurrent_ingest_of_the_same_batch_stores_once(write_key):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections
    from rest_framework.test import APIClient

    body = batch([measurement(f"n{i}", f"n{i + 1}", files=1) for i in range(200)], nodes=[{"name": "n0"}])

    def send(_):
        try:
            return post(APIClient(), body, write_key).json()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(send, range(3)))
    assert sum(a["created"] for a in answers) == 200, answers
    assert all(a["created"] + a["duplicates"] == 200 for a in answers)
    assert Measurement.objects.count() == 200 and FileTransfer.objects.count() == 200
    cells = {(c.source.name, c.destination.name): (str(c.measurement_id), c.throughput_gbps)
             for c in PairLatest.objects.select_related("source", "destination")}
    assert cells == {(m["source"], m["destination"]): (m["id"], m["throughput_gbps"]) for m in body["measurements"]}


@pytest.mark.django_db(transaction=True)
def test_concurrent_ingest_never_moves_a_cell_back_in_time(write_key):
    """Batches of the same cells, measured at different times, arrive at once (newest first): every cell must end
    at the newest measurement, whatever order the transactions commit in."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections
    from rest_framework.test import APIClient

    pairs = [(f"n{i}", f"n{(i + 1 + i // 12) % 13}") for i in range(150)]
    pairs = [(s, d) for s, d in dict.fromkeys(pairs) if s != d]

    def send(body):
        try:
            r = post(APIClient(), body, write_key)
            assert r.status_code == 200, r.content
        finally:
            connections.close_all()

    for round_ in range(3):
        bodies = [batch([measurement(s, d, gbps=float(10 * round_ + k), finished=T0 + timedelta(hours=10 * round_ + k))
                         for s, d in pairs], run=f"r{round_}-{k}") for k in range(4)]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(send, reversed(bodies)))
        newest = {(m["source"], m["destination"]): m["id"] for m in bodies[-1]["measurements"]}
        cells = {(c.source.name, c.destination.name): (str(c.measurement_id), c.throughput_gbps, c.finished_at)
                 for c in PairLatest.objects.select_related("source", "destination")}
        assert len(cells) == len(pairs)
        assert {k: v[0] for k, v in cells.items()} == newest, f"round {round_}: a cell went back in time"
        assert {v[1:] for v in cells.values()} == {(10.0 * round_ + 3, T0 + timedelta(hours=10 * round_ + 3))}


def _tcp(retransmits: int | None) -> dict:
    side = {"retransmits": retransmits, "min_rtt_ms": 50.2, "srtt_ms": 63.5, "cwnd_max_bytes": 4_194_304,
            "connections": 2, "congestion": ["cubic"]}
    return {"retransmits": retransmits, "srtt_median_ms": 63.5, "sender": side, "receiver": None}


def test_the_tcp_view_is_stored_served_and_filterable(client, write_key):
    lossy, clean, old = (measurement("a", "b", protocol="builtin", files=2), measurement("b", "a", protocol="builtin"),
                         measurement("a", "b", protocol="gridftp"))
    lossy["tcp"], clean["tcp"] = _tcp(731), _tcp(0)
    lossy["files"][0]["tcp"] = {"sender": {"retransmits": 400, "srtt_ms": 63.5}, "receiver": {"out_of_order": 90}}
    r = post(client, batch([lossy, clean, old]), write_key)
    assert r.status_code == 200, r.content
    stored = Measurement.objects.get(id=lossy["id"])
    assert stored.retransmits == 731 and stored.tcp == lossy["tcp"]  # the COPY path kept the JSON as JSON
    assert Measurement.objects.get(id=old["id"]).retransmits is None
    assert sorted(m["id"] for m in results(client.get("/api/v1/measurements/?retransmits_min=1"))) == [lossy["id"]]
    assert len(results(client.get("/api/v1/measurements/?retransmits_min=0"))) == 2  # unknown is not 0
    assert client.get("/api/v1/measurements/?retransmits_min=lots").status_code == 400
    detail = client.get(f"/api/v1/measurements/{lossy['id']}/").json()
    assert detail["retransmits"] == 731 and detail["tcp"] == lossy["tcp"]
    by_name = {f["name"]: f for f in detail["files"]}
    assert by_name[lossy["files"][0]["name"]]["tcp"] == lossy["files"][0]["tcp"]
    assert by_name[lossy["files"][1]["name"]]["tcp"] is None
    bad = measurement("a", "b", protocol="builtin")
    bad["tcp"] = {"retransmits": "many"}
    r = post(client, batch([bad]), write_key)
    assert r.status_code == 400 and "measurements[0].tcp.retransmits" in r.content.decode()


def test_measurements_filter_by_auth_mode(client, write_key):
    token, x509, iperf = (measurement("a", "b", protocol="builtin"), measurement("a", "b", protocol="builtin"),
                          measurement("a", "b", protocol="iperf3"))
    token["auth"], x509["auth"] = "token", "x509"
    assert post(client, batch([token, x509, iperf]), write_key).status_code == 200
    assert [m["id"] for m in results(client.get("/api/v1/measurements/?auth=token"))] == [token["id"]]
    both = results(client.get("/api/v1/measurements/?auth=token&auth=x509"))
    assert sorted(m["id"] for m in both) == sorted([token["id"], x509["id"]])
    r = client.get("/api/v1/measurements/?auth=kerberos")
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "auth"


@pytest.mark.parametrize(("query", "field", "words"), [
    ("min_throughput_gbps=abc&min_throughput_gbps=", "min_throughput_gbps", "given 2 times"),  # the last, empty
    ("streams=8&streams=1", "streams", "given 2 times"),
    ("retransmits_min=5.0", "retransmits_min", "not an integer"),
    ("retransmits_min=1e3", "retransmits_min", "not an integer"),
])
def test_list_filters_refuse_a_value_they_would_misread(client, query, field, words):
    """A single-valued parameter given twice (Django reads the last: `abc` then empty would be no filter at all),
    or an integer written as a decimal, is a 400 naming the parameter; several values where a filter takes them
    (status) are fine."""
    r = client.get(f"/api/v1/measurements/?{query}", HTTP_ACCEPT="application/json")
    assert r.status_code == 400, r.content
    errors = {e["field"]: e["message"] for e in r.json()["errors"]}
    assert field in errors and words in errors[field], errors
    ok = client.get("/api/v1/measurements/?status=failed&status=cancelled&retransmits_min=5",
                    HTTP_ACCEPT="application/json")
    assert ok.status_code == 200, ok.content


@pytest.mark.django_db(transaction=True)
def test_an_analyser_locks_the_measurements_it_judges_in_id_order(write_key):
    """Two analysers storing overlapping answers must take the rows in one order, whatever plan their UPDATE gets
    (two that did not deadlocked in a CI run). The rows here lie in the table against their id order (the high ids
    stored first); with the lowest id held by another transaction, an analyser storing its answers waits for that
    row holding no other."""
    import threading

    import psycopg2
    from django.db import connections
    from rest_framework.test import APIClient
    from results.diagnosis.cells import _store_answers

    def ids(first_digit: str) -> list[str]:
        return [f"{first_digit}{uuid.uuid4().hex[1:]}" for _ in range(40)]

    for digits in ("f", "1"):
        ms = [dict(measurement(f"n{i}", f"n{i + 1}"), id=str(uuid.UUID(h))) for i, h in enumerate(ids(digits))]
        assert post(APIClient(), batch(ms), write_key).status_code == 200
    rows = list(Measurement.objects.all())
    lowest = min(str(m.id) for m in rows)
    dsn = connection.get_connection_params()
    holder, probe = psycopg2.connect(**dsn), psycopg2.connect(**dsn)
    try:
        with holder.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {Measurement._meta.db_table} WHERE id = %s FOR UPDATE", [lowest])

        def store():
            try:
                _store_answers(rows)
            finally:
                connections.close_all()

        writer = threading.Thread(target=store, daemon=True)
        writer.start()
        probe.autocommit = True
        with probe.cursor() as cur:
            for _ in range(100):  # the analyser reaches the held row
                cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted")
                if cur.fetchone()[0]:
                    break
                threading.Event().wait(0.05)
            else:
                raise AssertionError("the analyser never waited for the held row")
            cur.execute(f"SELECT count(*) FROM (SELECT 1 FROM {Measurement._meta.db_table} WHERE id <> %s "
                        "FOR UPDATE SKIP LOCKED) t", [lowest])
            free = cur.fetchone()[0]
        assert free == len(rows) - 1, f"the waiting analyser holds {len(rows) - 1 - free} other rows"
        holder.rollback()
        writer.join(30)
        assert not writer.is_alive()
    finally:
        holder.close()
        probe.close()

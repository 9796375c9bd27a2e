"""Selectors: grid (latest / mean / median, age, staleness), history, comparisons, classification."""

from datetime import UTC, datetime, timedelta

import pytest
from results import selectors
from results.models import Benchmark, Node

from tests.support.dashboard import batch, ingest, measurement

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


@pytest.fixture
def bench():
    h = timedelta(hours=1)
    ingest(batch([
        measurement("a", "b", gbps=10, finished=NOW - 30 * h, files=2),
        measurement("a", "b", gbps=20, finished=NOW - 20 * h),
        measurement("a", "b", gbps=60, finished=NOW - 10 * h),
        measurement("a", "b", streams=8, gbps=40, finished=NOW - 10 * h),
        measurement("b", "a", gbps=5, finished=NOW - 72 * h),
        measurement("a", "b", protocol="rtt", rtt_ms=12.5, finished=NOW - 9 * h),
        measurement("b", "a", status="failed", gbps=None, error="connection refused", finished=NOW - 73 * h),
    ]))
    return Benchmark.objects.get()


def cell(grid, src, dst, streams=1):
    return next(c for c in grid["cells"] if (c["source"], c["destination"], c["streams"]) == (src, dst, streams))


def test_latest_grid_takes_the_newest_and_reports_age_and_staleness(bench):
    g = selectors.grid(bench, "xrootd-https", now=NOW)
    assert {n["name"] for n in g["nodes"]} == {"a", "b"}
    ab = cell(g, "a", "b")
    assert ab["value"] == 60 and ab["age_seconds"] == 36000 and not ab["stale"]
    assert cell(g, "a", "b", 8)["value"] == 40
    ba = cell(g, "b", "a")
    assert ba["value"] == 5 and ba["stale"]  # 72 h > the 48 h default
    assert selectors.grid(bench, "xrootd-https", streams=8, now=NOW)["cells"] == [cell(g, "a", "b", 8)]


def test_mean_and_median_over_a_window(bench):
    day = timedelta(days=1)
    mean = selectors.grid(bench, "xrootd-https", streams=1, mode="mean", window=2 * day, now=NOW)
    assert cell(mean, "a", "b")["value"] == pytest.approx(30)  # 10, 20, 60
    assert cell(mean, "a", "b")["count"] == 3
    median = selectors.grid(bench, "xrootd-https", streams=1, mode="median", window=2 * day, now=NOW)
    assert cell(median, "a", "b")["value"] == 20
    short = selectors.grid(bench, "xrootd-https", streams=1, mode="mean", window=timedelta(hours=25), now=NOW)
    assert cell(short, "a", "b")["value"] == pytest.approx(40)
    assert all(c["destination"] != "a" for c in short["cells"])  # b->a is outside the window
    with pytest.raises(ValueError, match="mode"):
        selectors.grid(bench, "xrootd-https", mode="max")


def test_latency_grid_uses_rtt(bench):
    g = selectors.grid(bench, "rtt", now=NOW)
    assert g["kind"] == "latency" and g["unit"] == "ms"
    assert cell(g, "a", "b", 0)["value"] == 12.5
    median = selectors.grid(bench, "rtt", streams=0, mode="median", window=timedelta(days=2), now=NOW)
    assert cell(median, "a", "b", 0)["value"] == 12.5


def test_pair_history_files_errors_and_comparisons(bench):
    a, b = Node.objects.get(name="a"), Node.objects.get(name="b")
    history = selectors.pair_history(a, b, bench)
    assert len(history) == 7
    assert [p["finished_at"] for p in history] == sorted(p["finished_at"] for p in history)
    assert {(p["source"], p["destination"]) for p in history} == {("a", "b"), ("b", "a")}
    assert len(selectors.pair_history(a, b, since=NOW - timedelta(hours=15))) == 3
    files = selectors.pair_latest_run_files(a, b, bench)
    assert [(g["source"], g["streams"], [f["seconds"] for f in g["files"]]) for g in files["groups"]] == [
        ("a", 1, [1.0, 2.0])]
    errors = selectors.pair_errors(a, b, bench)
    assert [e.error for e in errors] == ["connection refused"]
    rtt = selectors.throughput_vs_rtt(bench)
    assert {(p["source"], p["streams"], p["rtt_ms"], p["throughput_gbps"]) for p in rtt["xrootd-https"]} == {
        ("a", 1, 12.5, 60), ("a", 8, 12.5, 40), ("b", 1, 12.5, 5)}  # b->a takes a->b's RTT (symmetric)
    pairs = selectors.streams_pairs(bench)
    assert pairs == [{"protocol": "xrootd-https", "source": "a", "destination": "b", "low_streams": 1,
                      "high_streams": 8, "low_gbps": 60, "high_gbps": 40, "address_family": "ipv4",
                      "congestion_control": "", "auth": "", "storage": "memory"}]


def test_pair_files_are_the_latest_runs_per_direction_and_setting():
    h = timedelta(hours=1)
    ingest(batch([measurement("a", "b", streams=1, files=3, finished=NOW - 50 * h),
                  measurement("b", "a", streams=8, files=2, finished=NOW - 50 * h)], run="r1"))
    latest = batch([measurement("a", "b", streams=8, files=4, finished=NOW - 20 * h),
                    measurement("a", "b", streams=1, files=2, finished=NOW - 21 * h),
                    measurement("b", "a", streams=8, files=3, finished=NOW - 22 * h)], run="r2")
    latest["measurements"][2]["files"][1].update(seconds=None, error="checksum mismatch")
    ingest(latest)
    ingest(batch([measurement("a", "b", protocol="rtt", finished=NOW)], run="r3"))  # newer, but no files
    ingest(batch([measurement("a", "b", protocol="gridftp", files=5, finished=NOW)], name="other", run="r4"))
    a, b = Node.objects.get(name="a"), Node.objects.get(name="b")
    files = selectors.pair_latest_run_files(b, a, Benchmark.objects.get(name="nightly"))
    assert files["run"] == "r2"
    got = [(g["source"], g["destination"], g["protocol"], g["streams"], [f["name"] for f in g["files"]],
            g["summary"]["n"], g["summary"]["median"], g["failed"]) for g in files["groups"]]
    assert got == [
        ("a", "b", "xrootd-https", 1, ["f000", "f001"], 2, 1.5, 0),
        ("a", "b", "xrootd-https", 8, ["f000", "f001", "f002", "f003"], 4, 2.5, 0),
        ("b", "a", "xrootd-https", 8, ["f000", "f002"], 2, 2.0, 1),
    ]
    assert selectors.pair_latest_run_files(a, b)["run"] == "r4"  # every benchmark: the other one's newer run
    assert selectors.pair_latest_run_files(a, Node.objects.create(name="c")) is None


def test_comparisons_never_mix_address_families_or_auth_modes():
    """A pair measured over IPv4 and IPv6 (and in two auth modes): the streams pairs, the throughput-vs-RTT points
    and the auth comparison each pair a value with one of its own family (IPv6's RTT, not IPv4's), never the newer
    of two families or a mean over both."""
    h = timedelta(hours=1)

    def m(family, streams, gbps, hours, auth="x509", **kw):
        out = measurement("a", "b", streams=streams, gbps=gbps, finished=NOW - hours * h, **kw)
        out["address_family"] = family
        if out["protocol"] != "rtt":
            out["auth"] = auth
        return out

    ingest(batch([m("ipv4", 1, 10, 5), m("ipv4", 8, 40, 5), m("ipv6", 1, 2, 4), m("ipv6", 8, 4, 4),
                  m("ipv4", 1, 8, 3, auth="token"),
                  m("ipv4", None, None, 5, protocol="rtt", rtt_ms=10.0),
                  m("ipv6", None, None, 4, protocol="rtt", rtt_ms=30.0)]))
    bench = Benchmark.objects.get()
    pairs = selectors.streams_pairs(bench)
    assert sorted((p["address_family"], p["auth"], p["low_gbps"], p["high_gbps"]) for p in pairs) == [
        ("ipv4", "x509", 10, 40), ("ipv6", "x509", 2, 4)]
    rtt = selectors.throughput_vs_rtt(bench)["xrootd-https"]
    assert sorted((p["address_family"], p["auth"], p["streams"], p["rtt_ms"]) for p in rtt) == [
        ("ipv4", "token", 1, 10.0), ("ipv4", "x509", 1, 10.0), ("ipv4", "x509", 8, 10.0),
        ("ipv6", "x509", 1, 30.0), ("ipv6", "x509", 8, 30.0)]
    modes = selectors.auth_pairs(bench, NOW - 24 * h)
    assert [(p["address_family"], p["streams"], p["gbps"]) for p in modes] == [("ipv4", 1, {"x509": 10, "token": 8})]
    assert selectors.auth_summary(modes)[0]["median_ratio"] == pytest.approx(0.8)


def test_the_pair_pages_files_and_repeats_keep_families_apart():
    """A run that measured a→b over IPv4 and IPv6: two strips of per-file seconds, each named by its setting."""
    v4 = measurement("a", "b", files=2, finished=NOW)
    v6 = measurement("a", "b", files=3, finished=NOW)
    v6["address_family"] = "ipv6"
    ingest(batch([v4, v6], run="r1"))
    a, b = Node.objects.get(name="a"), Node.objects.get(name="b")
    files = selectors.pair_latest_run_files(a, b, Benchmark.objects.get())
    assert [(g["setting"], len(g["files"])) for g in files["groups"]] == [("xrootd-https ×1", 2),
                                                                         ("xrootd-https ×1 IPv6", 3)]
    assert selectors.setting_label({"protocol": "builtin", "streams": 8, "address_family": "ipv4",
                                    "congestion_control": "bbr", "auth": "token"}) == "builtin ×8 bbr token"


def test_the_streams_pick_reads_a_count_or_newest():
    from results import params

    assert [params.streams("streams", v, 16) for v in (None, "", "0", "8", "newest")] == [16, 16, 0, 8, "newest"]
    for bad in ("most", "101", "-1", "8.0", "NEWEST"):
        with pytest.raises(params.ParamError) as err:
            params.streams("streams", bad)
        assert err.value.param == "streams" and "from 0 to 100, nor newest" in err.value.message, bad
    newest = selectors.Pick(selectors.NEWEST, "ipv4")
    assert newest.newest and newest.stream_count is None and newest.args()["streams"] is None
    assert selectors.Pick(8).stream_count == 8 and not selectors.Pick(8).newest
    with pytest.raises(ValueError, match="newest"):
        selectors.Pick("most")


def test_newest_per_link_takes_each_links_newest_then_most_streams():
    def c(src, dst, streams, hours, family="ipv4"):
        return {"source": src, "destination": dst, "streams": streams, "address_family": family,
                "congestion_control": "", "auth": "", "storage": "memory",
                "finished_at": NOW - timedelta(hours=hours)}

    cells = [c("a", "b", 4, 3), c("a", "b", 8, 1), c("a", "b", 32, 2), c("b", "a", 2, 1), c("b", "a", 16, 1),
             c("a", "b", 1, 5, "ipv6")]
    got = sorted((x["source"], x["address_family"], x["streams"]) for x in selectors.newest_per_link(cells))
    assert got == [("a", "ipv4", 8), ("a", "ipv6", 1), ("b", "ipv4", 16)]

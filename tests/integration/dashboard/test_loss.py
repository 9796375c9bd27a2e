"""The loss mesh's archive (#27) on the suite's real PostgreSQL: ingest of the agents' period summaries
(idempotent, bad items named by index and field, cluster scoping), their list, and the windowed loss grid, whose
one-way delays are numbers only when every period in the window was trusted."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from results import services
from results.loss import ingest as loss_ingest
from results.models import LossSummary, Node

from tests.support.dashboard import batch, loss_summary, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
INGEST = "/api/v1/loss/ingest/"
NOW = datetime.now(UTC).replace(second=0, microsecond=0)


def auth(key):
    return {"HTTP_AUTHORIZATION": f"Token {key}"}


def post(client, body, key):
    return client.post(INGEST, json.dumps(body), content_type="application/json", **auth(key))


def store(client, key, summaries, cluster=None):
    r = post(client, {"summaries": summaries, **({"cluster": cluster} if cluster else {})}, key)
    assert r.status_code == 200, r.content
    return r.json()


def periods(node, peer, n, **kw):
    """The last n one-minute periods of a pair, oldest first."""
    return [loss_summary(node, peer, NOW - timedelta(minutes=n - i), **kw) for i in range(n)]


def test_ingest_stores_once_and_counts_duplicates(client, write_key):
    body = {"cluster": "east", "summaries": periods("a", "b", 3) + periods("b", "a", 2, family=6)}
    r = post(client, body, write_key)
    assert r.status_code == 200, r.content
    assert r.json() == {"accepted": 5, "duplicates": 0}
    again = post(client, {"cluster": "east", "summaries": body["summaries"] + body["summaries"][:1]}, write_key)
    assert again.json() == {"accepted": 0, "duplicates": 6}
    assert LossSummary.objects.count() == 5
    # unknown nodes were created in the batch's cluster, as the measurement ingest does
    assert set(Node.objects.filter(cluster__name="east").values_list("name", flat=True)) == {"a", "b"}
    row = LossSummary.objects.get(source__name="a", period_start=NOW - timedelta(minutes=1))
    assert (row.sent, row.lost, row.rtt_median_ms, row.forward_median_ms, row.trusted, row.ipdv_ms) == \
        (600, 0, 10.0, 5.0, True, 0.05)
    assert json.loads(row.detail)["clock"] == {"synchronized": True, "esterror_ms": 0.1}  # the rest, as sent


def test_a_repeat_inside_one_batch_is_stored_once(client, write_key):
    s = loss_summary("a", "b", NOW)
    assert post(client, {"summaries": [s, dict(s)]}, write_key).json() == {"accepted": 1, "duplicates": 1}


def test_bad_items_are_named_by_index_and_field(client, write_key):
    good = loss_summary("a", "b", NOW)
    no_sent = {k: v for k, v in good.items() if k != "sent"}
    r = post(client, {"summaries": [good, no_sent, {**good, "family": 5}]}, write_key)
    assert r.status_code == 400
    errors = r.json()["errors"]
    assert {(e["index"], e["field"]) for e in errors} == {(1, "(summary)"), (2, "family")}, errors
    assert any("'sent' is a required property" in e["message"] for e in errors)
    r = post(client, {"summaries": [good, {**good, "lost": 700}, {**good, "peer": "a"},
                                    {**good, "period_end": "2000-01-01T00:00:00Z"}]}, write_key)
    assert r.status_code == 422
    assert [(e["index"], e["field"]) for e in r.json()["errors"]] == [(1, "lost"), (2, "peer"), (3, "period_end")]
    assert LossSummary.objects.count() == 0  # all or nothing


def test_more_than_a_thousand_is_413(client, write_key):
    many = [loss_summary("a", "b", NOW - timedelta(minutes=i)) for i in range(loss_ingest.MAX_SUMMARIES + 1)]
    r = post(client, {"summaries": many}, write_key)
    assert r.status_code == 413
    assert "at most 1000" in r.json()["detail"]


def test_a_cluster_token_sends_its_own_cluster_only(client, db):
    east = services.create_api_token("op-east", write=True, cluster="east")[1]
    reader = services.create_api_token("reader", write=False)[1]
    s = [loss_summary("a", "b", NOW)]
    r = post(client, {"cluster": "west", "summaries": s}, east)
    assert r.status_code == 403
    assert "scoped to cluster 'east'" in r.json()["detail"]
    assert post(client, {"summaries": s}, reader).status_code == 403
    assert post(client, {"summaries": s}, east).json() == {"accepted": 1, "duplicates": 0}  # the token's own
    assert LossSummary.objects.get().source.cluster.name == "east"


def test_the_list_filters_and_pages(client, write_key):
    store(client, write_key, periods("a", "b", 4) + periods("b", "a", 4), "east")
    r = client.get("/api/v1/loss/", {"source": "a", "since": (NOW - timedelta(minutes=2)).isoformat(),
                                      "limit": 1}, **auth(write_key))
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["count"] == 2 and len(body["results"]) == 1
    first = body["results"][0]
    assert (first["source"], first["destination"], first["cluster"], first["family"]) == ("a", "b", "east", 4)
    assert first["period_start"].startswith((NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M"))
    assert first["loss_percent"] == 0 and first["detail"]["ttl_min"] == 64
    assert client.get("/api/v1/loss/", {"family": 6}, **auth(write_key)).json()["count"] == 0


@pytest.fixture
def bench_abc(client, write_key):
    """A benchmark whose nodes are a, b, c (the grid's rows), with a transfer result of each pair."""
    r = client.post("/api/v1/ingest/", json.dumps(batch([measurement("a", "b"), measurement("b", "c"),
                                                         measurement("c", "a")])),
                    content_type="application/json", **auth(write_key))
    assert r.status_code == 200, r.content
    return "mesh/nightly"


def grid(client, key, **q):
    r = client.get("/api/v1/loss/grid/", {"benchmark": "mesh/nightly", **q}, **auth(key))
    assert r.status_code == 200, r.content
    return {(c["source"], c["destination"]): c for c in r.json()["cells"]}


def test_the_grid_sums_loss_over_the_window(client, write_key, bench_abc):
    old = [loss_summary("a", "b", NOW - timedelta(hours=2), lost=600)]  # outside the 15 minutes
    lossy = [loss_summary("a", "b", NOW - timedelta(minutes=m), lost=lost, rtt_ms=rtt)
             for m, lost, rtt in ((3, 6, 10.0), (2, 0, 12.0), (1, 0, 30.0))]
    store(client, write_key, old + lossy + periods("b", "a", 3, rtt_ms=11.0))
    cells = grid(client, write_key)
    ab = cells[("a", "b")]
    assert (ab["periods"], ab["sent"], ab["lost"]) == (3, 1800, 6)
    assert ab["loss_percent"] == pytest.approx(100 * 6 / 1800)
    assert ab["rtt_ms"] == 12.0  # the median of the periods' medians
    assert ab["jitter_ms"] == pytest.approx(0.05)
    assert (ab["forward_ms"], ab["backward_ms"], ab["one_way_trusted"], ab["one_way_reason"]) == (5.0, 5.0, True,
                                                                                                 None)
    assert cells[("b", "a")]["loss_percent"] == 0
    assert ("a", "c") not in cells  # no summary of that pair
    assert grid(client, write_key, window="3h")[("a", "b")]["lost"] == 606
    assert grid(client, write_key, family=6) == {}


def test_an_untrusted_period_makes_the_one_way_delay_null(client, write_key, bench_abc):
    one_bad = periods("a", "b", 4) + [loss_summary("a", "b", NOW, trusted=False, one_way_ms=123.0)]
    store(client, write_key, one_bad)
    ab = grid(client, write_key)[("a", "b")]
    assert ab["forward_ms"] is None and ab["backward_ms"] is None  # never the untrusted figure, nor a median
    assert ab["one_way_trusted"] is False
    assert ab["one_way_reason"] == "the reflector's clock is not synchronised"
    assert ab["rtt_ms"] == 10.0  # the round trip needs no clock
    r = client.get("/api/v1/loss/grid/", {"benchmark": "mesh/nightly"}, **auth(write_key))
    assert "123" not in r.content.decode()


def test_problems_from_loss_summaries(client, write_key, bench_abc):
    """A pair losing 1 % for its last periods is a problem, the healthy pairs raise none; once the pair is clean
    again the problem is resolved."""
    from results import analysis
    from results.loss import rules
    from results.models import Problem

    n = rules.PERSISTENT_PERIODS + 1
    store(client, write_key, periods("a", "b", n, lost=6) + periods("b", "a", n) + periods("b", "c", n))
    analysis.evaluate_loss()
    found = list(Problem.objects.filter(resolved_at__isnull=True).values_list("kind", "key"))
    assert found == [("loss", "loss:a|b|4")], found
    store(client, write_key, [loss_summary("a", "b", NOW)])  # a clean newest period ends the stretch
    analysis.evaluate_loss(now=NOW + timedelta(minutes=1))
    assert not Problem.objects.filter(resolved_at__isnull=True).exists()


def test_the_rules_read_the_periods_of_the_lossy_pairs_only(client, write_key, bench_abc):
    """Each lossy pair's periods, oldest first, by its own key: a healthy pair between a lossy pair's source and
    another's destination (a -> c here) is not read (a bad node's pairs touch every node: reading their sources ×
    destinations read the whole mesh)."""
    from results.loss import rules, selectors
    from results.models import Benchmark

    n = rules.PERSISTENT_PERIODS + 1
    store(client, write_key, periods("a", "b", n, lost=6) + periods("b", "c", n, lost=6) + periods("a", "c", n)
          + periods("c", "a", n, lost=6, family=6))
    lossy, measured, _ = selectors.rule_input(Benchmark.objects.get(name="nightly"), NOW + timedelta(minutes=1))
    assert measured == {("a", "b", 4), ("b", "c", 4), ("a", "c", 4), ("c", "a", 6)}
    assert sorted(lossy) == [("a", "b", 4), ("b", "c", 4), ("c", "a", 6)]
    for pair, got in lossy.items():
        assert [p[0] for p in got] == [NOW - timedelta(minutes=n - i) for i in range(n)], pair
        assert all((sent, lost) == (600, 6) for _, sent, lost in got), pair


def test_the_loss_rules_every_minute_leave_the_grids_problems_alone(client, write_key, bench_abc):
    """The summaries come every minute, the grid's measurements twice a day: the minute's rules are the loss
    mesh's only; the grid's open problem (here one the grid has no cells for any more) stays as it was."""
    from results import analysis
    from results.loss import rules
    from results.models import Benchmark, Problem

    bench = Benchmark.objects.get(name="nightly")
    node = Problem.objects.create(benchmark=bench, key="node:c", kind="node", severity="critical", summary="c",
                                  cells=[], fingerprint="f", first_seen=NOW, last_seen=NOW)
    n = rules.PERSISTENT_PERIODS + 1
    store(client, write_key, periods("a", "b", n, lost=6))
    analysis.evaluate_loss()
    found = set(Problem.objects.filter(resolved_at__isnull=True).values_list("kind", "key"))
    assert found == {("loss", "loss:a|b|4"), ("node", "node:c")}, found
    node.refresh_from_db()
    assert node.last_seen == NOW
    analysis.evaluate_problems(bench)  # the whole rule set: the grid no longer finds it
    assert set(Problem.objects.filter(resolved_at__isnull=True).values_list("key", flat=True)) == {"loss:a|b|4"}


def test_the_pair_page_has_the_loss_plot_data(client, write_key, bench_abc):
    store(client, write_key, periods("a", "b", 3, lost=6) + periods("b", "a", 2, family=6))
    page = client.get("/pair/a/b/", {"benchmark": "mesh/nightly"}).content.decode()
    assert '<canvas id="loss">' in page
    plot = json.loads(page.split('<script id="pair-data" type="application/json">')[1].split("</script>")[0])
    assert [p[1] for p in plot["loss"]["a → b"]] == [1.0, 1.0, 1.0]
    assert len(plot["loss"]["b → a IPv6"]) == 2 and plot["loss_rtt"]["RTT a → b"][0][1] == 10.0


def test_the_cell_has_one_definition_in_sql_and_python(client, write_key, bench_abc):
    """The stored default cells (written at ingest), the cells of an asked window (aggregated at request) and the
    portable path's Python cells (results.loss.selectors.cell) are the same cells."""
    from results.loss import selectors as loss
    from results.models import Benchmark

    store(client, write_key, periods("a", "b", 3, lost=7) + [loss_summary("a", "b", NOW, trusted=False)]
          + periods("b", "c", 4, rtt_ms=3.5) + periods("c", "b", 2, one_way_ms=None))
    stored = client.get("/api/v1/loss/grid/", {"benchmark": "mesh/nightly"}, **auth(write_key)).json()["cells"]
    live = client.get("/api/v1/loss/grid/", {"benchmark": "mesh/nightly", "window": "15m"},
                      **auth(write_key)).json()["cells"]
    assert stored == live and len(stored) == 3
    bench = Benchmark.objects.get(name="nightly")
    names = dict(bench.nodes.values_list("id", "name"))
    ids = {n: i for i, n in names.items()}
    python = sorted((loss.cell(a, names) for a in loss._aggregates_in_python(
        4, datetime.now(UTC) - loss.DEFAULT_WINDOW, datetime.now(UTC), list(names))),
        key=lambda c: (ids[c["source"]], ids[c["destination"]]))
    assert python == stored


def test_a_probe_mesh_names_its_benchmark_and_members_before_any_transfer(client, write_key):
    """A loss-only benchmark: its members arrive with the summaries (or alone, summaries empty) and the loss grid
    lists them at once; a batch without a benchmark attaches nothing."""
    store(client, write_key, periods("x", "y", 2))
    r = client.get("/api/v1/loss/grid/", {"benchmark": "mesh/probe-only"}, **auth(write_key))
    assert r.status_code == 404, r.content  # no such benchmark yet
    members = [{"name": "x", "site": "east"}, {"name": "y", "site": "west"}, {"name": "z"}]
    body = {"benchmark": {"namespace": "mesh", "name": "probe-only"}, "nodes": members, "summaries": []}
    assert post(client, body, write_key).json() == {"accepted": 0, "duplicates": 0}
    r = client.get("/api/v1/loss/grid/", {"benchmark": "mesh/probe-only"}, **auth(write_key))
    assert r.status_code == 200, r.content
    assert [(n["name"], n["site"]) for n in r.json()["nodes"]] == [("x", "east"), ("y", "west"), ("z", "")]
    assert {(c["source"], c["destination"]) for c in r.json()["cells"]} == {("x", "y")}


@pytest.mark.parametrize("body", [
    {"benchmark": {"namespace": "mesh", "name": "a\ud800"}, "nodes": [{"name": "x"}], "summaries": []},
    {"benchmark": {"namespace": "mesh", "name": "b"}, "nodes": [{"name": "x", "labels": {"k\udfff": "v"}}],
     "summaries": []},
])
def test_a_lone_surrogate_is_refused_by_name_not_a_500(client, write_key, body):
    r = post(client, body, write_key)
    assert r.status_code == 400, r.content
    assert "surrogate" in r.json()["errors"][0]["message"]

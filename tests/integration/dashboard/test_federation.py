"""Federation (#16) against the suite's real PostgreSQL: two clusters' operators write to one dashboard with
their own cluster-scoped tokens; each writes its own records, a token of cluster A is refused (403 naming why) on
cluster B's; the grid shows one cluster or both combined (cross-cluster pairs included)."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from results import services
from results.models import ApiToken, Benchmark, Cluster, Maintenance, Measurement, Node, Problem, Run

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
INGEST = "/api/v1/ingest/"
T0 = datetime.now(UTC) - timedelta(hours=1)


def auth(key):
    return {"HTTP_AUTHORIZATION": f"Token {key}"}


def post(client, body, key):
    return client.post(INGEST, json.dumps(body), content_type="application/json", **auth(key))


@pytest.fixture
def keys(db):
    """Each cluster's operator token, scoped to its cluster."""
    return {c: services.create_api_token(f"operator-{c}", write=True, cluster=c)[1] for c in ("east", "west")}


@pytest.fixture
def two_clusters(client, keys):
    """Both clusters measured their own mesh of the same benchmark (mesh/nightly) with the same node names."""
    runs = {}
    for c, gbps in (("east", 10.0), ("west", 20.0)):
        body = batch([measurement("n1", "n2", gbps=gbps, finished=T0), measurement("n2", "n1", gbps=gbps,
                                                                                finished=T0)],
                     run=f"run-{c}", cluster=c, nodes=[{"name": "n1", "site": f"site-{c}"}])
        r = post(client, body, keys[c])
        assert r.status_code == 200, r.content
        runs[c] = body
    return runs


def test_each_cluster_writes_its_own_records(two_clusters):
    assert set(Cluster.objects.values_list("name", flat=True)) >= {"east", "west"}
    for c in ("east", "west"):
        bench = Benchmark.objects.get(cluster__name=c, namespace="mesh", name="nightly")
        assert Node.objects.filter(cluster__name=c).count() == 2
        assert Node.objects.get(cluster__name=c, name="n1").site == f"site-{c}"
        assert Run.objects.get(uid=f"uid-run-{c}").benchmark == bench
        assert Measurement.objects.filter(benchmark=bench).count() == 2


def test_a_batch_without_a_cluster_goes_to_the_tokens(client, keys):
    r = post(client, batch([measurement("x1", "x2")], name="unnamed"), keys["east"])
    assert r.status_code == 200, r.content
    assert Benchmark.objects.get(name="unnamed").cluster.name == "east"


def test_a_token_of_one_cluster_is_refused_on_anothers_batch(client, keys, two_clusters):
    body = batch([measurement("n1", "n2")], cluster="west")
    r = post(client, body, keys["east"])
    assert r.status_code == 403
    detail = r.json()["detail"]
    assert "'operator-east' is scoped to cluster 'east'" in detail and "cluster 'west'" in detail
    assert Measurement.objects.filter(id=body["measurements"][0]["id"]).count() == 0


def test_a_token_of_one_cluster_is_refused_on_anothers_run(client, keys, two_clusters):
    """A run uid of cluster west sent by east (in east's own batch): refused, west's run unchanged."""
    body = batch([measurement("n1", "n2")], run="run-west", cluster="east")
    body["run"]["state"] = "Failed"
    r = post(client, body, keys["east"])
    assert r.status_code == 403 and "run 'uid-run-west'" in r.json()["detail"], r.content
    assert "belongs to cluster 'west'" in r.json()["detail"]
    assert Run.objects.get(uid="uid-run-west").state == "Succeeded"


def test_describing_another_clusters_node_is_refused_naming_it_is_not(client, keys, two_clusters):
    """A cross-cluster pair: east measured east:n1 -> west:n2 (west's agent through its public instance). Naming
    west's node is fine; describing it (its site) is writing west's record."""
    pair = measurement("n1", "n2", gbps=5.0, finished=T0 + timedelta(minutes=5))
    r = post(client, batch([pair], run="run-east-2", cluster="east", nodes=[{"name": "n2", "cluster": "west"}]),
             keys["east"])
    assert r.status_code == 200, r.content
    stored = Measurement.objects.select_related("source__cluster", "destination__cluster").get(id=pair["id"])
    assert (stored.source.cluster.name, stored.destination.cluster.name) == ("east", "west")
    r = post(client, batch([measurement("n1", "n2")], run="run-east-3", cluster="east",
                           nodes=[{"name": "n2", "cluster": "west", "site": "mine now"}]), keys["east"])
    assert r.status_code == 403 and "node 'n2'" in r.json()["detail"] and "cluster 'west'" in r.json()["detail"]
    assert Node.objects.get(cluster__name="west", name="n2").site == ""


def test_maintenance_and_problems_of_another_cluster_are_refused(client, keys, two_clusters):
    ends = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    r = client.post("/api/v1/maintenance/", json.dumps({"node": "west:n1", "reason": "disk", "ends_at": ends}),
                    content_type="application/json", **auth(keys["east"]))
    assert r.status_code == 403 and "cluster 'west'" in r.json()["detail"], r.content
    r = client.post("/api/v1/maintenance/", json.dumps({"node": "west:n1", "reason": "disk", "ends_at": ends}),
                    content_type="application/json", **auth(keys["west"]))
    assert r.status_code == 201, r.content
    window = r.json()["id"]
    r = client.delete(f"/api/v1/maintenance/{window}/", **auth(keys["east"]))
    assert r.status_code == 403 and "maintenance window" in r.json()["detail"]
    assert Maintenance.objects.get(pk=window).ends_at > datetime.now(UTC)
    r = client.post("/api/v1/maintenance/", json.dumps({"node": "n1", "reason": "disk", "ends_at": ends}),
                    content_type="application/json", **auth(keys["west"]))
    assert r.status_code == 400 and "several clusters" in r.content.decode()

    west = Benchmark.objects.get(cluster__name="west")
    now = datetime.now(UTC)
    problem = Problem.objects.create(benchmark=west, key="k", kind="node", severity="warning", summary="s",
                                     fingerprint="f", first_seen=now, last_seen=now)
    r = client.post(f"/api/v1/problems/{problem.pk}/acknowledge/", json.dumps({"note": "mine"}),
                    content_type="application/json", **auth(keys["east"]))
    assert r.status_code == 403 and "problem" in r.json()["detail"] and "cluster 'west'" in r.json()["detail"]
    r = client.post(f"/api/v1/problems/{problem.pk}/acknowledge/", json.dumps({"note": "ours"}),
                    content_type="application/json", **auth(keys["west"]))
    assert r.status_code == 200 and r.json()["acknowledged"]


def test_an_unscoped_write_token_writes_any_cluster(client, keys, two_clusters):
    admin = services.create_api_token("admin", write=True)[1]
    r = post(client, batch([measurement("n1", "n2")], run="run-west-2", cluster="west"), admin)
    assert r.status_code == 200, r.content
    r = post(client, batch([measurement("d1", "d2")], name="legacy"), admin)  # no cluster: the default one
    assert r.status_code == 200 and Benchmark.objects.get(name="legacy").cluster.name == "default"


def grid(client, **query):
    r = client.get("/api/v1/grid/", {"benchmark": "mesh/nightly", "protocol": "xrootd-https", **query})
    assert r.status_code == 200, r.content
    return r.json()


def test_the_grid_shows_one_cluster_or_every_cluster(client, keys, two_clusters):
    east = grid(client, cluster="east")
    assert east["clusters"] == ["east"]
    assert [(n["name"], n["cluster"]) for n in east["nodes"]] == [("n1", "east"), ("n2", "east")]
    assert {c["value"] for c in east["cells"]} == {10.0}

    both = grid(client)
    assert both["clusters"] == ["east", "west"]
    assert [(n["name"], n["cluster"]) for n in both["nodes"]] == [
        ("east:n1", "east"), ("east:n2", "east"), ("west:n1", "west"), ("west:n2", "west")]
    assert {(c["source"], c["destination"], c["value"]) for c in both["cells"]} == {
        ("east:n1", "east:n2", 10.0), ("east:n2", "east:n1", 10.0),
        ("west:n1", "west:n2", 20.0), ("west:n2", "west:n1", 20.0)}

    # a cross-cluster pair measured by east shows in the combined grid, between the two clusters' nodes
    pair = measurement("n1", "n2", gbps=7.0, finished=T0 + timedelta(minutes=5))
    assert post(client, batch([pair], run="run-east-x", cluster="east", nodes=[{"name": "n2", "cluster": "west"}]),
                keys["east"]).status_code == 200
    both = grid(client, mode="median", window="7d")
    assert ("east:n1", "west:n2", 7.0) in {(c["source"], c["destination"], c["value"]) for c in both["cells"]}

    assert client.get("/api/v1/grid/", {"benchmark": "mesh/nightly", "protocol": "xrootd-https",
                                        "cluster": "north"}).status_code == 404


def test_reads_filter_by_cluster(client, keys, two_clusters):
    rows = client.get("/api/v1/measurements/", {"cluster": "west"}).json()["results"]
    assert len(rows) == 2 and {m["cluster"] for m in rows} == {"west"}
    nodes = client.get("/api/v1/nodes/", {"cluster": "east"}).json()["results"]
    assert {(n["name"], n["cluster"]) for n in nodes} == {("n1", "east"), ("n2", "east")}
    runs = client.get("/api/v1/runs/", {"cluster": "east"}).json()["results"]
    assert [r["cluster"] for r in runs] == ["east"]
    assert client.get("/api/v1/pairs/history/", {"source": "n1", "destination": "n2"}).status_code == 400
    history = client.get("/api/v1/pairs/history/", {"source": "west:n1", "destination": "west:n2"}).json()
    assert {p["throughput_gbps"] for p in history} == {20.0}


def test_the_grid_page_shows_one_cluster_or_every_cluster(client, two_clusters):
    page = client.get("/grid/mesh/nightly/").content.decode()
    assert "every cluster" in page and 'data-n="east:n1"' in page and 'data-n="west:n2"' in page
    page = client.get("/grid/mesh/nightly/?cluster=west").content.decode()
    assert "cluster west" in page and 'data-n="n1"' in page and "east:n1" not in page


def test_create_api_token_command_scopes_to_a_cluster(capsys):
    call_command("create_api_token", "op-north", "--cluster", "north")
    key = capsys.readouterr().out.strip()
    token = ApiToken.objects.select_related("cluster").get(name="op-north")
    assert token.write and token.cluster.name == "north" and len(key) == 40


def test_each_operator_reads_its_own_clusters_maintenance(client, keys, two_clusters):
    """The operator asks for ?active=true&cluster=<its own> (ResultsClient.active_maintenance): a window on west's
    n1 must not leave east's n1 out of east's runs."""
    ends = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    r = client.post("/api/v1/maintenance/", json.dumps({"node": "west:n1", "reason": "NIC", "ends_at": ends}),
                    content_type="application/json", **auth(keys["west"]))
    assert r.status_code == 201, r.content
    east = client.get("/api/v1/maintenance/", {"active": "true", "cluster": "east"}).json()["results"]
    west = client.get("/api/v1/maintenance/", {"active": "true", "cluster": "west"}).json()["results"]
    assert east == [] and [w["node"] for w in west] == ["n1"]

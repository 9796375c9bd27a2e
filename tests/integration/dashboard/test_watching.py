"""Watching the mesh over time, through the API on the suite's PostgreSQL: step changes found on ingest and listed
by /api/v1/changes/, problems with acknowledgement, maintenance windows (grid colour, no problem), the problems
gauge for the chart's alert rules. Ingest runs the analysis in the request (settings_test: ANALYSIS=inline), after
its transaction commits, as the background thread does in production."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission, User

from tests.support.dashboard import batch, measurement, post_batch

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
NODES = ["a1", "a2", "b1", "b2"]
SITES = [{"name": n, "site": n[0].upper()} for n in NODES]


def ingest(client, key, ms, run):
    post_batch(client, key, batch(ms, run=run, nodes=SITES))


def mesh_run(t, gbps_of, protocol="builtin", streams=8):
    return [measurement(s, d, protocol=protocol, streams=streams, finished=t, gbps=gbps_of(s, d),
                        status="succeeded" if gbps_of(s, d) else "failed", error=None if gbps_of(s, d) else "refused")
            for s in NODES for d in NODES if s != d]


def auth(key):
    return {"HTTP_AUTHORIZATION": f"Token {key}"}


def test_a_step_change_is_found_within_three_runs_and_listed(client, write_key):
    rng = random.Random(3)
    t0 = datetime.now(UTC) - timedelta(days=10)
    # a1 -> b1 falls from ~20 to ~10 Gbit/s at run 8; one outlier elsewhere is not a change
    for k in range(14):
        def gbps(s, d, k=k):
            base = 10.0 if (s, d) == ("a1", "b1") and k >= 8 else 20.0
            if (s, d) == ("b2", "a2") and k == 5:
                base = 4.0
            return round(base * rng.uniform(0.97, 1.03), 3)
        ingest(client, write_key, mesh_run(t0 + timedelta(hours=12 * k), gbps), f"r{k}")
    found = client.get("/api/v1/changes/?benchmark=mesh/nightly").json()
    assert found["count"] == 1, found
    (c,) = found["results"]
    assert (c["source"], c["destination"], c["protocol"], c["streams"], c["metric"]) == (
        "a1", "b1", "builtin", 8, "throughput_gbps")
    assert c["worse"] is True and c["ratio"] == pytest.approx(0.5, abs=0.05) and c["runs_to_detect"] <= 3
    assert c["at"].startswith((t0 + timedelta(hours=12 * 8)).strftime("%Y-%m-%dT%H"))
    # found once: later runs see the same step and do not list it again
    assert client.get("/api/v1/changes/?node=b1&worse=true").json()["count"] == 1
    assert client.get("/api/v1/changes/?node=a2").json()["count"] == 0
    assert client.get("/api/v1/changes/?metric=rtt_ms").json()["count"] == 0
    bad = client.get("/api/v1/changes/?since=yesterday")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "since"


def test_problems_are_found_acknowledged_until_they_change_and_resolved(client, write_key, read_key):
    t = datetime.now(UTC) - timedelta(hours=3)
    ingest(client, write_key, mesh_run(t, lambda s, d: 0.4 if s == "b1" else 20.0), "p1")
    (p,) = client.get("/api/v1/problems/?active=true").json()["results"]
    assert (p["kind"], p["key"], p["severity"], p["acknowledged"]) == ("node", "node:b1", "critical", False)
    assert "every test from b1" in p["summary"] and len(p["cells"]) == 3

    url = f"/api/v1/problems/{p['id']}/acknowledge/"
    assert client.post(url, {"note": "ticket 42"}, format="json", **auth(read_key)).status_code == 403
    assert client.post(url, {"note": "x" * 1001}, content_type="application/json",
                       **auth(write_key)).status_code == 400
    r = client.post(url, json.dumps({"note": "ticket 42"}), content_type="application/json", **auth(write_key))
    assert r.status_code == 200 and r.json()["acknowledged"] and r.json()["ack_by"] == "token:operator"
    gauge = client.get("/metrics").content.decode()
    assert ('tpcmesh_dashboard_problems{acknowledged="true",benchmark="mesh/nightly",kind="node",'
            'severity="critical"} 1.0') in gauge

    # the same problem in the next run: still acknowledged, first seen unchanged
    ingest(client, write_key, mesh_run(t + timedelta(hours=1), lambda s, d: 0.5 if s == "b1" else 20.0), "p2")
    again = client.get(f"/api/v1/problems/{p['id']}/").json()
    assert again["acknowledged"] and again["first_seen"] == p["first_seen"]
    # it changes (b1 now fails receiving too): listed as not acknowledged, alerting again
    ingest(client, write_key, mesh_run(t + timedelta(hours=2), lambda s, d: 0.5 if "b1" in (s, d) else 20.0), "p3")
    changed = client.get(f"/api/v1/problems/{p['id']}/").json()
    assert not changed["acknowledged"] and "from and to b1" in changed["summary"]
    # mended: resolved, no longer active
    ingest(client, write_key, mesh_run(t + timedelta(hours=2, minutes=30), lambda s, d: 20.0), "p4")
    assert client.get(f"/api/v1/problems/{p['id']}/").json()["resolved_at"] is not None
    assert client.get("/api/v1/problems/?active=true").json()["count"] == 0


def test_a_signed_in_user_needs_the_permission_to_acknowledge(client, write_key):
    ingest(client, write_key, mesh_run(datetime.now(UTC), lambda s, d: 0.4 if d == "a2" else 20.0), "u1")
    (p,) = client.get("/api/v1/problems/").json()["results"]
    user = User.objects.create_user("alice", password="pw")
    client.force_login(user)
    url = f"/api/v1/problems/{p['id']}/acknowledge/"
    refused = client.post(url, {"note": "mine"}, format="json")
    assert refused.status_code == 403 and "permission" in refused.json()["detail"]
    user.user_permissions.add(Permission.objects.get(codename="change_problem"))
    user = User.objects.get(pk=user.pk)  # the permission cache
    client.force_login(user)
    ok = client.post(url, json.dumps({"note": "mine"}), content_type="application/json")
    assert ok.status_code == 200 and ok.json()["ack_by"] == "alice"


def test_maintenance_colours_the_cells_raises_no_problem_and_ends(client, write_key):
    t = datetime.now(UTC) - timedelta(minutes=30)
    ingest(client, write_key, mesh_run(t, lambda s, d: None if "b2" in (s, d) else 20.0), "m1")
    (p,) = client.get("/api/v1/problems/?active=true").json()["results"]
    assert p["key"] == "node:b2"

    ends = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    both = {"node": "b2", "source": "a1", "reason": "x", "ends_at": ends}
    bad = client.post("/api/v1/maintenance/", json.dumps(both), content_type="application/json", **auth(write_key))
    assert bad.status_code == 400 and "not both" in json.dumps(bad.json())
    misspelt = {"node": "b2", "reason": "x", "ends_at": ends, "until": ends}
    typo = client.post("/api/v1/maintenance/", json.dumps(misspelt), content_type="application/json",
                       **auth(write_key))
    assert typo.status_code == 400 and typo.json()["errors"][0]["field"] == "until"
    anon = client.post("/api/v1/maintenance/", json.dumps({"node": "b2", "reason": "NIC swap", "ends_at": ends}),
                       content_type="application/json")
    assert anon.status_code in (401, 403)
    r = client.post("/api/v1/maintenance/", json.dumps({"node": "b2", "reason": "NIC swap", "ends_at": ends}),
                    content_type="application/json", **auth(write_key))
    assert r.status_code == 201, r.content
    window = r.json()
    assert window["active"] and window["created_by"] == "token:operator"

    cells = client.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=builtin").json()["cells"]
    states = {(c["source"], c["destination"]): c["state"] for c in cells}
    assert all((st == "maintenance") == ("b2" in pair) for pair, st in states.items()), states
    assert client.get("/api/v1/problems/?active=true").json()["count"] == 0  # resolved by the window
    listed = client.get("/api/v1/maintenance/?active=true&node=b2").json()["results"]
    assert [w["id"] for w in listed] == [window["id"]]

    # ended early: kept in the history, the problem is back (a new sighting)
    assert client.delete(f"/api/v1/maintenance/{window['id']}/", **auth(write_key)).status_code == 204
    assert client.get("/api/v1/maintenance/?active=true").json()["count"] == 0
    assert client.get("/api/v1/maintenance/?active=false").json()["count"] == 1
    (back,) = client.get("/api/v1/problems/?active=true").json()["results"]
    assert back["key"] == "node:b2" and back["first_seen"] > p["first_seen"]


def test_a_node_without_results_in_two_runs_is_silent(client, write_key):
    t = datetime.now(UTC) - timedelta(hours=5)
    ingest(client, write_key, mesh_run(t, lambda s, d: 20.0), "s1")
    without = [m for m in mesh_run(t + timedelta(hours=1), lambda s, d: 20.0) if "a2" not in (m["source"],
                                                                                             m["destination"])]
    ingest(client, write_key, without, "s2")
    assert client.get("/api/v1/problems/?kind=silent").json()["count"] == 0  # one run without: not yet
    ingest(client, write_key, [m for m in mesh_run(t + timedelta(hours=2), lambda s, d: 20.0)
                               if "a2" not in (m["source"], m["destination"])], "s3")
    (p,) = client.get("/api/v1/problems/?kind=silent").json()["results"]
    assert p["key"] == "silent:a2" and "no result in the last 2 runs" in p["summary"]


def test_analysis_marks_cells_apart_and_never_rewrites_a_grid_row(client, write_key):
    """The analysed mark lives in AnalysisMark: analysing writes no PairLatest row (the rows ingest upserts keep
    their row version), and a cell analysed up to its newest measurement is not analysed again."""
    from django.db import connection
    from results import analysis
    from results.models import AnalysisMark, PairLatest

    t = datetime.now(UTC) - timedelta(hours=3)
    with connection.cursor() as cur:  # analysis "inline" runs in the ingest request: look before and after it
        ingest(client, write_key, mesh_run(t, lambda s, d: 20.0), "m1")
        cur.execute(f"SELECT id, xmin::text FROM {PairLatest._meta.db_table}")
        versions = dict(cur.fetchall())
        assert len(versions) == 12
        AnalysisMark.objects.all().delete()  # as if the analysis had not run yet
        assert analysis.detect_changes() == {PairLatest.objects.get(id=next(iter(versions))).benchmark_id}
        cur.execute(f"SELECT id, xmin::text FROM {PairLatest._meta.db_table}")
        assert dict(cur.fetchall()) == versions
    marks = dict(AnalysisMark.objects.values_list("cell_id", "analysed_at"))
    assert marks == dict(PairLatest.objects.values_list("id", "finished_at"))
    assert analysis.detect_changes() == set()  # nothing left
    ingest(client, write_key, mesh_run(t + timedelta(hours=1), lambda s, d: 20.0), "m2")
    assert AnalysisMark.objects.filter(analysed_at=t + timedelta(hours=1)).count() == 12  # moved forward

"""Every slow cell says why (results.diagnosis): after an ingest the analysis diagnoses each newest cell with the
limit model, stores the answer on the measurement (API: binding_limit, efficiency, diagnosis; filter
?binding_limit=), and the problem rules use it: a far node whose every incoming single-stream test sits at its
receive window gets one tuning problem naming tcp_rmem and its figure, not "look at the node"."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.dashboard import batch, host_end, measurement, post_batch

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
NODES = ["a1", "a2", "b1", "far"]
RTT_FAR_MS = 53.0


def _mesh(t: datetime, far_buffer: int, far_gbps: float, far_iperf3_gbps: float) -> list[dict]:
    """builtin x1 and iperf3 x8 between every pair; `far` is 53 ms away with TCP buffers of `far_buffer` (both
    ways: its receive window bounds the tests to it, its send buffer the tests from it)."""
    out = []
    for s in NODES:
        for d in NODES:
            if s == d:
                continue
            far = "far" in (s, d)
            host = {"source": host_end(far_buffer if s == "far" else 64_000_000),
                    "destination": host_end(far_buffer if d == "far" else 64_000_000)}
            waited = {"rwnd_limited_fraction": 0.87 if d == "far" else 0.01,
                      "sndbuf_limited_fraction": 0.87 if s == "far" else 0.0}
            for protocol, streams, gbps in (("builtin", 1, far_gbps), ("iperf3", 8, far_iperf3_gbps)):
                m = measurement(s, d, protocol=protocol, streams=streams, finished=t, gbps=gbps if far else 40.0,
                                rtt_ms=RTT_FAR_MS if far else 0.2)
                m["aggregate_gbps"] = m["throughput_gbps"]
                m["host"] = host
                m["tcp"] = {"retransmits": 0, "sender": {"retransmits": 0, "data_segs_out": 400_000,
                                                         "congestion": ["cubic"], **waited}}
                out.append(m)
    return out


def ingest(client, key, ms, run):
    post_batch(client, key, batch(ms, run=run, nodes=[{"name": n} for n in NODES]))


def test_a_far_node_behind_a_small_receive_window_is_a_tuning_problem_with_its_figures(client, write_key):
    ingest(client, write_key, _mesh(datetime.now(UTC) - timedelta(hours=1), 3_000_000, 0.35, 2.8), "d1")

    limited = client.get("/api/v1/measurements/?binding_limit=receive-window&protocol=builtin").json()
    assert limited["count"] == 3, limited
    assert {(m["source"], m["destination"]) for m in limited["results"]} == {(n, "far") for n in ("a1", "a2", "b1")}
    one = limited["results"][0]
    assert one["efficiency"] == pytest.approx(0.35 / 2.8, rel=0.01)  # measured ÷ the pair's iperf3 x8
    diagnosis = client.get(f"/api/v1/measurements/{one['id']}/").json()["diagnosis"]
    assert diagnosis["limit"] == "receive-window" and "tcp_rmem" in diagnosis["fix"] and "far" in diagnosis["fix"]
    window = next(b for b in diagnosis["bounds"] if b["limit"] == "receive-window")
    assert window["sits_at"] and window["evidence"]["tcp_rmem_max_bytes"] == 3_000_000
    # from far: its send buffer; the LAN pairs are not window-limited
    sent = client.get("/api/v1/measurements/?binding_limit=send-buffer&protocol=builtin").json()["results"]
    assert {m["source"] for m in sent} == {"far"} and len(sent) == 3
    assert client.get("/api/v1/measurements/?binding_limit=receive-window&destination=a1").json()["count"] == 0

    active = client.get("/api/v1/problems/?active=true").json()["results"]
    assert [p["key"] for p in active if p["kind"] == "node"] == [], active  # far is healthy: no node problem
    tuning = {p["key"]: p["summary"] for p in active if p["kind"] == "tuning"}
    assert set(tuning) == {"tuning:far:receive-window", "tuning:far:send-buffer"}, active
    assert "every slow test to far is receive-window-limited" in tuning["tuning:far:receive-window"]
    assert "tcp_rmem" in tuning["tuning:far:receive-window"] and "tcp_wmem" in tuning["tuning:far:send-buffer"]


def test_without_telemetry_the_slow_far_node_is_still_a_node_problem_and_the_cell_unknown(client, write_key):
    """What the dashboard did before diagnosis, and still does when the figures a bound needs are missing."""
    ms = _mesh(datetime.now(UTC) - timedelta(hours=1), 3_000_000, 0.35, 2.8)
    for m in ms:
        m.pop("host", None)
        m.pop("tcp", None)
    ingest(client, write_key, ms, "d2")
    assert client.get("/api/v1/measurements/?binding_limit=receive-window").json()["count"] == 0
    unknown = client.get("/api/v1/measurements/?binding_limit=unknown&destination=far&protocol=builtin").json()
    assert unknown["count"] == 3
    detail = client.get(f"/api/v1/measurements/{unknown['results'][0]['id']}/").json()["diagnosis"]
    assert detail["missing"], detail  # the missing figures are named, never guessed
    active = client.get("/api/v1/problems/?active=true").json()["results"]
    assert [p["key"] for p in active if p["kind"] == "node"] == ["node:far"], active


def test_evaluate_answers_a_benchmarks_open_problems_now(client, write_key, read_key):
    """POST /api/v1/problems/evaluate/: what the operator asks for a run's MeshHealthy condition."""
    ingest(client, write_key, _mesh(datetime.now(UTC) - timedelta(hours=1), 3_000_000, 0.35, 2.8), "d3")
    url = "/api/v1/problems/evaluate/"
    body = json.dumps({"namespace": "mesh", "name": "nightly"})
    r = client.post(url, body, content_type="application/json", HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200, r.content
    answer = r.json()
    assert (answer["benchmark"], answer["cluster"]) == ("mesh/nightly", "default")
    assert sorted(p["key"] for p in answer["problems"]) == ["tuning:far:receive-window", "tuning:far:send-buffer"]
    assert client.post(url, body, content_type="application/json",
                       HTTP_AUTHORIZATION=f"Token {read_key}").status_code == 403
    missing = client.post(url, json.dumps({"namespace": "mesh", "name": "never"}), content_type="application/json",
                          HTTP_AUTHORIZATION=f"Token {write_key}")
    assert missing.status_code == 404 and "mesh/never" in missing.json()["detail"]
    bad = client.post(url, json.dumps({"namespace": "mesh"}), content_type="application/json",
                      HTTP_AUTHORIZATION=f"Token {write_key}")
    assert bad.status_code == 400 and "name" in bad.content.decode()


def _grid(client, query: str) -> dict:
    """The grid API's builtin cells by (source, destination)."""
    r = client.get(f"/api/v1/grid/?benchmark=mesh/nightly&protocol=builtin{query}",
                   HTTP_ACCEPT="application/json")
    assert r.status_code == 200, r.content
    return {(c["source"], c["destination"]): c for c in r.json()["cells"]}


@pytest.mark.parametrize("mode", ["latest", "median"])
def test_grid_cells_carry_their_limit_evidence_and_efficiency_and_filter_by_limit(client, write_key, mode,
                                                                                  monkeypatch):
    """Each builder (the database's JSON, its rows for a window, the filtered grid built in Python) answers the
    cell's diagnosis; ?binding_limit= keeps the cells of those limits; a newer measurement the analysis has not
    judged yet shows none rather than the older one's."""
    from results import analysis, selectors
    from results.models import Benchmark, PairLatest

    ingest(client, write_key, _mesh(datetime.now(UTC) - timedelta(hours=1), 3_000_000, 0.35, 2.8), "g1")
    cells = _grid(client, f"&mode={mode}")
    into = cells[("a1", "far")]
    assert into["binding_limit"] == "receive-window"
    assert into["efficiency"] == pytest.approx(0.35 / 2.8, rel=0.01)
    assert "tcp_rmem" in into["fix"] and "far" in into["fix"]
    assert into["evidence"].startswith("receive-window: 0.35 Gbit/s sits at")
    assert cells[("far", "a1")]["binding_limit"] == "send-buffer"
    assert cells[("a1", "a2")]["binding_limit"] == "network-capacity"
    assert cells[("a1", "a2")]["efficiency"] == pytest.approx(1.0)

    only = _grid(client, f"&mode={mode}&binding_limit=receive-window&binding_limit=send-buffer")
    assert set(only) == {(n, "far") for n in ("a1", "a2", "b1")} | {("far", n) for n in ("a1", "a2", "b1")}
    same = [k for k in into if k != "age_seconds"]  # the age moves on between the two requests
    assert [only[("a1", "far")][k] for k in same] == [into[k] for k in same]  # the filtered grid's cell: the same
    assert _grid(client, "&binding_limit=source-storage") == {}
    bad = client.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=builtin&binding_limit=window")
    assert bad.status_code == 400 and "binding_limit: 'window' is not one of" in bad.json()["detail"], bad.content
    portable = selectors.grid(Benchmark.objects.get(), "builtin", mode=mode)["cells"]  # rows, or Python's cells
    assert {(c["source"], c["destination"]): c["binding_limit"] for c in portable}[("a1", "far")] == "receive-window"

    # a newer measurement of the cell, not analysed yet: its cell is not diagnosed until it is
    newer = _mesh(datetime.now(UTC) - timedelta(minutes=5), 3_000_000, 0.35, 2.8)
    newer = [m for m in newer if (m["source"], m["destination"], m["protocol"]) == ("a1", "far", "builtin")]
    monkeypatch.setattr(analysis, "schedule", lambda: None)
    ingest(client, write_key, newer, "g2")
    assert PairLatest.objects.get(source__name="a1", destination__name="far", protocol="builtin").diagnosis
    fresh = _grid(client, "")[("a1", "far")]
    assert (fresh["binding_limit"], fresh["efficiency"], fresh["evidence"], fresh["fix"]) == ("", None, None, None)

"""Faults with real agents: a refused source, a source killed mid-transfer, a stalled source past the timeout,
cancellation, one test at a time (409) and idempotency by test id. The agent stays healthy after each."""

from __future__ import annotations

import time
import uuid

import pytest

pytestmark = pytest.mark.integration


def _validator():
    import json

    import jsonschema

    from tests.support.paths import REPO

    schema = json.loads((REPO / "manifests/schemas/measurement.v1.schema.json").read_text())
    return jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/transferRecord"},
                                           format_checker=jsonschema.FormatChecker())

SIZE = 4_000_000


def _healthy_after(src, dst) -> None:
    """The destination still answers and still moves files."""
    assert dst.alive()
    assert dst.get("/healthz").status_code == 200
    fs = src.file_set(count=1, size=10_000)
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                       file_set={"count": 1, "size": 10_000}, files=fs["files"])
    assert rec["status"] == "succeeded", rec["error"]


def _wait_bytes(dst, test_id: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = dst.get(f"/api/v1/transfers/{test_id}").json()
        if rec["status"] != "running" or rec["progress"]["bytes_done"] > 0:
            return rec
        time.sleep(0.02)
    raise AssertionError("no bytes moved")


def test_refused_source_fails_with_the_reason(agent_factory):
    src, dst = agent_factory.many(2)
    src.file_set(count=2, size=1000)
    t0 = time.monotonic()
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": 9},  # nothing listens there
                       file_set={"count": 2, "size": 1000}, concurrency=2)
    assert time.monotonic() - t0 < 20  # no hang (generous: the machine is shared)
    assert rec["status"] == "failed"
    assert rec["error"].startswith("2 of 2 files failed; first: file-0000.dat: cannot connect to ")
    assert "refused" in rec["error"].lower()
    assert all(f["bytes"] == 0 and "refused" in f["error"].lower() for f in rec["files"])
    assert rec["total_bytes"] == 0 and rec["throughput_gbps"] is None
    assert dst.metric("tpcmesh_agent_transfers_total", protocol="builtin", status="failed") == 1.0
    _healthy_after(src, dst)


def test_missing_set_on_source_fails_with_404(agent_factory):
    src, dst = agent_factory.many(2)
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                       file_set={"count": 1, "size": 1000})
    assert rec["status"] == "failed" and "answered 404 Not Found" in rec["error"]


@pytest.mark.parametrize("streams", [1, 8])
def test_source_killed_mid_transfer(agent_factory, streams):
    src = agent_factory(builtin_max_rate=2_000_000 // streams)  # per connection: a 4 MB file takes 2 s
    dst = agent_factory()
    fs = src.file_set(count=2, size=SIZE)
    started = dst.start_transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                                 file_set={"count": 2, "size": SIZE}, files=fs["files"], concurrency=2,
                                 streams=streams, timeout_seconds=30)
    assert started["status"] == "running" and started["progress"]["files_total"] == 2
    running = _wait_bytes(dst, started["test_id"])
    assert running["status"] == "running" and 0 < running["progress"]["bytes_done"] < 2 * SIZE
    src.kill()
    rec = dst.wait_transfer(started["test_id"], timeout=15)
    assert rec["status"] == "failed"
    assert "connection closed after" in rec["error"] or "reset" in rec["error"], rec["error"]
    assert all(f["error"] and f["bytes"] < SIZE for f in rec["files"])
    assert 0 < rec["total_bytes"] < 2 * SIZE
    assert dst.alive() and dst.get("/healthz").status_code == 200
    assert list((dst.data_dir / "data" / "incoming").iterdir()) == []


def test_stalled_source_times_out(agent_factory):
    src, dst = agent_factory.many(2)
    fs = src.file_set(count=1, size=SIZE)
    src.pause()  # SIGSTOP: the kernel still accepts the connection, nobody answers
    try:
        t0 = time.monotonic()
        rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                           file_set={"count": 1, "size": SIZE}, files=fs["files"], timeout_seconds=1.5)
        took = time.monotonic() - t0
    finally:
        src.resume()
    assert rec["status"] == "failed"
    assert rec["error"] == "timed out after 1.5 s: 1 of 1 files failed; first: file-0000.dat: timed out after 1.5 s"
    assert 1.4 <= rec["wall_seconds"] < 6 and took < 15
    assert rec["files"][0]["error"] == "timed out after 1.5 s" and rec["files"][0]["bytes"] == 0
    _healthy_after(src, dst)


def test_timeout_mid_transfer_keeps_the_bytes_received(agent_factory):
    src = agent_factory(builtin_max_rate=2_000_000)
    dst = agent_factory()
    fs = src.file_set(count=2, size=2 * SIZE)
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                       file_set={"count": 2, "size": 2 * SIZE}, files=fs["files"], concurrency=2, streams=1,
                       timeout_seconds=2.0, destination="sink")  # 8 MB at 2 MB/s: 4 s
    assert rec["status"] == "failed" and rec["error"].startswith("timed out after 2 s: 2 of 2 files failed")
    assert all(f["error"] == "timed out after 2 s" and f["bytes"] < 2 * SIZE for f in rec["files"])
    assert rec["total_bytes"] > 0
    assert rec["total_bytes"] == sum(f["bytes"] for f in rec["files"])
    assert rec["aggregate_gbps"] > 0


def test_one_test_at_a_time_idempotency_and_cancel(agent_factory):
    src = agent_factory(builtin_max_rate=1_000_000)
    dst = agent_factory()
    fs = src.file_set(count=1, size=SIZE)
    body = {"test_id": str(uuid.uuid4()), "protocol": "builtin",
            "source": {"host": src.address, "port": src.builtin_port},
            "file_set": {"count": 1, "size": SIZE}, "files": fs["files"], "timeout_seconds": 60}
    first = dst.post("/api/v1/transfers", json=body)
    assert first.status_code == 202 and first.json()["status"] == "running"
    again = dst.post("/api/v1/transfers", json=body)  # same test id: same test, not a second one
    assert again.status_code == 200 and again.json()["test_id"] == body["test_id"]
    other = dst.post("/api/v1/transfers", json={**body, "test_id": str(uuid.uuid4())})
    assert other.status_code == 409
    assert other.json() == {"error": f"test {body['test_id']} is running; one test at a time",
                            "running_test_id": body["test_id"]}
    assert dst.get("/api/v1/info").json()["running_test_id"] == body["test_id"]
    _wait_bytes(dst, body["test_id"])
    assert dst.metric("tpcmesh_agent_active_transfers") == 1.0
    t0 = time.monotonic()
    cancelled = dst.delete(f"/api/v1/transfers/{body['test_id']}")
    assert time.monotonic() - t0 < 15
    assert cancelled.status_code == 200
    rec = cancelled.json()
    assert rec["status"] == "cancelled" and rec["error"] == f"cancelled by request after {rec['total_bytes']} bytes"
    assert 0 < rec["total_bytes"] < SIZE and rec["files"][0]["error"] == "cancelled by request"
    _validator().validate(rec)
    assert dst.get(f"/api/v1/transfers/{body['test_id']}").json() == rec
    repeat = dst.post("/api/v1/transfers", json=body)  # a finished test id returns its record
    assert repeat.status_code == 200 and repeat.json() == rec
    assert dst.metric("tpcmesh_agent_active_transfers") == 0.0
    assert dst.metric("tpcmesh_agent_transfers_total", protocol="builtin", status="cancelled") == 1.0
    assert dst.delete(f"/api/v1/transfers/{uuid.uuid4()}").status_code == 404
    _healthy_after(src, dst)


def test_sigterm_during_a_test_ends_it_and_exits_cleanly(agent_factory):
    src = agent_factory(builtin_max_rate=1_000_000)
    dst = agent_factory()
    fs = src.file_set(count=1, size=SIZE)
    started = dst.start_transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                                 file_set={"count": 1, "size": SIZE}, files=fs["files"])
    _wait_bytes(dst, started["test_id"])
    t0 = time.monotonic()
    dst.process.terminate()
    assert dst.process.wait(20) == 0 and time.monotonic() - t0 < 20
    assert "Finished transfer " + started["test_id"] + ": cancelled" in dst.log()
    assert src.get("/healthz").status_code == 200  # the source does not care


def test_port_in_use_fails_fast_with_the_reason(agent_factory):
    first = agent_factory()
    with pytest.raises(RuntimeError) as e:
        agent_factory(address=first.address, api_port=9444, metrics_port=9465)  # builtin port 9080 is taken
    assert "exited with 1" in str(e.value) and "address already in use" in str(e.value).lower()
    assert first.get("/healthz").status_code == 200

"""The executor's output against the measurement contract (manifests/schemas/measurement.v1.schema.json)."""

from __future__ import annotations

import json
import uuid

import jsonschema
import pytest
from tpcmesh_operator.plan.planner import Setting, Test
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import Agent
from tpcmesh_operator.run.batch import ingest_batch
from tpcmesh_operator.run.executor import (
    MemoryStatusStore,
    RunExecutor,
    RunInfo,
    StaticDirectory,
    failed_measurement,
    measurement_from_record,
    rtt_measurement,
)
from tpcmesh_operator.run.measurements import now_iso
from tpcmesh_operator.run.status import loopback_entry

from tests.support.paths import REPO

SCHEMA = json.loads((REPO / "manifests/schemas/measurement.v1.schema.json").read_text())


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = {**SCHEMA, "$ref": f"#/$defs/{name}"}
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def record(**kw) -> dict:
    t = now_iso()
    r = {"test_id": str(uuid.uuid4()), "protocol": "xrootd-https", "streams": 8, "concurrency": 2,
         "status": "succeeded", "error": None, "file_size": 1000, "file_count": 2, "total_bytes": 2000,
         "wall_seconds": 0.5, "mean_transfer_seconds": 0.25, "throughput_gbps": 6.4e-5, "aggregate_gbps": 3.2e-5,
         "peak_gbps": None, "checksum": "ok", "destination_kind": "store", "started_at": t, "finished_at": t,
         "files": [{"name": f"f{i}", "size": 1000, "bytes": 1000, "started_at": t, "finished_at": t,
                    "seconds": 0.25, "error": None, "checksum_ok": True} for i in range(2)],
         "progress": {"bytes_done": 2000, "files_done": 2, "files_total": 2, "gbps": 0.0}}
    r.update(kw)
    return r


def test_record_to_measurement_keeps_every_contract_field() -> None:
    rec = record()
    validator("transferRecord").validate(rec)
    m = measurement_from_record(rec, "node-a", "node-b", {"median_ms": 0.2, "min_ms": 0.1, "max_ms": 0.4})
    validator("measurement").validate(m)
    assert m["id"] == rec["test_id"] and (m["source"], m["destination"]) == ("node-a", "node-b")
    assert m["rtt_ms"] == 0.2 and m["throughput_gbps"] == rec["throughput_gbps"] and m["files"] == rec["files"]
    assert "progress" not in m


def test_a_repeated_settings_rows_say_which_repeat_they_are() -> None:
    m = measurement_from_record(record(), "node-a", "node-b", repeat=2)
    validator("measurement").validate(m)
    assert m["repeat"] == 2 and "repeat" not in measurement_from_record(record(), "node-a", "node-b")
    t = Test(0, Setting("gridftp", 8, repeat=1), "a", "b")
    failed = failed_measurement(str(uuid.uuid4()), t, parse_spec({"repeats": 2}), "agent b vanished", now_iso())
    validator("measurement").validate(failed)
    assert failed["repeat"] == 1
    with pytest.raises(jsonschema.ValidationError):
        validator("measurement").validate({**m, "repeat": -1})


def test_the_records_tcp_view_is_passed_on_unchanged() -> None:
    side = {"retransmits": 42, "min_rtt_ms": 50.1, "srtt_ms": 61.0, "cwnd_max_bytes": 900_000, "connections": 2}
    rec = record(tcp={"retransmits": 42, "srtt_median_ms": 61.0, "sender": {**side, "congestion": ["cubic"]},
                      "receiver": None})
    rec["files"][0]["tcp"] = {"sender": side, "receiver": None}
    validator("transferRecord").validate(rec)
    m = measurement_from_record(rec, "node-a", "node-b")
    validator("measurement").validate(m)
    assert m["tcp"] == rec["tcp"] and m["files"][0]["tcp"]["sender"] == side and "tcp" not in measurement_from_record(
        record(), "node-a", "node-b")
    with pytest.raises(jsonschema.ValidationError):  # the contract checks the figures' types
        validator("measurement").validate({**m, "tcp": {"retransmits": -1}})


def test_the_records_implementation_is_passed_on_and_failed_rows_carry_none() -> None:
    impl = {"name": "xrootd", "version": "5.5.3", "peer_version": None, "agent_version": "0.1.0"}
    rec = record(implementation=impl)
    validator("transferRecord").validate(rec)
    m = measurement_from_record(rec, "node-a", "node-b")
    validator("measurement").validate(m)
    assert m["implementation"] == impl and "implementation" not in measurement_from_record(record(), "a", "b")
    t = Test(0, Setting("xrootd-https", 8), "a", "b")
    failed = failed_measurement(str(uuid.uuid4()), t, parse_spec({}), "agent b vanished", now_iso())
    assert "implementation" not in failed
    with pytest.raises(jsonschema.ValidationError):  # the contract names the implementations it knows
        validator("measurement").validate({**m, "implementation": {**impl, "name": "fts"}})


def test_failed_and_rtt_rows_validate() -> None:
    spec = parse_spec({})
    t = Test(0, Setting("gridftp", 8), "a", "b")
    validator("measurement").validate(failed_measurement(str(uuid.uuid4()), t, spec, "agent b vanished", now_iso()))
    r = Test(0, Setting("rtt"), "a", "b")
    ok = rtt_measurement(str(uuid.uuid4()), r, {"min_ms": 0.1, "median_ms": 0.2, "max_ms": 0.3, "error": None},
                         now_iso())
    bad = rtt_measurement(str(uuid.uuid4()), r, {"error": "connection refused"}, now_iso())
    trace = {"hops": [{"ttl": 1, "address": "198.18.1.1", "rtt_ms": 0.1}, {"ttl": 2, "address": None, "rtt_ms": None},
                      {"ttl": 3, "address": "2001:db8::3", "rtt_ms": 0.3}], "pmtu": 1400, "reached": True,
             "interface": "eth0", "interface_mtu": 9000, "error": None}
    traced = rtt_measurement(str(uuid.uuid4()), r, {"median_ms": 0.2, "error": None}, now_iso(), trace)
    for m in (ok, bad, traced):
        validator("measurement").validate(m)
    assert ok["status"] == "succeeded" and bad["status"] == "failed" and "path" not in ok
    assert traced["path"] == {"hops": ["198.18.1.1", None, "2001:db8::3"], "pmtu": 1400, "interface_mtu": 9000,
                              "reached": True, "error": None}
    with pytest.raises(jsonschema.ValidationError):  # hops are addresses, never free text
        validator("measurement").validate({**traced, "path": {"hops": ["no reply"]}})
    with pytest.raises(jsonschema.ValidationError):
        validator("measurement").validate({**ok, "protocol": "ftp"})


def test_ingest_batch_validates() -> None:
    spec = parse_spec({"thresholds": {"goodGbps": 5, "warnGbps": 1, "efficiency": {"warning": 0.9}}})
    agents = [Agent("a", "127.0.1.1", labels={"tpcmesh.io/site": "X", "tpcmesh.io/nic-speed-gbps": "100"}),
              Agent("b", "127.0.1.2")]
    ex = RunExecutor(spec, RunInfo("default", "bench", "bench-1", str(uuid.uuid4())), StaticDirectory(agents),
                     None, None, MemoryStatusStore())  # type: ignore[arg-type]
    ex._frozen = {a.node: a for a in agents}
    ex.status = {"phase": "Running", "startTime": now_iso(), "planned": 1, "done": 1}
    loop = loopback_entry(measurement_from_record(record(protocol="iperf3", throughput_gbps=41.5), "b", "b"))
    batch = ex._batch([measurement_from_record(record(), "a", "b"), loop])
    validator("ingestBatch").validate(batch)
    assert [m["source"] for m in batch["measurements"]] == ["a"]  # a loopback result is no measurement ...
    assert [n.get("loopback_gbps") for n in batch["nodes"]] == [None, 41.5]  # ... but its node's figure
    assert batch["nodes"][0]["site"] == "X" and batch["nodes"][0]["nic_speed_gbps"] == 100.0
    assert batch["benchmark"]["thresholds"] == {"goodGbps": 5, "warnGbps": 1, "goodRttMs": 20, "warnRttMs": 80,
                                                "efficiency": {"warning": 0.9, "critical": 0.5}}


def test_ingest_batch_carries_the_runs_cluster() -> None:
    """Federation: a run of a named cluster is delivered as that cluster's; a run without one names none (the
    dashboard takes its token's cluster)."""
    agents = [Agent("a", "127.0.1.1"), Agent("b", "127.0.1.2")]
    status = {"phase": "Running", "startTime": now_iso(), "planned": 1, "done": 1}
    entries = [measurement_from_record(record(), "a", "b")]
    info = RunInfo("default", "bench", "bench-1", str(uuid.uuid4()), cluster="east")
    batch = ingest_batch(info, status, parse_spec({}), agents, entries)
    validator("ingestBatch").validate(batch)
    assert batch["cluster"] == "east"
    plain = ingest_batch(RunInfo("default", "bench", "bench-1", str(uuid.uuid4())), status, parse_spec({}), agents,
                         entries)
    validator("ingestBatch").validate(plain)
    assert "cluster" not in plain
    with pytest.raises(jsonschema.ValidationError):  # a blank cluster name is no name
        validator("ingestBatch").validate({**batch, "cluster": " "})

"""Two real agents on loopback addresses of their own; the built-in mover pulls a file set, records checked field by
field and against the measurement contract."""

from __future__ import annotations

import json
import statistics
import uuid
from datetime import datetime

import jsonschema
import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.integration

SIZE = 2_000_003  # odd: ranges of 8 streams do not divide it


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((REPO / "manifests/schemas/measurement.v1.schema.json").read_text())
    return jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/transferRecord"},
                                           format_checker=jsonschema.FormatChecker())


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def check_record(rec: dict, files: list[dict], *, streams: int, concurrency: int, destination: str) -> None:
    """Field-by-field checks of a succeeded builtin record."""
    _validator().validate(rec)
    assert rec["status"] == "succeeded", rec["error"]
    assert rec["error"] is None
    assert rec["protocol"] == "builtin"
    assert (rec["streams"], rec["concurrency"], rec["destination_kind"]) == (streams, concurrency, destination)
    assert rec["file_count"] == len(files)
    sizes = {f["size"] for f in files}
    assert rec["file_size"] == (sizes.pop() if len(sizes) == 1 else None)
    assert rec["total_bytes"] == sum(f["size"] for f in files)
    by_name = {f["name"]: f for f in rec["files"]}
    assert sorted(by_name) == sorted(f["name"] for f in files)
    start, end = _t(rec["started_at"]), _t(rec["finished_at"])
    for f in files:
        got = by_name[f["name"]]
        assert got["bytes"] == got["size"] == f["size"]
        assert got["error"] is None
        assert got["checksum_ok"] is (True if destination == "store" else None)
        assert start <= _t(got["started_at"]) <= _t(got["finished_at"]) <= end
        assert got["seconds"] == pytest.approx((_t(got["finished_at"]) - _t(got["started_at"])).total_seconds())
    assert rec["checksum"] == ("ok" if destination == "store" else "skipped")
    mean = statistics.fmean(f["seconds"] for f in rec["files"])
    assert rec["mean_transfer_seconds"] == pytest.approx(mean)
    last = max(_t(f["finished_at"]) for f in rec["files"])
    assert rec["wall_seconds"] == pytest.approx((last - start).total_seconds())  # until the last byte arrived
    gbit = rec["total_bytes"] * 8 / 1e9
    assert rec["throughput_gbps"] == pytest.approx(gbit / mean)
    assert rec["aggregate_gbps"] == pytest.approx(gbit / rec["wall_seconds"])
    assert mean <= rec["wall_seconds"] + 1e-6
    assert rec["throughput_gbps"] >= rec["aggregate_gbps"] * (1 - 1e-9)  # files overlap or run back to back
    assert rec["peak_gbps"] is not None and rec["peak_gbps"] > 0
    check_tcp(rec, streams=streams)


def check_tcp(rec: dict, *, streams: int) -> None:
    """Each file's TCP view has both sides, one connection per stream: the sender's (fetched from the source
    agent) counts the data segments it sent and its retransmits; the receiver's the segments it got."""
    for f in rec["files"]:
        sender, receiver = f["tcp"]["sender"], f["tcp"]["receiver"]
        assert sender is not None and receiver is not None, f
        assert sender["connections"] == receiver["connections"] == streams
        assert isinstance(sender["retransmits"], int) and sender["min_rtt_ms"] is not None
        assert sender["cwnd_max_bytes"] > 0 and sender["delivery_rate_max_bps"] > 0
    tcp = rec["tcp"]
    assert tcp["sender"]["data_segs_out"] >= rec["total_bytes"] // 65536 <= tcp["receiver"]["data_segs_in"]
    assert tcp["sender"]["congestion"]
    assert tcp["retransmits"] == sum(f["tcp"]["sender"]["retransmits"] for f in rec["files"])
    assert tcp["sender"]["connections"] == streams * len(rec["files"]) and tcp["srtt_median_ms"] is not None


@pytest.fixture
def pair(agent_factory):
    src, dst = agent_factory.many(2)
    return src, dst


@pytest.mark.parametrize("streams", [1, 8])
@pytest.mark.parametrize("destination", ["store", "sink"])
def test_builtin_transfer_11_files(pair, streams, destination):
    src, dst = pair
    fs = src.file_set(count=11, size=SIZE)
    assert fs["name"] == f"11x{SIZE}" and len(fs["files"]) == 11
    assert dst.metric("tpcmesh_agent_bytes_total", protocol="builtin") is None
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                       file_set={"count": 11, "size": SIZE}, files=fs["files"], concurrency=11, streams=streams,
                       destination=destination, timeout_seconds=60)
    check_record(rec, fs["files"], streams=streams, concurrency=11, destination=destination)
    # received files are deleted after the test (memory budget)
    assert list((dst.data_dir / "data" / "incoming").iterdir()) == []
    assert dst.metric("tpcmesh_agent_transfers_total", protocol="builtin", status="succeeded") == 1.0
    assert dst.metric("tpcmesh_agent_bytes_total", protocol="builtin") == 11 * SIZE
    assert dst.metric("tpcmesh_agent_active_transfers") == 0.0
    assert dst.metric("tpcmesh_agent_server_up", server="builtin") == 1.0
    # GET on a finished test returns the same record
    assert dst.get(f"/api/v1/transfers/{rec['test_id']}").json() == rec


def test_builtin_mixed_dataset_and_checksums_from_the_destination_s_own_copy(pair):
    src, dst = pair
    fs = src.file_set(dataset="small")
    assert [f["size"] for f in fs["files"]] == [8192 * 2**i for i in range(10)]
    # the destination holds the same deterministic set: no file list needed, checksums come from its manifest
    assert dst.file_set(dataset="small")["files"] == fs["files"]
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                       file_set={"dataset": "small"}, concurrency=4, streams=8, destination="store")
    check_record(rec, fs["files"], streams=8, concurrency=4, destination="store")
    assert rec["file_size"] is None and rec["file_set"] == "small"


def test_corrupted_source_file_gives_checksum_mismatch(pair):
    src, dst = pair
    fs = src.file_set(count=2, size=100_000)
    victim = src.data_dir / "data" / "sets" / fs["name"] / fs["files"][1]["name"]
    data = bytearray(victim.read_bytes())
    data[500] ^= 0xFF
    victim.write_bytes(bytes(data))
    rec = dst.transfer(test_id=str(uuid.uuid4()), protocol="builtin",
                       source={"host": src.address, "port": src.builtin_port},
                       file_set={"count": 2, "size": 100_000}, files=fs["files"], concurrency=2, streams=1)
    _validator().validate(rec)
    assert rec["status"] == "failed" and rec["checksum"] == "mismatch"
    assert [f["checksum_ok"] for f in rec["files"]] == [True, False]
    assert "checksum mismatch" in rec["error"] and fs["files"][1]["name"] in rec["error"]
    assert rec["total_bytes"] == 200_000


def test_checksums_from_the_source_s_digest_header_and_back_to_back_tests(pair):
    """No file list and no local copy: the mover asks the source for an adler32 Digest and verifies against it.
    A second test may start as soon as the first record is final."""
    src, dst = pair
    fs = src.file_set(count=3, size=SIZE)
    body = {"protocol": "builtin", "source": {"host": src.address, "port": src.builtin_port},
            "file_set": {"count": 3, "size": SIZE}, "concurrency": 3, "streams": 2, "destination": "store"}
    for _ in range(2):
        rec = dst.transfer(**body)
        check_record(rec, fs["files"], streams=2, concurrency=3, destination="store")


@pytest.mark.parametrize("algorithm", ["cubic", "bbr"])
def test_the_source_sends_with_the_congestion_control_asked_for(pair, algorithm):
    """Both algorithms this kernel has (the agents run as root, so an available one need not be allowed too): the
    source's sockets use the one the test names, and the record says which was asked for."""
    src, dst = pair
    fs = src.file_set(count=2, size=SIZE)
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                       file_set={"count": 2, "size": SIZE}, files=fs["files"], concurrency=2, streams=2,
                       congestion_control=algorithm, timeout_seconds=60)
    check_record(rec, fs["files"], streams=2, concurrency=2, destination="store")
    assert rec["congestion_control"] == algorithm
    assert rec["tcp"]["sender"]["congestion"] == [algorithm] == rec["tcp"]["receiver"]["congestion"]

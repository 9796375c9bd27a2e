"""Serializers compiled (results.api.compiled). Ingest's quick way: the measurements' serializer compiled into plain
converters gives DRF's validated data exactly, and never accepts a batch DRF or the contract refuses (it declines;
DRF then explains). Reads: a compiled representation is the serializer's .data."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from results.api import compiled, serializers
from results.api.views import _valid_batch

from tests.support.dashboard import HOST_END, batch, measurement
from tests.unit.dashboard.test_contract import mutations

T = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def rich_batch() -> dict[str, Any]:
    """Every kind of field the measurements have: files, tcp, host, implementation, path, storage, repeat,
    congestion control, auth, an IPv6 one, a failed one, a NUL in a JSON object's key and text."""
    a = measurement("a", "b", files=2, finished=T)
    a.update(tcp={"retransmits": 12, "cong\x00": "bbr"}, host={"destination": HOST_END, "source": HOST_END},
             implementation={"name": "tpcmesh-agent", "version": "1.2"}, congestion_control="bbr", repeat=3,
             auth="token", peak_gbps=41, address_family="ipv6",
             storage={"source": "disk", "destination": "memory", "direct_write": None, "fallback": None})
    a["files"][1].update(error="short read", checksum_ok=None, tcp={"retransmits": 1})
    rtt = measurement("b", "a", protocol="rtt", finished=T)
    rtt["path"] = {"hops": ["10.0.0.1", None, "fe80::1"], "pmtu": 9000, "interface_mtu": 9000, "error": None}
    failed = measurement("a", "c", gbps=None, status="failed", error="connection reset by peer", finished=T)
    failed.pop("streams")  # optional fields left out stay out
    return batch([a, rtt, failed], nodes=[{"name": "a", "site": "s1"}, {"name": "b"}],
                 thresholds={"goodGbps": 30, "warnGbps": 10})


def drf(doc: dict[str, Any]) -> dict[str, Any] | None:
    s = serializers.IngestBatchIn(data=doc)
    return s.validated_data if s.is_valid() else None


def test_the_compiled_measurements_give_drfs_validated_data():
    doc = rich_batch()
    quick = _valid_batch(doc)
    assert quick is not None, "the quick way declined a valid batch"
    assert quick == drf(doc)
    m = quick["measurements"][0]
    assert isinstance(m["id"], uuid.UUID) and m["started_at"].tzinfo is not None
    assert m["tcp"] == {"retransmits": 12, "cong\ufffd": "bbr"} and m["peak_gbps"] == 41.0
    assert "streams" not in quick["measurements"][2] and quick["measurements"][2]["address_family"] == "ipv4"
    assert quick["measurements"][1]["path"]["reached"] is False  # the nested serializer's default


@pytest.mark.parametrize("change", [
    lambda m: m.update(destination=m["source"]),  # the serializer's validate(): a pair of two nodes
    lambda m: m.update(finished_at="2026-11-23T11:00:00Z"),  # before started_at
    lambda m: m.update(source=" a"),  # DRF trims: the quick way leaves that to it
    lambda m: m.update(streams=8.0),  # an integral float: DRF's int
    lambda m: m["files"][0].update(finished_at="2026-11-23T11:00:00Z"),  # a file's validate()
])
def test_what_only_drf_decides_is_left_to_it(change):
    doc = rich_batch()
    change(doc["measurements"][0])
    quick, full = _valid_batch(doc), drf(doc)
    assert quick is None or quick == full, "the quick way decided what DRF would not have"


def test_the_quick_way_is_never_laxer_than_drf_and_the_contract():
    accepted = declined = 0
    for doc in mutations(rich_batch()):
        quick = _valid_batch(copy.deepcopy(doc))
        if quick is None:
            declined += 1
            continue
        accepted += 1
        assert quick == drf(doc), doc  # DRF accepts it too, with the same data
    assert accepted > 50 and declined > 500, (accepted, declined)


def test_a_serializer_with_a_field_it_does_not_know_is_refused_when_compiled():
    class Odd(serializers.serializers.Serializer):
        when = serializers.serializers.DateField()

    with pytest.raises(TypeError, match="when: no converter for DateField"):
        compiled.converter(Odd)


def test_a_compiled_representation_is_the_serializers_data():
    at = datetime(2026, 11, 23, 12, 0, 0, 123456, tzinfo=UTC)
    raw = {"id": uuid.uuid4(), "source": "a", "destination": "b", "protocol": "builtin", "streams": 8,
           "throughput_gbps": 12.5, "aggregate_gbps": 12, "rtt_ms": None, "congestion_control": None,
           "address_family": "ipv6", "auth": "token", "storage": "disk", "status": "succeeded", "error": None,
           "finished_at": at.astimezone(timezone(timedelta(hours=2))), "day": None,
           "implementation": {"name": "x"}}  # a key the serializer does not have: left out
    rolled = {**raw, "id": None, "streams": None, "auth": None, "status": "failed", "error": "reset",
              "finished_at": at, "day": {"count": 4, "failures": 1, "p10": 3.25, "p90": None}}
    point = compiled.representer(serializers.HistoryPointSerializer)
    for p in (raw, rolled):
        assert point(p) == serializers.HistoryPointSerializer(p).data
    assert point(raw)["finished_at"] == "2026-11-23T12:00:00.123456Z" and point(raw)["aggregate_gbps"] == 12.0

"""Statistics of the transfer record: the 003 paper's throughput, aggregate, peak, checksum verdict, contract."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest
from tpcmesh_agent import records
from tpcmesh_agent.movers.base import Endpoint, FileResult, FileSpec, TransferJob

from tests.support.paths import REPO

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _job(n: int, size: int, dest: Path | None = Path("/tmp/x")) -> TransferJob:
    return TransferJob(test_id="0b7c3f0e-8a3a-4c43-9d7e-2f6f0f9a1c11", protocol="builtin",
                       source=Endpoint("127.0.1.1", 9080), files=tuple(FileSpec(f"f{i}", size) for i in range(n)),
                       file_set=f"{n}x{size}", concurrency=n, streams=1, timeout=60, destination_dir=dest)


def _res(name: str, size: int, start: float, end: float, **kw) -> FileResult:
    return FileResult(name=name, size=size, bytes=kw.pop("bytes", size), started_at=T0 + timedelta(seconds=start),
                      finished_at=T0 + timedelta(seconds=end), **kw)


def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((REPO / "manifests/schemas/measurement.v1.schema.json").read_text())
    return jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/transferRecord"},
                                           format_checker=jsonschema.FormatChecker())


def test_throughput_is_total_over_mean_file_time_and_aggregate_over_wall():
    # two 1 GB files: 2 s and 4 s, overlapping; the test's wall time is 5 s
    res = [_res("f0", 10**9, 0, 2), _res("f1", 10**9, 1, 5)]
    rec = records.build_record(_job(2, 10**9), res, T0, T0 + timedelta(seconds=5), "succeeded")
    assert rec["total_bytes"] == 2 * 10**9
    assert rec["mean_transfer_seconds"] == pytest.approx(3.0)
    assert rec["throughput_gbps"] == pytest.approx(16 / 3)  # 16 Gbit / 3 s (SI)
    assert rec["aggregate_gbps"] == pytest.approx(16 / 5)
    assert rec["wall_seconds"] == pytest.approx(5.0)
    assert rec["file_size"] == 10**9 and rec["file_count"] == 2
    assert [f["seconds"] for f in rec["files"]] == [pytest.approx(2.0), pytest.approx(4.0)]
    validator().validate(rec)


def test_wall_time_ends_with_the_last_byte_not_with_verification():
    res = [_res("f0", 10**9, 0, 2), _res("f1", 10**9, 0, 4)]
    rec = records.build_record(_job(2, 10**9), res, T0, T0 + timedelta(seconds=6), "succeeded")  # 2 s verifying
    assert rec["wall_seconds"] == pytest.approx(4.0) and rec["aggregate_gbps"] == pytest.approx(4.0)
    assert rec["finished_at"] == "2026-01-01T12:00:06Z"
    failed = [_res("f0", 10, 0, 1, bytes=0, error="x")]
    rec = records.build_record(_job(1, 10), failed, T0, T0 + timedelta(seconds=3), "failed", "x")
    assert rec["wall_seconds"] == pytest.approx(3.0)


def test_single_file_throughput_equals_aggregate_when_file_spans_the_test():
    res = [_res("f0", 5 * 10**8, 0, 1)]
    rec = records.build_record(_job(1, 5 * 10**8), res, T0, T0 + timedelta(seconds=1), "succeeded")
    assert rec["throughput_gbps"] == pytest.approx(4.0)
    assert rec["aggregate_gbps"] == pytest.approx(4.0)


def test_failed_files_without_bytes_do_not_count_in_mean_and_give_error_summary():
    res = [_res("f0", 1000, 0, 1), _res("f1", 1000, 0, 3, bytes=0, error="cannot connect")]
    err = records.failure_summary(res)
    assert err == "1 of 2 files failed; first: f1: cannot connect"
    rec = records.build_record(_job(2, 1000), res, T0, T0 + timedelta(seconds=3), "failed", err)
    assert rec["total_bytes"] == 1000
    assert rec["mean_transfer_seconds"] == pytest.approx(1.0)
    validator().validate(rec)


def test_short_file_is_a_failure():
    assert records.failure_summary([_res("f0", 1000, 0, 1, bytes=999)]) == \
        "1 of 1 files failed; first: f0: received 999 of 1000 bytes"


def test_no_bytes_gives_null_rates():
    res = [_res("f0", 1000, 0, 1, bytes=0, error="refused")]
    rec = records.build_record(_job(1, 1000), res, T0, T0 + timedelta(seconds=1), "failed", "x")
    assert rec["throughput_gbps"] is None and rec["aggregate_gbps"] is None and rec["peak_gbps"] is None
    validator().validate(rec)


def test_checksum_verdict():
    ok, bad, none = (_res("a", 1, 0, 1, checksum_ok=True), _res("b", 1, 0, 1, checksum_ok=False),
                     _res("c", 1, 0, 1))
    assert records.checksum_verdict([ok, none]) == "ok"
    assert records.checksum_verdict([ok, bad]) == "mismatch"
    assert records.checksum_verdict([none]) == "skipped"
    rec = records.build_record(_job(1, 1, dest=None), [none], T0, T0 + timedelta(seconds=1), "succeeded")
    assert rec["checksum"] == "skipped" and rec["destination_kind"] == "sink"


def test_peak_is_the_fastest_window_of_at_least_one_second():
    # 1 Gbit/s for 2 s, then 4 Gbit/s for 2 s, then idle
    samples = [(0.0, 0), (1.0, 125_000_000), (2.0, 250_000_000), (3.0, 750_000_000), (4.0, 1_250_000_000),
               (5.0, 1_250_000_000)]
    assert records.peak_from_samples(samples) == pytest.approx(4e9)
    rec = records.build_record(_job(1, 1_250_000_000), [_res("f0", 1_250_000_000, 0, 4)], T0,
                               T0 + timedelta(seconds=5), "succeeded", samples=samples)
    assert rec["peak_gbps"] == pytest.approx(4.0)
    assert rec["peak_gbps"] >= rec["aggregate_gbps"]


def test_peak_of_a_test_shorter_than_the_window_is_its_mean_rate():
    assert records.peak_from_samples([(0.0, 0), (0.25, 10**6), (0.5, 2 * 10**6)]) == pytest.approx(32e6)
    assert records.peak_from_samples([(0.0, 0)]) is None


def test_a_single_end_jump_is_no_peak():
    """iperf3 (and the GridFTP sink) learn their bytes only at the end: 10 s at 20 Gbit/s sampled by the runner is
    one jump of 25 GB within 0.25 s, which a 1 s window would read as 200 Gbit/s. Spread over the file's time, the
    peak is its mean rate."""
    jumped = [(t / 4, 0) for t in range(41)] + [(10.25, 25 * 10**9)]
    assert records.peak_from_samples(jumped) == pytest.approx(200e9)  # what the sampled counters would say
    res = [_res("iperf3", 25 * 10**9, 0, 10)]
    spread = records.spread_samples(res)
    rec = records.build_record(_job(1, 25 * 10**9), res, T0, T0 + timedelta(seconds=10.25), "succeeded",
                               samples=spread)
    assert rec["peak_gbps"] == pytest.approx(20.0)
    assert rec["peak_gbps"] == pytest.approx(rec["throughput_gbps"])


def test_spread_samples_add_up_overlapping_files():
    # f0: 1 GB over 0-2 s (4 Gbit/s), f1: 1 GB over 1-2 s (8 Gbit/s), f2: 10 MB in no time at 3 s
    res = [_res("f0", 10**9, 0, 2), _res("f1", 10**9, 1, 2), _res("f2", 10**7, 3, 3), _res("lost", 5, 0, 1, bytes=0)]
    spread = dict(records.spread_samples(res))
    assert spread[T0.timestamp()] == 0
    assert spread[T0.timestamp() + 1] == 5 * 10**8
    assert spread[T0.timestamp() + 2] == 2 * 10**9
    assert spread[T0.timestamp() + 3] == 2 * 10**9 + 10**7
    assert records.peak_from_samples(spread.items()) == pytest.approx(12e9)  # 1-2 s: both files
    assert records.spread_samples([_res("lost", 5, 0, 1, bytes=0)]) == []


def test_peak_of_growth_needs_a_full_window_when_asked():
    assert records.peak_from_samples([(0.0, 0), (0.5, 10**9)], short_span=False) is None


def test_file_marker_peak_is_used_when_higher():
    res = [_res("f0", 10**9, 0, 2, peak_bps=9e9)]
    rec = records.build_record(_job(1, 10**9), res, T0, T0 + timedelta(seconds=2), "succeeded",
                               samples=[(0, 0), (2, 10**9)])
    assert rec["peak_gbps"] == pytest.approx(9.0)


def test_iso_times_are_utc_z():
    assert records.iso(T0) == "2026-01-01T12:00:00Z"


def _side(retrans: int | None, srtt: float, conns: int = 1) -> dict:
    return {"retransmits": retrans, "srtt_ms": srtt, "min_rtt_ms": srtt / 2, "connections": conns,
            "congestion": ["cubic"]}


def test_tcp_views_of_files_give_the_tests_retransmits_and_median_rtt():
    res = [_res("f0", 10, 0, 1, tcp={"sender": _side(2, 50.0), "receiver": _side(0, 40.0)}),
           _res("f1", 10, 0, 1, tcp={"sender": _side(5, 70.0, 2), "receiver": _side(0, 45.0, 2)}),
           _res("f2", 10, 0, 1, tcp={"sender": _side(0, 60.0), "receiver": _side(0, 42.0)})]
    rec = records.build_record(_job(3, 10), res, T0, T0 + timedelta(seconds=1), "succeeded")
    validator().validate(rec)
    tcp = rec["tcp"]
    assert tcp["retransmits"] == 7 and tcp["srtt_median_ms"] == 60.0
    assert tcp["sender"]["connections"] == 4 and tcp["sender"]["min_rtt_ms"] == 25.0
    assert rec["files"][1]["tcp"]["sender"]["retransmits"] == 5


def test_without_a_sender_view_the_retransmits_are_unknown_not_zero():
    res = [_res("f0", 10, 0, 1, tcp={"sender": None, "receiver": _side(0, 40.0)})]
    rec = records.build_record(_job(1, 10), res, T0, T0 + timedelta(seconds=1), "succeeded")
    assert rec["tcp"]["retransmits"] is None and rec["tcp"]["srtt_median_ms"] == 40.0


def test_a_mover_without_tcp_view_adds_no_tcp_fields():
    rec = records.build_record(_job(1, 10), [_res("f0", 10, 0, 1)], T0, T0 + timedelta(seconds=1), "succeeded")
    assert "tcp" not in rec and "tcp" not in rec["files"][0]


def test_a_files_row_keeps_the_main_figures_and_the_test_every_one():
    side = {**_side(3, 50.0), "bytes_retrans": 4000, "pacing_rate_max_bps": None, "samples": 12}
    rec = records.build_record(_job(1, 10), [_res("f0", 10, 0, 1, tcp={"sender": side, "receiver": None})], T0,
                               T0 + timedelta(seconds=1), "succeeded")
    assert rec["files"][0]["tcp"] == {"sender": {"retransmits": 3, "srtt_ms": 50.0, "min_rtt_ms": 25.0,
                                                 "connections": 1}, "receiver": None}
    assert rec["tcp"]["sender"]["bytes_retrans"] == 4000 and rec["tcp"]["sender"]["samples"] == 12

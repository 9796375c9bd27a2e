"""Pure parts of the external movers: iperf3's JSON report, destination checks, file verification."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from tpcmesh_agent.config import Settings
from tpcmesh_agent.files import adler32_of
from tpcmesh_agent.movers.base import Endpoint, FileResult, FileSpec, MoverUnavailable, TransferJob
from tpcmesh_agent.movers.external import FileWatch, finish_file, local_source_address, prepare_destination
from tpcmesh_agent.movers.iperf3 import duration_for, parse_report


def _interval(start: float, seconds: float, nbytes: int, omitted: bool = False) -> dict:
    """One entry of ``intervals`` as iperf3 3.12 -J -R writes it (the receiver's sum over the streams)."""
    return {"streams": [], "sum": {"start": start, "end": start + seconds, "seconds": seconds, "bytes": nbytes,
                                   "bits_per_second": nbytes * 8 / seconds, "omitted": omitted, "sender": False}}


REPORT = {"start": {}, "intervals": [_interval(0, 1.00004, 2_320_564_171), _interval(1.00004, 0.99997, 2_222_260_277)],
          "end": {"sum_sent": {"start": 0, "end": 2.0, "seconds": 2.0, "bytes": 4_545_000_000,
                               "bits_per_second": 1.818e10},
                  "sum_received": {"start": 0, "end": 2.000014, "seconds": 2.000014, "bytes": 4_542_824_448,
                                   "bits_per_second": 18171170593.805843, "sender": False}}}


def test_iperf3_report_gives_received_bytes_seconds_mean_and_the_fastest_interval():
    report = parse_report(json.dumps(REPORT))
    assert (report.bytes, report.seconds, report.bps) == (4_542_824_448, 2.000014, 18171170593.805843)
    assert report.peak_bps == pytest.approx(2_320_564_171 * 8 / 1.00004)
    assert 1 <= report.peak_bps / report.bps < 1.05  # a peak near the mean, not the total in one second
    assert report.tcp is None  # neither the sender's JSON nor exchanged retransmits


def _sender_stream(retrans: int, cwnd: int, rtts: tuple[int, int, int]) -> dict:
    """end.streams[i].sender of the server's -J output (iperf3 3.12): RTTs in µs, cwnd in bytes."""
    lo, mean, hi = rtts
    return {"sender": {"socket": 5, "bytes": 10**9, "retransmits": retrans, "max_snd_cwnd": cwnd, "min_rtt": lo,
                       "mean_rtt": mean, "max_rtt": hi, "sender": True}}


def test_iperf3_report_takes_the_senders_tcp_figures_from_the_server_output():
    server = {"end": {"streams": [_sender_stream(3, 1_440_626, (51_200, 52_000, 60_000)),
                                  _sender_stream(4, 900_000, (51_100, 53_500, 58_000))],
                      "sender_tcp_congestion": "cubic"}}
    tcp = parse_report(json.dumps({**REPORT, "server_output_json": server})).tcp
    assert tcp is not None and tcp["receiver"] is None
    s = tcp["sender"]
    assert (s["retransmits"], s["cwnd_max_bytes"], s["connections"]) == (7, 1_440_626, 2)
    assert (s["min_rtt_ms"], s["srtt_ms"], s["srtt_max_ms"]) == (51.1, 53.5, 60.0)
    assert s["congestion"] == ["cubic"] and s["lost_max"] is None


def test_iperf3_report_without_server_json_keeps_the_exchanged_retransmits():
    end = {**REPORT["end"], "sum_sent": {**REPORT["end"]["sum_sent"], "retransmits": 12},
           "sender_tcp_congestion": "bbr"}
    s = parse_report(json.dumps({**REPORT, "end": end})).tcp["sender"]
    assert s["retransmits"] == 12 and s["congestion"] == ["bbr"] and s["cwnd_max_bytes"] is None


def test_iperf3_peak_skips_omitted_and_ragged_intervals():
    intervals = [_interval(0, 1.0, 9 * 10**9, omitted=True), _interval(1, 1.0, 10**9), _interval(2, 1.0, 2 * 10**9),
                 _interval(3, 0.01, 10**8)]  # the last: 80 Gbit/s over 10 ms
    report = parse_report(json.dumps({**REPORT, "intervals": intervals}))
    assert report.peak_bps == pytest.approx(16e9)
    assert parse_report(json.dumps({**REPORT, "intervals": []})).peak_bps is None
    with pytest.raises(ValueError, match="malformed interval"):
        parse_report(json.dumps({**REPORT, "intervals": [{"sum": {"bytes": 1}}]}))


def test_iperf3_error_report_names_iperf3s_reason():
    with pytest.raises(ValueError, match="iperf3: unable to connect to server: Connection refused"):
        parse_report(json.dumps({"start": {}, "end": {}, "error": "unable to connect to server: Connection refused"}))


def test_iperf3_output_that_is_not_json():
    with pytest.raises(ValueError, match="no JSON report"):
        parse_report("iperf3: error - the server is busy running a test. try again later\n")


@pytest.mark.parametrize(("timeout", "secs"), [(0.5, 1), (2, 1), (9, 4), (60, 10), (3600, 10)])
def test_iperf3_duration_is_half_the_timeout_between_1_and_10_s(timeout, secs):
    assert duration_for(timeout) == secs


ONE_FILE = (FileSpec("f1", 5, None),)


def _job(tmp_path: Path, dest: Path | None) -> TransferJob:
    return TransferJob(test_id=str(uuid.uuid4()), protocol="gridftp", source=Endpoint("127.0.0.1", 2811),
                       files=ONE_FILE, file_set="1x5", concurrency=1, streams=1, timeout=10,
                       destination_dir=dest)


def test_sink_is_refused_with_a_clear_message(tmp_path):
    settings = Settings(data_dir=tmp_path)
    with pytest.raises(MoverUnavailable, match="supports only destination 'store'"):
        prepare_destination(settings, _job(tmp_path, None), "gridftp")


def test_destination_outside_the_data_dir_is_refused(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    with pytest.raises(MoverUnavailable, match="outside the data dir"):
        prepare_destination(settings, _job(tmp_path, tmp_path / "elsewhere"), "gridftp")


def test_destination_path_is_relative_to_the_data_dir(tmp_path):
    settings = Settings(data_dir=tmp_path, run_user="nobody")
    dest = tmp_path / "incoming" / "abc"
    assert prepare_destination(settings, _job(tmp_path, dest), "gridftp") == "/incoming/abc"
    assert dest.is_dir()


def test_a_disk_landing_is_named_under_disk_as_the_servers_reach_it(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", disk_dir=tmp_path / "disk", run_user="nobody")
    dest = tmp_path / "disk" / "incoming" / "abc"
    assert prepare_destination(settings, _job(tmp_path, dest), "gridftp") == "/disk/incoming/abc"
    assert dest.is_dir()
    with pytest.raises(MoverUnavailable, match="outside the data dir .* and the disk path"):
        prepare_destination(settings, _job(tmp_path, tmp_path / "elsewhere"), "gridftp")


def test_finish_file_checks_size_and_checksum(tmp_path):
    (tmp_path / "good").write_bytes(b"hello")
    (tmp_path / "short").write_bytes(b"hel")
    good_sum = adler32_of(tmp_path / "good")
    job = _job(tmp_path, tmp_path)
    ok = finish_file(FileResult("good", 5), FileSpec("good", 5, good_sum), job, None)
    assert (ok.bytes, ok.error, ok.checksum_ok) == (5, None, True)
    short = finish_file(FileResult("short", 5), FileSpec("short", 5, good_sum), job, None)
    assert short.bytes == 3 and short.error == "received 3 of 5 bytes" and short.checksum_ok is None
    bad = finish_file(FileResult("good", 5), FileSpec("good", 5, "adler32:00000001"), job, None)
    assert bad.checksum_ok is False and "checksum mismatch" in bad.error
    missing = finish_file(FileResult("nope", 5), FileSpec("nope", 5, None), job, "server said no")
    assert (missing.bytes, missing.error) == (0, "server said no")


def test_local_source_address_on_loopback():
    assert local_source_address("127.0.1.9", 1094).startswith("127.")


def test_file_growth_peak_is_the_fastest_full_second(tmp_path):
    """XRootD's multi-stream markers count bytes handed to its workers: its peak comes from the file's growth, over
    windows of at least 1 s (a file that grew for less has no peak of its own)."""
    watch = FileWatch(tmp_path / "f", 3 * 10**9, None)
    watch.samples = [(0.0, 1), (0.5, 10**8), (1.0, 2 * 10**8), (1.5, 10**9), (2.0, 1_800_000_000), (3.0, 3 * 10**9)]
    assert watch.peak_bps() == pytest.approx((1_800_000_000 - 2 * 10**8) * 8)  # 1.0 -> 2.0 s
    watch.samples = [(0.0, 1), (0.3, 10**9)]
    assert watch.peak_bps() is None


def test_error_text_from_a_program_holds_no_nul():
    from tpcmesh_agent.movers.external import short

    # xrdcp's own words for a missing source (a server message ending with a NUL).
    text = "Run: [ERROR] Server responded with an error: [3011] Unable to open /sets/x; no such file or directory\x00\n"
    assert short(text) == text.removesuffix("\x00\n")

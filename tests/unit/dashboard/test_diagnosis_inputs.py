"""What the limit model is given for a cell (results.diagnosis.cells.model_input): the sender's TCP view from the
record, else from the source's host telemetry (XRootD's, GridFTP's, iperf3's sending sockets)."""

from __future__ import annotations

from results.diagnosis.cells import model_input

ROW = {"status": "succeeded", "aggregate_gbps": 0.4, "throughput_gbps": 0.4, "protocol": "xrootd-https",
       "streams": 1, "file_count": 1, "concurrency": 1, "rtt_ms": 53.0, "source_id": 1, "destination_id": 2}
SENT = {"retransmits": 4, "data_segs_out": 90_000, "rwnd_limited_fraction": 0.7, "sndbuf_limited_fraction": 0.1}


def test_the_sources_sending_sockets_stand_in_for_a_record_without_a_sender_view():
    row = {**ROW, "tcp": None, "host": {"source": {"tcp_sent": SENT}, "destination": {}}}
    m = model_input(row, {1: "a", 2: "far"}, {}, None, None)
    assert (m.tcp.rwnd_limited, m.tcp.sndbuf_limited, m.tcp.retransmits) == (0.7, 0.1, 4)
    assert (m.source.name, m.destination.name) == ("a", "far")


def test_the_records_own_sender_view_comes_first():
    row = {**ROW, "tcp": {"sender": {**SENT, "rwnd_limited_fraction": 0.2}}, "host": {"source": {"tcp_sent": SENT}}}
    assert model_input(row, {}, {}, None, None).tcp.rwnd_limited == 0.2


def test_a_failed_or_empty_test_is_not_judged():
    assert model_input({**ROW, "status": "failed", "tcp": None, "host": None}, {}, {}, None, None) is None
    assert model_input({**ROW, "aggregate_gbps": None, "throughput_gbps": 0.0, "tcp": None, "host": None}, {}, {},
                       None, None) is None

"""struct tcp_info parsing against the real kernel (a loopback connection), and the summaries' arithmetic."""

from __future__ import annotations

import socket
import struct
import threading
import time

from tpcmesh_agent import tcpinfo
from tpcmesh_agent.tcpsampler import Sampler, congestion_of, read_info


def _connected_pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    lst = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(lst.getsockname())
    srv, _ = lst.accept()
    return lst, cli, srv


def test_parse_reads_the_kernels_struct_for_a_loopback_transfer():
    lst, cli, srv = _connected_pair()
    try:
        before = read_info(srv)
        payload = b"x" * (4 << 20)
        t = threading.Thread(target=srv.sendall, args=(payload,))
        t.start()
        got = 0
        while got < len(payload):
            got += len(cli.recv(1 << 20))
        t.join()
        after = read_info(srv)
        deadline = time.monotonic() + 5  # the last ACKs may reach the sender after the reader has every byte
        while after is not None and after["bytes_acked"] < len(payload) and time.monotonic() < deadline:
            time.sleep(0.01)
            after = read_info(srv)
        recv_side = read_info(cli)
    finally:
        for s in (cli, srv, lst):
            s.close()
    assert before is not None and after is not None and recv_side is not None
    assert after["state"] == 1  # TCP_ESTABLISHED: the first byte is where the header says
    assert after["snd_mss"] and 500 < after["snd_mss"] <= 65536
    assert after["data_segs_out"] > before["data_segs_out"]
    assert after["bytes_acked"] >= len(payload)  # a u64 field past the first u64 group
    assert recv_side["bytes_received"] >= len(payload)
    assert after["min_rtt"] is not None and 0 < after["min_rtt"] < 1_000_000  # µs: loopback is far below 1 s
    # a count, not garbage from a wrong offset: loopback on a loaded machine can retransmit (an RTO while the
    # receiver waits for a core), so not necessarily 0
    assert 0 <= after["total_retrans"] <= after["data_segs_out"]


def test_parse_leaves_fields_of_a_shorter_struct_as_none():
    full = tcpinfo.parse(bytes(tcpinfo.SIZE))
    short = tcpinfo.parse(bytes(104))  # an old kernel's struct ends after tcpi_total_retrans
    assert full["snd_wnd"] == 0 and short["total_retrans"] == 0
    assert short["pacing_rate"] is None and short["min_rtt"] is None


def test_sampler_summarizes_a_watched_connection_with_its_congestion_control():
    lst, cli, srv = _connected_pair()
    sampler = Sampler(interval=0.01)
    try:
        w = sampler.watch(srv)
        srv.sendall(b"y" * (1 << 20))
        got = 0
        while got < 1 << 20:
            got += len(cli.recv(1 << 20))
        summary = w.finish()
        algo = congestion_of(srv)
    finally:
        for s in (cli, srv, lst):
            s.close()
    assert summary is not None
    assert summary["samples"] >= 2 and summary["connections"] == 1
    assert summary["data_segs_out"] > 0 and summary["retransmits"] == 0
    assert summary["cwnd_max_bytes"] > 0 and summary["min_rtt_ms"] is not None
    assert algo and summary["congestion"] == [algo]


def _sample(**kw):
    base = dict.fromkeys(tcpinfo.parse(bytes(tcpinfo.SIZE)), 0)
    base.update(snd_mss=1000, pacing_rate=tcpinfo.U64_UNLIMITED)
    base.update(kw)
    return base


def test_summary_counts_the_change_and_keeps_highest_and_median():
    samples = [_sample(total_retrans=5, rtt=10_000, snd_cwnd=10, lost=0, reord_seen=1, min_rtt=9_000),
               _sample(total_retrans=9, rtt=30_000, snd_cwnd=40, lost=3, reord_seen=1, min_rtt=8_000,
                       delivery_rate=125_000_000),
               _sample(total_retrans=12, rtt=20_000, snd_cwnd=20, lost=1, reord_seen=4, min_rtt=8_000)]
    s = tcpinfo.summarize(samples, "cubic")
    assert s["retransmits"] == 7 and s["reordering"] == 3 and s["lost_max"] == 3
    assert s["srtt_ms"] == 20.0 and s["srtt_max_ms"] == 30.0 and s["min_rtt_ms"] == 8.0
    assert s["cwnd_max_bytes"] == 40_000 and s["cwnd_last_bytes"] == 20_000
    assert s["delivery_rate_max_bps"] == 10**9 and s["pacing_rate_max_bps"] is None  # ~0: no pacing set
    assert s["congestion"] == ["cubic"]
    assert tcpinfo.summarize([]) is None


def test_a_wrapped_u32_counter_still_counts_forward():
    s = tcpinfo.summarize([_sample(total_retrans=2**32 - 2), _sample(total_retrans=3)])
    assert s["retransmits"] == 5


def test_combine_sums_counters_and_keeps_extremes():
    a = tcpinfo.summarize([_sample(rtt=10_000, min_rtt=5_000), _sample(total_retrans=2, rtt=10_000, min_rtt=5_000,
                                                                        snd_cwnd=5)], "cubic")
    b = tcpinfo.summarize([_sample(rtt=40_000, min_rtt=7_000), _sample(total_retrans=3, rtt=40_000, min_rtt=7_000,
                                                                        snd_cwnd=9)], "bbr")
    c = tcpinfo.combine([a, None, b])
    assert c["retransmits"] == 5 and c["connections"] == 2 and c["samples"] == 4
    assert c["min_rtt_ms"] == 5.0 and c["srtt_ms"] == 40.0 and c["cwnd_max_bytes"] == 9000
    assert c["congestion"] == ["bbr", "cubic"]
    assert tcpinfo.combine([None]) is None


def _info_bytes(**fields: int) -> bytes:
    """A TCP_INFO buffer as the kernel writes it (native byte order), with ``fields`` set and the rest 0."""
    buf = bytearray(tcpinfo.SIZE)
    for name, value in fields.items():
        at, code = tcpinfo._OFFSETS[name]
        struct.pack_into("=" + code, buf, at, value)
    return bytes(buf)


def test_why_the_sender_waited_comes_from_the_chrono_fields_of_constructed_bytes():
    first = tcpinfo.parse(_info_bytes(busy_time=1_000_000, rwnd_limited=100_000, sndbuf_limited=0, snd_mss=1448))
    last = tcpinfo.parse(_info_bytes(busy_time=3_000_000, rwnd_limited=1_700_000, sndbuf_limited=200_000,
                                     snd_mss=1448))
    assert (last["busy_time"], last["rwnd_limited"], last["sndbuf_limited"]) == (3_000_000, 1_700_000, 200_000)
    s = tcpinfo.summarize([first, last])
    # over the connection's sampled share: 2 s busy, 1.6 s of it stalled by the receiver's window, 0.2 s by sndbuf
    assert s["busy_ms"] == 2000.0 and s["rwnd_limited_fraction"] == 0.8 and s["sndbuf_limited_fraction"] == 0.1
    idle = tcpinfo.summarize([first, first])  # nothing in flight between the samples: no share to give
    assert idle["busy_ms"] == 0.0 and idle["rwnd_limited_fraction"] is None
    old = tcpinfo.summarize([tcpinfo.parse(bytes(160))] * 2)  # a kernel before 4.10 has no chrono fields
    assert old["busy_ms"] is None and old["sndbuf_limited_fraction"] is None
    assert set(tcpinfo.for_file({"sender": s, "receiver": None})["sender"]) >= {
        "busy_ms", "rwnd_limited_fraction", "sndbuf_limited_fraction"}


def test_combined_fractions_are_weighted_by_busy_time():
    a = tcpinfo.summarize([_sample(busy_time=0), _sample(busy_time=3_000_000, rwnd_limited=3_000_000)])
    b = tcpinfo.summarize([_sample(busy_time=0), _sample(busy_time=1_000_000, sndbuf_limited=500_000)])
    c = tcpinfo.combine([a, b, tcpinfo.summarize([_sample(), _sample()])])  # an idle one weighs nothing
    assert c["busy_ms"] == 4000.0
    assert c["rwnd_limited_fraction"] == 0.75 and c["sndbuf_limited_fraction"] == 0.125

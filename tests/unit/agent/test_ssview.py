"""ss's text view of struct tcp_info back into tcpinfo's fields: a fixed iproute2 6.1 sample and the real ss."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import threading
import time

import pytest
from tpcmesh_agent import ssview, tcpinfo

SAMPLE = (
    "0      0                198.51.100.2:40312          198.51.100.3:1094\n"
    "\t cubic wscale:10,10 rto:220 rtt:20.512/1.25 ato:40 mss:64948 pmtu:65000 rcvmss:64948 advmss:64948 cwnd:10 "
    "bytes_sent:480 bytes_received:64000000 segs_out:900 segs_in:1200 data_segs_out:3 data_segs_in:1000 "
    "send 253Mbps lastsnd:20 pacing_rate 506.2Mbps delivery_rate 1.5Gbps delivered:4 reord_seen:2 "
    "rcv_ooopack:37 retrans:0/5 lost:1 bytes_retrans:324740 minrtt:20.1 snd_wnd:65536\n"
    "0      0                198.51.100.2:40314          198.51.100.3:1094\n"
    "\t bbr wscale:10,10 rto:220 rtt:21/2 mss:64948 cwnd:12 data_segs_in:10 minrtt:20.3\n"
)


def test_ss_text_gives_tcpinfos_fields_per_connection():
    found = ssview.parse(SAMPLE)
    assert list(found) == ["198.51.100.2:40312 198.51.100.3:1094", "198.51.100.2:40314 198.51.100.3:1094"]
    fields, algo = found["198.51.100.2:40312 198.51.100.3:1094"]
    assert algo == "cubic"
    assert (fields["rtt"], fields["rttvar"], fields["min_rtt"]) == (20512, 1250, 20100)
    assert (fields["total_retrans"], fields["lost"], fields["bytes_retrans"]) == (5, 1, 324740)
    assert (fields["rcv_ooopack"], fields["reord_seen"], fields["data_segs_in"]) == (37, 2, 1000)
    assert fields["snd_cwnd"] * fields["snd_mss"] == 649480
    assert fields["delivery_rate"] == 1.5e9 / 8 and fields["pacing_rate"] == int(506.2e6 / 8)
    other, algo = found["198.51.100.2:40314 198.51.100.3:1094"]
    assert algo == "bbr" and other["total_retrans"] == 0 and other["rcv_ooopack"] == 0  # ss leaves zeros out


@pytest.mark.skipif(shutil.which("ss") is None, reason="iproute2's ss is not installed")
def test_the_real_ss_sees_a_loopback_connection_while_it_moves_data():
    lst = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(lst.getsockname())
    srv, _ = lst.accept()
    port = lst.getsockname()[1]
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            try:
                srv.sendall(b"z" * (1 << 20))
            except OSError:
                return

    def receive() -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set() and cli.recv(1 << 20):
                pass

    threads = [threading.Thread(target=send), threading.Thread(target=receive)]
    for t in threads:
        t.start()

    async def view():
        # until three samples of our connection (0.15 s on a quiet machine; each `ss` takes longer on a loaded one)
        sockets = ssview.PeerSockets("127.0.0.1", interval=0.05).start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(
                k.endswith(f":{port}") and len(v) >= 3 for k, v in sockets.samples.items()):
            await asyncio.sleep(0.05)
        return await sockets.stop(), sockets.samples

    try:
        summary, samples = asyncio.run(view())
    finally:
        stop.set()
        for s in (cli, srv):
            with contextlib.suppress(OSError):  # the other end may have gone first
                s.shutdown(socket.SHUT_RDWR)
        for t in threads:
            t.join(5)
        for s in (cli, srv, lst):
            s.close()
    ours = [k for k in samples if k.endswith(f":{port}")]  # the receiving end's line: its peer is the server
    assert ours and len(samples[ours[0]]) >= 3
    assert samples[ours[0]][-1]["data_segs_in"] > samples[ours[0]][0]["data_segs_in"]
    assert summary is not None and summary["min_rtt_ms"] is not None and summary["congestion"]


def test_ss_chrono_stats_say_why_the_sender_waited():
    line = ("\t bbr rtt:0.04/0.007 mss:2048 cwnd:100 data_segs_out:31262 delivered:31261 busy:612ms "
            "rwnd_limited:140ms(22.9%) unacked:2 minrtt:0.003 snd_wnd:4096")
    fields, _ = ssview.parse_info(line)
    assert (fields["busy_time"], fields["rwnd_limited"], fields["sndbuf_limited"]) == (612_000, 140_000, 0)
    later, _ = ssview.parse_info(line.replace("busy:612ms", "busy:1612ms").replace("140ms(22.9%)", "940ms(58.3%)")
                                 + " sndbuf_limited:100ms(6.2%)")
    s = tcpinfo.summarize([fields, later])
    assert s["busy_ms"] == 1000.0 and s["rwnd_limited_fraction"] == 0.8 and s["sndbuf_limited_fraction"] == 0.1
    receiver, _ = ssview.parse_info("\t cubic rtt:0.02/0.01 mss:32768 cwnd:10 data_segs_in:10 minrtt:0.02")
    assert "busy_time" not in receiver  # a receiver has no busy time: the fractions stay unknown, not 0

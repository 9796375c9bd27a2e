"""Why TCP waited, on real sockets and the real kernel: a sender pushing into a receiver whose SO_RCVBUF is tiny
spends most of its busy time stalled by the receive window (tcpi_rwnd_limited); with a large receive buffer and a
receiver reading as fast as it can, little of it. The sender's socket is watched by the agent's own sampler
(tcpsampler: the built-in mover's and data server's path), summarised by tcpinfo."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from tpcmesh_agent.tcpsampler import Sampler, wait_drained

pytestmark = pytest.mark.integration

SECONDS = 1.0


def _send_into(rcvbuf: int) -> dict:
    """The sender's summary of SECONDS of sending to a loopback receiver with SO_RCVBUF ``rcvbuf`` (set before
    listen, so the accepted socket has it from the handshake: the window it advertises)."""
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    lst.bind(("127.0.0.1", 0))
    lst.listen()
    sender = socket.create_connection(lst.getsockname())
    receiver, _ = lst.accept()

    def drain() -> None:
        while receiver.recv(1 << 20):
            pass

    reader = threading.Thread(target=drain)
    reader.start()
    watch = Sampler(interval=0.02).watch(sender)
    chunk = b"w" * (1 << 20)
    try:
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            sender.sendall(chunk)
        wait_drained(sender, 10)
        summary = watch.finish()
    finally:
        sender.close()
        reader.join(10)
        receiver.close()
        lst.close()
    assert summary is not None
    return summary


def test_a_tiny_receive_buffer_makes_the_sender_receive_window_limited():
    tiny = _send_into(4096)  # the kernel doubles it and keeps a floor: a window of a few KB
    large = _send_into(8 << 20)  # capped by net.core.rmem_max: still far above what loopback needs in flight
    assert tiny["busy_ms"] > 0.5 * SECONDS * 1000 and large["busy_ms"] > 0
    # 0.66 on a quiet machine; 0.25-0.37 when the suite loads both cores (the draining thread and the sender
    # compete): the window's mark is the gap to the large buffer, not one figure
    assert tiny["rwnd_limited_fraction"] >= 0.15, tiny
    assert large["rwnd_limited_fraction"] <= 0.3, large
    assert tiny["rwnd_limited_fraction"] - large["rwnd_limited_fraction"] >= 0.1, (tiny, large)
    assert tiny["sndbuf_limited_fraction"] is not None and tiny["sndbuf_limited_fraction"] < 0.5

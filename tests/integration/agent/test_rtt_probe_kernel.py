"""The RTT probe's samples are the kernel's handshake RTT: an agent whose event loop is busy (it serves transfers and
its API in the same loop) still reports the path's RTT, not the loop's lag. Real sockets on loopback."""

from __future__ import annotations

import asyncio
import socket
import time

from tpcmesh_agent.probes import tcp_connect_rtt

HOG_MS = 30


async def probe_while_the_loop_is_busy(port: int) -> dict:
    """The probe, with another task that holds the loop for HOG_MS at a time (like a busy agent's handler)."""
    stop = asyncio.Event()

    async def hog() -> None:
        while not stop.is_set():
            time.sleep(HOG_MS / 1000)  # blocks the loop: every wake-up of the probe waits for it
            await asyncio.sleep(0)

    task = asyncio.create_task(hog())
    try:
        return await tcp_connect_rtt("127.0.0.1", port, count=5, interval=0.01)
    finally:
        stop.set()
        await task


def test_a_busy_event_loop_does_not_show_in_the_rtt():
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        port = listener.getsockname()[1]
        started = time.perf_counter()
        r = asyncio.run(probe_while_the_loop_is_busy(port))
        elapsed_ms = (time.perf_counter() - started) * 1000
    assert r["samples"] == 5 and r["error"] is None, r
    # the loop was held for HOG_MS again and again while the probe ran (its connects waited on it) ...
    assert elapsed_ms >= 5 * HOG_MS, elapsed_ms
    # ... yet each sample is loopback's handshake, a small fraction of one hold
    assert 0 < r["min_ms"] <= r["max_ms"] < HOG_MS / 3, r

"""Samples ``getsockopt(TCP_INFO)`` of watched sockets from one background thread (every ``INTERVAL`` seconds), so a
transfer blocked in one long ``sendfile`` or ``splice`` is still seen while it runs; ``Watch.finish`` takes a last
sample and returns the connection's summary (tcpinfo.summarize). Call it before the socket is closed."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from . import tcpinfo

INTERVAL = 0.1  # seconds between samples: enough for cwnd and RTT over a WAN, a few syscalls per stream per second
TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)


def read_info(sock: socket.socket) -> dict[str, int | None] | None:
    """One parsed TCP_INFO of ``sock``; None when the socket is gone (closed, not TCP)."""
    try:
        return tcpinfo.parse(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, tcpinfo.SIZE))
    except OSError:
        return None


def congestion_of(sock: socket.socket) -> str | None:
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).split(b"\0", 1)[0].decode() or None
    except OSError:
        return None


class Watch:
    """One watched connection's samples."""

    def __init__(self, sampler: Sampler, sock: socket.socket) -> None:
        self._sampler = sampler
        self.sock = sock
        self.samples: list[dict[str, Any]] = []
        self.congestion = congestion_of(sock)
        self.done = False
        self.sample()

    def sample(self) -> None:
        info = read_info(self.sock)
        if info is not None:
            self.samples.append(info)

    def finish(self) -> dict[str, Any] | None:
        """Stop watching; the summary from the first sample to one taken now (None when none could be taken)."""
        self.congestion = congestion_of(self.sock) or self.congestion  # set after the watch began, perhaps
        self._sampler.forget(self)
        return tcpinfo.summarize(self.samples, self.congestion)


class Sampler:
    """The background thread; it runs only while something is watched."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._watches: set[Watch] = set()
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket) -> Watch:
        w = Watch(self, sock)
        with self._lock:
            self._watches.add(w)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="tcp-info-sampler")
                self._thread.start()
        return w

    def forget(self, w: Watch) -> None:
        # under the lock, so the thread never samples a socket its owner is about to close
        with self._lock:
            if not w.done:
                w.done = True
                w.sample()
                self._watches.discard(w)

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval)
            with self._lock:
                if not self._watches:
                    self._thread = None
                    return
                for w in self._watches:
                    w.sample()


SAMPLER = Sampler()  # one per process: the data server's and the mover's sockets share it


def wait_drained(sock: socket.socket, timeout: float, poll: float = 0.005) -> bool:
    """Wait until everything written to ``sock`` is acknowledged (the retransmits of a file's last bytes then count
    too); False when ``timeout`` seconds pass first or the socket is gone."""
    deadline = time.monotonic() + timeout
    while True:
        info = read_info(sock)
        if info is None:
            return False
        if not info.get("unacked") and not info.get("notsent_bytes"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)

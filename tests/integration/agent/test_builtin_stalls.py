"""A source that sends part of a response and then stalls must never hang the built-in mover: a real agent pulls
from a small socket server in the test that misbehaves on purpose. The file fails with the reason within the idle
timeout (or the test's timeout, or on cancel), and the thread that pulled it is gone afterwards."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PARTIAL = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Len"


class MisbehavingSource:
    """Answers every data request with ``head`` (sent ``step`` bytes at a time, ``pause`` seconds apart), then
    ``body`` the same way, then holds the connection open without a byte more until the test ends."""

    def __init__(self, head: bytes, body: bytes = b"", step: int = 1 << 20, pause: float = 0.0) -> None:
        self.head, self.body, self.step, self.pause = head, body, step, pause
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = threading.Event()
        self.done = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if conn.recv(65536).startswith(b"GET /tcp-info/"):
                # the sender's TCP view, asked for after the test: none here, as from an agent without it (404),
                # or each record waits out the 17 s fetch timeout on a question only a real data server answers
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            data = self.head + self.body
            for i in range(0, len(data), self.step):
                if self.done.is_set():
                    return
                conn.sendall(data[i:i + self.step])
                time.sleep(self.pause)
            self.done.wait()
        except OSError:
            pass

    def close(self) -> None:
        self.done.set()
        self.listener.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def source():
    made: list[MisbehavingSource] = []

    def make(*args, **kw) -> MisbehavingSource:
        made.append(MisbehavingSource(*args, **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def threads(agent) -> int:
    for line in Path(f"/proc/{agent.process.pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads: line")


def wait_threads(agent, at_most: int, timeout: float = 10.0) -> None:
    """The agent is back to ``at_most`` threads: the pulling threads ended instead of spinning on."""
    deadline = time.monotonic() + timeout
    while threads(agent) > at_most:
        assert time.monotonic() < deadline, f"the agent still has {threads(agent)} threads, {at_most} before the test"
        time.sleep(0.05)


def pull_body(fake: MisbehavingSource, size: int = 4_000_000, **body) -> dict:
    return dict(protocol="builtin", source={"host": "127.0.0.1", "port": fake.port},
                file_set={"count": 1, "size": size}, destination="sink", **body)


def test_partial_header_then_stall_fails_within_the_idle_timeout(agent_factory, source):
    dst = agent_factory(idle_timeout=1)
    before = threads(dst)
    fake = source(PARTIAL)
    t0 = time.monotonic()
    rec = dst.transfer(timeout=30, **pull_body(fake, timeout_seconds=60))
    took = time.monotonic() - t0
    assert rec["status"] == "failed", rec
    [f] = rec["files"]
    assert "no complete response header within 1 s" in f["error"], f["error"]
    assert f"{len(PARTIAL)} bytes of it received" in f["error"]
    assert took < 30, took  # the idle timeout (1 s), not the test's 60 s
    wait_threads(dst, before)


def test_header_trickling_in_is_bounded_too(agent_factory, source):
    """A byte every 0.2 s never leaves the socket idle for 1 s, yet the header must be complete within it."""
    dst = agent_factory(idle_timeout=1)
    before = threads(dst)
    fake = source(PARTIAL, step=1, pause=0.2)
    rec = dst.transfer(timeout=30, **pull_body(fake, timeout_seconds=60))
    assert rec["status"] == "failed" and "no complete response header within 1 s" in rec["files"][0]["error"], rec
    wait_threads(dst, before)


@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_stalled_header_ends_on_cancel_and_on_the_test_timeout(agent_factory, source, how):
    dst = agent_factory()  # idle timeout 60 s: only the cancel or the test's own timeout can end it
    before = threads(dst)
    fake = source(PARTIAL)
    test_id = str(uuid.uuid4())
    dst.start_transfer(test_id=test_id, **pull_body(fake, timeout_seconds=2 if how == "timeout" else 120))
    assert fake.accepted.wait(10)
    t0 = time.monotonic()
    if how == "cancel":
        time.sleep(0.3)
        rec = dst.delete(f"/api/v1/transfers/{test_id}").json()
        assert rec["status"] == "cancelled", rec
        assert rec["files"][0]["error"] == "cancelled by request"  # the mover itself ended the file
    else:
        rec = dst.wait_transfer(test_id, timeout=20)
        assert rec["status"] == "failed", rec
        assert rec["files"][0]["error"] == "timed out after 2 s"
    assert time.monotonic() - t0 < 15  # ended by the 2 s timeout or the cancel, not by the 20 s wait
    wait_threads(dst, before)
    assert dst.get("/healthz").status_code == 200


def copy(dst, fake: MisbehavingSource, name: str, timeout: float = 60) -> tuple[str, float]:
    t0 = time.monotonic()
    r = subprocess.run(["curl", "-sS", "--noproxy", "*", "-X", "COPY", "-H",
                        f"Source: http://127.0.0.1:{fake.port}/files/x/y", "-H", "Credential: none",
                        "-H", f"Authorization: Bearer {dst.token}",
                        f"http://{dst.address}:{dst.builtin_port}/files/incoming/{name}"],
                       capture_output=True, timeout=timeout)
    return r.stdout.decode(), time.monotonic() - t0


def test_copy_from_a_stalling_source_ends_with_a_failure_line(agent_factory, source):
    dst = agent_factory(idle_timeout=1, marker_interval=0.2)
    before = threads(dst)
    fake = source(PARTIAL)
    body, took = copy(dst, fake, "stalled.dat")
    last = body.rstrip("\n").splitlines()[-1]
    assert last.startswith("failure: no complete response header within 1 s"), body
    assert took < 30  # the idle timeout (1 s), not the default 3600 s COPY deadline
    assert not (dst.data_dir / "data" / "incoming" / "stalled.dat").exists()
    wait_threads(dst, before)


def test_copy_has_an_overall_deadline(agent_factory, source):
    """A source that keeps sending, just too slowly (1 KB every 0.1 s of a 10 MB body), is never idle: the COPY's
    own deadline ends it and the caller gets its final line."""
    dst = agent_factory(copy_timeout=2, marker_interval=0.5)
    before = threads(dst)
    size = 10_000_000
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode()
    fake = source(head, body=b"x" * size, step=1000, pause=0.1)
    body, took = copy(dst, fake, "slow.dat")
    lines = body.rstrip("\n").splitlines()
    assert lines[-1] == "failure: timed out after 2 s", body
    assert lines.count("Perf Marker") >= 3  # markers kept coming until the deadline
    assert 1.9 < took < 30  # its own 2 s deadline, not the idle timeout nor the default 3600 s
    wait_threads(dst, before)


@pytest.mark.parametrize("streams", [1, 8])
def test_body_stalling_midway_fails_within_the_idle_timeout(agent_factory, source, streams):
    """Every range gets its header and part of its body, then nothing: each file fails as stalled after the idle
    timeout (1 s), keeping the bytes it received, and the receiving thread is gone."""
    dst = agent_factory(idle_timeout=1)
    before = threads(dst)
    size = 4_000_000
    length = size // streams
    status = "206 Partial Content" if streams > 1 else "200 OK"
    head = f"HTTP/1.1 {status}\r\nContent-Length: {length}\r\n\r\n".encode()
    fake = source(head + b"x" * (length // 2))  # half of each range, then the connection stays silent
    t0 = time.monotonic()
    rec = dst.transfer(timeout=30, **pull_body(fake, streams=streams, timeout_seconds=60))
    assert time.monotonic() - t0 < 30  # the idle timeout, not the test's 60 s
    [f] = rec["files"]
    assert rec["status"] == "failed" and "stalled: no data for 1 s" in f["error"], rec
    assert 0 < f["bytes"] <= size // 2
    wait_threads(dst, before)


def test_a_slow_steady_body_is_not_called_stalled(agent_factory, source):
    """10 KB every 0.1 s takes 3 s for the body, three times the idle timeout (1 s), but the connection is never
    idle that long: the idle timeout bounds each silence, not the whole body, so the file completes."""
    dst = agent_factory(idle_timeout=1)
    size = 300_000
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode()
    fake = source(head + b"x" * size, step=10_000, pause=0.1)
    rec = dst.transfer(timeout=30, **pull_body(fake, size, timeout_seconds=20))
    assert rec["status"] == "succeeded", rec["error"]
    assert rec["files"][0]["bytes"] == size

"""The test servers are supervised (tests/support/serving.py): a server that dies is restarted on its port, counted,
and its exit signal and log tail are named; the test that was running is not failed for it."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import sys
import time

import httpx
import pytest

from tests.support import serving as serving_module
from tests.support.external_xrootd import external_xrootd
from tests.support.serving import serving

pytestmark = pytest.mark.integration

# a server that says it started, then listens until killed
LISTENER = ("import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('listening', flush=True); "
            "[s.accept()[0].close() for _ in iter(int, 1)]")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_a_server_killed_by_a_signal_is_restarted_counted_and_named(tmp_path):
    port = _free_port()
    before = len(serving_module.CRASHES)
    with serving([sys.executable, "-c", LISTENER, str(port)], "127.0.0.1", port, tmp_path / "out.log", [],
                 "the test listener") as server:
        first = server.proc.pid
        os.kill(first, signal.SIGSEGV)
        _wait(lambda: server.restarts == 1 and server.proc.pid != first, 10, "a restart")
        _wait(lambda: _listening(port), 10, "listening")
    crashes = serving_module.CRASHES[before:]
    assert len(crashes) == 1, crashes
    said = crashes[0].describe()
    assert f"the test listener (pid {first}) exited with status -11 (SIGSEGV)" in said
    assert "listening" in said  # the log's tail
    assert "test_a_server_killed_by_a_signal_is_restarted_counted_and_named" in said  # the test it hit
    assert server.proc.poll() is not None  # the block's end stops the restarted one, and no new one is started
    time.sleep(serving_module.BACKOFF_FIRST * 2)
    assert len(serving_module.CRASHES) == before + 1


def test_the_external_xrootd_comes_back_on_its_port_after_a_segfault(tpcmesh_pki):
    if os.geteuid() != 0:
        pytest.skip("the external XRootD needs root")
    with external_xrootd(tpcmesh_pki) as x:
        pid = x.server.proc.pid
        os.kill(pid, signal.SIGSEGV)
        _wait(lambda: x.server.restarts == 1, 20, "a restart")
        token = x.token("storage.read:/store")
        _wait(lambda: _listening(x.port), 30, "the new xrootd listening")
        r = httpx.get(f"https://{x.address}:{x.port}/store/", headers={"Authorization": f"Bearer {token}"},
                      verify=ssl.create_default_context(cafile=x.site_pki.ca_file), timeout=10)
        assert r.status_code < 500, r.text
    assert any("the external xrootd" in c.what and "SIGSEGV" in c.how for c in serving_module.CRASHES)


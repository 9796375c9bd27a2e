"""The test servers are supervised (tests/support/serving.py): a server that dies is restarted on its port, counted,
and its exit signal and log tail are named; the test that was running is not failed for it."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time

import httpx
import pytest

from tests.support import serving as serving_module
from tests.support.external_xrootd import external_xrootd
from tests.support.paths import REPO
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


@pytest.mark.about_dependency
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


@pytest.mark.about_dependency
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



SESSION = """
import os, pathlib, signal, socket, sys, time
import pytest
from tests.support.serving import serving

ATTEMPTS = pathlib.Path(__file__).with_name("attempts")
LISTENER = {listener!r}


def _hit(name, fault):
    seen = ATTEMPTS.read_text().split() if ATTEMPTS.exists() else []
    ATTEMPTS.write_text(" ".join([*seen, name]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with serving([sys.executable, "-c", LISTENER, str(port)], "127.0.0.1", port,
                 ATTEMPTS.with_name(name + ".log"), [], "the " + name + " listener") as server:
        if name not in seen:  # the first attempt: the dependency dies under the test
            os.kill(server.proc.pid, fault)
            while server.restarts == 0:
                time.sleep(0.05)
            raise AssertionError("a transfer through the dead " + name + " failed")


def test_hit_by_a_segfault():
    _hit("segv", signal.SIGSEGV)


def test_hit_by_a_kill():  # SIGKILL is sent on purpose (a test, the OOM killer): the failure is the test's
    _hit("kill", signal.SIGKILL)


@pytest.mark.about_dependency
def test_about_the_dependency():
    _hit("about", signal.SIGABRT)


def test_failing_alone():
    raise AssertionError("nothing crashed")
"""


def test_a_test_hit_by_a_dependency_fault_runs_once_more_and_nothing_else_does(tmp_path):
    (tmp_path / "test_session.py").write_text(SESSION.format(listener=LISTENER))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                        "--rootdir", str(tmp_path), "-p", "no:django", "-p", "tests.support.serving",
                        str(tmp_path / "test_session.py")],
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                       timeout=120)
    out = r.stdout
    assert "3 failed, 1 passed" in out, out + r.stderr
    attempts = (tmp_path / "attempts").read_text().split()
    assert attempts == ["segv", "segv", "kill", "about"], attempts
    assert ("test_session.py::test_hit_by_a_segfault: run again after the segv listener (pid" in out
            and "exited with status -11 (SIGSEGV); its first attempt failed with: AssertionError: a transfer "
                "through the dead segv failed" in out), out
    assert "test_hit_by_a_kill: run again" not in out and "test_about_the_dependency: run again" not in out

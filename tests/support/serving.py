"""A test server as a context, supervised like the agents' own servers: started in its own session, waited for until
it listens, restarted when it exits without being asked to, killed with its children on the way out. The external and
anonymous XRootD endpoints and the external GridFTP server share it.

A restart is not itself a test failure: the crash (exit signal or status, the tail of the server's logs, the test
that was running) is kept in ``CRASHES``, and this module (a pytest plugin, listed in tests/conftest.py) names it in
that test's report and in the session's summary. A test that fails while one of these servers (a dependency, not
the product) faulted under it (SIGSEGV, SIGABRT, ...: XRootD 5.5.3's TLS races, hack/xrootd_tls_stress.py) is run
once more against the restarted server, and the summary says so with the first attempt's error; a test about the
server itself is marked ``about_dependency`` and is never run again. Nothing else is retried.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol
from tpcmesh_agent.daemons.supervisor import exit_description

BACKOFF_FIRST = 0.2
BACKOFF_MAX = 5.0
TAIL_LINES = 6  # of each log, in a crash's description


@dataclass(frozen=True)
class Crash:
    """One exit of a supervised test server that nobody asked for."""

    what: str  # the server, e.g. "the external xrootd (pid 123)"
    how: str  # exit_description()
    log_tail: str
    test: str | None  # pytest's current test when the exit was seen
    dependency_fault: bool = False  # a test server (not the product) killed by a fault: a test it hit runs again

    def describe(self) -> str:
        return (f"{self.what} {self.how} during {self.test or 'set-up'}; restarted. "
                f"Its logs end: {self.log_tail or '(empty)'}")


CRASHES: list[Crash] = []  # the session's, in order; read by tests/conftest.py
_crashes_lock = threading.Lock()


def record_crash(what: str, how: str, log_tail: str, dependency_fault: bool = False) -> None:
    with _crashes_lock:
        CRASHES.append(Crash(what, how, log_tail, _current_test(), dependency_fault))


SENT_ON_PURPOSE = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)  # by a test, a user or the OOM killer


def is_fault(returncode: int) -> bool:
    """An exit by a signal the process brought on itself (SIGSEGV, SIGABRT, SIGBUS, ...)."""
    return returncode < 0 and -returncode not in SENT_ON_PURPOSE


def _current_test() -> str | None:
    current = os.environ.get("PYTEST_CURRENT_TEST")
    return current.rsplit(" (", 1)[0] if current else None


def _logs_tail(logs: Sequence[Path]) -> str:
    return " | ".join(" / ".join(p.read_text(errors="replace").strip().splitlines()[-TAIL_LINES:])
                      for p in logs if p.exists())


def wait_listening(host: str, port: int, proc: subprocess.Popen, logs: Sequence[Path], what: str,
                   timeout: float = 30.0) -> None:
    """Until the server listens on host:port; its logs' ends when it exits first. `what` names it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} {exit_description(proc.returncode)}: {_logs_tail(logs)}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout:g} s")


class Supervised:
    """One server process and the thread that restarts it (same argv, same port) whenever it exits on its own."""

    def __init__(self, argv: Sequence[str], host: str, port: int, stdout: Path, logs: Sequence[Path], what: str,
                 popen: dict[str, Any]) -> None:
        self.argv, self.host, self.port, self.what, self.popen = list(argv), host, port, what, popen
        self.stdout = stdout
        self.logs = [stdout, *logs]
        self.restarts = 0
        self.proc: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._launching = threading.Lock()  # stop() never misses a process the watcher is starting
        self._watcher: threading.Thread | None = None

    def _launch(self) -> subprocess.Popen:
        with open(self.stdout, "ab") as out:
            return subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    **self.popen)

    def start(self) -> None:
        self.proc = self._launch()
        wait_listening(self.host, self.port, self.proc, self.logs, self.what)
        self._watcher = threading.Thread(target=self._watch, name=f"supervise {self.what}", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        backoff = BACKOFF_FIRST
        while not self._stopping.is_set():
            assert self.proc is not None
            code = self.proc.wait()
            if self._stopping.is_set():
                return
            _kill_session(self.proc)  # children it forked (xrootd's helpers, gridftp's sessions) go with it
            record_crash(f"{self.what} (pid {self.proc.pid})", exit_description(code), _logs_tail(self.logs),
                         dependency_fault=is_fault(code))
            self.restarts += 1
            if self._stopping.wait(backoff):
                return
            backoff = min(backoff * 2, BACKOFF_MAX)
            with self._launching:
                if self._stopping.is_set():
                    return
                self.proc = self._launch()
            with contextlib.suppress(RuntimeError):  # it may crash again at once: the loop sees that exit too
                wait_listening(self.host, self.port, self.proc, self.logs, self.what)

    def stop(self) -> None:
        self._stopping.set()
        with self._launching:
            proc = self.proc
        if proc is not None:
            _kill_session(proc)
            proc.wait(timeout=10)
        if self._watcher is not None:
            self._watcher.join(timeout=10)


def _kill_session(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)


@contextlib.contextmanager
def serving(argv: Sequence[str], host: str, port: int, stdout: Path, logs: Sequence[Path], what: str,
            **popen: Any) -> Iterator[Supervised]:
    """Run `argv` (its output in `stdout`) until the block ends, restarted whenever it exits; `logs` are quoted
    when it does."""
    server = Supervised(argv, host, port, stdout, logs, what, popen)
    try:
        server.start()
        yield server
    finally:
        server.stop()


# ---- the pytest plugin: each restart named in its test's report and in the session's summary -----------------------
_first_crash = pytest.StashKey[int]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_first_crash] = len(CRASHES)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "teardown" or report.failed:
        new = CRASHES[item.stash.get(_first_crash, len(CRASHES)):]
        if new:
            report.sections.append(("supervised servers restarted", "\n".join(c.describe() for c in new)))
    return report


RUN_AGAIN: list[str] = []  # "<test>: <first attempt's error>", for the session's summary


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "about_dependency: the test is about a supervised test server itself (its "
                                       "failure is the test's: never run again after the server faulted)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Run the test; once more if it failed while a supervised dependency faulted under it (see the docstring)."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    first = len(CRASHES)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    faulted = [c for c in CRASHES[first:] if c.dependency_fault]
    if faulted and any(r.failed for r in reports) and item.get_closest_marker("about_dependency") is None:
        failed = next(r for r in reports if r.failed)
        crash = getattr(failed.longrepr, "reprcrash", None)
        error = crash.message if crash is not None else failed.longreprtext.strip()[-300:]
        RUN_AGAIN.append(f"{item.nodeid}: run again after {faulted[0].what} {faulted[0].how}; its first attempt "
                         f"failed with: {error}")
        item._initrequest()  # type: ignore[attr-defined]  # fresh fixture requests, as pytest-rerunfailures does
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if CRASHES:
        terminalreporter.section("supervised servers restarted")
        for crash in CRASHES:
            terminalreporter.write_line(crash.describe())
    if RUN_AGAIN:
        terminalreporter.section("tests run again after a supervised dependency faulted under them")
        for line in RUN_AGAIN:
            terminalreporter.write_line(line)

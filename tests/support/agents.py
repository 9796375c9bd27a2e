"""Real `tpcmesh-agent` processes for tests, each on a loopback address of its own.

Use the ``agent_factory`` fixture::

    def test_x(agent_factory):
        src, dst = agent_factory(), agent_factory(protocols=("builtin", "xrootd-https"), run_user="nobody")
        r = dst.post("/api/v1/transfers", json={...})

Each agent gets a fresh address (127.0.1.1, 127.0.1.2, ...; an address is locked with a file in /tmp so parallel
pytest sessions never share one), the default ports on it, a data dir on /dev/shm, a token file, and a host
certificate from the session's tpcmesh CA (``tpcmesh_operator.credentials.pki``). The factory waits for /readyz and
kills the process at teardown. Keyword arguments are agent settings (``protocols``, ``budget_bytes``,
``builtin_max_rate``, ``run_user``, ``token_file`` to share one token, ...), passed as TPCMESH_AGENT_<NAME>
environment variables. ``agent_factory.many(n, **settings)`` starts n agents in parallel. ``module_agent_factory`` is
the same with agents shared by a module's tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.paths import VENV_BIN
from tests.support.serving import record_crash

DEFAULT_PORTS = {
    "api_port": 9443,
    "metrics_port": 9464,
    "builtin_port": 9080,
    "xrootd_root_port": 1094,
    "xrootd_https_port": 8444,
    "gridftp_port": 2811,
    "iperf3_port": 5201,
}
LOCK_DIR = Path(tempfile.gettempdir()) / "tpcmesh-test-addresses"


@dataclass(frozen=True)
class TestPKI:
    ca_file: Path
    ca_dir: Path
    ca: Any  # tpcmesh_operator.credentials.pki.KeyPair
    directory: Path

    def host_cert(self, name: str, addresses: list[str]) -> tuple[Path, Path]:
        from tpcmesh_operator.credentials import pki

        kp = pki.issue_host_cert(self.ca, name, addresses)
        cert, key = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        kp.write(cert, key)
        os.chmod(key, 0o644)  # servers running as run_user (e.g. xrootd as nobody) must read it; tests only
        return cert, key


@dataclass
class AgentHandle:
    name: str
    address: str
    ports: dict[str, int]
    token: str
    token_file: Path
    ca_file: Path
    cert_file: Path
    key_file: Path
    data_dir: Path
    log_file: Path
    process: subprocess.Popen
    settings: dict[str, str] = field(default_factory=dict)
    pooled: bool = False  # the address came from the pool (released at clean-up)
    _client: httpx.Client | None = None

    @property
    def api_port(self) -> int:
        return self.ports["api_port"]

    @property
    def builtin_port(self) -> int:
        return self.ports["builtin_port"]

    @property
    def metrics_port(self) -> int:
        return self.ports["metrics_port"]

    @property
    def base_url(self) -> str:
        return f"https://{self.address}:{self.api_port}"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def client(self, token: str | None = None, timeout: float = 30.0) -> httpx.Client:
        """An httpx client on the control API with the bearer token (``token=""`` for none)."""
        tok = self.token if token is None else token
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        return httpx.Client(base_url=self.base_url, verify=self.ssl_context(), headers=headers, timeout=timeout)

    @property
    def http(self) -> httpx.Client:
        if self._client is None:
            self._client = self.client()
        return self._client

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.get(path, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.post(path, **kw)

    def delete(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.delete(path, **kw)

    def metrics(self) -> str:
        return httpx.get(f"http://{self.address}:{self.metrics_port}/metrics", timeout=10).text

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of one sample of /metrics (e.g. ``metric("tpcmesh_agent_bytes_total", protocol="builtin")``)."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return None

    def file_set(self, **body: Any) -> dict:
        r = self.post("/api/v1/filesets", json=body, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()

    def start_transfer(self, **body: Any) -> dict:
        body.setdefault("test_id", str(uuid.uuid4()))
        r = self.post("/api/v1/transfers", json=body)
        assert r.status_code == 202, r.text
        return r.json()

    def wait_transfer(self, test_id: str, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            rec = self.get(f"/api/v1/transfers/{test_id}").json()
            if rec.get("status") != "running":
                return rec
            if time.monotonic() > deadline:
                raise AssertionError(f"transfer {test_id} still running after {timeout} s: {rec}")
            time.sleep(0.05)

    def transfer(self, timeout: float = 60.0, **body: Any) -> dict:
        """Start a transfer on this (destination) agent and wait for its finished record."""
        return self.wait_transfer(self.start_transfer(**body)["test_id"], timeout)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        with contextlib.suppress(ProcessLookupError):  # children (xrootd, ...) the agent did not reap
            os.killpg(self.process.pid, signal.SIGKILL)
        self._report_server_crashes()

    def _report_server_crashes(self) -> None:
        """Its servers that crashed (a signal nobody sends on purpose: SIGSEGV, SIGABRT, ...) and were restarted by
        its supervisor, in the session's report of restarted servers (tests/support/serving.py)."""
        with contextlib.suppress(OSError):
            for line in self.log_file.read_text(errors="replace").splitlines():
                crash = AGENT_SERVER_CRASH.search(line)
                if crash:
                    record_crash(f"the agent {self.name}'s {crash['server']}", crash["how"], line.strip()[-300:])


# the agent supervisor's log line of a crashed server (tpcmesh_agent.daemons.supervisor); SIGKILL and SIGTERM are
# what tests (and the OOM killer) send on purpose
AGENT_SERVER_CRASH = re.compile(
    r"Server (?P<server>\S+) (?P<how>exited with status -\d+ \((?!SIGKILL|SIGTERM)SIG\w+\))")

PROTOCOL_PORTS = {"xrootd-root": "xrootd_root_port", "xrootd-https": "xrootd_https_port",
                  "gridftp": "gridftp_port", "iperf3": "iperf3_port"}


def _ports_needed(protocols: tuple[str, ...] | list[str] | str) -> list[int]:
    if isinstance(protocols, str):
        protocols = [p.strip() for p in protocols.split(",")]
    keys = ["api_port", "metrics_port", "builtin_port"] + [PROTOCOL_PORTS[p] for p in protocols if p in PROTOCOL_PORTS]
    return [DEFAULT_PORTS[k] for k in keys]


def _address_free(address: str, ports: list[int]) -> bool:
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((address, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


class _AddressPool:
    """127.0.1.1 .. 127.0.9.254, each held with an flock for the agent's life."""

    def __init__(self) -> None:
        LOCK_DIR.mkdir(exist_ok=True)
        self.next = 0
        self.held: dict[str, int] = {}

    def acquire(self, ports: list[int]) -> str:
        for _ in range(9 * 254):
            i = self.next
            self.next = (self.next + 1) % (9 * 254)
            address = f"127.0.{1 + i // 254}.{1 + i % 254}"
            if address in self.held:
                continue
            fd = os.open(LOCK_DIR / address, os.O_CREAT | os.O_RDWR, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if not _address_free(address, ports):
                os.close(fd)
                continue
            self.held[address] = fd
            return address
        raise RuntimeError("no free loopback address for a test agent")

    def release(self, address: str) -> None:
        fd = self.held.pop(address, None)
        if fd is not None:
            os.close(fd)


_POOL: _AddressPool | None = None


@pytest.fixture(scope="session")
def tpcmesh_pki(tmp_path_factory: pytest.TempPathFactory) -> TestPKI:
    from tpcmesh_operator.credentials import pki

    d = tmp_path_factory.mktemp("pki")
    os.chmod(d, 0o755)
    ca = pki.create_ca("tpcmesh test CA")
    (d / "ca.crt").write_bytes(ca.cert_pem)
    ca_dir = pki.write_ca_dir(ca.cert_pem, d / "ca-dir")
    return TestPKI(ca_file=d / "ca.crt", ca_dir=ca_dir, ca=ca, directory=d)


def start_agent(pki_: TestPKI, name: str | None = None, wait: float = 60.0, **settings: Any) -> AgentHandle:
    """Start one real agent process and wait until it is ready (use the ``agent_factory`` fixture, which also
    cleans up)."""
    return wait_ready(launch_agent(pki_, name, **settings), wait)


def launch_agent(pki_: TestPKI, name: str | None = None, **settings: Any) -> AgentHandle:
    """Start one real agent process without waiting for it (see ``wait_ready``)."""
    global _POOL
    if _POOL is None:
        _POOL = _AddressPool()
    address = settings.pop("address", None)
    pooled = address is None
    if address is None:
        # only the ports this agent opens: a wildcard listener elsewhere (e.g. xrootd on *:1094) then blocks
        # only agents that run that server themselves
        address = _POOL.acquire(_ports_needed(settings.get("protocols", ("builtin",))))
    name = name or f"agent-{address.replace('.', '-')}"
    data_dir = Path(tempfile.mkdtemp(prefix=f"tpcmesh-{name}-", dir="/dev/shm"))
    os.chmod(data_dir, 0o755)
    if settings.get("token_file"):  # a shared token (e.g. an operator talking to several agents)
        token_file = Path(settings.pop("token_file"))
        token = token_file.read_text().strip()
    else:
        token = secrets.token_urlsafe(24)
        token_file = data_dir / "token"
        token_file.write_text(token + "\n")
    cert, key = pki_.host_cert(name, [address])
    ports = {k: int(settings.pop(k, v)) for k, v in DEFAULT_PORTS.items()}
    values: dict[str, Any] = {
        "address": address, "node_name": name, "data_dir": data_dir / "data", "token_file": token_file,
        "tls_cert": cert, "tls_key": key, "ca_file": pki_.ca_file, "budget_bytes": 2 * 10**9,
        "protocols": ("builtin",), "log_level": "INFO", **ports, **settings,
    }
    env = dict(os.environ)
    env = {k: v for k, v in env.items() if not k.startswith("TPCMESH_AGENT_")}
    for k, v in values.items():
        env["TPCMESH_AGENT_" + k.upper()] = ",".join(v) if isinstance(v, tuple | list) else str(v)
    log_file = data_dir / "agent.log"
    with open(log_file, "wb") as out:
        proc = subprocess.Popen([str(VENV_BIN / "tpcmesh-agent")], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    handle = AgentHandle(name=name, address=address, ports=ports, token=token, token_file=token_file,
                         ca_file=pki_.ca_file, cert_file=cert, key_file=key, data_dir=data_dir, log_file=log_file,
                         process=proc, settings={k: str(v) for k, v in values.items()}, pooled=pooled)
    return handle


def wait_ready(handle: AgentHandle, wait: float = 60.0) -> AgentHandle:
    """Wait for /readyz; on exit or time-out the agent is cleaned up and RuntimeError carries its log."""
    proc, name = handle.process, handle.name
    deadline = time.monotonic() + wait
    with httpx.Client(verify=handle.ssl_context(), timeout=2) as c:
        while True:
            if proc.poll() is not None:
                log = handle.log()
                _cleanup(handle)
                raise RuntimeError(f"tpcmesh-agent {name} exited with {proc.returncode}:\n{log}")
            try:
                if c.get(f"{handle.base_url}/readyz").status_code == 200:
                    return handle
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                handle.stop()
                log = handle.log()
                _cleanup(handle)
                raise RuntimeError(f"tpcmesh-agent {name} not ready after {wait} s:\n{log}")
            time.sleep(0.05)


def _cleanup(handle: AgentHandle) -> None:
    shutil.rmtree(handle.data_dir, ignore_errors=True)
    if _POOL is not None and handle.pooled:
        _POOL.release(handle.address)


def _factory(pki_: TestPKI, node: Any) -> Iterator[Any]:
    started: list[AgentHandle] = []

    def factory(name: str | None = None, **settings: Any) -> AgentHandle:
        h = start_agent(pki_, name=name, **settings)
        started.append(h)
        return h

    def many(n: int, **settings: Any) -> list[AgentHandle]:
        """Start ``n`` agents at once (in parallel) with the same settings; returns them when all are ready."""
        handles = [launch_agent(pki_, **settings) for _ in range(n)]
        ready, error = [], None
        for h in handles:
            try:
                ready.append(wait_ready(h))
            except RuntimeError as e:
                error = error or e
        started.extend(ready)
        if error is not None:
            raise error
        return ready

    factory.many = many  # type: ignore[attr-defined]

    yield factory
    for h in started:
        h.stop()
        if hasattr(node, "add_report_section"):
            node.add_report_section("teardown", f"log of {h.name} ({h.address})", h.log()[-8000:])
        _cleanup(h)


@pytest.fixture
def agent_factory(tpcmesh_pki: TestPKI, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Call ``agent_factory(**settings)`` to start an agent; every agent is stopped at the test's end."""
    yield from _factory(tpcmesh_pki, request.node)


@pytest.fixture(scope="module")
def module_agent_factory(tpcmesh_pki: TestPKI, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Like ``agent_factory``, but the agents live until the module's last test (share them to save time)."""
    yield from _factory(tpcmesh_pki, request.node)

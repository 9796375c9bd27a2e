"""The local mesh's parts: certificates, real agents in the lab, the dashboard on SQLite.

Each part is a real process (``tpcmesh-agent``, the dashboard under gunicorn) started the way a cluster starts it,
configured through the same settings (environment variables), and stopped by the lab's cleanup.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import tpcmesh_operator.credentials.pki as pki
from tpcmesh_operator.protocols import PROTOCOLS as ALL_PROTOCOLS
from tpcmesh_operator.run.agents import DEFAULT_PORTS, Agent

from .diskpath import DISK_DIR
from .netns import Lab, Node

log = logging.getLogger("tpcmesh.local")

REPO = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = REPO / "dashboard"


class MeshError(RuntimeError):
    """A part of the local mesh did not start; the message says which and shows its log."""


def venv_command(name: str) -> str:
    """A console script of the running virtualenv (``tpcmesh-agent``, ``gunicorn``), else from PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if not found:
        raise MeshError(f"the command {name!r} is not installed (run `make setup`)")
    return found


@dataclass
class Certificates:
    directory: Path
    ca_file: Path
    hosts: dict[str, tuple[Path, Path]] = field(default_factory=dict)

    @classmethod
    def create(cls, directory: Path, nodes: list[Node], extra: Mapping[str, str] | None = None) -> Certificates:
        """The lab's CA and a host certificate per node; ``extra``: name -> address of more hosts (the token
        issuer on the lab's host address)."""
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o755)
        ca = pki.create_ca("tpcmesh local CA")
        ca_file = directory / "ca.crt"
        ca_file.write_bytes(ca.cert_pem)
        certs = cls(directory=directory, ca_file=ca_file)
        hosts = ([(n.name, [n.address, *([n.address6] if n.address6 else [])]) for n in nodes]
                 + [(name, [address]) for name, address in sorted((extra or {}).items())])
        for name, addresses in hosts:
            kp = pki.issue_host_cert(ca, name, [*addresses, name])
            cert, key = directory / f"{name}.crt", directory / f"{name}.key"
            kp.write(cert, key)
            # Servers the agent runs as its unprivileged run_user (xrootd refuses root) must read the key; the
            # directory is the demo's own temporary one.
            os.chmod(key, 0o644)
            certs.hosts[name] = (cert, key)
        return certs


@dataclass
class LocalAgent:
    node: Node
    process: subprocess.Popen
    data_dir: Path
    log_file: Path
    ports: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    info: dict = field(default_factory=dict)
    address: str = ""  # what it listens on: its node's IPv4 or (family ipv6) IPv6 address
    address6: str | None = None  # family dual: its IPv6 address besides the IPv4 one

    def __post_init__(self) -> None:
        self.address = self.address or self.node.address

    @property
    def control_url(self) -> str:
        return self.agent().control_url

    def agent(self) -> Agent:
        return Agent(node=self.node.name, address=self.address, address6=self.address6, ports=dict(self.ports),
                     labels={"tpcmesh.io/site": self.node.name.rsplit("-", 1)[0] if self.node.name[-1].isdigit()
                             else self.node.name}, name=self.node.name)

    def available(self) -> list[str]:
        return [p for p, v in (self.info.get("protocols") or {}).items() if v.get("available")]


DISK_RESERVE = 8 * 2**20  # a lab disk is small: keep only what the filesystem needs to stay healthy


def start_agents(lab: Lab, certs: Certificates, token: str, state: Path, *, budget_bytes: int,
                 protocols: tuple[str, ...] = ALL_PROTOCOLS, wait: float = 60.0,
                 token_issuer: str = "", family: str = "ipv4",
                 single_stack: tuple[str, ...] = (), disk: bool = False) -> list[LocalAgent]:
    """One real ``tpcmesh-agent`` per lab node (in its namespace), waited for until /readyz answers; with
    ``token_issuer`` (its URL) in token mode: XRootD and the built-in endpoint take that issuer's bearer tokens.
    Disk mode: a node with a loop disk (the profile's diskBytes) uses it; with ``disk`` (a benchmark asking for
    spec.storage disk) the others get a directory of their own on the machine's real disk (DISK_DIR)."""
    token_file = state / "agent-token"
    token_file.write_text(token + "\n", encoding="utf-8")
    os.chmod(token_file, 0o600)
    data_root = data_base(state) / f"{DATA_PREFIX}{os.getpid()}"
    data_root.mkdir(parents=True, exist_ok=True)
    os.chmod(data_root, 0o755)
    disk_root = DISK_DIR / f"{DATA_PREFIX}{os.getpid()}-disk"
    if disk and any(node.disk is None for node in lab.nodes):
        disk_root.mkdir(exist_ok=True)
        lab.add_cleanup(lambda: shutil.rmtree(disk_root, ignore_errors=True))
    agents = []
    for node in lab.nodes:
        # family ipv4 or ipv6: every agent on that address; dual: IPv4 and IPv6 (but the single_stack nodes)
        address = node.address6 if family == "ipv6" else node.address
        address6 = node.address6 if family == "dual" and node.name not in single_stack else None
        if not address or (family == "dual" and node.name not in single_stack and not address6):
            raise MeshError(f"node {node.name} has no {family} address (IPv6 needs the netns lab, not loopback)")
        cert, key = certs.hosts[node.name]
        data_dir = data_root / node.name
        data_dir.mkdir(exist_ok=True)
        os.chmod(data_dir, 0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TPCMESH_AGENT_")}
        settings = {
            "address": address, "node_name": node.name, "data_dir": data_dir, "token_file": token_file,
            "tls_cert": cert, "tls_key": key, "ca_file": certs.ca_file, "budget_bytes": budget_bytes,
            "protocols": ",".join(protocols), "log_level": "INFO",
            "host_cpu_shared": "true",  # every lab node runs on this machine's cores
        }
        if address6:
            settings["address6"] = address6
        if node.disk is not None:  # the profile's diskBytes: disk mode on the node's loop disk
            settings["disk_dir"] = node.disk.mount
            settings["disk_reserve_bytes"] = DISK_RESERVE
        elif disk:
            (disk_root / node.name).mkdir(exist_ok=True)
            settings["disk_dir"] = disk_root / node.name
        if lab.cgroup_root is not None:
            settings["cgroup_root"] = lab.cgroup_root
        if token_issuer:
            settings["xrootd_token_issuer"] = token_issuer  # checked against ca_file, the lab's CA
        ports = dict(DEFAULT_PORTS)
        if node.netns is None:
            # XRootD listens on every address of the host: on loopback each agent needs XRootD ports of its own.
            for proto in ("xrootd-root", "xrootd-https"):
                ports[proto] = free_port("0.0.0.0")
                settings[f"{proto.replace('-', '_')}_port"] = ports[proto]
        for k, v in settings.items():
            env[f"TPCMESH_AGENT_{k.upper()}"] = str(v)
        log_file = state / f"agent-{node.name}.log"
        with open(log_file, "wb") as out:
            proc = lab.popen(node, [venv_command("tpcmesh-agent")], env=env, stdout=out, stderr=subprocess.STDOUT,
                             critical=True)
        agents.append(LocalAgent(node=node, process=proc, data_dir=data_dir, log_file=log_file, ports=ports,
                                 address=address, address6=address6))
    lab.add_cleanup(lambda: shutil.rmtree(data_root, ignore_errors=True))
    ctx = ssl.create_default_context(cafile=str(certs.ca_file))
    deadline = time.monotonic() + wait
    with httpx.Client(verify=ctx, timeout=3, headers={"Authorization": f"Bearer {token}"}) as client:
        for a in agents:
            url = a.control_url
            while True:
                if a.process.poll() is not None:
                    raise MeshError(f"the agent on {a.node.name} exited with {a.process.returncode}:\n"
                                    f"{_tail(a.log_file)}")
                try:
                    if client.get(url + "/readyz").status_code == 200:
                        a.info = client.get(url + "/api/v1/info").json()
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise MeshError(f"the agent on {a.node.name} was not ready after {wait:g} s:\n{_tail(a.log_file)}")
                time.sleep(0.1)
    return agents


DATA_PREFIX = "tpcmesh-local-"  # + the pid of the demo: the agents' data (GBs in /dev/shm), the demo's state dir


def data_base(fallback: Path) -> Path:
    return Path("/dev/shm") if Path("/dev/shm").is_dir() else fallback


def remove_stale_data(bases: tuple[Path, ...] | None = None) -> list[str]:
    """Remove the data and state directories of local runs whose process is gone (a SIGKILLed demo cleans
    nothing up); returns what was removed. Directories of live processes stay."""
    from .netns import _pid_alive

    removed = []
    default = (data_base(Path(tempfile.gettempdir())), Path(tempfile.gettempdir()), DISK_DIR)
    for base in bases if bases is not None else default:
        for d in base.glob(f"{DATA_PREFIX}*"):
            pid = d.name[len(DATA_PREFIX):].split("-", 1)[0]
            if d.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(str(d))
    if removed:
        log.info("Removed data of earlier local runs: %s.", ", ".join(removed))
    return removed


@dataclass
class Dashboard:
    url: str
    token: str
    process: subprocess.Popen
    log_file: Path


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def start_dashboard(lab: Lab, state: Path, port: int, wait: float = 60.0) -> Dashboard:
    """The dashboard on a SQLite file in ``state``: migrated, with a write token, under gunicorn on 127.0.0.1."""
    env = dict(os.environ)
    env["DATABASE_URL"] = f"sqlite:///{state / 'dashboard.sqlite3'}"
    env["TPCMESH_DASHBOARD_SECRET_KEY"] = secrets.token_urlsafe(50)  # the dashboard serves only with a key
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    env["PYTHONPATH"] = os.pathsep.join([str(DASHBOARD_DIR), env.get("PYTHONPATH", "")])
    log_file = state / "dashboard.log"
    manage = [sys.executable, str(DASHBOARD_DIR / "manage.py")]
    for argv in ([*manage, "migrate", "--noinput"],):
        result = subprocess.run(argv, env=env, cwd=DASHBOARD_DIR, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise MeshError(f"`{' '.join(argv[1:])}` failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}")
    if port == 0:
        port = free_port()
    with open(log_file, "wb") as out:
        proc = lab.popen(None, [venv_command("gunicorn"), "--chdir", str(DASHBOARD_DIR), "--bind",
                                f"127.0.0.1:{port}", "--workers", "2", "--threads", "4", "--timeout", "120",
                                "config.wsgi"], env=env, stdout=out, stderr=subprocess.STDOUT, critical=True)
    # the token while gunicorn boots (each is a Django start of a second or more; the database is migrated)
    name = f"tpcmesh-local-{os.getpid()}-{secrets.token_hex(3)}"
    result = subprocess.run([*manage, "create_api_token", name, "--write"], env=env, cwd=DASHBOARD_DIR,
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise MeshError(f"create_api_token failed:\n{result.stderr[-4000:]}")
    token = result.stdout.strip().splitlines()[-1]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + wait
    while True:
        if proc.poll() is not None:
            raise MeshError(f"the dashboard exited with {proc.returncode}:\n{_tail(log_file)}")
        try:
            if httpx.get(url + "/healthz", timeout=3).status_code == 200:
                return Dashboard(url=url, token=token, process=proc, log_file=log_file)
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise MeshError(f"the dashboard did not answer /healthz after {wait:g} s:\n{_tail(log_file)}")
        time.sleep(0.2)


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"

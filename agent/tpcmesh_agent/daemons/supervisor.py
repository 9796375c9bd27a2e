"""Launches the protocol servers the agent is configured for, watches them and restarts crashed ones.

Each server is one child process in its own session (so its forked children die with it). A server whose
program is missing is reported ``available: false`` with the Debian package to install; the others run.
A crashed server is restarted with exponential backoff and counted in ``restarts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import grp
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_atomically
from ..cadir import one_line_dn, write_ca_dir
from . import configs
from .gridmap import GridftpAccess

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
STABLE_AFTER = 30.0  # a server that stayed up this long gets its backoff reset
READY_TIMEOUT = 15.0
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")


XROOTD_ENV_DIR = Path("/tmp")  # fixed in XRootD, whatever TMPDIR says


def find_library(name: str) -> Path | None:
    for d in LIB_DIRS:
        p = Path(d) / name
        if p.exists():
            return p
    return None


def missing_message(program: str) -> str:
    return f"{program} is not installed: install the Debian package {configs.PACKAGES[program]}"


@dataclass
class ServerSpec:
    """What the supervisor needs to run one server."""

    name: str  # protocol name: xrootd-https, xrootd-root, gridftp, iperf3
    port: int
    host: str  # where to probe for readiness
    requires: tuple[str, ...]  # programs or libraries that must exist
    prepare: Callable[[], list[str]]  # writes config files, returns argv
    log_file: Path
    cwd: Path | None = None
    diag_logs: tuple[Path, ...] = ()  # the server's own logs, searched for the reason of an exit
    env: dict[str, str] | None = None  # added to the agent's environment
    # a port the agent chose itself (free_port): when another process took it before the server bound it, the
    # same server on a new free port (see _watch)
    repick: Callable[[], ServerSpec] | None = None


@dataclass
class ManagedServer:
    spec: ServerSpec
    available: bool = True
    message: str | None = None
    restarts: int = 0
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task | None = None
    started_at: float = 0.0
    stopping: bool = False
    last_exit: int | None = None
    last_exit_message: str | None = None
    backoff: float = BACKOFF_FIRST
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def status(self) -> dict:
        return {"available": self.available, "running": self.running, "port": self.spec.port,
                "message": self.message, "restarts": self.restarts, "last_exit": self.last_exit_message}


def _user_ids(user: str) -> tuple[int, int, str]:
    try:
        pw = pwd.getpwnam(user)
    except KeyError as e:
        raise ValueError(f"run_user {user!r} does not exist on this host") from e
    try:
        group = grp.getgrgid(pw.pw_gid).gr_name
    except KeyError:
        group = str(pw.pw_gid)
    return pw.pw_uid, pw.pw_gid, group


def free_port() -> int:
    """A TCP port free on every address (XRootD listens on all of them)."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    """Something accepts TCP connections at host:port (the supervisor's readiness check; the tests' too)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class ServerSupervisor:
    """``await start()`` launches every enabled server and waits (bounded) until each listens."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.runtime_dir = Path(settings.data_dir) / "servers"
        self.as_root = os.geteuid() == 0
        self.run_user = settings.run_user if self.as_root else None
        self.servers: dict[str, ManagedServer] = {}
        self._stopping = False
        self._private_root: Path | None = None
        self._keytab_made = False
        self.setpriv = shutil.which("setpriv")  # util-linux: servers die with the agent (parent-death signal)

    def _private(self, name: str, mode: int = 0o755) -> Path:
        """A directory of the run user in a fresh temporary root outside the data dir, removed at stop: XRootD's
        admin socket (Unix socket paths are limited to 108 bytes, the data dir may be longer) and the copies of
        the host key, which must never sit where a protocol server exports files."""
        if self._private_root is None:
            self._private_root = Path(tempfile.mkdtemp(prefix="tpcm-"))
            self._private_root.chmod(0o755)
        d = self._private_root / name
        d.mkdir(exist_ok=True)
        self._own(d, mode)
        return d

    # ---- specs -----------------------------------------------------------------------------------------------
    def _own(self, path: Path, mode: int | None = None) -> None:
        if mode is not None:
            path.chmod(mode)
        if self.run_user:
            uid, gid, _ = _user_ids(self.run_user)
            os.chown(path, uid, gid)

    def _runtime(self, name: str) -> Path:
        d = self.runtime_dir / name
        d.mkdir(parents=True, exist_ok=True)
        self._own(d)
        return d

    def _data_dirs(self) -> None:
        """The run user reads the sets and writes into incoming/ (the mover creates per-test dirs it owns)."""
        s = self.settings
        for d in (Path(s.data_dir), s.sets_dir, s.incoming_dir):
            d.mkdir(parents=True, exist_ok=True)
            mode = d.stat().st_mode
            # Only what is missing: in a pod the data volume's root belongs to root (an emptyDir, 0777 with the
            # fsGroup), and the agent's user may not chmod it even to the mode it already has.
            if mode & 0o755 != 0o755:
                d.chmod(mode | 0o755)

    def _xrootd_paths(self, name: str, tls: bool) -> configs.XrootdPaths:
        rt = self._runtime(name)
        admin = self._private(name.removeprefix("xrootd-"))
        if not tls:
            return configs.XrootdPaths(rt, admin_dir=admin)
        cert, key, ca_dir = self._host_credentials()
        return configs.XrootdPaths(rt, cert, key, ca_dir, admin)

    def _credential_paths(self) -> tuple[Path, Path]:
        d = self._private("credentials", 0o700)
        return d / "hostcert.pem", d / "hostkey.pem"

    def _host_credentials(self) -> tuple[Path, Path, Path]:
        """Copies of the host certificate and key the run user may read (servers drop root), in a private directory
        outside the data dir (GridFTP's home, XRootD's local root), and a CA directory."""
        s = self.settings
        cert, key = self._credential_paths()
        # each TLS server's start calls this: a copy in place would truncate the key another one is reading
        write_atomically(cert, Path(s.tls_cert).read_bytes(), 0o644, self._own)
        write_atomically(key, Path(s.tls_key).read_bytes(), 0o600, self._own)
        ca_dir = s.ca_dir
        if ca_dir is None or not Path(ca_dir).is_dir():
            ca_dir = self._private("ca-dir")
            write_ca_dir(s.ca_file, ca_dir)
        return cert, key, Path(ca_dir)

    def _sss_keytab(self) -> None:
        """A new random sss key for the local root:// instance, once per agent start (a restarted instance keeps
        it, so a running pull is not refused), readable by the run user only."""
        keytab = configs.root_tpc_keytab(self.settings)
        if self._keytab_made and keytab.exists():
            return
        with tempfile.TemporaryDirectory(prefix="tpcm-sss-") as tmp:
            made = Path(tmp) / "keytab"
            proc = subprocess.run(configs.sss_keytab_argv(made), input="y\n", capture_output=True, text=True,
                                  timeout=30)
            if proc.returncode != 0 or not made.is_file():
                raise RuntimeError(f"xrdsssadmin could not make the sss keytab: {(proc.stderr or proc.stdout).strip()}")
            write_atomically(keytab, made.read_bytes(), 0o600, self._own)
        self._keytab_made = True

    def _wrap(self, argv: list[str], user: str | None = None) -> list[str]:
        group = _user_ids(user)[2] if user else None
        return configs.supervised_argv(argv, user, group, self.setpriv)

    def _xrootd_argv(self, protocol: str, port: int, paths: configs.XrootdPaths) -> list[str]:
        if self.setpriv and self.run_user:  # setpriv drops to run_user and keeps the parent-death signal
            return self._wrap(configs.xrootd_argv(protocol, port, paths, None), self.run_user)
        return configs.xrootd_argv(protocol, port, paths, self.run_user)

    def _xrootd_spec(self, name: str, port: int, build: Callable[[Any, configs.XrootdPaths], str], tls: bool,
                     requires: tuple[str, ...]) -> ServerSpec:
        def prepare() -> list[str]:
            paths = self._xrootd_paths(name, tls)
            # who may pull: over HTTPS the agent's own host certificate, over root:// whoever holds its sss key
            if name == configs.TPC_SERVERS["xrootd-https"]:
                paths.gridmap.write_text(configs.xrootd_gridmap(one_line_dn(Path(self.settings.tls_cert).read_bytes())))
            if name == configs.TPC_SERVERS["xrootd-root"]:
                self._sss_keytab()
            if name in configs.TPC_SERVERS.values():
                paths.authdb.write_text(configs.xrootd_authdb())
            paths.config.write_text(build(self.settings, paths))
            argv = self._xrootd_argv(name, port, paths)
            return self._token_validation(paths, argv) if tokens else argv

        rt = self.runtime_dir / name
        tokens = bool(self.settings.xrootd_token_issuer) and name.startswith("xrootd-https")
        env = None
        if tokens:
            requires = (*requires, "libXrdAccSciTokens-5.so", "unshare")
            env = {"XDG_CACHE_HOME": str(configs.XrootdPaths(rt).token_cache)}
        return ServerSpec(name, port, self.settings.address, requires, prepare, rt / "stdout.log", rt,
                          (rt / configs.instance_name(name, port) / "xrootd.log",), env)

    def _tpc_spec_on_a_free_port(self, name: str, setting: str, build: Callable[[Any, configs.XrootdPaths], str],
                                 tls: bool, requires: tuple[str, ...]) -> ServerSpec:
        """A local TPC instance on a port free now, written to the settings (``setting``) the movers read. Free
        now is not free at its bind: another agent starting beside this one can be given the same port, so the
        spec can move to another (repick)."""
        setattr(self.settings, setting, free_port())
        spec = self._xrootd_spec(name, getattr(self.settings, setting), build, tls, requires)
        return dataclasses.replace(
            spec, repick=lambda: self._tpc_spec_on_a_free_port(name, setting, build, tls, requires))

    def _token_validation(self, paths: configs.XrootdPaths, argv: list[str]) -> list[str]:
        """Token mode: the SciTokens plugin's configuration, a key cache the run user may write, and the issuer's CA
        in the CA bundle the plugin's HTTPS client trusts (a private mount namespace; see
        configs.xrootd_private_ca_argv)."""
        s = self.settings
        paths.scitokens_config.write_text(configs.scitokens_config(s.xrootd_token_issuer, s.xrootd_audience()))
        shutil.rmtree(paths.token_cache, ignore_errors=True)  # keys of an earlier issuer at the same URL
        paths.token_cache.mkdir(mode=0o700)
        self._own(paths.token_cache)
        issuer_ca = s.token_issuer_ca()
        system = configs.SYSTEM_CA_BUNDLE.read_bytes() if configs.SYSTEM_CA_BUNDLE.is_file() else b""
        if issuer_ca is not None and configs.bundle_has(system, Path(issuer_ca).read_bytes()):
            return argv  # the system bundle already trusts it (the chart mounts one with the agents' CA added)
        if os.geteuid() != 0 or issuer_ca is None:
            log.warning("XRootD validates tokens of %s with the system's CA bundle only: %s", s.xrootd_token_issuer,
                        "the agent is not root (a private mount namespace needs it) and the system bundle lacks "
                        f"{issuer_ca}" if issuer_ca else "no xrootd_token_issuer_ca or ca_file")
            return argv
        paths.ca_bundle.write_bytes(system.rstrip(b"\n") + b"\n" + Path(issuer_ca).read_bytes())
        paths.ca_bundle.chmod(0o644)
        return configs.xrootd_private_ca_argv(paths.ca_bundle, argv)

    def _gridftp_spec(self, name: str, address: str) -> ServerSpec:
        s = self.settings
        rt = self.runtime_dir / name

        def prepare() -> list[str]:
            self._runtime(name)
            user = self.run_user or pwd.getpwuid(os.geteuid()).pw_name
            _, _, group = _user_ids(user)
            argv = configs.gridftp_argv(s, rt / "gridftp.log", user, group, address)
            configs.gridftp_transfer_log(rt)
            if not s.gsiftp:  # as root, it switches anonymous sessions to the run user itself
                return self._wrap(argv)
            self._host_credentials()
            GridftpAccess(s).write()  # who may log in: the agent and the mesh's members (gridmap.py)
            return self._wrap(argv, self.run_user)  # gsiftp sessions run as the server's own user

        env = None
        if s.gsiftp:
            cert, key = self._credential_paths()
            env = configs.gridftp_env(cert, key, Path(s.ca_dir) if s.ca_dir else self._private("ca-dir"),
                                      GridftpAccess(s).gridmap)
        return ServerSpec(name, s.gridftp_port, address, ("globus-gridftp-server",), prepare, rt / "stdout.log", rt,
                          (rt / "gridftp.log",), env)

    def specs(self) -> list[ServerSpec]:
        s = self.settings
        out: list[ServerSpec] = []
        enabled = set(s.protocols)
        xrootd = (  # protocol, public port, setting of the local TPC instance's port, builders, TLS, requirements
            ("xrootd-https", s.xrootd_https_port, "xrootd_tpc_port", configs.xrootd_https_config,
             configs.xrootd_tpc_config, True, ("xrootd", "libXrdHttpTPC-5.so")),
            ("xrootd-root", s.xrootd_root_port, "xrootd_root_tpc_port", configs.xrootd_root_config,
             configs.xrootd_root_tpc_config, False, ("xrootd", "xrdcp", "xrdsssadmin", "libXrdSecsss-5.so")),
        )
        for protocol, port, tpc_setting, public, local, tls, requires in xrootd:
            if protocol not in enabled:
                continue
            out.append(self._xrootd_spec(protocol, port, public, tls, requires))
            if getattr(s, tpc_setting):
                out.append(self._xrootd_spec(configs.TPC_SERVERS[protocol], getattr(s, tpc_setting), local, tls,
                                             requires))
            else:  # only this agent connects to it: any free port (the movers read it from the settings)
                out.append(self._tpc_spec_on_a_free_port(configs.TPC_SERVERS[protocol], tpc_setting, local, tls,
                                                         requires))
        if "gridftp" in enabled:
            # GridFTP binds one address: a dual-stack agent runs a second server on the IPv6 one
            for name, address in (("gridftp", s.address), ("gridftp-ipv6", s.address6)):
                if address:
                    out.append(self._gridftp_spec(name, address))
        if "iperf3" in enabled:
            def prep_iperf3() -> list[str]:
                self._runtime("iperf3")
                return self._wrap(configs.iperf3_argv(s))

            rt = self.runtime_dir / "iperf3"
            out.append(ServerSpec("iperf3", s.iperf3_port, s.address, ("iperf3",), prep_iperf3,
                                  rt / "stdout.log", rt))
            if s.address6:  # dual stack: iperf3 -s binds one address; a second server on the IPv6 one
                def prep_iperf3_v6() -> list[str]:
                    self._runtime("iperf3-ipv6")
                    return self._wrap(configs.iperf3_argv(s, s.address6))

                rt6 = self.runtime_dir / "iperf3-ipv6"
                out.append(ServerSpec("iperf3-ipv6", s.iperf3_port, s.address6, ("iperf3",), prep_iperf3_v6,
                                      rt6 / "stdout.log", rt6))
        return out

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def _check(self, spec: ServerSpec) -> str | None:
        for req in spec.requires:
            found = find_library(req) if req.endswith(".so") else shutil.which(req)
            if not found:
                return missing_message(req)
        if spec.name.startswith("xrootd-https"):
            s = self.settings
            if s.tls_cert is None or s.tls_key is None or s.ca_file is None:
                return ("needs tls_cert, tls_key and ca_file: XRootD's HTTP-TPC handler loads only with TLS")
        if spec.name.startswith("gridftp") and self.settings.gsiftp_missing():
            return self.settings.gsiftp_missing()
        if self.run_user:
            try:
                _user_ids(self.run_user)
            except ValueError as e:
                return str(e)
        return None

    async def start(self) -> None:
        self._stopping = False
        self._data_dirs()
        for spec in self.specs():
            server = ManagedServer(spec)
            self.servers[spec.name] = server
            why = self._check(spec)
            if why:
                server.available, server.message = False, why
                log.warning("Server %s is unavailable: %s", spec.name, why)
                continue
            server.task = asyncio.create_task(self._watch(server), name=f"server-{spec.name}")
        waiting = [s for s in self.servers.values() if s.task is not None]
        if waiting:
            await asyncio.wait([asyncio.create_task(s.ready.wait()) for s in waiting], timeout=READY_TIMEOUT)
        for s in waiting:
            if not s.ready.is_set():
                s.message = s.message or f"did not listen on port {s.spec.port} within {READY_TIMEOUT:g} s"
                log.warning("Server %s is not ready: %s", s.spec.name, s.message)

    async def _launch(self, server: ManagedServer) -> None:
        spec = server.spec
        argv = spec.prepare()
        spec.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log_file, "ab") as out:
            server.process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, cwd=spec.cwd,
                env={**os.environ, **spec.env} if spec.env else None, start_new_session=True)
        server.started_at = time.monotonic()
        log.info("Started server %s (pid %d) on port %d", spec.name, server.process.pid, spec.port)

    async def _wait_listening(self, server: ManagedServer) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while server.running and time.monotonic() < deadline:
            if await asyncio.to_thread(port_open, server.spec.host, server.spec.port):
                server.message = None
                server.ready.set()
                return
            await asyncio.sleep(0.1)

    async def _watch(self, server: ManagedServer) -> None:
        spec = server.spec
        while not self._stopping:
            try:
                await self._launch(server)
            except Exception as e:  # a config we could not write, an exec failure
                server.message = f"could not start: {e}"
                log.error("Server %s could not start: %s", spec.name, e)
                server.ready.set()
                await asyncio.sleep(server.backoff)
                server.backoff = min(server.backoff * 2, BACKOFF_MAX)
                continue
            assert server.process is not None
            listening = asyncio.create_task(self._wait_listening(server))
            code = await server.process.wait()
            listening.cancel()
            if self._stopping:
                return
            server.last_exit = code
            server.restarts += 1
            if time.monotonic() - server.started_at > STABLE_AFTER:
                server.backoff = BACKOFF_FIRST
            tail = _reason(spec.diag_logs + (spec.log_file,))
            server.message = f"{exit_description(code)}, restarting (restart {server.restarts})" + (
                f": {tail}" if tail else "")
            if spec.repick is not None and PORT_TAKEN in tail.lower():
                server.spec = spec = spec.repick()
                server.message += f"; moved to port {spec.port}"
            server.last_exit_message = server.message  # kept once the restarted server is up again
            log.warning("Server %s %s; restarting in %.1f s", spec.name, exit_description(code), server.backoff)
            await asyncio.sleep(server.backoff)
            server.backoff = min(server.backoff * 2, BACKOFF_MAX)
            _kill_group(server.process)

    async def stop(self) -> None:
        self._stopping = True
        for server in self.servers.values():
            if server.task is not None:
                server.task.cancel()
        for server in self.servers.values():
            if server.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await server.task
            proc = server.process
            if proc is None:
                continue
            _kill_group(proc, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                _kill_group(proc, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    await proc.wait()
            _kill_group(proc, signal.SIGKILL)  # forked children (gridftp sessions) left in the group
            if server.spec.name.startswith("xrootd-"):  # XRootD leaves /tmp/<program>.<instance>.env behind
                instance = configs.instance_name(server.spec.name, server.spec.port)
                with contextlib.suppress(OSError):
                    (XROOTD_ENV_DIR / f"xrootd.{instance}.env").unlink()
            log.info("Stopped server %s", server.spec.name)
        if self._private_root is not None:
            shutil.rmtree(self._private_root, ignore_errors=True)
            self._private_root = None

    def status(self) -> dict[str, dict]:
        return {name: server.status() for name, server in self.servers.items()}


def exit_description(code: int | None) -> str:
    """How a server ended, naming the signal that killed it: "exited with status -11 (SIGSEGV)"."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"exited with status {code} ({signal.Signals(-code).name})"
    return f"exited with status {code}"


def _kill_group(proc: asyncio.subprocess.Process, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


REASON_WORDS = (("unable", "in use", "denied", "refus", "no such"), ("error", "failed", "fatal"))


PORT_TAKEN = "address already in use"  # how XRootD (and the C library) say a port was taken


def _reason(paths: tuple[Path, ...]) -> str:
    """The last line of the logs that looks like a reason (else the last line), for the status message."""
    for words in REASON_WORDS:
        for path in paths:
            for line in reversed(_tail(path, 4000).splitlines()):
                if any(w in line.lower() for w in words):
                    return line.strip()[-300:]
    for path in paths:
        last = _tail(path).splitlines()
        if last:
            return last[-1].strip()
    return ""


def _tail(path: Path, limit: int = 300) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""

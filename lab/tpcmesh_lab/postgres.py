"""A throw-away PostgreSQL from Debian's server (initdb/pg_ctl into a directory of our own).

Used by the test suite (tests/support/postgres.py), the dashboard benchmark and `tpcmesh-local cluster demo`,
whose dashboard pod reaches it on the lab's host address (`for_cluster`): the chart's bundled StatefulSet needs
a PostgreSQL image from a registry this machine cannot reach, while the server here is already installed.
As root the server runs as the `postgres` user (PostgreSQL refuses root) in a directory that user owns.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def find_pg_bin() -> Path:
    """Debian's PostgreSQL binaries (newest version); /usr/local/bin may hold other copies, so not PATH."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if not candidates:
        raise RuntimeError("Debian postgresql not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    return Path(candidates[-1]).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    datadir: Path
    port: int
    user: str
    run_as: str | None
    bin: Path

    @property
    def url(self) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/postgres"

    def _cmd(self, *args: str) -> list[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        return ["runuser", "-u", self.run_as, "--", *cmd] if self.run_as else cmd

    def psql(self) -> list[str]:
        """psql as the superuser over loopback, stopping at the first error, unaligned rows."""
        return [str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", "postgres",
                "-v", "ON_ERROR_STOP=1", "-qAt"]

    def _run(self, *args: str) -> None:
        r = subprocess.run(self._cmd(*args), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"PostgreSQL's {args[0]} failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")

    def start(self, extra_conf: dict[str, str] | None = None) -> None:
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.datadir.parent}'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "shared_buffers": "128MB",
            "max_connections": "50",
            **(extra_conf or {}),
        }
        self._run("initdb", "-D", str(self.datadir), "-U", self.user, "--auth=trust", "-E", "UTF8", "--no-sync")
        with open(self.datadir / "postgresql.conf", "a") as f:
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())
        log = self.datadir.parent / "postgres.log"
        self._run("pg_ctl", "-D", str(self.datadir), "-l", str(log), "-w", "-t", "60", "start")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"PostgreSQL did not listen on 127.0.0.1:{self.port}; see {log}")

    def stop(self) -> None:
        subprocess.run(self._cmd("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop"),
                       capture_output=True)


def start_postgres(extra_conf: dict[str, str] | None = None) -> tuple[PostgresServer, Path]:
    """Start a throw-away server in a new temp dir (the `postgres` user must reach it: not under root's home);
    returns it and that directory (remove it after stop())."""
    base = Path(tempfile.mkdtemp(prefix="tpcmesh-pg-"))
    run_as = None
    if os.geteuid() == 0:
        run_as = "postgres"
        shutil.chown(base, user="postgres")
    server = PostgresServer(datadir=base / "data", port=free_port(), user="tpcmesh", run_as=run_as,
                            bin=find_pg_bin())
    server.start(extra_conf)
    return server, base


def stop_leftover(pointer: Path) -> None:
    """Stop and remove the server whose directory ``pointer`` names (for_cluster's record), left by a killed
    process."""
    try:
        base = Path(pointer.read_text().strip())
    except OSError:
        return
    if (base / "data" / "postmaster.pid").exists():
        cmd = [str(find_pg_bin() / "pg_ctl"), "-D", str(base / "data"), "-m", "immediate", "-w", "stop"]
        subprocess.run(["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd, capture_output=True)
    if base.name.startswith("tpcmesh-pg-"):
        shutil.rmtree(base, ignore_errors=True)
    pointer.unlink(missing_ok=True)


@dataclass
class ClusterDatabase:
    server: PostgresServer
    base: Path
    url: str  # what the dashboard pod connects to: the lab's host address, with a password

    def close(self) -> None:
        self.server.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def for_cluster(host: str, subnet: str, pointer: Path | None = None, also: Sequence[str] = ()) -> ClusterDatabase:
    """A server the cluster's pods reach on ``host`` (the lab's host address; pods leave their node masqueraded to
    the node's address in ``subnet``, or with their own address in the ranges ``also`` names where the cluster does
    not masquerade), password-protected for those ranges, trust only over loopback. Its directory is written to
    ``pointer`` (for stop_leftover)."""
    server, base = start_postgres({"listen_addresses": f"'127.0.0.1,{host}'"})
    if pointer is not None:
        pointer.write_text(f"{base}\n")
    password = secrets.token_hex(16)
    with open(server.datadir / "pg_hba.conf", "a") as f:
        for cidr in (subnet, *also):
            f.write(f"host all all {cidr} scram-sha-256\n")
    subprocess.run([*server.psql(), "-c", f"ALTER USER {server.user} PASSWORD '{password}'; SELECT pg_reload_conf();"],
                   check=True, capture_output=True)
    return ClusterDatabase(server, base, f"postgres://{server.user}:{password}@{host}:{server.port}/postgres")

"""A real PostgreSQL for the dashboard's tests: Debian's initdb/pg_ctl in a temp dir, on a free loopback port.

`postgres_server` (session) starts one server the first time a test needs the database; pytest-django's
`django_db_modify_db_settings` hook (overridden here) points the test database at it, so every `django_db`
test runs on PostgreSQL. `TPCMESH_TEST_DB=sqlite` keeps Django's configured database instead. As root, the
server runs as the `postgres` user (PostgreSQL refuses root) in a directory that user owns.
`start_postgres()` is also used by dashboard/bench/bench_dashboard.py.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


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
        subprocess.run(self._cmd("initdb", "-D", str(self.datadir), "-U", self.user, "--auth=trust", "-E", "UTF8",
                                 "--no-sync"), check=True, capture_output=True)
        with open(self.datadir / "postgresql.conf", "a") as f:
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())
        log = self.datadir.parent / "postgres.log"
        subprocess.run(self._cmd("pg_ctl", "-D", str(self.datadir), "-l", str(log), "-w", "-t", "60", "start"),
                       check=True, capture_output=True)
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
    """Start a throw-away server; returns it and its temp dir (remove it after stop())."""
    base = Path(tempfile.mkdtemp(prefix="tpcmesh-pg-"))
    run_as = None
    if os.geteuid() == 0:
        run_as = "postgres"
        shutil.chown(base, user="postgres")
    server = PostgresServer(datadir=base / "data", port=free_port(), user="tpcmesh", run_as=run_as,
                            bin=find_pg_bin())
    server.start(extra_conf)
    return server, base


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server, base = start_postgres()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _wants_postgres() -> bool:
    return os.environ.get("TPCMESH_TEST_DB", "postgres") == "postgres"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(request: pytest.FixtureRequest) -> None:
    """Point pytest-django's test database at the session's PostgreSQL, unless TPCMESH_TEST_DB=sqlite."""
    if not _wants_postgres():
        return
    import dj_database_url
    from django.conf import settings
    from django.db import connections

    server = request.getfixturevalue("postgres_server")
    # Settings were loaded (from the environment) before this server existed, and Django's connection handler
    # keeps references to these dicts: update them in place, before the first connection is opened.
    db = settings.DATABASES["default"]
    db.update(dj_database_url.parse(server.url))
    db.setdefault("TEST", {})["NAME"] = "test_tpcmesh"
    # A wrapper made earlier is of the old backend's class: drop it so the next access builds a PostgreSQL one.
    connections.close_all()
    try:
        delattr(connections._connections, "default")
    except AttributeError:
        pass

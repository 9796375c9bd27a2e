"""The real dashboard (gunicorn + Django on the suite's PostgreSQL, a fresh database each) as a process that tests
can stop and start on the same port, to play a dashboard outage. Not a fixture plugin: build one from the
`postgres_server` fixture, e.g. `LiveDashboard(postgres_server, tmp_path).start()`; `token` can ingest."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from tpcmesh_lab.controlplane import stop_process

from tests.support.paths import REPO

DASHBOARD = REPO / "dashboard"
BIN = Path(sys.executable).parent


SEED_NODE_NAMES = ("contract-a", "contract-b")
# in the default cluster (kept across resets: truncating clusters would cascade to the API tokens)
SEED_NODES = ("INSERT INTO results_cluster (name, created) VALUES ('default', now()) ON CONFLICT (name) DO NOTHING; "
              "INSERT INTO results_node (cluster_id, name, site, address, labels, first_seen, last_seen) VALUES "
              + ", ".join(f"((SELECT id FROM results_cluster WHERE name = 'default'), '{n}', '', '', '{{}}', now(), "
                          "now())" for n in SEED_NODE_NAMES))


class LiveDashboard:
    def __init__(self, pg, workdir: Path) -> None:
        self.db = f"op_{uuid.uuid4().hex[:10]}"
        self.pg = pg
        subprocess.run(pg._cmd("createdb", "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user, self.db),
                       check=True, capture_output=True)
        self.env = {**os.environ, "DATABASE_URL": f"postgres://{pg.user}@127.0.0.1:{pg.port}/{self.db}",
                    "DJANGO_SETTINGS_MODULE": "config.settings", "TPCMESH_DASHBOARD_ALLOWED_HOSTS": "127.0.0.1",
                    "TPCMESH_DASHBOARD_SECRET_KEY": secrets.token_urlsafe(50)}
        self.env.pop("TPCMESH_TEST_DB", None)
        self._manage("migrate", "--noinput")
        self.token = self._manage("create_api_token", f"operator-{self.db}", "--write").strip()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = workdir / "dashboard.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _manage(self, *args: str) -> str:
        r = subprocess.run([sys.executable, "manage.py", *args], cwd=DASHBOARD, env=self.env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"manage.py {' '.join(args)}: {r.stderr[-2000:]}"
        return r.stdout

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "gunicorn"), "config.wsgi:application", "-b", f"127.0.0.1:{self.port}", "-w", "1",
                 "--threads", "4", "--access-logfile", "-"],
                cwd=DASHBOARD, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            time.sleep(0.1)
        raise AssertionError(f"dashboard not healthy: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc:
            stop_process(self.proc)
        self.proc = None

    def reset(self) -> None:
        """Forget every stored result (tokens stay): each scenario of a stateful test starts from the same empty
        database, with the same ids, so replaying it gives the same answers. Two nodes stay (SEED_NODE_NAMES), for
        requests that name existing nodes (maintenance windows)."""
        tables = "results_node, results_benchmark, results_run, results_measurement, results_filetransfer, " \
                 "results_pairlatest"
        for attempt in range(3):
            r = subprocess.run(self.pg._cmd("psql", "-h", "127.0.0.1", "-p", str(self.pg.port), "-U", self.pg.user,
                                            "-d", self.db, "-v", "ON_ERROR_STOP=1", "-qc",
                                            f"TRUNCATE {tables} RESTART IDENTITY CASCADE; {SEED_NODES}"),
                               capture_output=True, text=True)
            # the server's background analysis of the last scenario may still hold some of the tables: the
            # TRUNCATE, locking them one by one, can then be a deadlock's victim; it is tried again
            if r.returncode == 0 or "deadlock detected" not in r.stderr or attempt == 2:
                break
        assert r.returncode == 0, f"resetting the dashboard's database: {r.stderr}"

    def measurements(self) -> list[dict]:
        """Every stored measurement (the public read API)."""
        out: list[dict] = []
        url: str | None = f"{self.url}/api/v1/measurements/?limit=1000"
        while url:
            r = httpx.get(url, timeout=10, headers={"Accept": "application/json"})
            r.raise_for_status()
            body = r.json()
            out += body["results"]
            url = body.get("next")
        return out


@contextmanager
def running(pg, workdir: Path) -> Iterator[LiveDashboard]:
    """A started dashboard on a fresh database, stopped at the end (a module fixture's body)."""
    dashboard = LiveDashboard(pg, workdir)
    dashboard.start()
    try:
        yield dashboard
    finally:
        dashboard.stop()

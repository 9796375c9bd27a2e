"""Settings that keep a deployment safe: no secret key, no server (with a message naming the variable); local
host names only unless told; commands that sign nothing (collectstatic in the image build) still run."""

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.paths import REPO
from tests.support.postgres import free_port

pytestmark = pytest.mark.integration
DASHBOARD = REPO / "dashboard"
GUNICORN = Path(sys.executable).parent / "gunicorn"


def dashboard_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPCMESH_DASHBOARD_")}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
               PYTHONPATH=str(DASHBOARD), **extra)
    return env


def gunicorn(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([str(GUNICORN), "config.wsgi", "-b", f"127.0.0.1:{port}", "-w", "1"], cwd=DASHBOARD,
                                env=env, stdout=out, stderr=subprocess.STDOUT)


def test_server_refuses_to_start_without_a_secret_key(tmp_path):
    proc = gunicorn(dashboard_env(tmp_path), free_port(), tmp_path / "gunicorn.log")
    try:
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    log = (tmp_path / "gunicorn.log").read_text()
    assert code != 0 and "TPCMESH_DASHBOARD_SECRET_KEY is not set" in log, log[-3000:]


def test_server_with_a_key_serves_local_host_names_only(tmp_path):
    port = free_port()
    proc = gunicorn(dashboard_env(tmp_path, TPCMESH_DASHBOARD_SECRET_KEY=secrets.token_urlsafe(50)), port,
                    tmp_path / "gunicorn.log")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "gunicorn.log").read_text()[-3000:]
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "dashboard did not answer"
                time.sleep(0.2)
        assert r.status_code == 200
        assert httpx.get(f"http://localhost:{port}/healthz", timeout=5).status_code == 200
        evil = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"Host": "evil.example"}, timeout=5)
        assert evil.status_code == 400  # not in the default ALLOWED_HOSTS
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_commands_that_sign_nothing_run_without_a_key(tmp_path):
    # The image runs collectstatic at build time, with no secret in sight.
    r = subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "--dry-run"], cwd=DASHBOARD,
                       env=dashboard_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("value", ["0", "-3", "six months"])
def test_a_bad_retention_age_is_refused_naming_the_variable(tmp_path, value):
    r = subprocess.run([sys.executable, "manage.py", "prune_archive", "--dry-run"], cwd=DASHBOARD,
                       env=dashboard_env(tmp_path, TPCMESH_DASHBOARD_RETENTION_RAW_DAYS=value),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert f"TPCMESH_DASHBOARD_RETENTION_RAW_DAYS must be a whole number of days, 1 or more, not {value!r}" in r.stderr

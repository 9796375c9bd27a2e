"""Dashboard pods starting together (an upgrade, replicas > 1) migrate one at a time: `manage.py locked migrate`,
what the chart's init container runs, waits for the PostgreSQL advisory lock another holds, then the first applies
every migration and the next finds none left; each migration is booked once. Real PostgreSQL, real manage.py
processes."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import uuid

import psycopg2

from tests.support.paths import REPO

DASHBOARD = REPO / "dashboard"


def test_two_pods_migrate_one_after_the_other(postgres_server):
    pg = postgres_server
    db = f"lock_{uuid.uuid4().hex[:10]}"
    subprocess.run(pg._cmd("createdb", "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user, db), check=True,
                   capture_output=True)
    url = f"postgres://{pg.user}@127.0.0.1:{pg.port}/{db}"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings",
           "TPCMESH_DASHBOARD_SECRET_KEY": secrets.token_urlsafe(50)}
    env.pop("TPCMESH_TEST_DB", None)
    sys.path.insert(0, str(DASHBOARD))
    try:
        from results.management.commands.locked import LOCK_KEY
    finally:
        sys.path.remove(str(DASHBOARD))

    holder = psycopg2.connect(url)
    holder.autocommit = True
    with holder.cursor() as c:
        c.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
    pods = [subprocess.Popen([sys.executable, "manage.py", "locked", "migrate", "--noinput"], cwd=DASHBOARD, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        # both wait for the lock: nothing is migrated while it is held
        deadline = time.monotonic() + 60
        with holder.cursor() as c:
            while True:
                c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                if c.fetchone()[0] == 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            assert c.fetchone()[0] == 2, "both migrate runs should be waiting for the setup lock"
            c.execute("SELECT to_regclass('django_migrations')")
            assert c.fetchone()[0] is None
            c.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
        outs = [p.communicate(timeout=240) for p in pods]
    finally:
        for p in pods:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(pods, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "migrate: waiting for the setup lock (another dashboard pod holds it)" in err, err
    applied = [out.count("... OK") for out, _ in outs]
    assert sorted(applied)[0] == 0 and sorted(applied)[1] > 10, applied  # one applied everything, the other nothing
    assert sum("No migrations to apply." in out for out, _ in outs) == 1
    with holder.cursor() as c:
        c.execute("SELECT app, name, count(*) FROM django_migrations GROUP BY app, name HAVING count(*) > 1")
        assert c.fetchall() == []
        c.execute("SELECT count(*) FROM django_migrations WHERE app = 'results'")
        assert c.fetchone()[0] >= 14
    holder.close()

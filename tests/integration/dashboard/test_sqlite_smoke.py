"""The quick start on SQLite (DATABASE_URL unset -> a SQLite file): migrate, token, ingest, grid, in a
fresh process so the suite's PostgreSQL settings do not apply."""

import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.integration

# a fresh SQLite database, migrated, a write token `key` and a test client `c`
PREAMBLE = r"""
import json, django
django.setup()
from django.core.management import call_command
from django.db import connection
from django.test import Client
from io import StringIO
from tests.support.dashboard import batch, measurement
assert connection.vendor == "sqlite", connection.vendor
call_command("migrate", verbosity=0)
out = StringIO(); call_command("create_api_token", "smoke", "--write", stdout=out)
key = out.getvalue().strip()
c = Client()
"""

SCRIPT = PREAMBLE + r"""
body = json.dumps(batch([measurement("a", "b", files=2), measurement("b", "a", gbps=3)]))
r = c.post("/api/v1/ingest/", body, content_type="application/json", HTTP_AUTHORIZATION="Token " + key)
assert r.status_code == 200 and r.json()["created"] == 2, r.content
r = c.post("/api/v1/ingest/", body, content_type="application/json", HTTP_AUTHORIZATION="Token " + key)
assert r.json()["duplicates"] == 2, r.content
g = c.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=xrootd-https&mode=median&window=1d").json()
assert sorted(x["value"] for x in g["cells"]) == [3, 35], g
# The latest cell only moves forward: an older measurement arriving late leaves it, a newer one replaces it.
from datetime import UTC, datetime, timedelta
now = datetime.now(UTC)
for gbps, finished in [(1, now - timedelta(days=1)), (7, now + timedelta(seconds=5))]:
    late = json.dumps(batch([measurement("b", "a", gbps=gbps, finished=finished)]))
    r = c.post("/api/v1/ingest/", late, content_type="application/json", HTTP_AUTHORIZATION="Token " + key)
    assert r.status_code == 200, r.content
    g = c.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=xrootd-https").json()
    assert {x["source"]: x["value"] for x in g["cells"]} == {"a": 35, "b": 3 if gbps == 1 else 7}, g
# A cell per auth mode (#13): x509, then token on one pair; the grid shows the newest mode unless asked.
for auth, gbps, finished in [("x509", 2, now + timedelta(seconds=6)), ("token", 1, now + timedelta(seconds=7))]:
    m = measurement("a", "b", gbps=gbps, finished=finished)
    m["auth"] = auth
    r = c.post("/api/v1/ingest/", json.dumps(batch([m])), content_type="application/json",
               HTTP_AUTHORIZATION="Token " + key)
    assert r.status_code == 200, r.content
for query, want in [("", {("a", "token"): 1}), ("&auth=x509", {("a", "x509"): 2})]:
    g = c.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=xrootd-https" + query).json()
    assert {(x["source"], x["auth"]): x["value"] for x in g["cells"]} == want, g
assert 'name="auth"' in c.get("/grid/mesh/nightly/?protocol=xrootd-https").content.decode()
assert c.get("/grid/mesh/nightly/").status_code == 200
assert c.get("/pair/a/b/").status_code == 200
# The loss mesh's portable paths (results.loss): ingest once, the grid with its one-way trust rule, the pair's plot.
from tests.support.dashboard import loss_summary
minute = now.replace(second=0, microsecond=0)
loss = json.dumps({"summaries": [loss_summary("a", "b", minute - timedelta(minutes=2), lost=6),
                                 loss_summary("a", "b", minute - timedelta(minutes=1), trusted=False)]})
for want in ({"accepted": 2, "duplicates": 0}, {"accepted": 0, "duplicates": 2}):
    r = c.post("/api/v1/loss/ingest/", loss, content_type="application/json", HTTP_AUTHORIZATION="Token " + key)
    assert r.json() == want, r.content
cells = c.get("/api/v1/loss/grid/?benchmark=mesh/nightly").json()["cells"]
assert [(x["lost"], x["loss_percent"], x["forward_ms"], x["one_way_trusted"]) for x in cells] == [(6, 0.5, None,
                                                                                                    False)], cells
assert 'class="loss-view on"' in c.get("/grid/mesh/nightly/?view=one-way").content.decode()
assert '<canvas id="loss">' in c.get("/pair/a/b/").content.decode()
from results.loss import selectors
from results.models import Benchmark
lossy, measured, _ = selectors.rule_input(Benchmark.objects.get(name="nightly"), now)
assert {k: [p[2] for p in v] for k, v in lossy.items()} == {("a", "b", 4): [6, 0]}, lossy  # the rules' input
print("SMOKE OK")
"""


def run_on_sqlite(tmp_path, script: str) -> str:
    """Run ``script`` (PREAMBLE first) in a fresh process on a SQLite file in ``tmp_path``; its output."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", PYTHONPATH=f"{REPO}:{REPO / 'dashboard'}",
               TPCMESH_DASHBOARD_ALLOWED_HOSTS="testserver",  # the host name Django's test client sends
               TPCMESH_DASHBOARD_SECRET_KEY="smoke-test-key")
    # An explicit SQLite URL keeps the repository's dashboard/db.sqlite3 untouched; the unset default is
    # checked by the next test.
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    p = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_sqlite_quick_start(tmp_path):
    assert "SMOKE OK" in run_on_sqlite(tmp_path, SCRIPT)
    assert (tmp_path / "db.sqlite3").stat().st_size > 0


def test_default_database_is_sqlite_when_database_url_unset(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", PYTHONPATH=f"{REPO / 'dashboard'}")
    code = "import django; django.setup(); from django.conf import settings; d = settings.DATABASES['default'];" \
           "print(d['ENGINE'], d['NAME'])"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    engine, name = p.stdout.split()
    assert engine == "django.db.backends.sqlite3" and name.endswith("dashboard/db.sqlite3")


PRUNE = PREAMBLE + r"""
from datetime import UTC, datetime, timedelta
from results.models import DailyRollup, Measurement
day = datetime.combine(datetime.now(UTC).date() - timedelta(days=400), datetime.min.time(), tzinfo=UTC)
old = [measurement("a", "b", gbps=g, finished=day + timedelta(hours=h)) for g, h in ((1, 1), (3, 2), (8, 3))]
r = c.post("/api/v1/ingest/", json.dumps(batch([*old, measurement("a", "b", gbps=5)])),
           content_type="application/json", HTTP_AUTHORIZATION="Token " + key)
assert r.status_code == 200, r.content
from django.db.models import F
Measurement.objects.update(ingested_at=F("finished_at"))  # delivered when measured, as old rows were
call_command("prune_archive", stdout=StringIO())
assert Measurement.objects.count() == 1  # the three old ones rolled up (Python's percentiles), then removed
(day,) = DailyRollup.objects.values("count", "median", "p10", "p90")
assert day == {"count": 3, "median": 3, "p10": 1.4, "p90": 7.0}, day
# a window across the raw horizon: the rolled-up day (median 3 of 3) and today's raw 5, weighted by their counts
g = c.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=xrootd-https&mode=median&window=3650d").json()
assert [(x["value"], x["count"]) for x in g["cells"]] == [(3, 4)], g
g = c.get("/api/v1/grid/?benchmark=mesh/nightly&protocol=xrootd-https&mode=mean&window=3650d").json()
assert [(x["value"], x["count"]) for x in g["cells"]] == [(17 / 4, 4)], g
print("PRUNE OK")
"""


def test_sqlite_prune_rolls_up_in_python(tmp_path):
    assert "PRUNE OK" in run_on_sqlite(tmp_path, PRUNE)

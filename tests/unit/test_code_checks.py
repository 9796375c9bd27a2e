"""The checks `make lint` runs, and the dashboard's committed migrations, are part of the test suite."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO, VENV_BIN


def run(argv: list[str], cwd=REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240)


def test_ruff_is_clean():
    result = run([str(VENV_BIN / "ruff"), "check", "agent", "operator", "dashboard", "tests"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    result = run([str(VENV_BIN / "mypy"), "agent/tpcmesh_agent", "operator/tpcmesh_operator"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_migrations_are_committed():
    # SQLite in a throwaway file is enough: makemigrations compares models with the migration files.
    result = run([sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"], cwd=REPO / "dashboard")
    assert result.returncode == 0, "models changed without a migration:\n" + result.stdout + result.stderr

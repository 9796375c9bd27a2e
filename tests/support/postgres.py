"""A real PostgreSQL for the dashboard's tests: Debian's initdb/pg_ctl in a temp dir, on a free loopback port.

`postgres_server` (session) starts one server the first time a test needs the database; pytest-django's
`django_db_modify_db_settings` hook (overridden here) points the test database at it, so every `django_db`
test runs on PostgreSQL. `TPCMESH_TEST_DB=sqlite` keeps Django's configured database instead. As root, the
server runs as the `postgres` user (PostgreSQL refuses root) in a directory that user owns.
The server itself is tpcmesh_lab.postgres (the dashboard bench and the cluster demo use it too).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from tpcmesh_lab.postgres import PostgresServer, find_pg_bin, free_port, start_postgres

__all__ = ["PostgresServer", "find_pg_bin", "free_port", "start_postgres"]


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

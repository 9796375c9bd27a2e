"""Running the dashboard's migrations to a given state inside a test (the migration tests): the historical models
of that state come back, and ``latest()`` puts the schema back for the tests after."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(target: list[tuple[str, str]]) -> Any:
    """Migrate to ``target`` ([(app, migration)]); returns the apps registry of that state."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


def latest() -> None:
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

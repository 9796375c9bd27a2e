"""Fixtures of the operator's integration tests."""

from __future__ import annotations

import pytest

from tests.support.live_dashboard import running


@pytest.fixture(scope="module")
def dashboard(postgres_server, tmp_path_factory):
    """The real dashboard for a module's tests (tests stop and start it to play an outage)."""
    with running(postgres_server, tmp_path_factory.mktemp("dashboard")) as d:
        yield d

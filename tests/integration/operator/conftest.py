"""Fixtures of the operator's integration tests."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tpcmesh_operator.run.agents import Agent

from tests.support.live_dashboard import running


@pytest.fixture(scope="module")
def dashboard(postgres_server, tmp_path_factory):
    """The real dashboard for a module's tests (tests stop and start it to play an outage)."""
    with running(postgres_server, tmp_path_factory.mktemp("dashboard")) as d:
        yield d


@pytest.fixture
def shared_token(tmp_path: Path) -> tuple[str, Path]:
    """The agents' control token (and its file): the executor's tests share one across their agents."""
    token = "mesh-" + uuid.uuid4().hex
    f = tmp_path / "token"
    f.write_text(token + "\n")
    return token, f


@pytest.fixture
def mesh(agent_factory, shared_token):
    """start(n, **agent settings) -> (handles, Agents): n real agents on 127.0.1.x sharing the control token."""
    def start(n: int, **settings) -> tuple[list, list[Agent]]:
        handles = [agent_factory(token_file=shared_token[1], **settings) for _ in range(n)]
        agents = [Agent(node=h.name, address=h.address, ports={"control": h.api_port, "builtin": h.builtin_port})
                  for h in handles]
        return handles, agents
    return start

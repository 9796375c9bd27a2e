"""Runs of the operator's executor against one external endpoint, for the external-endpoint tests of each scheme
(test_operator_external.py, _root.py, _gridftp.py): two real agents that trust the endpoint's CA, the endpoint's
credentials in memory, every event kept."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tpcmesh_operator.external.access import StaticCredentials
from tpcmesh_operator.run.agents import Agent, AgentsClient
from tpcmesh_operator.run.executor import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory

FAST = ExecutorOptions(poll_interval=0.1, unreachable_grace=1.0, timeout_grace=5.0, delivery_max_seconds=1.0)
COUNT, SIZE = 2, 1_000_000


def one_endpoint_spec(protocol: str, endpoint: Mapping[str, Any], auth: str = "x509") -> dict[str, Any]:
    """A benchmark of two files of 1 MB over ``protocol`` with the one external endpoint given."""
    return {"protocols": [protocol], "streams": [1], "concurrency": 2, "auth": auth,
            "fileSet": {"count": COUNT, "size": SIZE}, "latency": {"enabled": False},
            "loopback": {"enabled": False}, "timeoutSeconds": 60, "retries": 0, "externalEndpoints": [dict(endpoint)]}


def trusting_mesh(agent_factory: Callable[..., Any], directory: Path, agents_ca_file: Path, protocol: str,
                  ports: Callable[[], Mapping[str, int]], port_key: str, **options: Any) -> tuple[str, list[Agent]]:
    """Two agents measuring ``protocol`` (``ports()`` gives each its server ports; ``port_key`` names the one
    ``protocol`` listens on) whose CA file holds the endpoint's CA beside their own: the mesh's token, its agents.
    ``options`` go to each agent as they are (xrootd_token_issuer: token mode)."""
    token = "mesh-" + uuid.uuid4().hex
    token_file = directory / "token"
    token_file.write_text(token + "\n")
    handles = [agent_factory(protocols=(protocol,), run_user="nobody", token_file=token_file,
                             ca_file=agents_ca_file, **ports(), **options)
               for _ in range(2)]
    return token, [Agent(node=h.name, address=h.address, ports={"control": h.api_port, protocol: h.ports[port_key]})
                   for h in handles]


async def run_external(mesh: tuple[str, list], ca_file: Any, spec: Any, secrets: Mapping[str, Mapping[str, str]],
                       external_ca_file: str, name: str, token_issuer: Any = None) -> tuple[dict, list, RunExecutor]:
    """One run of ``spec`` on the mesh (its token, its agents): the final status, the events, the executor."""
    mesh_token, agents = mesh
    events: list = []
    info = RunInfo("default", name, f"run-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))
    async with AgentsClient(mesh_token, ca_file) as ac:
        ex = RunExecutor(spec, info, StaticDirectory(agents), ac, None, MemoryStatusStore(), options=FAST,
                         on_event=lambda *e: events.append(e), external_credentials=StaticCredentials(secrets),
                         external_ca_file=external_ca_file, token_issuer=token_issuer)
        return await ex.execute(), events, ex


def with_endpoint(st: Mapping[str, Any], endpoint: str) -> list[dict]:
    """The run's measurements from or to ``endpoint``."""
    return [m for m in st["outbox"] if endpoint in (m["source"], m["destination"])]

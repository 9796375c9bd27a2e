"""Runs of the operator's executor against one external endpoint, for the external-endpoint tests of each scheme
(test_operator_external_root.py, test_operator_external_gridftp.py): real agents, the endpoint's credentials in
memory, every event kept."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from tpcmesh_operator.agents import AgentsClient
from tpcmesh_operator.external_io import StaticCredentials
from tpcmesh_operator.runs import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory

FAST = ExecutorOptions(poll_interval=0.1, unreachable_grace=1.0, timeout_grace=5.0, delivery_max_seconds=1.0)
COUNT, SIZE = 2, 1_000_000


def one_endpoint_spec(protocol: str, endpoint: Mapping[str, Any]) -> dict[str, Any]:
    """A benchmark of two files of 1 MB over ``protocol`` with the one external endpoint given."""
    return {"protocols": [protocol], "streams": [1], "concurrency": 2, "auth": "x509",
            "fileSet": {"count": COUNT, "size": SIZE}, "latency": {"enabled": False},
            "loopback": {"enabled": False}, "timeoutSeconds": 60, "retries": 0, "externalEndpoints": [dict(endpoint)]}


async def run_external(mesh: tuple[str, list], ca_file: Any, spec: Any, secrets: Mapping[str, Mapping[str, str]],
                       external_ca_file: str, name: str) -> tuple[dict, list, RunExecutor]:
    """One run of ``spec`` on the mesh (its token, its agents): the final status, the events, the executor."""
    mesh_token, agents = mesh
    events: list = []
    info = RunInfo("default", name, f"run-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))
    async with AgentsClient(mesh_token, ca_file) as ac:
        ex = RunExecutor(spec, info, StaticDirectory(agents), ac, None, MemoryStatusStore(), options=FAST,
                         on_event=lambda *e: events.append(e), external_credentials=StaticCredentials(secrets),
                         external_ca_file=external_ca_file)
        return await ex.execute(), events, ex


def with_endpoint(st: Mapping[str, Any], endpoint: str) -> list[dict]:
    """The run's measurements from or to ``endpoint``."""
    return [m for m in st["outbox"] if endpoint in (m["source"], m["destination"])]

"""The WAN lab with real agents for the lab tests, and a run of the operator's executor against them."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tpcmesh_lab.mesh import Certificates, LocalAgent, start_agents
from tpcmesh_lab.netns import Lab
from tpcmesh_lab.profile import parse_profile
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import AgentsClient
from tpcmesh_operator.run.executor import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory

FAST = ExecutorOptions(poll_interval=0.1, unreachable_grace=1.0, timeout_grace=5.0, delivery_max_seconds=1.0)


@dataclass
class LabMesh:
    lab: Lab
    agents: list[LocalAgent]
    token: str
    certs: Certificates

    def run(self, spec: dict, name: str, events: list | None = None) -> dict:
        """One run of ``spec`` by the executor over every agent; its final status (no dashboard: the outbox)."""
        info = RunInfo("lab", name, f"{name}-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))

        async def go() -> dict:
            async with AgentsClient(self.token, self.certs.ca_file) as ac:
                return await RunExecutor(parse_spec(spec), info, StaticDirectory([a.agent() for a in self.agents]),
                                         ac, None, MemoryStatusStore(), options=FAST,
                                         on_event=None if events is None else lambda *e: events.append(e)).execute()

        return asyncio.run(go())


@contextmanager
def lab_mesh(nodes: list[str], delay_ms: float, state: Path, **agents) -> Iterator[LabMesh]:
    """Namespaces joined by the delay line (``delay_ms`` each way on every link) and an agent in each
    (``agents``: start_agents' options such as family)."""
    profile = parse_profile({"nodes": nodes, "defaultLink": {"delayMs": delay_ms}}, "lab-mesh")
    state.chmod(0o755)
    with Lab(profile, mode="netns") as lab:
        certs = Certificates.create(state / "pki", lab.nodes)
        token = secrets.token_urlsafe(32)
        yield LabMesh(lab, start_agents(lab, certs, token, state, budget_bytes=10**9, **agents), token, certs)

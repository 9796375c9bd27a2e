"""The run executor's ports (run/executor.py): what it is given and what it reports. The protocols its collaborators
implement (status store, agent directory, agents' and results' APIs), the stores and the directory that need no
cluster (memory, a JSON file, a fixed list of agents), and the executor's identity, options and progress record.
Kubernetes-free; kube.py has the cluster's store and directory."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .agents import Agent
from .outbox import STATUS_BUDGET_BYTES


class StatusStore(Protocol):
    async def load(self) -> dict[str, Any] | None: ...
    async def save(self, status: dict[str, Any]) -> None: ...


class AgentDirectory(Protocol):
    async def agents(self) -> Sequence[Agent]: ...


class AgentsAPI(Protocol):
    async def prepare_fileset(self, agent: Agent, request: Mapping[str, Any], timeout: float = ...) -> dict: ...
    async def start_transfer(self, agent: Agent, request: Mapping[str, Any]) -> dict: ...
    async def get_transfer(self, agent: Agent, test_id: str, wait: float = 0.0) -> dict: ...
    async def cancel_transfer(self, agent: Agent, test_id: str) -> dict | None: ...
    async def probe_rtt(self, agent: Agent, host: str, port: int, count: int) -> dict: ...
    async def probe_path(self, agent: Agent, host: str) -> dict: ...
    async def storage_ceilings(self, agent: Agent, request: Mapping[str, Any], timeout: float) -> dict: ...


class ResultsAPI(Protocol):
    async def post_batch(self, batch: Mapping[str, Any]) -> dict: ...


class MemoryStatusStore:
    def __init__(self, status: dict[str, Any] | None = None) -> None:
        self.status = copy.deepcopy(status) if status else None
        self.saves = 0

    async def load(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.status)

    async def save(self, status: dict[str, Any]) -> None:
        self.status = copy.deepcopy(status)
        self.saves += 1


class JsonFileStatusStore:
    """The local mode's store: one JSON file, replaced atomically."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    async def load(self) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        return json.loads(self.path.read_text())

    async def save(self, status: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(status, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


class StaticDirectory:
    """A fixed list of agents; `remove(node)` makes one vanish (tests, local mode when an agent dies)."""

    def __init__(self, agents: Sequence[Agent]) -> None:
        self._agents = {a.node: a for a in agents}

    async def agents(self) -> Sequence[Agent]:
        return list(self._agents.values())

    def remove(self, node: str) -> None:
        self._agents.pop(node, None)

    def add(self, agent: Agent) -> None:
        self._agents[agent.node] = agent


@dataclass(frozen=True)
class RunInfo:
    benchmark_namespace: str
    benchmark_name: str
    run_name: str
    run_uid: str
    benchmark_uid: str | None = None
    scheduled_at: str | None = None
    cluster: str | None = None  # the cluster delivered as (federation); None: the dashboard takes its token's


@dataclass(frozen=True)
class ExecutorOptions:
    poll_interval: float = 1.0
    unreachable_grace: float = 15.0  # how long an agent may not answer before its test fails
    timeout_grace: float = 30.0  # slack on top of the spec's per-transfer timeout
    fileset_timeout: float = 3600.0
    delivery_max_seconds: float = 60.0  # backoff budget at the end of execute(); the rest waits for deliver()
    save_every: float = 0.0  # min seconds between status saves while tests finish (0: after every test)
    status_budget_bytes: int = STATUS_BUDGET_BYTES  # no new test starts while its measurement might not fit
    backlog_retry_seconds: float = 30.0  # each delivery attempt while new tests wait for room


@dataclass
class Progress:
    done: int
    failed: int
    total: int
    round: int
    rounds: int
    gbps: float
    running: list[str] = field(default_factory=list)
    undelivered: int = 0


ProgressCallback = Callable[[Progress], None]
EventCallback = Callable[[str, str, str], None]

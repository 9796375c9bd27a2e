"""Client of the agent control API (HTTPS + bearer token, TLS verified against a CA file) and the Agent record.

The executor only needs `AgentsClient`'s calls (ports.AgentsAPI); errors come as `AgentUnavailable` (cannot reach
it: connection refused, TLS, timeout, 5xx) or `AgentRejected` (the agent answered 4xx; `status` and the JSON body
kept), and `AgentBusy` for 409 (another test is running there).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from .. import protocols
from .httpclient import OwnsHttpClient

# "loss": the agent's TWAMP-light UDP port (its loss_port; RFC 8545's 863), which peers probe
DEFAULT_PORTS: Mapping[str, int] = {"control": 9443, "metrics": 9464, "loss": 863, **protocols.DEFAULT_PORTS}


@dataclass(frozen=True)
class Agent:
    """One agent: its node name (the identity in plans and measurements), address and ports."""

    node: str
    address: str
    ports: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    labels: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None  # pod name in a cluster
    scheme: str = "https"
    annotations: Mapping[str, str] = field(default_factory=dict)  # the node's tpcmesh.io/maintenance-* ones
    address6: str | None = None  # a dual-stack agent's IPv6 address besides its IPv4 `address` (its address6)

    @property
    def families(self) -> frozenset[str]:
        """The address families it can be measured over (the planner's `families`)."""
        return frozenset({"ipv6" if ":" in self.address else "ipv4"} | ({"ipv6"} if self.address6 else set()))

    def host(self, family: str) -> str:
        """Its address in ``family`` (ipv4, ipv6); the planner only pairs agents that have it."""
        if family == "ipv6" and self.address6:
            return self.address6
        return self.address

    @property
    def control_url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{host}:{self.port('control')}"

    def port(self, what: str) -> int:
        return int(self.ports.get(what, DEFAULT_PORTS[what]))

    def to_dict(self) -> dict[str, Any]:
        out = {"node": self.node, "address": self.address, "ports": dict(self.ports), "labels": dict(self.labels),
               "name": self.name, "scheme": self.scheme}
        if self.address6:
            out["address6"] = self.address6
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Agent:
        return cls(node=d["node"], address=d["address"], ports=dict(d.get("ports") or DEFAULT_PORTS),
                   labels=dict(d.get("labels") or {}), name=d.get("name"), scheme=d.get("scheme", "https"),
                   annotations=dict(d.get("annotations") or {}), address6=d.get("address6"))


LOSS_TIMEOUT = 15.0  # the loss probe's calls are small: a pass over many agents must not wait 30 s on one


class AgentError(Exception):
    def __init__(self, agent: Agent, message: str) -> None:
        super().__init__(f"agent {agent.node} ({agent.address}): {message}")
        self.agent = agent
        self.message = message


class AgentUnavailable(AgentError):
    pass


class AgentRejected(AgentError):
    def __init__(self, agent: Agent, status: int, body: Any) -> None:
        err = body.get("error") if isinstance(body, Mapping) else None
        super().__init__(agent, f"HTTP {status}: {err or body}")
        self.status = status
        self.body = body


class AgentBusy(AgentRejected):
    pass


def ssl_context(ca_file: str | Path | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    return ctx


AGENT_MAX_WAIT = 30.0  # the longest ?wait= an agent accepts (tpcmesh_agent.runner.MAX_WAIT)


class AgentsClient(OwnsHttpClient):
    """Async client for every agent (one connection pool). Use as `async with AgentsClient(...) as c`."""

    def __init__(
        self,
        token: str,
        ca_file: str | Path | None = None,
        timeout: float = 30.0,
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        verify: ssl.SSLContext = ssl_context(ca_file)
        if client_cert:
            verify.load_cert_chain(*client_cert)
        self._timeout = timeout
        self._client = httpx.AsyncClient(
            verify=verify,
            timeout=httpx.Timeout(timeout, connect=5.0),
            headers={"Authorization": f"Bearer {token}", "User-Agent": "tpcmesh-operator"},
        )

    async def _call(self, agent: Agent, method: str, path: str, json: Any = None, timeout: float | None = None) -> Any:
        url = agent.control_url + path
        try:
            kw: dict[str, Any] = {"json": json} if json is not None else {}
            if timeout is not None:
                kw["timeout"] = timeout
            r = await self._client.request(method, url, **kw)
        except httpx.HTTPError as e:
            raise AgentUnavailable(agent, f"{method} {path} failed: {type(e).__name__}: {e}") from e
        try:
            body = r.json()
        except ValueError:
            body = r.text[:500]
        if r.status_code == 409:
            raise AgentBusy(agent, r.status_code, body)
        if r.status_code >= 500:
            raise AgentUnavailable(agent, f"{method} {path}: HTTP {r.status_code}: {body}")
        if r.status_code >= 400:
            raise AgentRejected(agent, r.status_code, body)
        return body

    async def info(self, agent: Agent) -> dict[str, Any]:
        return await self._call(agent, "GET", "/api/v1/info")

    async def prepare_fileset(self, agent: Agent, request: Mapping[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        """POST /api/v1/filesets: creates (or verifies) the set; may take long for big sets."""
        return await self._call(agent, "POST", "/api/v1/filesets", dict(request), timeout=timeout)

    async def start_transfer(self, agent: Agent, request: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call(agent, "POST", "/api/v1/transfers", dict(request))

    async def get_transfer(self, agent: Agent, test_id: str, wait: float = 0.0) -> dict[str, Any]:
        """The test's record; with ``wait`` (s) the agent answers when the test ends or that time passes (an agent
        from before ?wait answers at once: callers still pause)."""
        wait = min(max(wait, 0.0), AGENT_MAX_WAIT)
        if not wait:
            return await self._call(agent, "GET", f"/api/v1/transfers/{test_id}")
        return await self._call(agent, "GET", f"/api/v1/transfers/{test_id}?wait={wait:g}",
                                timeout=self._timeout + wait)

    async def cancel_transfer(self, agent: Agent, test_id: str) -> dict[str, Any] | None:
        """DELETE /api/v1/transfers/{id}: the agent stops the test and answers with its record (None: unknown)."""
        try:
            rec = await self._call(agent, "DELETE", f"/api/v1/transfers/{test_id}")
        except AgentRejected:
            return None
        return rec if isinstance(rec, dict) else None

    async def storage_ceilings(self, agent: Agent, request: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """POST /api/v1/storage/ceilings: fio on the agent's disk path ({write_bps, read_bps, ...}, bytes/s)."""
        return await self._call(agent, "POST", "/api/v1/storage/ceilings", dict(request), timeout=timeout)

    async def probe_rtt(self, agent: Agent, host: str, port: int, count: int) -> dict[str, Any]:
        return await self._call(agent, "POST", "/api/v1/probes/rtt", {"host": host, "port": port, "count": count})

    async def host_summary(self, agent: Agent, since: str, until: str, peer: str) -> dict[str, Any]:
        """GET /api/v1/host: the agent's host telemetry from ``since`` to ``until`` (RFC 3339) towards ``peer``."""
        return await self._call(agent, "GET", "/api/v1/host?" + urlencode({"since": since, "until": until,
                                                                             "peer": peer}))

    async def probe_path(self, agent: Agent, host: str) -> dict[str, Any]:
        """The agent traces its path to ``host`` (tracepath; up to a minute when hops do not answer)."""
        return await self._call(agent, "POST", "/api/v1/probes/path", {"host": host}, timeout=90.0)

    async def loss_status(self, agent: Agent) -> dict[str, Any]:
        """GET /api/v1/loss: {running, error, config, ...} of the agent's loss probe."""
        return await self._call(agent, "GET", "/api/v1/loss", timeout=LOSS_TIMEOUT)

    async def configure_loss(self, agent: Agent, config: Mapping[str, Any]) -> dict[str, Any]:
        """PUT /api/v1/loss/config: the whole loss-probe configuration (it replaces the last one)."""
        return await self._call(agent, "PUT", "/api/v1/loss/config", dict(config), timeout=LOSS_TIMEOUT)

    async def loss_summaries(self, agent: Agent, limit: int) -> dict[str, Any]:
        """GET /api/v1/loss/summaries: the oldest unacknowledged summaries (the same again until acknowledged)."""
        return await self._call(agent, "GET", f"/api/v1/loss/summaries?limit={int(limit)}", timeout=LOSS_TIMEOUT)

    async def ack_loss(self, agent: Agent, through: int) -> dict[str, Any]:
        """POST /api/v1/loss/summaries/ack: the agent forgets every summary up to id `through`."""
        return await self._call(agent, "POST", "/api/v1/loss/summaries/ack", {"through": through},
                                timeout=LOSS_TIMEOUT)

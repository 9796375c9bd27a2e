"""A pair's probe test (the `rtt` setting): the TCP-connect RTT the destination measures to the source and, with
spec.latency.path, the path the source traces to the destination (tracepath), as one measurement row. Moved out of
run/executor.py, which schedules tests; this module runs one probe test."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ..plan.planner import Test
from .agents import Agent, AgentRejected, AgentUnavailable
from .measurements import rtt_measurement


class ProbeAPI(Protocol):
    async def probe_rtt(self, agent: Agent, host: str, port: int, count: int) -> dict: ...
    async def probe_path(self, agent: Agent, host: str) -> dict: ...


async def probe_pair(agents: ProbeAPI, src: Agent, dst: Agent, test: Test, tid: str, started: str,
                     count: int, trace: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(measurement, the RTT probe's answer). An agent that does not answer makes a failed row (or a path with its
    error), never an exception. Both probes run at once: the round gives this pair both agents."""
    family = test.setting.family  # the addresses of the test's IP version
    rtt, path = await asyncio.gather(_rtt(agents, src, dst, count, family),
                                     _path(agents, src, dst, family) if trace else _nothing())
    return rtt_measurement(tid, test, rtt, started, path), rtt


async def _rtt(agents: ProbeAPI, src: Agent, dst: Agent, count: int, family: str) -> dict[str, Any]:
    try:
        return await agents.probe_rtt(dst, src.host(family), src.port("control"), count)
    except (AgentUnavailable, AgentRejected) as e:
        return {"error": e.message}


async def _path(agents: ProbeAPI, src: Agent, dst: Agent, family: str) -> dict[str, Any]:
    try:
        return await agents.probe_path(src, dst.host(family))
    except (AgentUnavailable, AgentRejected) as e:
        return {"hops": [], "error": f"path probe on {src.node}: {e.message}"}


async def _nothing() -> None:
    return None

"""A pair's probe test (the `rtt` setting): the TCP-connect RTT the destination measures to the source, as a
measurement row. Moved out of runs.py, which schedules tests; this module runs one probe test."""

from __future__ import annotations

from typing import Any, Protocol

from .agents import Agent, AgentRejected, AgentUnavailable
from .measurements import rtt_measurement
from .planner import Test


class ProbeAPI(Protocol):
    async def probe_rtt(self, agent: Agent, host: str, port: int, count: int) -> dict: ...


async def probe_pair(agents: ProbeAPI, src: Agent, dst: Agent, test: Test, tid: str, started: str,
                     count: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(measurement, the RTT probe's answer). An agent that does not answer makes a failed row, never an error."""
    try:
        probe = await agents.probe_rtt(dst, src.address, src.port("control"), count)
    except (AgentUnavailable, AgentRejected) as e:
        probe = {"error": e.message}
    return rtt_measurement(tid, test, probe, started), probe

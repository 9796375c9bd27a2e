"""The source's host telemetry on a measurement: the destination agent's record carries ``host.destination`` (its
own node during the test); the source only served, so the executor asks the source agent for its summary of the
same window after the test (GET /api/v1/host, the agent's hosttelemetry.py) and adds it as ``host.source``.

Telemetry is never worth a test: an agent that keeps none (host_sample_interval 0, an agent from before it: 404),
cannot be reached or answers something else leaves the measurement without ``host.source``, and says why in an
INFO line."""

from __future__ import annotations

import logging
from typing import Any

from .agents import Agent, AgentError

log = logging.getLogger(__name__)


async def add_source_host(agents: Any, source: Agent, peer: str, m: dict[str, Any]) -> None:
    """Put the ``source`` agent's host summary over ``m``'s window (started_at to finished_at) into
    ``m["host"]["source"]``; ``peer``: the destination's address the test used (its route names the source's
    interface). ``agents``: the executor's agents client (AgentsClient.host_summary; a client without it is
    skipped)."""
    ask = getattr(agents, "host_summary", None)
    if ask is None or not m.get("started_at") or not m.get("finished_at"):
        return
    try:
        summary = await ask(source, m["started_at"], m["finished_at"], peer)
    except AgentError as e:
        log.info("Measurement %s has no host telemetry of its source: %s", m.get("id"), e)
        return
    if not isinstance(summary, dict):
        log.info("Measurement %s has no host telemetry of its source: agent %s answered %.200r", m.get("id"),
                 source.node, summary)
        return
    m["host"] = {**(m.get("host") or {}), "source": summary}

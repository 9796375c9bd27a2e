"""Prometheus metrics of the agent (tpcmesh_agent_*; base units; bounded labels)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

disable_created_metrics()  # no *_created series: they double the scrape for nothing

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _ServersCollector(Collector):
    def __init__(self, status: Callable[[], dict]) -> None:
        self.status = status

    def collect(self) -> Iterable[GaugeMetricFamily]:
        g = GaugeMetricFamily("tpcmesh_agent_server_up", "1 when the protocol server is running, else 0",
                              labels=["server"])
        for name, st in sorted(self.status().items()):
            g.add_metric([name], 1.0 if st.get("running") else 0.0)
        yield g


class AgentMetrics:
    def __init__(self, server_status: Callable[[], dict]) -> None:
        self.registry = CollectorRegistry()
        self.bytes = Counter("tpcmesh_agent_bytes", "Bytes received by the agent's movers", ["protocol"],
                             registry=self.registry)
        self.transfers = Counter("tpcmesh_agent_transfers", "Transfer tests finished, by protocol and status",
                                 ["protocol", "status"], registry=self.registry)
        self.active = Gauge("tpcmesh_agent_active_transfers", "Transfer tests running now", registry=self.registry)
        self.registry.register(_ServersCollector(server_status))

    def render(self) -> bytes:
        return generate_latest(self.registry)

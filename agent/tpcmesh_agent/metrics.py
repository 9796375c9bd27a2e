"""Prometheus metrics of the agent (tpcmesh_agent_*; base units; bounded labels)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

disable_created_metrics()  # no *_created series: they double the scrape for nothing

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FAMILIES = {4: "ipv4", 6: "ipv6"}  # a summary's family -> the `family` label (the operator's names)


class _ServersCollector(Collector):
    def __init__(self, status: Callable[[], dict]) -> None:
        self.status = status

    def collect(self) -> Iterable[GaugeMetricFamily]:
        g = GaugeMetricFamily("tpcmesh_agent_server_up", "1 when the protocol server is running, else 0",
                              labels=["server"])
        for name, st in sorted(self.status().items()):
            g.add_metric([name], 1.0 if st.get("running") else 0.0)
        yield g


class _LossCollector(Collector):
    """The loss probes' figures per peer (the peer's node name: bounded by the mesh) from the finished periods."""

    def __init__(self, probe: Callable[[], object | None]) -> None:
        self.probe = probe

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        probe: Any = self.probe()
        if probe is None:
            return
        sent = CounterMetricFamily("tpcmesh_agent_loss_packets_sent", "Test packets sent to a peer (finished "
                                   "periods)", labels=["peer", "family"])
        lost = CounterMetricFamily("tpcmesh_agent_loss_packets_lost", "Test packets to a peer without a reply "
                                   "(round trip)", labels=["peer", "family"])
        for (peer, family), t in sorted(probe.totals.items()):
            sent.add_metric([peer, FAMILIES[family]], t["sent"])
            lost.add_metric([peer, FAMILIES[family]], t["lost"])
        ratio = GaugeMetricFamily("tpcmesh_agent_loss_ratio", "Round-trip loss of the last period (0-1)",
                                  labels=["peer", "family"])
        rtt = GaugeMetricFamily("tpcmesh_agent_loss_rtt_seconds", "RTT of the last period's test packets",
                                labels=["peer", "family", "statistic"])
        jitter = GaugeMetricFamily("tpcmesh_agent_loss_ipdv_seconds", "Median |IPDV| (RFC 3393) of the last "
                                   "period", labels=["peer", "family", "direction"])
        one_way = GaugeMetricFamily("tpcmesh_agent_loss_one_way_delay_seconds", "Median one-way delay of the last "
                                    "period, only while both clocks are synchronised",
                                    labels=["peer", "family", "direction"])
        for (peer, number), r in sorted(probe.latest.items()):
            family = FAMILIES[number]
            if r["sent"]:
                ratio.add_metric([peer, family], r["lost"] / r["sent"])
            for stat, value in (r["rtt_ms"] or {}).items():
                rtt.add_metric([peer, family, stat], value / 1000)
            for direction in ("forward", "backward"):
                if r["ipdv_ms"][direction]:
                    jitter.add_metric([peer, family, direction], r["ipdv_ms"][direction]["median_abs"] / 1000)
                if r["one_way_ms"]["trusted"] and r["one_way_ms"][direction]:
                    one_way.add_metric([peer, family, direction], r["one_way_ms"][direction]["median"] / 1000)
        dropped = CounterMetricFamily("tpcmesh_agent_loss_reflector_dropped", "Packets the reflector did not "
                                      "answer, by reason", labels=["reason"])
        for reason in ("not_allowed", "malformed", "too_short"):
            dropped.add_metric([reason], sum(r.counters[reason] for r in probe.reflectors))
        pending = GaugeMetricFamily("tpcmesh_agent_loss_summaries_pending", "Summaries waiting for a collector")
        pending.add_metric([], len(probe.outbox))
        yield from (sent, lost, ratio, rtt, jitter, one_way, dropped, pending)


class AgentMetrics:
    def __init__(self, server_status: Callable[[], dict], loss_probe: Callable[[], object | None] = lambda: None
                 ) -> None:
        self.registry = CollectorRegistry()
        self.bytes = Counter("tpcmesh_agent_bytes", "Bytes received by the agent's movers", ["protocol"],
                             registry=self.registry)
        self.transfers = Counter("tpcmesh_agent_transfers", "Transfer tests finished, by protocol and status",
                                 ["protocol", "status"], registry=self.registry)
        self.active = Gauge("tpcmesh_agent_active_transfers", "Transfer tests running now", registry=self.registry)
        self.registry.register(_ServersCollector(server_status))
        self.registry.register(_LossCollector(loss_probe))

    def render(self) -> bytes:
        return generate_latest(self.registry)

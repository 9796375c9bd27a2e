"""The pair page's lines of host telemetry and of why TCP waited (results.hosts): figures, and nothing guessed."""

from __future__ import annotations

from results import hosts


def test_an_end_line_names_the_busy_core_the_drops_and_the_busiest_own_program():
    end = {"cpu": {"busiest_core_pct": 99.6, "busiest_core_softirq_pct": 62.0, "saturated_pct": 91.0},
           "interface": {"name": "eth0", "rx_dropped": 3, "tx_dropped": 0, "rx_errors": 1, "tx_errors": None,
                         "driver": {"rx_missed_errors": 2}},
           "processes": {"agent": {"cpu_pct": 4.0}, "iperf3": {"cpu_pct": 97.5}}}
    assert hosts.end_line(end) == ("busiest core 100 % (softirq 62 %), saturated 91 % of the time, "
                                   "6 drops/errors on eth0, iperf3 98 %")
    calm = {"cpu": {"busiest_core_pct": 20.0, "busiest_core_softirq_pct": None, "saturated_pct": 0.0},
            "interface": {"name": "lo", "rx_dropped": 0, "driver": None}, "processes": {}}
    assert hosts.end_line(calm) == "busiest core 20 % (softirq ?), 0 drops/errors on lo"
    assert hosts.end_line(None) == "" and hosts.end_details(None) == ""


def test_why_tcp_waited_is_said_only_when_the_sender_was_seen():
    tcp = {"sender": {"busy_ms": 2500.0, "rwnd_limited_fraction": 0.873, "sndbuf_limited_fraction": None}}
    assert hosts.waited(tcp) == "receive window 87 %, send buffer ? of 2.5 s busy"
    assert hosts.waited({"sender": None, "receiver": {"busy_ms": 0.0}}) == ""  # XRootD's receiver view: unknown
    assert hosts.waited(None) == ""
    shown = hosts.view({"destination": {"limits": {"tcp_rmem_max_bytes": 33554432, "mtu": 1500}}}, tcp)
    assert [e[0] for e in shown["ends"]] == ["dst"]
    assert "tcp_rmem max 33.6 MB" in shown["ends"][0][2] and "MTU 1500" in shown["ends"][0][2]

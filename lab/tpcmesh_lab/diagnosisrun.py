"""`make bench-diagnosis`, first form: the injection plan (``diagnosisbench.plan``) run in the WAN lab with iperf3
alone, each test labelled by the limit model and scored.

Until the agents carry host telemetry (#26), the figures the model needs are read where the lab holds them, the
same places the telemetry will read: each namespace's tcp_rmem/tcp_wmem maxima, the kernel release, the sender's
retransmits and cwnd from iperf3's own JSON (segments sent ≈ bytes ÷ MSS, so p is not understated), the pair's RTT
from the profile, the path as the pair's 8-stream iperf3, and a quota'd node's CPU as the share of periods its
cgroup was throttled in. A core's busy share is not used: every lab node shares this machine's cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .diagnosisbench import CAUSES, Plan, ScoredTest, plan, score
from .netns import MTU, Lab
from .profile import parse_profile

IPERF3_PORT = "5321"
DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "dashboard"


def _iperf3(lab: Lab, test: ScoredTest, seconds: float) -> dict[str, Any]:
    src = lab.node(test.source)
    server = lab.popen(src, ["iperf3", "-s", "-1", "-J", "-B", src.address, "-p", IPERF3_PORT],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        argv = ["iperf3", "-c", src.address, "-p", IPERF3_PORT, "-R", "-P", str(test.streams), "-t", f"{seconds:g}",
                "-O", "2", "-J", "--get-server-output"]
        if test.cause.congestion_control:
            argv += ["-C", test.cause.congestion_control]
        deadline = time.monotonic() + 30  # a CPU-starved node's server takes seconds to listen
        while True:
            out = lab.run(test.destination, argv, capture_output=True, text=True, timeout=seconds + 60)
            data = json.loads(out.stdout or "{}")
            if "unable to connect" not in str(data.get("error")) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if "error" in data or "end" not in data:
            raise RuntimeError(f"iperf3 {test.source} -> {test.destination} failed: {data.get('error') or out.stderr}")
        return data
    finally:
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


def _throttled(lab: Lab, node: str) -> tuple[int, int] | None:
    group = lab.node(node).cpu_group
    if group is None:
        return None
    stat = dict(line.split() for line in (group.path / "cpu.stat").read_text().splitlines())
    return int(stat.get("nr_periods", 0)), int(stat.get("nr_throttled", 0))


def measure(lab: Lab, p: Plan, seconds: float, build: Callable[..., Any]) -> list[tuple[ScoredTest, Any]]:
    """Each scored test with ``build(...)``'s result. The pair's path figure is its highest iperf3 rate: the delay
    line is a user-space process on a shared machine, so its ceiling moves with the load, and an 8-stream run
    sometimes got less than the 1-stream run beside it (3.2 against 4.6 Gbit/s seen)."""
    kernel = os.uname().release
    results: list[tuple[ScoredTest, Any]] = []
    figures: list[tuple[ScoredTest, dict[str, Any]]] = []
    path: dict[tuple[str, str], tuple[float, int]] = {}
    for test in sorted(p.tests, key=lambda t: (t.source, t.destination, -t.streams)):
        pair = (test.source, test.destination)
        if test.cause.congestion_control and pair not in path:
            # As in the product, the path is iperf3 with the node's own congestion control (bbr here), not the
            # scored test's: a cubic test over a lossy link would otherwise be its own path figure, and its rate
            # ties "network-capacity" with its Mathis bound.
            own = replace(test, cause=replace(test.cause, congestion_control=None),
                          streams=max(t.streams for t in p.tests))
            path[pair] = (float(_iperf3(lab, own, seconds)["end"]["sum_received"]["bits_per_second"]) / 1e9,
                          own.streams)
        before = {n: _throttled(lab, n) for n in (test.source, test.destination)}
        data = _iperf3(lab, test, seconds)
        quota_used = {}
        for n, b in before.items():
            after = _throttled(lab, n)
            if b is not None and after is not None and after[0] > b[0]:
                quota_used[n] = 100.0 * (after[1] - b[1]) / (after[0] - b[0])
        gbps = float(data["end"]["sum_received"]["bits_per_second"]) / 1e9
        print(f"{test.cause.name}: {test.source} -> {test.destination}, {test.streams} streams: {gbps:.3f} Gbit/s",
              file=sys.stderr, flush=True)
        if gbps > path.get(pair, (0.0, 0))[0]:
            path[pair] = (gbps, test.streams)
        server_end = (data.get("server_output_json") or {}).get("end") or {}
        senders = [s.get("sender") or {} for s in server_end.get("streams") or []]
        sum_sent = data["end"].get("sum_sent") or {}
        sent_bytes = float(sum_sent.get("bytes") or 0)
        retransmits = sum(int(s.get("retransmits") or 0) for s in senders) if senders else sum_sent.get("retransmits")
        figures.append((test, dict(
            test=test, gbps=gbps, kernel=kernel, rtt_ms=lab.profile.rtt_ms(test.source, test.destination),
            src_limits=lab.node(test.source).sysctls, dst_limits=lab.node(test.destination).sysctls,
            congestion=server_end.get("sender_tcp_congestion") or test.cause.congestion_control,
            retransmits=retransmits,
            cwnd_max=max((int(s.get("max_snd_cwnd") or 0) for s in senders), default=0) or None,
            segments=int(sent_bytes / (MTU - 52)) or None, mss=MTU - 52,
            quota_used=quota_used)))
    for test, figure in figures:
        results.append((test, build(**figure, path=path[(test.source, test.destination)])))
    return results


def labelled(lab: Lab, p: Plan, seconds: float) -> list[tuple[ScoredTest, Any]]:
    """Each scored test with the limit model's diagnosis (results.diagnosis.limits, from the dashboard's tree)."""
    if str(DASHBOARD_DIR) not in sys.path:
        sys.path.insert(0, str(DASHBOARD_DIR))
    from results.diagnosis.limits import Host, Measurement, PathCapacity, Tcp, diagnose

    def build(*, test, gbps, kernel, rtt_ms, src_limits, dst_limits, congestion, retransmits, cwnd_max, segments,
              mss, quota_used, path):
        src = Host(name=test.source, kernel=kernel, tcp_wmem_max=src_limits.get("net.ipv4.tcp_wmem", [0, 0, None])[2],
                   congestion_control=congestion, mtu=MTU, cpu_throttled_percent=quota_used.get(test.source))
        dst = Host(name=test.destination, kernel=kernel,
                   tcp_rmem_max=dst_limits.get("net.ipv4.tcp_rmem", [0, 0, None])[2],
                   cpu_throttled_percent=quota_used.get(test.destination))
        return diagnose(Measurement(gbps=gbps, protocol="iperf3", streams=test.streams, rtt_ms=rtt_ms, source=src,
                                    destination=dst, path=PathCapacity(*path),
                                    tcp=Tcp(cwnd_max_bytes=cwnd_max, mss_bytes=mss, retransmits=retransmits,
                                            data_segs_out=segments)))

    for node, cores in p.quotas.items():
        group = lab.node(node).cpu_group
        assert group is not None, f"{node} has no CPU group"
        group.set_quota(cores)
    return measure(lab, p, seconds, build)


def main(pairs: int = 2, seconds: float = 4.0, only: str = "") -> int:
    p = plan([c for c in CAUSES if only.lower() in c.name.lower()] or CAUSES, pairs_per_cause=pairs)
    with Lab(parse_profile(p.profile, "bench-diagnosis"), mode="netns") as lab:
        rows = labelled(lab, p, seconds)
    for test, d in rows:
        print(f"{test.cause.name:42} {test.source:>10} -> {test.destination:<10} {test.streams} st  "
              f"{d.limit:16} {d.reason}")
    print("\n".join(score((t, d.limit) for t, d in rows).table()))
    return 0

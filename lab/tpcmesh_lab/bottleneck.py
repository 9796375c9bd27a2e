"""Round policies against a shared uplink, in the WAN lab (the lab test and `make bench-fidelity` share this).

Site A's two nodes reach the world through one shaped uplink (the profile's ``uplinks``) while every pair also has
its own link of the same rate. Three pairs (a1 -> b1, a2 -> b2, c1 -> d1; sites a, b, c, d) are planned by the real
planner under each round policy and each round's tests run at once, as the operator runs them (iperf3 from the
source to the destination, one stream). The serial plan measures each pair alone: its solo rate. A policy is true to
the pair when each test's rate stays near that solo rate; nodeExclusive puts both site-A tests in one round, where
they share the uplink and measure each other.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass

from tpcmesh_operator.plan.planner import plan
from tpcmesh_operator.plan.spec import parse_spec

from .mesh import MeshError
from .netns import Lab
from .profile import WanProfile, parse_profile

POLICIES = ("serial", "siteExclusive", "nodeExclusive")
SITE_LABEL = "topology.kubernetes.io/zone"
PAIRS = (("a1", "b1"), ("a2", "b2"), ("c1", "d1"))
IPERF3_PORT = "5302"


@dataclass(frozen=True)
class Measured:
    policy: str
    round: int
    source: str
    destination: str
    concurrent: int  # tests in its round
    gbps: float


def profile(rate_mbit: float = 200, delay_ms: float = 2) -> WanProfile:
    """Every pair a link of ``rate_mbit``; site A's nodes share one uplink of the same rate."""
    nodes = sorted({n for pair in PAIRS for n in pair})
    return parse_profile({
        "nodes": nodes, "defaultLink": {"delayMs": delay_ms, "rateMbit": rate_mbit},
        "uplinks": [{"name": "site-a", "nodes": ["a1", "a2"], "rateMbit": rate_mbit}],
    }, "shared-uplink")


def rounds(policy: str) -> list[list[tuple[str, str]]]:
    """The real planner's rounds of PAIRS under ``policy`` (sites from the zone label: the node name's letter)."""
    spec = parse_spec({"protocols": ["iperf3"], "streams": [1], "latency": False, "loopback": {"enabled": False},
                       "roundPolicy": policy, "pairs": {"mode": "explicit", "explicit": [
                           {"source": s, "destination": d} for s, d in PAIRS]}})
    labels = {n: {SITE_LABEL: n[0]} for pair in PAIRS for n in pair}
    return [[(t.source, t.destination) for t in r] for r in plan(labels, spec).rounds()]


def run_round(lab: Lab, tests: list[tuple[str, str]], seconds: float) -> dict[tuple[str, str], float]:
    """Each test's Gbit/s, all at once: an iperf3 server on each source, each destination's client receiving (-R)."""
    servers = [lab.popen(s, ["iperf3", "-s", "-1", "-B", lab.node(s).address, "-p", IPERF3_PORT],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for s, _ in tests]
    try:
        time.sleep(0.5)
        clients = {(s, d): lab.popen(d, ["iperf3", "-c", lab.node(s).address, "-p", IPERF3_PORT, "-R", "-t",
                                         f"{seconds:g}", "-O", "1", "-J"], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True) for s, d in tests}
        out: dict[tuple[str, str], float] = {}
        for pair, proc in clients.items():
            stdout, stderr = proc.communicate(timeout=seconds + 60)
            try:
                data = json.loads(stdout)
            except ValueError:
                raise MeshError(f"iperf3 {pair[0]} -> {pair[1]} gave no JSON: {stderr.strip()[:300]}") from None
            if "error" in data:
                raise MeshError(f"iperf3 {pair[0]} -> {pair[1]} failed: {data['error']}")
            out[pair] = float(data["end"]["sum_received"]["bits_per_second"]) / 1e9
        return out
    finally:
        for server in servers:
            if server.poll() is None:
                server.kill()
                server.wait(10)


def run_policies(lab: Lab, seconds: float) -> list[Measured]:
    rows: list[Measured] = []
    for policy in POLICIES:
        for k, tests in enumerate(rounds(policy)):
            for (s, d), gbps in run_round(lab, tests, seconds).items():
                rows.append(Measured(policy, k, s, d, len(tests), gbps))
    return rows


def ratios_to_solo(rows: list[Measured]) -> dict[str, dict[tuple[str, str], float]]:
    """Per policy, each pair's rate over its solo (serial) rate."""
    solo = {(r.source, r.destination): r.gbps for r in rows if r.policy == "serial"}
    out: dict[str, dict[tuple[str, str], float]] = {}
    for r in rows:
        out.setdefault(r.policy, {})[(r.source, r.destination)] = r.gbps / solo[(r.source, r.destination)]
    return out


def table(rows: list[Measured]) -> list[str]:
    """Markdown rows: policy, rounds, each pair's round, concurrency, Mbit/s and share of its solo rate."""
    ratio = ratios_to_solo(rows)
    lines = ["| policy | rounds | pair | round | tests in its round | Mbit/s | / solo |",
             "|---|---|---|---|---|---|---|"]
    for policy in POLICIES:
        mine = [r for r in rows if r.policy == policy]
        count = len({r.round for r in mine})
        for r in sorted(mine, key=lambda r: (r.source, r.destination)):
            lines.append(f"| {policy} | {count} | {r.source} -> {r.destination} | {r.round + 1} | {r.concurrent} | "
                         f"{r.gbps * 1000:.0f} | {ratio[policy][(r.source, r.destination)]:.2f} |")
    return lines

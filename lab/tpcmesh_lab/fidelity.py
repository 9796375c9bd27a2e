"""`make bench-fidelity`: is the emulated WAN link believable, and do the agents measure it right?

On one lab link (the shipped ``fidelity`` profile: 500 Mbit/s, 20 ms each way) it runs, alternately and several
times, iperf3 (4 streams, far -> near) and the built-in mover through two real agents (4 files at once, 1 stream
each, far -> near into a sink), and the agents' RTT probe. Pass: the mover's wall-clock throughput within +-10 % of
iperf3's, and the probe's median RTT within 10 % of the profile. Then the shared-bottleneck case
(local/bottleneck.py): the round policies' plans run on a lab where site A's nodes share one shaped uplink; pass:
siteExclusive keeps every pair within 15 % of its solo (serial) rate. Results replace the ``bench-fidelity``
section of BENCHMARKS.md.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import secrets
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from tpcmesh_operator.run.agents import DEFAULT_PORTS

from . import bottleneck
from .mesh import Certificates, MeshError, start_agents
from .netns import Lab, LabError, netns_unavailable_reason
from .profile import load_profile, parse_profile
from .report import utc_minute, write_section

log = logging.getLogger("tpcmesh.local.fidelity")
SECTION = "bench-fidelity"
FILES = {"count": 4, "size": 128_000_000}
REPEATS = 3


def iperf3(lab: Lab, seconds: float, streams: int = 4) -> float:
    """Gbit/s received, far -> near."""
    near, far = lab.nodes[0], lab.nodes[1]
    port = "5301"
    server = lab.popen(far, ["iperf3", "-s", "-1", "-B", far.address, "-p", port], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = lab.run(near, ["iperf3", "-c", far.address, "-p", port, "-R", "-P", str(streams), "-t", str(seconds),
                             "-O", "2", "-J"], capture_output=True, text=True, timeout=seconds + 60)
        data = json.loads(out.stdout)
        if "error" in data:
            raise MeshError(f"iperf3 failed: {data['error']}")
        return float(data["end"]["sum_received"]["bits_per_second"]) / 1e9
    finally:
        if server.poll() is None:
            server.wait(10)


def main(output: Path | None = None, seconds: float = 8.0) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    problem = netns_unavailable_reason()
    if problem:
        print(f"bench-fidelity needs the WAN lab (root, ip netns, /dev/net/tun): {problem}", file=sys.stderr)
        return 1
    profile = load_profile("fidelity")
    link = profile.link("near", "far")
    want_rtt = profile.rtt_ms("near", "far")
    state = Path(tempfile.mkdtemp(prefix="tpcmesh-fidelity-"))
    os.chmod(state, 0o755)
    rows: list[dict] = []
    probes: list[float] = []
    try:
        with Lab(profile, mode="netns") as lab:
            certs = Certificates.create(state / "pki", lab.nodes)
            token = secrets.token_urlsafe(32)
            start_agents(lab, certs, token, state, budget_bytes=4 * 10**9, protocols=("builtin",))
            near, far = lab.nodes[0], lab.nodes[1]
            ctx = ssl.create_default_context(cafile=str(certs.ca_file))
            api = {n.name: f"https://{n.address}:{DEFAULT_PORTS['control']}" for n in lab.nodes}
            with httpx.Client(verify=ctx, timeout=600, headers={"Authorization": f"Bearer {token}"}) as c:
                for n in (near, far):
                    r = c.post(api[n.name] + "/api/v1/filesets", json=FILES)
                    r.raise_for_status()
                for i in range(REPEATS):
                    ip_gbps = iperf3(lab, seconds)
                    tid = str(uuid.uuid4())
                    r = c.post(api["near"] + "/api/v1/transfers", json={
                        "test_id": tid, "protocol": "builtin",
                        "source": {"host": far.address, "port": DEFAULT_PORTS["builtin"]},
                        "file_set": FILES, "concurrency": 4, "streams": 1, "timeout_seconds": 300,
                        "destination": "sink"})
                    r.raise_for_status()
                    while (rec := c.get(api["near"] + f"/api/v1/transfers/{tid}").json())["status"] == "running":
                        time.sleep(0.2)
                    if rec["status"] != "succeeded":
                        raise MeshError(f"the built-in transfer failed: {rec.get('error')}")
                    probe = c.post(api["near"] + "/api/v1/probes/rtt",
                                   json={"host": far.address, "port": DEFAULT_PORTS["control"], "count": 10}).json()
                    if probe.get("error"):
                        raise MeshError(f"the RTT probe failed: {probe['error']}")
                    probes.append(probe["median_ms"])
                    rows.append({"iperf3": ip_gbps, "builtin": rec["aggregate_gbps"],
                                 "builtin_paper": rec.get("throughput_gbps"), "probe": probe["median_ms"]})
                    log.info("Repeat %d: iperf3 %.3f Gbit/s, builtin %.3f Gbit/s, probe RTT %.2f ms", i + 1,
                             ip_gbps, rec["aggregate_gbps"], probe["median_ms"])
        # The delay line's own capacity: one TCP stream over an unlimited 0.1 ms link.
        with Lab(parse_profile({"nodes": ["near", "far"], "defaultLink": {"delayMs": 0.1}}, "capacity"),
                 mode="netns") as lab:
            capacity = iperf3(lab, 5, streams=1)
        with Lab(bottleneck.profile(), mode="netns") as lab:
            shared = bottleneck.run_policies(lab, seconds)
    except (LabError, MeshError, httpx.HTTPError) as e:
        print(f"bench-fidelity: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(state, ignore_errors=True)
    ip = statistics.median(row["iperf3"] for row in rows)
    bi = statistics.median(row["builtin"] for row in rows)
    probe_ms = statistics.median(probes)
    ratio = bi / ip
    rtt_err = abs(probe_ms - want_rtt) / want_rtt
    site_ratios = bottleneck.ratios_to_solo(shared)["siteExclusive"].values()
    site_ok = all(abs(x - 1) <= 0.15 for x in site_ratios)
    ok = abs(ratio - 1) <= 0.10 and rtt_err <= 0.10 and site_ok
    lines = [
        "## Fidelity of the WAN lab (`make bench-fidelity`)",
        "",
        f"One emulated link ({link.rate_mbit:g} Mbit/s, {link.delay_ms:g} ms each way, profile RTT {want_rtt:g} ms) "
        f"through the project's delay line, far -> near, medians of {REPEATS} alternating repeats. "
        f"iperf3: 4 streams, {seconds:g} s (first 2 s omitted). Built-in mover: real agents, {FILES['count']} files "
        f"x {FILES['size'] // 10**6} MB at once, 1 stream each, into a sink; wall-clock aggregate. "
        f"RTT: the agents' probe (TCP connect, 10 samples). {utc_minute()}, {platform.node()}, {os.cpu_count()} cores.",
        "",
        "| measure | value | target | ok |",
        "|---|---|---|---|",
        f"| iperf3 throughput | {ip * 1000:.0f} Mbit/s | - | |",
        f"| built-in mover throughput | {bi * 1000:.0f} Mbit/s | iperf3 +-10 % | "
        f"{'yes' if abs(ratio - 1) <= 0.10 else 'NO'} ({(ratio - 1) * 100:+.1f} %) |",
        f"| agents' RTT probe (median) | {probe_ms:.2f} ms | {want_rtt:g} ms +-10 % | "
        f"{'yes' if rtt_err <= 0.10 else 'NO'} ({rtt_err * 100:.1f} %) |",
        f"| delay line capacity (iperf3, 1 stream, unlimited 0.1 ms link) | {capacity:.1f} Gbit/s | - | |",
        "",
        "| repeat | iperf3 Mbit/s | built-in Mbit/s (wall clock) | built-in Mbit/s (paper's definition) "
        "| probe RTT ms |",
        "|---|---|---|---|---|",
    ]
    for i, row in enumerate(rows, 1):
        paper = f"{row['builtin_paper'] * 1000:.0f}" if row["builtin_paper"] is not None else "-"
        lines.append(f"| {i} | {row['iperf3'] * 1000:.0f} | {row['builtin'] * 1000:.0f} | {paper} | "
                     f"{row['probe']:.2f} |")
    link_mbit = bottleneck.profile().default.rate_mbit
    lines += [
        "",
        "### Shared bottleneck: round policies (`local/bottleneck.py`)",
        "",
        f"Site A's nodes a1, a2 share one shaped uplink of {link_mbit:g} Mbit/s (the delay line's `uplinks`); every "
        f"pair also has its own {link_mbit:g} Mbit/s, 2 ms link. The planner's rounds of a1 -> b1, a2 -> b2, "
        f"c1 -> d1 under each policy, each round's tests at once (iperf3, 1 stream, {seconds:g} s, first second "
        f"omitted), one run. / solo: the pair's rate over its serial (alone) rate. siteExclusive keeps every pair "
        f"within 15 % of solo: {'yes' if site_ok else 'NO'}.",
        "",
        *bottleneck.table(shared),
    ]
    text = "\n".join(lines)
    print(text)
    if output is not None:
        write_section(output, SECTION, text)
        print(f"Wrote the bench-fidelity section of {output}")
    return 0 if ok else 1

"""`python -m tpcmesh_lab.lossbench`: an agent's loss-probe CPU at 10, 100 (and more) peers, into BENCHMARKS.md.

The agent under test is the agent's own probe (``python -m tpcmesh_agent.twamp``: the reflector and the sender the
agent runs) on one loopback address; the peers are simulated on further loopback addresses 127.0.x.y, all in one
second process (one LossProbe per address: each reflects the agent's packets and probes the agent itself), so the
agent sends and reflects what it would in a full mesh: 2 x peers x rate packets/s each way. Its CPU time (user +
system, from /proc/<pid>/stat) is read over whole summary periods after a warm-up period, beside the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from .bench import write_section
from .netns import Lab
from .profile import parse_profile

SECTION = "bench-loss"
PORT = 18863  # not the well-known 863, so the bench also runs without root
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (fields 14 and 15 of /proc/<pid>/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


PEERS_SCRIPT = """
import asyncio, json, sys
from tpcmesh_agent.twamp.service import LossProbe

async def main(agent, port, rate, period, addresses):
    probes = []
    for a in addresses:
        p = LossProbe([a], port=port, node=a)
        p.start()
        p.configure({"peers": [{"name": "agent", "address": agent, "port": port}], "rate_pps": rate,
                     "period_s": period})
        probes.append(p)
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5].split(",")))
"""


def measure(peers: int, rate: float, period: float, periods: int) -> dict:
    """One run: the agent probes ``peers`` simulated peers for a warm-up period plus ``periods`` periods."""
    profile = parse_profile({"nodes": [f"n{i}" for i in range(peers + 1)]}, "loss-bench")
    with Lab(profile, mode="loopback") as lab:
        agent, others = lab.nodes[0].address, [n.address for n in lab.nodes[1:]]
        sim = lab.popen(None, [sys.executable, "-c", PEERS_SCRIPT, agent, str(PORT), str(rate), str(period),
                               ",".join(others)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert sim.stdout is not None
        if sim.stdout.readline().strip() != "READY":
            raise RuntimeError("the simulated peers did not start")
        probe = lab.popen(None, [sys.executable, "-m", "tpcmesh_agent.twamp", "--address", agent, "--port",
                                 str(PORT), "--rate", str(rate), "--period", str(period), "--loss-timeout", "2",
                                 "--periods", str(periods + 1),
                                 *(x for i, a in enumerate(others) for x in ("--peer", f"p{i}={a},{PORT}"))],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert probe.stdout is not None
        records: list[dict] = []
        window: tuple[float, float] | None = None  # (cpu, wall) when the warm-up period's summaries were in
        end: tuple[float, float] | None = None
        full = 0
        for line in probe.stdout:
            record = json.loads(line)
            records.append(record)
            full += not record["partial"]
            if window is None and full == peers:  # the first whole period is the warm-up
                window = (cpu_seconds(probe.pid), time.monotonic())
            if full == peers * (periods + 1):
                end = (cpu_seconds(probe.pid), time.monotonic())
        _, err = probe.communicate(timeout=60)
        if sim.stdin:
            sim.stdin.close()
        sim.wait(10)
    if window is None or end is None:
        raise RuntimeError(f"the probe ended before its periods were summarised: {err[-2000:]}")
    measured = [r for r in records if not r["partial"]][peers:]
    cpu, wall = end[0] - window[0], end[1] - window[1]
    counters = json.loads(err.strip().splitlines()[-1])
    return {
        "peers": peers, "rate": rate, "period": period, "periods": periods, "cpu_s": cpu, "wall_s": wall,
        "summaries": len(measured), "sent": sum(r["sent"] for r in measured),
        "lost": sum(r["lost"] for r in measured),
        "rtt_p95_ms": max(r["rtt_ms"]["p95"] for r in measured if r["rtt_ms"]),
        "reflected": counters["reflector"]["reflected"], "not_allowed": counters["reflector"]["not_allowed"],
    }


def render(rows: list[dict]) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Loss mesh: an agent's CPU at 100 peers (`make bench-loss`)",
        "",
        f"The agent's TWAMP-light probe (`python -m tpcmesh_agent.twamp`: reflector + sender, one asyncio loop) on "
        f"one loopback address; the peers simulated on 127.0.x.y in a second process, each probing the agent and "
        f"reflecting its packets, so the agent sends and reflects 2 × peers × rate packets/s each way, as in a full "
        f"mesh. CPU time (user + system, /proc) over whole periods after a warm-up period. {when}, "
        f"Python {platform.python_version()}, {os.cpu_count()} cores (shared: the peers' process and the rest of "
        f"the machine run beside it).",
        "",
        "| peers | packets/s per peer | packets/s out + in | wall time | CPU time | CPU (one core) | summaries "
        "| sent | lost | RTT p95 (worst peer) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pps = 4 * r["peers"] * r["rate"]  # out: probes + replies; in: replies + probes
        lines.append(f"| {r['peers']} | {r['rate']:g} | {pps:,.0f} | {r['wall_s']:.1f} s | {r['cpu_s']:.2f} s | "
                     f"{100 * r['cpu_s'] / r['wall_s']:.1f} % | {r['summaries']} | {r['sent']:,} | {r['lost']} | "
                     f"{r['rtt_p95_ms']:.2f} ms |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tpcmesh_lab.lossbench", description=__doc__)
    ap.add_argument("--peers", default="10,100", help="comma-separated peer counts")
    ap.add_argument("--rate", type=float, default=10.0, help="packets/s to each peer")
    ap.add_argument("--period", type=float, default=20.0, help="seconds per summary")
    ap.add_argument("--periods", type=int, default=3, help="measured periods after the warm-up period")
    ap.add_argument("--output", type=Path, default=None, help=f"BENCHMARKS.md to update (section {SECTION})")
    args = ap.parse_args(argv)
    rows = [measure(int(n), args.rate, args.period, args.periods) for n in args.peers.split(",")]
    body = render(rows)
    print(body)
    if args.output:
        write_section(args.output, SECTION, body)


if __name__ == "__main__":
    main()

"""`python -m tpcmesh_lab.lossbench`: an agent's loss-probe CPU at 10, 100 (and more) peers (``cpu``: printed;
`make bench-loss` puts it into BENCHMARKS.md beside the archive's figures, dashboard/bench/bench_loss.py), and the
loss a probe reports over a long window on one lossy link of the WAN lab (``window``, into BENCHMARKS.md).

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
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from .bench import write_section
from .netns import Lab
from .profile import parse_profile

WINDOW_SECTION = "bench-loss-window"
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


def cpu_table(rows: list[dict]) -> list[str]:
    """The agent's CPU rows of `measure` as a Markdown table (BENCHMARKS.md's loss mesh section)."""
    lines = [
        "| peers | packets/s per peer | packets/s out + in | wall time | CPU time | CPU (one core) | summaries "
        "| sent | lost | RTT p95 (worst peer) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pps = 4 * r["peers"] * r["rate"]  # out: probes + replies; in: replies + probes
        lines.append(f"| {r['peers']} | {r['rate']:g} | {pps:,.0f} | {r['wall_s']:.1f} s | {r['cpu_s']:.2f} s | "
                     f"{100 * r['cpu_s'] / r['wall_s']:.1f} % | {r['summaries']} | {r['sent']:,} | {r['lost']} | "
                     f"{r['rtt_p95_ms']:.2f} ms |")
    return lines


CPU_METHOD = (
    "The agent's TWAMP-light probe (`python -m tpcmesh_agent.twamp`: reflector + sender, one asyncio loop) on one "
    "loopback address; the peers simulated on 127.0.x.y in a second process, each probing the agent and reflecting "
    "its packets, so the agent sends and reflects 2 × peers × rate packets/s each way, as in a full mesh. CPU time "
    "(user + system, /proc) over whole periods after a warm-up period"
)


def measure_window(loss_percent: float, delay_ms: float, rate: float, period: float, periods: int) -> dict:
    """One prober, one reflector in two namespaces of the WAN lab, the link dropping ``loss_percent`` towards the
    reflector: the minute summaries of ``periods`` whole periods, added up."""
    profile = parse_profile({"nodes": ["prober", "reflector"], "links": [
        {"from": "prober", "to": "reflector", "delayMs": delay_ms, "lossPercent": loss_percent},
        {"from": "reflector", "to": "prober", "delayMs": delay_ms}]}, "loss-window")
    with Lab(profile, mode="netns") as lab:
        prober, reflector = lab.node("prober"), lab.node("reflector")
        lab.popen("reflector", [sys.executable, "-m", "tpcmesh_agent.twamp", "--address", reflector.address,
                                "--port", str(PORT), "--reflect", prober.address],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        started = time.monotonic()
        proc = lab.popen("prober", [sys.executable, "-m", "tpcmesh_agent.twamp", "--address", prober.address,
                                    "--port", str(PORT), "--rate", str(rate), "--period", str(period),
                                    "--periods", str(periods), "--peer", f"reflector={reflector.address},{PORT}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate()
        wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"the prober failed: {err[-2000:]}")
    records = [r for r in map(json.loads, out.splitlines()) if not r["partial"]][:periods]
    sent, lost = sum(r["sent"] for r in records), sum(r["lost"] for r in records)
    return {"loss_percent": loss_percent, "delay_ms": delay_ms, "rate": rate, "period": period,
            "periods": len(records), "sent": sent, "lost": lost, "wall_s": wall,
            "per_period": [r["lost"] for r in records],
            "rtt_median_ms": sorted(r["rtt_ms"]["median"] for r in records if r["rtt_ms"])[len(records) // 2]}


def render_window(rows: list[dict]) -> str:
    from scipy.stats import binom

    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Loss mesh: the loss reported over a long window (`make bench-loss-window`)",
        "",
        "One prober and one reflector (`python -m tpcmesh_agent.twamp`) in two network namespaces of the WAN lab; "
        "the delay line drops the set share of the packets towards the reflector (a random draw per packet). The "
        "periods' summaries are added up over the window; the reported loss must lie in the central 99.9 % "
        "binomial interval of the set rate for the packets sent. To tell a rate p from no loss at all (P(0 lost) "
        "< 0.1 %) a window needs about 6.9 / p packets: 69,000 for 0.01 %, 1 h 55 min at the product's 10 "
        f"packets/s. {when}, {os.cpu_count()} cores.",
        "",
        "| set loss | one-way delay | packets/s | window | sent | lost | reported loss | 99.9 % interval (packets) "
        "| inside | lost per period |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        low, high = binom.interval(0.999, r["sent"], r["loss_percent"] / 100)
        inside = "yes" if low <= r["lost"] <= high else "NO"
        window = f"{r['periods']} × {r['period']:g} s"
        per = " ".join(str(x) for x in r["per_period"]) if len(r["per_period"]) <= 30 else "…"
        lines.append(f"| {r['loss_percent']:g} % | {r['delay_ms']:g} ms | {r['rate']:g} | {window} | "
                     f"{r['sent']:,} | {r['lost']} | {100 * r['lost'] / r['sent']:.4f} % | {low:.0f}–{high:.0f} | "
                     f"{inside} | {per} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tpcmesh_lab.lossbench", description=__doc__)
    ap.add_argument("what", nargs="?", choices=["cpu", "window"], default="cpu")
    ap.add_argument("--peers", default="10,100", help="cpu: comma-separated peer counts")
    ap.add_argument("--rate", type=float, default=10.0, help="packets/s to each peer")
    ap.add_argument("--period", type=float, default=None, help="seconds per summary (cpu: 20, window: 60)")
    ap.add_argument("--periods", type=int, default=None,
                    help="measured periods (cpu: 3 after a warm-up period; window: 115, 1 h 55 min)")
    ap.add_argument("--loss", default="0.01", help="window: comma-separated loss rates, percent")
    ap.add_argument("--delay", type=float, default=10.0, help="window: one-way delay, ms")
    ap.add_argument("--output", type=Path, default=None, help="window: BENCHMARKS.md to update")
    args = ap.parse_args(argv)
    if args.what == "window":
        rows = [measure_window(float(p), args.delay, args.rate, args.period or 60.0, args.periods or 115)
                for p in args.loss.split(",")]
        body, section = render_window(rows), WINDOW_SECTION
    else:
        rows = [measure(int(n), args.rate, args.period or 20.0, args.periods or 3) for n in args.peers.split(",")]
        print("\n".join(cpu_table(rows)))
        return
    print(body)
    if args.output:
        write_section(args.output, section, body)


if __name__ == "__main__":
    main()

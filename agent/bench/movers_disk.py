"""`make bench-movers` disk rows: the built-in mover disk->disk between two real agents whose disk paths are on this
machine's real disk (/var/tmp), with 1 and 8 streams, beside each disk's fio ceilings from the same run and iperf3.
Files are read cold at the source (O_DIRECT) and written with O_DIRECT and fsync at the destination (agent/README.md,
Disk mode). Both agents share one disk here, so the source's reads and the destination's writes compete for it:
the ceiling each row is held to is min(source read, destination write, iperf3), each measured alone."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

START, END = "<!-- bench-movers-disk:start -->", "<!-- bench-movers-disk:end -->"
STREAMS = (1, 8)
FILES = 4


def ceilings(agent: Any, jobs: int, size: int) -> dict:
    """fio on the agent's disk path: ``jobs`` jobs sharing ``size`` bytes (as a test's streams share a file)."""
    r = agent.post("/api/v1/storage/ceilings", json={"concurrency": jobs, "size": max(2**20, size // jobs),
                                                     "runtime_seconds": 60}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def run_disk(args: Any, test_pki: Any, agents: list, stop: Any, size: int, repeats: int, log: Any) -> None:
    from movers import RunStamp, write_section  # beside this script (agent/bench is not a package)

    from tests.support.agents import start_agent

    stamp = RunStamp(size)
    base = Path(tempfile.mkdtemp(prefix="bench-movers-disk-", dir="/var/tmp"))
    rows: list[str] = []
    goals: list[str] = []
    try:
        pair = []
        for end in ("src", "dst"):
            (base / end).mkdir()
            pair.append(start_agent(test_pki, protocols=("builtin", "iperf3"), log_level="WARNING",
                                    disk_dir=base / end, disk_reserve_bytes="1G", budget_bytes=10**9))
            agents.append(pair[-1])
        src, dst = pair
        log(f"Creating {FILES} x {size} bytes on the source agent's disk {base / 'src'}")
        files = src.file_set(count=FILES, size=size, storage="disk")["files"]
        for streams in STREAMS:
            read = ceilings(src, streams, size)["read_bps"]
            write = ceilings(dst, streams, size)["write_bps"]
            iperf, moved = [], []
            for _ in range(repeats):
                rec = dst.transfer(timeout=120, protocol="iperf3", streams=streams, concurrency=1,
                                   source={"host": src.address, "port": src.ports["iperf3_port"]},
                                   file_set={"count": 1, "size": 1000}, destination="sink", timeout_seconds=30,
                                   duration_seconds=5)
                iperf.append(rec["aggregate_gbps"] * 1e9 / 8 if rec["status"] == "succeeded" else 0.0)
                src.file_set(count=FILES, size=size, storage="disk")  # cold again (flushed, out of the cache)
                rec = dst.transfer(timeout=1200, test_id=str(uuid.uuid4()), protocol="builtin", streams=streams,
                                   concurrency=1, source={"host": src.address, "port": src.builtin_port},
                                   file_set={"count": FILES, "size": size}, files=files, storage="disk",
                                   verify_checksums=False, timeout_seconds=1100)
                if rec["status"] != "succeeded":
                    log(f"    builtin disk->disk failed: {rec['error']}")
                    continue
                assert rec["storage"]["direct_write"], rec["storage"]
                moved.append(rec["total_bytes"] / rec["wall_seconds"])
            net = statistics.median(iperf)
            ceiling = min(read, write, net)
            got = statistics.median(moved) if moved else None
            ratio = f"{got / ceiling:.2f}" if got else "–"
            log(f"  builtin disk->disk streams={streams}: {got and got / 1e6:.0f} MB/s; fio read {read / 1e6:.0f}, "
                f"write {write / 1e6:.0f}, iperf3 {net / 1e6:.0f} MB/s")
            rows.append(f"| built-in disk→disk | {streams} | {got / 1e6:.0f} | {read / 1e6:.0f} | {write / 1e6:.0f} "
                        f"| {net / 1e6:.0f} | {ratio} |" if got else
                        f"| built-in disk→disk | {streams} | failed | {read / 1e6:.0f} | {write / 1e6:.0f} | "
                        f"{net / 1e6:.0f} | – |")
            if got:
                goals.append(f"{streams} stream(s): {got / ceiling:.2f} × the ceiling "
                             f"({'met' if got >= 0.9 * ceiling else 'MISSED'})")
    finally:
        for a in list(agents):
            stop(a)
        shutil.rmtree(base, ignore_errors=True)
    about = " ".join((__doc__ or "").split()).split(": ", 1)[1]
    header = (f"{about[0].upper()}{about[1:]} "
              f"{'Quick run: ' if args.quick else ''}{FILES} files of {stamp.size_text} (SI), one at a time; "
              f"{'one run' if repeats == 1 else f'median of {repeats}'}; MB/s = SI wall-clock aggregate. fio: "
              "sequential 1 MiB, O_DIRECT, as many jobs as streams, the file size shared between them, on each "
              f"agent's disk path before its rows. {stamp.ended()}.")
    table = ["| mover | streams | MB/s | source read ceiling (fio) | destination write ceiling (fio) | iperf3 | "
             "ratio to min(read, write, iperf3) |", "|---|---|---|---|---|---|---|", *rows]
    section = "\n".join([START, "## Disk to disk over loopback (`make bench-movers`, disk rows)", "", header, "",
                         *table, "", "Goal for the built-in mover (≥ 0.9 × min(source read ceiling, destination "
                         "write ceiling, iperf3)): " + "; ".join(goals) + ".", END])
    write_section(args.output, section, START, END)
    log(f"Wrote the bench-movers disk section of {args.output}")

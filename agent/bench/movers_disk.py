"""`make bench-movers` disk rows: each mover disk->disk (the built-in, XRootD HTTP-TPC and root://, GridFTP) between two
real agents whose disk paths are on this machine's real disk (/var/tmp), with 1 and 8 streams, beside each disk's fio
ceilings from the same run and iperf3. Files are read cold at the source (the built-in with O_DIRECT; the servers
through the page cache, the set flushed and dropped from it before each test) and are on the destination's device
before each file's end time (the built-in writes with O_DIRECT and fsyncs; the agent fsyncs what XRootD and GridFTP
wrote; agent/README.md, Disk mode). The goal holds each row to min(source read, destination write, iperf3), each
ceiling measured alone, as issue 28 sets it. When both disk paths are on one device (as here: both agents share this
machine's disk), a copy makes that device read and write at once, which min(read, write) measured alone does not
capture: the same-device ceiling is fio with the readers and the writers running together, held in step as a
copy's are (ceilings.SharedDevicePlan), and each row gives its ratio to min(that, iperf3) too."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

from tpcmesh_agent.ceilings import SharedDevicePlan, measure_shared, same_device

START, END = "<!-- bench-movers-disk:start -->", "<!-- bench-movers-disk:end -->"
STREAMS = (1, 8)
FILES = 4
SHARED_RUNTIME = 10  # seconds of fio with reads and writes at once
# mover -> (its row's name, the source agent's port setting)
MOVERS = {"builtin": ("built-in", "builtin_port"), "xrootd-https": ("XRootD HTTP-TPC", "xrootd_https_port"),
          "xrootd-root": ("XRootD root://", "xrootd_root_port"), "gridftp": ("GridFTP", "gridftp_port")}


def mbs(bps: float | None, otherwise: str) -> str:
    return f"{bps / 1e6:.0f}" if bps else otherwise


def ratio(got: float | None, ceiling: float | None) -> str:
    return f"{got / ceiling:.2f}" if got and ceiling else "–"


def ceilings(agent: Any, jobs: int, size: int) -> dict:
    """fio on the agent's disk path: ``jobs`` jobs sharing ``size`` bytes (as a test's streams share a file)."""
    r = agent.post("/api/v1/storage/ceilings", json={"concurrency": jobs, "size": max(2**20, size // jobs),
                                                     "runtime_seconds": 60}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def run_disk(args: Any, test_pki: Any, agents: list, stop: Any, size: int, repeats: int, log: Any) -> None:
    from movers import RunStamp, free_port, write_section  # beside this script (not a package)

    from tests.support.agents import start_agent

    stamp = RunStamp(size)
    base = Path(tempfile.mkdtemp(prefix="bench-movers-disk-", dir="/var/tmp"))
    rows: list[str] = []
    goals: list[str] = []
    try:
        base.chmod(0o755)  # the servers' user (nobody) must enter it
        pair = []
        for end in ("src", "dst"):
            (base / end).mkdir()
            pair.append(start_agent(test_pki, protocols=(*MOVERS, "iperf3"), run_user="nobody", log_level="WARNING",
                                    disk_dir=base / end, disk_reserve_bytes="1G", budget_bytes=10**9,
                                    xrootd_root_port=free_port(), xrootd_https_port=free_port()))
            agents.append(pair[-1])
        src, dst = pair
        log(f"Creating {FILES} x {size} bytes on the source agent's disk {base / 'src'}")
        # the destination is a mesh member: the source's GridFTP admits it (daemons/gridmap.py)
        files = src.file_set(count=FILES, size=size, storage="disk", mesh=[dst.name])["files"]
        shared = same_device(base / "src", base / "dst")
        for streams in STREAMS:
            reads: list[float] = []
            writes: list[float] = []
            boths: list[float] = []
            iperf: list[float] = []
            moved: dict[str, list[float]] = {m: [] for m in MOVERS}
            for _ in range(repeats):
                # the ceilings in every repeat, beside its rows: this disk's rate drifts with the host's load
                reads.append(ceilings(src, streams, size)["read_bps"])
                writes.append(ceilings(dst, streams, size)["write_bps"])
                if shared:  # two devices: the ceilings measured alone apply
                    boths.append(measure_shared(SharedDevicePlan(
                        base / "src" / "fio-pair", base / "dst" / "fio-pair", streams, max(2**20, size // streams),
                        SHARED_RUNTIME))["copy_bps"])
                rec = dst.transfer(timeout=120, protocol="iperf3", streams=streams, concurrency=1,
                                   source={"host": src.address, "port": src.ports["iperf3_port"]},
                                   file_set={"count": 1, "size": 1000}, destination="sink", timeout_seconds=30,
                                   duration_seconds=5)
                iperf.append(rec["aggregate_gbps"] * 1e9 / 8 if rec["status"] == "succeeded" else 0.0)
                for mover, (_, port) in MOVERS.items():
                    src.file_set(count=FILES, size=size, storage="disk")  # cold again (flushed, out of the cache)
                    rec = dst.transfer(timeout=1200, test_id=str(uuid.uuid4()), protocol=mover, streams=streams,
                                       concurrency=1, source={"host": src.address, "port": src.ports[port]},
                                       file_set={"count": FILES, "size": size}, files=files, storage="disk",
                                       verify_checksums=False, timeout_seconds=1100)
                    if rec["status"] != "succeeded":
                        log(f"    {mover} disk->disk failed: {rec['error']}")
                        continue
                    assert rec["storage"]["direct_write"] is (mover == "builtin"), rec["storage"]
                    moved[mover].append(rec["total_bytes"] / rec["wall_seconds"])
            net = statistics.median(iperf)
            read, write = statistics.median(reads), statistics.median(writes)
            both = statistics.median(boths) if boths else None
            ceiling = min(read, write, net)
            together = min(both, net) if both else None
            figures = f"{read / 1e6:.0f} | {write / 1e6:.0f} | {net / 1e6:.0f}"
            for mover, (name, _) in MOVERS.items():
                got = statistics.median(moved[mover]) if moved[mover] else None
                log(f"  {mover} disk->disk streams={streams}: {mbs(got, 'failed')} MB/s; fio read "
                    f"{read / 1e6:.0f}, write {write / 1e6:.0f}, both at once {mbs(both, '-')}, iperf3 "
                    f"{net / 1e6:.0f} MB/s")
                rows.append(f"| {name} disk→disk | {streams} | {mbs(got, 'failed')} | {figures} | "
                            f"{ratio(got, ceiling)} | {mbs(both, '– (two devices)')} | {ratio(got, together)} |")
                if got and mover == "builtin":
                    goals.append(f"{streams} stream(s): {got / ceiling:.2f} × the ceiling "
                                 f"({'met' if got >= 0.9 * ceiling else 'MISSED'})"
                                 + (f"; {got / together:.2f} × the same-device ceiling" if together else ""))
    finally:
        for a in list(agents):
            stop(a)
        shutil.rmtree(base, ignore_errors=True)
    about = " ".join((__doc__ or "").split()).split(": ", 1)[1]
    header = (f"{about[0].upper()}{about[1:]} "
              f"{'Quick run: ' if args.quick else ''}{FILES} files of {stamp.size_text} (SI), one at a time, "
              "each mover in turn after the same fio and iperf3 runs; "
              f"{'one run' if repeats == 1 else f'median of {repeats}'}; MB/s = SI wall-clock aggregate. fio: "
              "sequential 1 MiB, O_DIRECT, as many jobs as streams, the file size shared between them, on each "
              "agent's disk path at the start of every repeat (median, as the rows); at once: as many readers on "
              f"the source's path and writers on the destination's, together for {SHARED_RUNTIME} s, held in step "
              f"(fio flow control), the lower of the two rates. {stamp.ended()}.")
    table = ["| mover | streams | MB/s | source read ceiling (fio, alone) | destination write ceiling (fio, alone) | "
             "iperf3 | ratio to min(read, write, iperf3) | read and write at once, same device (fio) | "
             "ratio to min(at once, iperf3) |", "|---|---|---|---|---|---|---|---|---|", *rows]
    section = "\n".join([START, "## Disk to disk over loopback (`make bench-movers`, disk rows)", "", header, "",
                         *table, "", "Goal for the built-in mover (≥ 0.9 × min(source read ceiling, destination "
                         "write ceiling, iperf3), the ceilings measured alone, as the issue sets it; beside it the "
                         "ratio to the same-device ceiling, the bound a copy between two paths on one device "
                         "meets): " + "; ".join(goals) + ".", END])
    write_section(args.output, section, START, END)
    log(f"Wrote the bench-movers disk section of {args.output}")

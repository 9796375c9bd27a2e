"""`make bench-movers`: every mover over loopback on this machine, written as one table into BENCHMARKS.md.

Two real agents (tests/support/agents.py starts them) on loopback addresses of their own, with the real XRootD,
GridFTP and iperf3 servers. Cases: iperf3 (1 and 8 streams), ``cp`` tmpfs->tmpfs, the built-in mover (sink and
store), XRootD HTTP-TPC over HTTPS and over plain HTTP, XRootD root:// TPC and GridFTP TPC (store), each with 1
and 11 files at once and 1 and 8 streams per file. Gbit/s are SI (1e9 bit/s) and wall-clock aggregates: bytes
moved / (last byte in - start). Median of 3 repeats (``--quick``: small files, one repeat); cp is timed at the start
and at the end of every repeat. Then the authorization rows (movers_auth.py): XRootD HTTP-TPC with tokens vs with
X509 host certificates vs with no authentication, driven by the agent and sent by hand with curl, in a section of
their own, and the disk rows (movers_disk.py: the built-in mover disk->disk beside each disk's fio ceilings;
``--only movers|auth|disk`` runs one of the three).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # movers_auth.py

START, END = "<!-- bench-movers:start -->", "<!-- bench-movers:end -->"
CONCURRENCY = (1, 11)
STREAMS = (1, 8)
GB = 10**9
AUTH_MAX_SIZE = 250 * 10**6  # auth rows' files: 2 sets (none serves x509's) + 8 streams x 11 in flight fit in 24 GB


@dataclass
class Case:
    mover: str
    streams: int | None  # None: not applicable (cp)
    concurrency: int
    destination: str  # sink | store
    samples: list[float | None]
    refused: str | None = None  # the agent's reason when it refused to run the case (422)

    @property
    def gbps(self) -> float | None:
        ok = [s for s in self.samples if s is not None]
        return statistics.median(ok) if ok else None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def shm_free() -> int:
    st = os.statvfs("/dev/shm")
    return st.f_bavail * st.f_frsize


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def pick_size(wanted: int, count: int) -> int:
    """The largest size <= wanted (halving) with the source set + one stored copy + 0.5 GB fitting in memory.
    What else a case needs (XRootD's buffers) the destination agent checks itself: it refuses a case that would
    not fit, and the table says so."""
    room = min(shm_free(), mem_available())
    size = wanted
    while size > 10**6 and 2 * count * size + 5 * 10**8 > room:
        size //= 2
    return size


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a running process (all its threads) has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


@dataclass
class CpuUse:
    """CPU seconds spent moving bytes, summed over the cases of one kind."""

    seconds: float = 0.0
    bytes: int = 0

    def add(self, seconds: float, nbytes: int) -> None:
        self.seconds += seconds
        self.bytes += nbytes

    @property
    def per_gb(self) -> float | None:
        return self.seconds / (self.bytes / GB) if self.bytes else None


class Bench:
    def __init__(self, size: int, repeats: int, log) -> None:
        self.size, self.repeats, self.log = size, repeats, log
        self.cases: dict[tuple, Case] = {}
        # CPU per GB of cp and of the built-in store (both agents): why store trails cp on a machine with few cores
        self.cpu = {"cp": CpuUse(), "builtin store": CpuUse(), "builtin store, verified": CpuUse()}

    def add(self, mover: str, streams: int | None, conc: int, dest: str, value: float | str | None) -> None:
        """``value``: Gbit/s, None when the transfer failed, or the agent's reason when it refused the case."""
        key = (mover, streams, conc, dest)
        case = self.cases.setdefault(key, Case(mover, streams, conc, dest, []))
        if isinstance(value, str):
            case.refused = value
            shown = "refused: " + value
        else:
            case.samples.append(value)
            shown = "failed" if value is None else f"{value:.2f} Gbit/s"
        self.log(f"  {mover:14s} streams={streams} concurrency={conc:2d} {dest:5s}: {shown}")

    # -- runners ---------------------------------------------------------------------------------------------
    def api(self, src, dst, protocol: str, port: int, files: list[dict], streams: int, conc: int, dest: str,
            timeout: float = 600, verify: bool = False, tokens: dict[str, str] | None = None) -> float | str | None:
        """One test through the destination agent's API. ``verify``: the agent checks each received file's adler32
        (off for the table's rows, like cp, which verifies nothing; on for the "verified" built-in rows).
        ``tokens``: {read, create} of a token-authorized copy."""
        body = dict(protocol=protocol, source={"host": src.address, "port": port},
                    file_set={"count": 11, "size": self.size}, files=files[:conc], concurrency=conc,
                    streams=streams, timeout_seconds=timeout, destination=dest, test_id=str(uuid.uuid4()),
                    verify_checksums=verify, **({"tokens": tokens} if tokens else {}))
        agents = (src.process.pid, dst.process.pid)  # the built-in mover moves the bytes inside the agents
        cpu0 = sum(process_cpu_seconds(pid) for pid in agents)
        r = dst.post("/api/v1/transfers", json=body)
        if r.status_code == 422:  # e.g. not enough memory on this machine for the case: say so in the table
            return r.json()["error"]
        assert r.status_code == 202, r.text
        rec = dst.wait_transfer(body["test_id"], timeout + 30)
        if rec["status"] != "succeeded":
            self.log(f"    {protocol} failed: {rec['error']}")
            return None
        if protocol == "builtin" and dest == "store":
            kind = "builtin store, verified" if verify else "builtin store"
            self.cpu[kind].add(sum(process_cpu_seconds(pid) for pid in agents) - cpu0, rec["total_bytes"])
        return rec["aggregate_gbps"]

    def iperf3(self, src, dst, streams: int) -> float | None:
        body = dict(protocol="iperf3", source={"host": src.address, "port": src.ports["iperf3_port"]},
                    file_set={"count": 1, "size": 1000}, concurrency=1, streams=streams,
                    timeout_seconds=20 if self.repeats > 1 else 8, destination="sink")
        rec = dst.transfer(timeout=60, **body)
        return rec["aggregate_gbps"] if rec["status"] == "succeeded" else None

    def cp(self, src_dir: Path, files: list[dict], conc: int, count_cpu: bool = True) -> float:
        out = Path(tempfile.mkdtemp(prefix="bench-cp-", dir="/dev/shm"))
        try:
            t0 = time.monotonic()
            procs = [subprocess.Popen(["cp", str(src_dir / f["name"]), str(out / f["name"])]) for f in files[:conc]]
            cpu = 0.0
            for p in procs:
                _, status, usage = os.wait4(p.pid, 0)  # wait4: the CPU this cp used
                p.returncode = os.waitstatus_to_exitcode(status)
                if p.returncode != 0:
                    raise RuntimeError("cp failed")
                cpu += usage.ru_utime + usage.ru_stime
            dt = time.monotonic() - t0
            nbytes = sum(f["size"] for f in files[:conc])
            if count_cpu:
                self.cpu["cp"].add(cpu, nbytes)
            return nbytes * 8 / 1e9 / dt
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def xrootd_plain_http(self, src, dst, files: list[dict], streams: int, conc: int) -> float | str | None:
        """XRootD HTTP-TPC with the source read over plain http:// (not a protocol of the API: run in-process)."""
        from tpcmesh_agent.config import load_settings
        from tpcmesh_agent.movers.base import Endpoint, FileSpec, Progress, TransferJob
        from tpcmesh_agent.movers.xrootd_https import XrootdHttpMover
        from tpcmesh_agent.runner import memory_shortfall

        env = {"TPCMESH_AGENT_" + k.upper(): v for k, v in dst.settings.items() if k != "protocols"}
        settings = load_settings([], {**env, "TPCMESH_AGENT_PROTOCOLS": "xrootd-https"})
        # the destination agent's local HTTP-TPC instance, on the port it chose at start
        settings.xrootd_tpc_port = dst.get("/api/v1/info").json()["servers"]["xrootd-https-tpc"]["port"]
        test_id = str(uuid.uuid4())
        job = TransferJob(test_id=test_id, protocol="xrootd-https",
                          source=Endpoint(src.address, src.ports["xrootd_https_port"]),
                          files=tuple(FileSpec(f["name"], f["size"], f["checksum"]) for f in files[:conc]),
                          file_set=f"11x{self.size}", concurrency=conc, streams=streams, timeout=600,
                          destination_dir=settings.incoming_dir / test_id, verify_checksums=False)
        mover = XrootdHttpMover(settings)
        short = memory_shortfall(job, mover, settings.incoming_dir)  # what the API would refuse
        if short:
            return short
        start = datetime.now(UTC)
        try:
            results = asyncio.run(mover.run(job, Progress()))
        finally:
            shutil.rmtree(settings.incoming_dir / test_id, ignore_errors=True)
        if any(r.error for r in results):
            self.log(f"    xrootd-http failed: {[r.error for r in results if r.error][0]}")
            return None
        last = max(r.finished_at for r in results if r.finished_at)
        return sum(r.bytes for r in results) * 8 / 1e9 / (last - start).total_seconds()

    # -- the whole matrix -------------------------------------------------------------------------------------
    def run(self, src, new_destination, files: list[dict], src_dir: Path) -> None:
        """``new_destination()`` stops the previous destination agent and starts a fresh one: XRootD keeps the heap
        a multi-stream case grew (about 1 GB per 1 GB file in flight), which the next case could not use."""
        ports = src.ports
        dst = new_destination()
        # untimed: the first write into memory a VM has not touched yet costs several times a later one (cp of
        # 1 GB measured 2.6 vs 13.7 Gbit/s), whichever mover comes first would pay it
        self.log("warming up memory (untimed: one cp and one built-in store of the whole set)")
        self.cp(src_dir, files, len(files), count_cpu=False)
        warm = self.cpu["builtin store"].seconds, self.cpu["builtin store"].bytes
        self.api(src, dst, "builtin", src.builtin_port, files, 1, len(files), "store")
        self.cpu["builtin store"] = CpuUse(*warm)  # the warm-up pays for first touches: not counted
        for rep in range(self.repeats):
            self.log(f"repeat {rep + 1}/{self.repeats}")
            for s in STREAMS:
                self.add("iperf3", s, 1, "sink", self.iperf3(src, dst, s))
            for c in CONCURRENCY:
                self.add("cp", None, c, "store", self.cp(src_dir, files, c))
            for c in CONCURRENCY:
                for s in STREAMS:
                    dst = new_destination()
                    self.add("builtin", s, c, "sink", self.api(src, dst, "builtin", src.builtin_port, files, s, c,
                                                               "sink"))
                    # untimed: stopping the last destination freed its XRootD heap (GBs), which this VM hands back
                    # to the host; the next write into it pays the first touch again (a 1 GB cp right after a 6 GB
                    # process exits: 10.4 vs 15 Gbit/s), so the first timed store of a case would pay for the last
                    self.cp(src_dir, files, c, count_cpu=False)
                    self.add("builtin", s, c, "store", self.api(src, dst, "builtin", src.builtin_port, files, s, c,
                                                                "store"))
                    self.add("builtin-verified", s, c, "store",
                             self.api(src, dst, "builtin", src.builtin_port, files, s, c, "store", verify=True))
                    self.add("xrootd-https", s, c, "store",
                             self.api(src, dst, "xrootd-https", ports["xrootd_https_port"], files, s, c, "store"))
                    self.add("xrootd-http", s, c, "store", self.xrootd_plain_http(src, dst, files, s, c))
                    self.add("xrootd-root", s, c, "store",
                             self.api(src, dst, "xrootd-root", ports["xrootd_root_port"], files, s, c, "store"))
                    for d in ("sink", "store"):
                        self.add("gridftp", s, c, d, self.api(src, dst, "gridftp", ports["gridftp_port"], files, s,
                                                              c, d))
            for c in CONCURRENCY:  # cp again at the end: its median spans the same stretch of time as the movers
                self.add("cp", None, c, "store", self.cp(src_dir, files, c))

    def table(self, header: str) -> str:
        iperf = {s: self.cases[("iperf3", s, 1, "sink")].gbps for s in STREAMS if ("iperf3", s, 1, "sink") in
                 self.cases}
        cp = {c: self.cases[("cp", None, c, "store")].gbps for c in CONCURRENCY}
        names = {"iperf3": "iperf3", "cp": "cp tmpfs→tmpfs", "builtin": "built-in",
                 "builtin-verified": "built-in, adler32 verified",
                 "xrootd-https": "XRootD HTTP-TPC (https)", "xrootd-http": "XRootD HTTP-TPC (plain http)",
                 "xrootd-root": "XRootD root:// TPC", "gridftp": "GridFTP TPC (gsiftp)"}
        rows = ["| mover | streams | concurrency | destination (sink or store) | Gbit/s | ratio to iperf3 |",
                "|---|---|---|---|---|---|"]
        for case in self.cases.values():
            ref = iperf.get(case.streams or 1)
            g = case.gbps
            ratio = f"{g / ref:.2f}" if g is not None and ref else "–"
            streams = "–" if case.streams is None else str(case.streams)
            shown = f"{g:.2f}" if g is not None else "refused¹" if case.refused else "failed"
            rows.append(f"| {names[case.mover]} | {streams} | {case.concurrency} | {case.destination} | "
                        f"{shown} | {ratio} |")
        refused = [f"¹ {names[c.mover]}, {c.streams} stream(s) × {c.concurrency}: the agent refused the case: "
                   f"“{c.refused}”." for c in self.cases.values() if c.refused and c.gbps is None]
        goals, store_ratios, store_rates = [], [], []
        for c in CONCURRENCY:
            for s in STREAMS:
                sink = self.cases.get(("builtin", s, c, "sink"))
                store = self.cases.get(("builtin", s, c, "store"))
                if sink and sink.gbps and iperf.get(s):
                    r = sink.gbps / iperf[s]
                    goals.append(f"sink {s} stream(s) × {c}: {r:.2f} × iperf3 ({'met' if r >= 0.9 else 'MISSED'})")
                if store and store.gbps and cp.get(c):
                    r = store.gbps / cp[c]
                    store_ratios.append((r, s, c))
                    store_rates.append((store.gbps, s, c))
                    goals.append(f"store {s} stream(s) × {c}: {r:.2f} × cp ({'met' if r >= 0.9 else 'MISSED'})")
        text = [START, "## Movers over loopback (`make bench-movers`)", "", header, "", *rows, "",
                *[line for r in refused for line in (r, "")],
                "Goals for the built-in mover (sink ≥ 0.9 × iperf3 at the same stream count, store ≥ 0.9 × cp at the "
                "same concurrency): " + "; ".join(goals) + ".",
                *store_shortfall(store_ratios, self.cpu["cp"].per_gb, self.cpu["builtin store"].per_gb,
                                  self.cpu["builtin store, verified"].per_gb),
                *against_fastest_cp({c: [x for x in self.cases[("cp", None, c, "store")].samples if x is not None]
                                     for c in CONCURRENCY}, store_rates), END]
        return "\n".join(text)


def store_shortfall(ratios: list[tuple[float, int, int]], cp_cpu: float | None, store_cpu: float | None,
                    verified_cpu: float | None = None) -> list[str]:
    """Why store misses its goal, when it does, with the CPU per GB this run measured for cp and for the built-in
    store (user + system seconds of the cp processes, of both agents during the store cases); no figure that the
    run did not measure, no reason that its figures contradict."""
    missed = [x for x in ratios if x[0] < 0.9]
    if not missed:
        return []
    r, s, c = min(missed)
    text = (f"Store misses its goal in {len(missed)} of {len(ratios)} cases, by up to {0.9 - r:.2f} × cp (worst: "
            f"{s} stream(s) × {c} at {r:.2f} × cp).")
    cores = os.cpu_count()
    if cp_cpu and store_cpu:
        text += (f" Measured in this run over every store case: the two agents used {store_cpu:.2f} CPU s per GB "
                 "stored (from the request to the finished record, so the clean-up and the API polling count too), "
                 f"cp {cp_cpu:.2f} CPU s per GB: {store_cpu / cp_cpu:.2f} × as much (see also “Built-in store path” "
                 "below).")
        if store_cpu > cp_cpu:
            text += (" Why: cp tmpfs→tmpfs is one in-kernel copy, while the built-in store does the same copy into "
                     "tmpfs plus the loopback TCP send and receive of two agents; on "
                     f"{cores} cores store keeps pace with cp only while a core is left idle.")
        else:
            connections = ", ".join(f"{ms * mc}" for _, ms, mc in sorted(missed, key=lambda x: x[1] * x[2]))
            text += (" The copy costs no more than cp's, so the shortfall is in the scheduling: the missed cases "
                     f"keep {connections} connections in flight (a thread on each side for each) on {cores} cores.")
    else:
        text += " This run measured no CPU use to compare them."
    if verified_cpu:
        text += (f" Checking every received file's adler32 (the agents' default) costs {verified_cpu:.2f} "
                 "CPU s per GB stored.")
    return ["", text + " Other load on the machine takes from store first."]


def against_fastest_cp(cp_samples: dict[int, list[float]], stores: list[tuple[float, int, int]]) -> list[str]:
    """cp's own spread in this run, and each built-in store case (Gbit/s, streams, concurrency) against cp's fastest
    sample at its concurrency: on a machine where cp swings this much, a goal read from the median is only as sure
    as that spread allows."""
    spread = "; ".join(f"{c} file(s) at once {min(v):.2f}-{max(v):.2f} Gbit/s" for c, v in sorted(cp_samples.items())
                       if v)
    ratios = [(g / max(cp_samples[c]), s, c) for g, s, c in stores if cp_samples.get(c)]
    if not spread or not ratios:
        return []
    text = (f"cp's own samples in this run: {spread}. Store against cp's fastest sample at the same concurrency: "
            + "; ".join(f"{s} stream(s) × {c}: {r:.2f} × cp" for r, s, c in ratios) + ".")
    below = [r for r, _, _ in ratios if r < 0.9]
    if below:
        text += (f" Against that sample {len(below)} of {len(ratios)} store cases stay below 0.9 × cp: a 'met' above "
                 "holds only as far as cp's spread allows.")
    return ["", text]


def write_section(path: Path, section: str, start: str = START, end: str = END) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 MB files, one repeat (a smoke run)")
    ap.add_argument("--size", type=int, default=None, help="file size in bytes (default 1e9; quick 1e8)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--output", type=Path, default=REPO / "BENCHMARKS.md")
    ap.add_argument("--only", choices=("movers", "auth", "disk"), default=None,
                    help="only the movers table, the authorization rows (token vs x509 vs none, agent vs curl), or "
                         "the disk rows (built-in disk->disk vs the fio ceilings)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the agents and free their memory on kill
    wanted = args.size or (10**8 if args.quick else GB)
    repeats = args.repeats or (1 if args.quick else 3)
    size = pick_size(wanted, 11)

    from tpcmesh_operator.credentials import pki

    from tests.support.agents import TestPKI, start_agent

    def log(msg: str) -> None:
        print(msg, flush=True)

    work = Path(tempfile.mkdtemp(prefix="bench-movers-pki-"))
    os.chmod(work, 0o755)
    ca = pki.create_ca("tpcmesh bench CA")
    (work / "ca.crt").write_bytes(ca.cert_pem)
    test_pki = TestPKI(work / "ca.crt", pki.write_ca_dir(ca.cert_pem, work / "ca-dir"), ca, work)
    protocols = ("builtin", "xrootd-https", "xrootd-root", "gridftp", "iperf3")
    agents: list = []

    def start() -> Any:
        agents.append(start_agent(test_pki, protocols=protocols, run_user="nobody",
                                  budget_bytes=int(22 * size * 1.05) + 10**8, log_level="WARNING",
                                  xrootd_root_port=free_port(), xrootd_https_port=free_port()))
        return agents[-1]

    def stop(agent: Any) -> None:
        agent.stop()
        shutil.rmtree(agent.data_dir, ignore_errors=True)
        agents.remove(agent)

    def new_destination() -> Any:
        for old in agents[1:]:
            stop(old)
        dst = start()
        # the source's GridFTP server admits only the mesh's members: name the new destination one, as an operator's
        # run names its agents (the agent's daemons/gridmap.py)
        agents[0].file_set(count=11, size=size, mesh=[dst.name])
        return dst

    if args.only in (None, "movers"):
        run_movers(args, agents, start, stop, new_destination, size, wanted, repeats, log)
    if args.only in (None, "disk"):
        from movers_disk import run_disk  # beside this script (agent/bench is not a package)

        run_disk(args, test_pki, agents, stop, wanted, repeats, log)
    if args.only in (None, "auth"):
        # two source sets, and 8 streams x 11 files must fit beside them (XRootD buffers about a file per stream)
        run_auth(args, test_pki, agents, stop, min(pick_size(wanted, 22), AUTH_MAX_SIZE), repeats, log)
    shutil.rmtree(work, ignore_errors=True)
    return 0


class RunStamp:
    """A section's run as its header tells it: the file size, and (taken when the run begins, told once it has
    ended) when it ended, on what machine, how long it took and the load at its start and end."""

    def __init__(self, size: int) -> None:
        self.t0 = time.monotonic()
        self.load_start = os.getloadavg()[0]
        self.size_text = f"{size / 1e9:g} GB" if size >= 10**8 else f"{size / 1e6:g} MB"

    def ended(self) -> str:
        return (f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}, {platform.node()}, {os.cpu_count()} cores, "
                f"run took {time.monotonic() - self.t0:.0f} s, 1-minute load average {self.load_start:.1f} at the "
                f"start and {os.getloadavg()[0]:.1f} at the end")


def run_movers(args: Any, agents: list, start: Any, stop: Any, new_destination: Any, size: int, wanted: int,
               repeats: int, log: Any) -> None:
    """The movers table: every mover, the main matrix."""
    stamp = RunStamp(size)
    reduced = size != wanted
    try:
        src = start()
        log(f"Creating 11 x {size} bytes on the source agent {src.address}")
        files = src.file_set(count=11, size=size)["files"]
        src_dir = src.data_dir / "data" / "sets" / f"11x{size}"
        bench = Bench(size, repeats, log)
        bench.run(src, new_destination, files, src_dir)
    finally:
        for a in list(agents):
            stop(a)
    size_text = stamp.size_text
    note = (f" **Files reduced to {size_text}** (wanted {wanted / 1e9:g} GB: source set + one stored copy must fit "
            f"in /dev/shm and free memory)." if reduced else "")
    header = (f"Two real agents on loopback addresses of their own, {'quick run: ' if args.quick else ''}files of "
              f"{size_text} (SI), 1 file or 11 at once, 1 or 8 streams per file; "
              f"{'one run' if repeats == 1 else f'median of {repeats}'}; Gbit/s = SI wall-clock aggregate (bytes / "
              "time from start to the last byte). sink discards the bytes (GridFTP: its server writes /dev/null); "
              "GridFTP authenticates with the agents' X509 host certificates (gsiftp, the agents' default) and "
              "leaves the data channel plain (-nodcau); "
              "store writes them to tmpfs. XRootD always stores (its server writes the file). Received files are "
              "not checksummed in these rows (cp verifies nothing either), except in the “built-in, adler32 "
              "verified” rows, which show what the agents' default check costs. iperf3 is measured "
              "with the agents' iperf3 mover (-R); ratio to iperf3 uses the same stream count. cp is timed at the "
              "start and at the end of every repeat (median of all); one untimed cp and built-in store of the whole "
              "set first warm the memory, and an untimed cp before each case's built-in store rows (on this VM the "
              "first write into memory it has not touched lately, e.g. freed by the last XRootD, is slower). "
              f"{stamp.ended()} (the load counts the benchmark's own threads, XRootD's many; other work on the "
              f"machine lowers every figure).{note}")
    write_section(args.output, bench.table(header))
    log(f"Wrote the bench-movers section of {args.output}")


def run_auth(args: Any, test_pki: Any, agents: list, stop: Any, size: int, repeats: int, log: Any) -> None:
    """The authorization rows (movers_auth.py): a token pair and an x509 pair of agents, the issuer in-process, and
    the none pair of plain XRootD instances, serving the x509 source's files."""
    from movers_auth import END as AUTH_END  # beside this script (agent/bench is not a package)
    from movers_auth import START as AUTH_START
    from movers_auth import AuthBench

    from tests.support.agents import start_agent
    from tests.support.anonymous_xrootd import anonymous_xrootd_pair
    from tests.support.tokens import running_issuer

    stamp = RunStamp(size)
    bench = AuthBench(size, repeats, log, Bench(size, repeats, log).api)
    with running_issuer(test_pki) as issuer:
        try:
            pairs, files = {}, {}
            for mode in ("token", "x509"):
                extra = {"xrootd_token_issuer": issuer.issuer} if mode == "token" else {}
                pair = [start_agent(test_pki, protocols=("xrootd-https",), run_user="nobody", log_level="WARNING",
                                    budget_bytes=int(22 * size * 1.05) + 10**8, xrootd_https_port=free_port(),
                                    **extra) for _ in range(2)]
                agents.extend(pair)
                pairs[mode] = (pair[0], pair[1])
                log(f"Creating 11 x {size} bytes on the {mode} source agent {pair[0].address}")
                files[mode] = pair[0].file_set(count=11, size=size)["files"]
            files["none"] = files["x509"]
            with anonymous_xrootd_pair(test_pki, pairs["x509"][0].data_dir / "data") as anonymous:
                bench.run(pairs, issuer, files, anonymous)
        finally:
            for a in list(agents):
                stop(a)
    header = (f"{(movers_auth_doc())} {'Quick run: f' if args.quick else 'F'}iles of {stamp.size_text} (SI); "
              f"{'one run' if repeats == 1 else f'median of {repeats}'} (the spread column: lowest-highest sample "
              "of the agent-driven and the by-hand copies). The x509 rows already read the source anonymously: only "
              "the destination's local instance checks the agent's certificate, once per connection; the none rows "
              "check nothing on either side. "
              f"{stamp.ended()}.")
    write_section(args.output, bench.section(header), AUTH_START, AUTH_END)
    log(f"Wrote the bench-movers authorization section of {args.output}")


def movers_auth_doc() -> str:
    import movers_auth

    return " ".join((movers_auth.__doc__ or "").split("\n\n", 1)[1].split())


if __name__ == "__main__":
    sys.exit(main())

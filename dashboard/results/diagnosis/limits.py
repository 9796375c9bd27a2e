"""The limit model: which bound a measurement ran into, with its figures, and a fix that cites them.

Pure Python (no Django, no I/O): the dashboard calls :func:`diagnose` at ingest or query time with what it holds
about the pair (the measurement, the pair's iperf3 with the most streams, the built-in mover beside it, each end's
host telemetry). Every input is optional except the measured rate; a bound whose figures are missing is absent
and its missing figure is named, never guessed. Rates are SI Gbit/s, sizes bytes (printed in SI MB), RTT ms.

**Connections.** A test moves ``min(files, concurrency)`` files at once with ``streams`` TCP connections each:
``conns = streams × files in flight``. Per-connection bounds (window, loss) are multiplied by ``conns``. The rate
judged is the one given as ``gbps`` (the record's aggregate: what the pair carried per second; with all files in
flight at once it equals the throughput).

**Bounds** (each a :class:`Bound` with its value, evidence figures and a fix):

- *network-capacity*: the pair's iperf3 with the most streams, same run or the newest (``path``).
- *receive-window*: ``conns × W_r ÷ RTT`` with ``W_r = tcp_rmem max (destination) × f_r``, the share of the
  receive buffer Linux advertises as window. Kernels before 6.6 use ``tcp_adv_win_scale`` (s > 0:
  ``f_r = 1 − 2^−s``, s ≤ 0: ``2^s``; the default 1 gives ½). Linux 6.6 (commit dfa2f0483360, "tcp: get rid of
  sysctl_tcp_adv_win_scale") made that sysctl obsolete: each socket scales by its measured skb len/truesize, so
  ``f_r`` depends on the driver and MTU; we assume ``WINDOW_FRACTION`` = 0.8 there (measured in this project's WAN
  lab on 6.18, 53 ms, MTU 65 000: 0.95–0.97), unless ``receive_window_fraction`` is given. Without the kernel
  release (or an explicit fraction) tcp_rmem cannot be read as a window: the bound is absent.
- *send-buffer*: ``conns × W_s ÷ RTT`` with ``W_s = tcp_wmem max (source) × WINDOW_FRACTION``: the send buffer
  holds every unacknowledged byte plus per-packet overhead (measured in the lab: 0.72 of a 2 MiB, 0.85 of a 4 MiB
  buffer in flight). tcp_rmem/tcp_wmem bound the buffers the kernel autotunes; ``net.core.rmem_max``/``wmem_max``
  cap only what a program asks for with SO_RCVBUF/SO_SNDBUF, so they are evidence and part of the fix, not the
  bound.
- The observed window widens these: if the receiver's rcv_space (bytes it took in per round trip) exceeds the
  window derived from the limits by a quarter, the window bound uses it (the limits were read too low). The sender's
  cwnd does not: it is a cap, not data in flight, and BBR sets it to twice its BDP estimate whatever the windows
  (seen in the lab: a 4× larger cwnd than a 1 MiB send buffer allowed in flight).
- *loss* (Mathis et al. 1997): ``conns × MSS × 1.22 ÷ (RTT × √p)``, ``p`` = retransmits ÷ data segments sent,
  MSS from tcp_info or the source's MTU − 52 (IPv4 + TCP with timestamps). Only for loss-based congestion control
  (reno, cubic, …): BBR does not back off on random loss, so with BBR at the source the bound is absent. No
  retransmits: no loss bound.
- *source-cpu* / *destination-cpu*: each end's loopback ceiling (the host's rate to itself, without the network);
  and a core at least ``CORE_BUSY_PERCENT`` (95 %) busy during the test, softirq included, or the end's processes
  using at least that share of their CPU quota, or a quota that ran out in at least ``THROTTLED_PERCENT`` (50 %)
  of its enforcement periods (a throttled cgroup): the host ran out at the measured rate, so that bound's value *is*
  the measured rate. A core of a node whose cores are shared with other nodes (the WAN lab) is no evidence.
- *source-storage* / *destination-storage* (disk mode, #28): only for an end that read or wrote a disk. Its
  disk path's ceiling (fio, sequential 1 MiB, O_DIRECT: the source's read, the destination's write ceiling); and
  its storage tax: this pair's rate with that end alone on disk (disk→memory for the source, memory→disk for the
  destination; the measurement itself when the other end is memory) against the same pair's memory→memory rate,
  same protocol and setting otherwise. That rate is a bound on every cell with this end on disk, when it is below
  ``1 − STORAGE_TAX_MIN`` (0.9) of the memory rate: a disk that costs less than that explains nothing.
- *protocol*: the built-in mover on the same pair and streams. It is not a ceiling but a comparison: the protocol
  binds when nothing else does and the built-in mover got at least ``1 ÷ PROTOCOL_SHORTFALL`` (1.25) times more.

**The binding limit.** A measurement *sits at* a bound when ``AT_BOUND (0.8) ≤ measured ÷ bound ≤ ABOVE_BOUND
(1.25)``: a bound exceeded by more than 25 % was estimated too low and explains nothing. The loss bound is allowed
``LOSS_ABOVE`` (2.0): Mathis's constant is 0.87–1.31 by ACK strategy and loss pattern (1.22 is periodic loss),
retransmits only approximate the loss rate, and Linux's cubic with SACK recovers from random loss better than the
model's Reno: in the lab, one cubic stream over 53 ms with 0.1 % random loss got 1.0–2.0 × its Mathis bound, eight
streams 1.0–1.3 ×. Without the kernel's window fractions a flow that sits at both a window and a lower loss bound is
ambiguous; with them, the window TCP waited on is direct evidence and wins.

Of the bounds it sits at, the lowest binds; bounds within ``TIE_BAND`` (10 %) of the lowest tie, and so does direct
evidence (a saturated CPU, a window the kernel says TCP waited on) whatever its value; the first in ``TIE_ORDER``
wins: receive-window, send-buffer, source-cpu, destination-cpu, source-storage, destination-storage,
network-capacity, loss (the specific mechanism before the path, as an iperf3 path figure is itself subject to the
same windows; but losses at the path's own capacity are a full path's congestion signal, so the path comes before
loss). When the kernel's
rwnd_limited / sndbuf_limited fractions of busy time are given they decide the window, as NDT (Web100) classes a
flow receiver-, sender- or network-limited by where it spent most of its time: the largest of rwnd_limited,
sndbuf_limited and the rest (cwnd: the network) names the one window limit considered (none for the network); a
window named by the kernel binds even if its limits are missing (then its value is the measured rate and its fix
names the missing figure). If no bound binds: *protocol* when the built-in mover's comparison says so, else
*unknown* with the missing figures named.

**Efficiency** = measured ÷ the pair's path bound (network-capacity); absent without it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

LIMITS = ("network-capacity", "receive-window", "send-buffer", "loss", "source-cpu", "destination-cpu", "protocol",
          "source-storage", "destination-storage", "unknown")
TIE_ORDER = ("receive-window", "send-buffer", "source-cpu", "destination-cpu", "source-storage", "destination-storage",
             "network-capacity", "loss")
AT_BOUND = 0.8
ABOVE_BOUND = 1.25
LOSS_ABOVE = 2.0
TIE_BAND = 0.10
CORE_BUSY_PERCENT = 95.0
THROTTLED_PERCENT = 50.0  # a group throttled in half its periods ran out of quota most of the test
PROTOCOL_SHORTFALL = 0.8
STORAGE_TAX_MIN = 0.1  # a disk end that keeps 90 % of the memory rate is no bound (within the tie band of the path)
WINDOW_FRACTION = 0.8
SCALING_RATIO_KERNEL = (6, 6)  # the first release that scales the receive window per socket
MATHIS_C = 1.22  # sqrt(3/2), Mathis et al. 1997, periodic loss with delayed ACKs off
HEADER_BYTES = 52  # IPv4 20 + TCP 20 + timestamps 12
LOSS_BASED = ("reno", "cubic", "htcp", "bic", "scalable", "highspeed", "westwood", "illinois", "hybla", "vegas",
              "veno", "yeah", "lp", "dctcp", "nv", "cdg")
WINDOW_STATES = ("receive-window", "send-buffer", "network")


@dataclass(frozen=True)
class Host:
    """One end's limits and host figures during the test (all optional)."""

    name: str | None = None
    kernel: str | None = None  # `uname -r`, e.g. "6.1.0-26-amd64"
    tcp_rmem_max: int | None = None  # net.ipv4.tcp_rmem, third value (bytes)
    tcp_wmem_max: int | None = None  # net.ipv4.tcp_wmem, third value
    rmem_max: int | None = None  # net.core.rmem_max
    wmem_max: int | None = None  # net.core.wmem_max
    tcp_adv_win_scale: int | None = None
    receive_window_fraction: float | None = None  # known share of the receive buffer advertised, overrides kernel
    congestion_control: str | None = None
    mtu: int | None = None
    loopback_gbps: float | None = None
    busiest_core_percent: float | None = None  # the busiest core's busy share, softirq included
    cores_shared: bool = False  # the cores are shared with other nodes (the WAN lab): a busy one is not this node's
    cpu_quota_used_percent: float | None = None  # the end's processes' CPU as a share of their cgroup quota
    cpu_throttled_percent: float | None = None  # the share of its cgroup's CPU periods in which the quota ran out
    storage: str = "memory"  # where this end kept the test's files: memory or disk (the record's storage)
    disk_read_gbps: float | None = None  # its disk path's ceilings (fio, sequential 1 MiB, O_DIRECT)
    disk_write_gbps: float | None = None

    def label(self, role: str) -> str:
        return self.name or f"the {role}"


@dataclass(frozen=True)
class Tcp:
    """The test's TCP view (tcp_info), summed or maxed over its connections."""

    cwnd_max_bytes: int | None = None  # sender: largest cwnd × MSS of one connection
    rcv_space_bytes: int | None = None  # receiver: largest tcpi_rcv_space of one connection
    mss_bytes: int | None = None
    retransmits: int | None = None
    data_segs_out: int | None = None
    rwnd_limited: float | None = None  # share of busy time, 0..1
    sndbuf_limited: float | None = None


@dataclass(frozen=True)
class PathCapacity:
    """The pair's iperf3 with the most streams."""

    gbps: float
    streams: int
    same_run: bool = True


@dataclass(frozen=True)
class Measurement:
    gbps: float
    protocol: str = "builtin"
    streams: int = 1
    files: int = 1
    concurrency: int | None = None
    rtt_ms: float | None = None
    source: Host = field(default_factory=Host)
    destination: Host = field(default_factory=Host)
    tcp: Tcp = field(default_factory=Tcp)
    path: PathCapacity | None = None
    builtin_gbps: float | None = None  # the built-in mover on the same pair and streams
    # the same pair and setting under the other storage settings (disk mode): memory→memory, and each end alone
    # on disk (disk→memory, memory→disk); None: not measured
    memory_gbps: float | None = None
    source_disk_gbps: float | None = None
    destination_disk_gbps: float | None = None

    @property
    def connections(self) -> int:
        in_flight = min(self.files, self.concurrency) if self.concurrency else self.files
        return max(1, self.streams) * max(1, in_flight)


@dataclass(frozen=True)
class Bound:
    limit: str
    gbps: float
    ratio: float  # measured ÷ gbps
    basis: str  # what the value is, with its formula filled in
    evidence: dict[str, float | int | str]
    fix: str
    direct: bool = False  # the host or kernel said so (a saturated CPU, a window TCP waited on): always a tie

    @property
    def sits_at(self) -> bool:
        return AT_BOUND <= self.ratio <= (LOSS_ABOVE if self.limit == "loss" else ABOVE_BOUND)


@dataclass(frozen=True)
class Diagnosis:
    limit: str
    efficiency: float | None
    path_gbps: float | None
    binding: Bound | None
    bounds: tuple[Bound, ...]
    missing: tuple[str, ...]
    reason: str

    @property
    def fix(self) -> str | None:
        return self.binding.fix if self.binding else None

    def to_dict(self) -> dict:
        return {"limit": self.limit, "efficiency": self.efficiency, "path_gbps": self.path_gbps,
                "reason": self.reason, "fix": self.fix, "missing": list(self.missing),
                "bounds": [asdict(b) | {"sits_at": b.sits_at} for b in self.bounds]}


def mb(n: float) -> str:
    return f"{n / 1e6:.3g} MB"


def gb(x: float) -> str:
    return f"{x:.3g} Gbit/s"


def kernel_version(release: str | None) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)", release or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def receive_window_fraction(host: Host) -> tuple[float, str] | None:
    """The share of tcp_rmem the kernel advertises as window, and how it is known; None: unknown."""
    if host.receive_window_fraction is not None:
        return host.receive_window_fraction, "given"
    version = kernel_version(host.kernel)
    if version is None:
        return None
    if version < SCALING_RATIO_KERNEL:
        s = 1 if host.tcp_adv_win_scale is None else host.tcp_adv_win_scale
        return (1 - 2.0 ** -s if s > 0 else 2.0 ** s), f"tcp_adv_win_scale {s} (kernel {version[0]}.{version[1]})"
    return WINDOW_FRACTION, f"assumed: kernel {version[0]}.{version[1]} scales per socket by len/truesize"


def _window_rate(conns: int, window: float, rtt_ms: float) -> float:
    return conns * window * 8 / (rtt_ms / 1000) / 1e9


class _Builder:
    def __init__(self, m: Measurement) -> None:
        self.m = m
        self.bounds: list[Bound] = []
        self.missing: list[str] = []
        self.conns = m.connections
        self.src = m.source.label("source")
        self.dst = m.destination.label("destination")

    def add(self, limit: str, gbps: float, basis: str, evidence: dict, fix: str, direct: bool = False) -> None:
        if not (gbps > 0 and math.isfinite(gbps)):
            return
        self.bounds.append(Bound(limit, gbps, self.m.gbps / gbps, basis, evidence, fix, direct))

    def need(self, what: str) -> None:
        if what not in self.missing:
            self.missing.append(what)

    # -- the bounds ----------------------------------------------------------------------------------------

    def path(self) -> None:
        p = self.m.path
        if p is None:
            self.need("the pair's iperf3 capacity (iperf3 with the most streams, this run or the newest)")
            return
        when = "this run" if p.same_run else "the newest run"
        eff = self.m.gbps / p.gbps if p.gbps > 0 else 0.0
        self.add("network-capacity", p.gbps, f"iperf3 with {p.streams} streams ({when}): {gb(p.gbps)}",
                 {"path_gbps": p.gbps, "iperf3_streams": p.streams, "same_run": str(p.same_run).lower()},
                 f"the path carries {gb(p.gbps)} with {p.streams} iperf3 streams and this test got {eff:.0%} of "
                 "it: nothing to fix at the hosts; more needs a faster path")

    def target_window(self) -> tuple[float, str] | None:
        """Per connection, the window that would fill the path: BDP = path ÷ conns × RTT."""
        p, rtt = self.m.path, self.m.rtt_ms
        if p is None or rtt is None or p.gbps <= self.m.gbps:
            return None
        per_conn = p.gbps / self.conns
        bdp = per_conn * 1e9 / 8 * rtt / 1000
        return bdp, f"BDP = {gb(per_conn)} × {rtt:g} ms = {mb(bdp)} per connection"

    def buffer_fix(self, sysctl: str, core: str, host: Host, who: str, current: int, fraction: float,
                   bound_gbps: float) -> str:
        target = self.target_window()
        if target is None:
            return (f"raise net.ipv4.{sysctl} max on {who} above its {mb(current)} (with {self.conns} connection(s) "
                    f"over {self.m.rtt_ms:g} ms it allows {gb(bound_gbps)}); no iperf3 path figure above this "
                    "rate names a target")
        bdp, how = target
        need = bdp / fraction
        factor = "2 × BDP" if abs(fraction - 0.5) < 1e-9 else f"BDP ÷ {fraction:.2g}"
        text = f"raise net.ipv4.{sysctl} max on {who} to at least {factor} = {mb(need)} ({how})"
        core_max = host.rmem_max if core == "rmem_max" else host.wmem_max
        if core_max is not None and core_max < need:
            text += f", and net.core.{core} (now {mb(core_max)}) to the same for programs that set their buffers"
        if self.m.path is not None:
            in_flight = self.conns // max(1, self.m.streams)  # files at once
            per_stream = bound_gbps / self.conns
            text += f"; or use {math.ceil(self.m.path.gbps / (per_stream * in_flight))} streams"
        return text

    def windows(self) -> None:
        m, rtt = self.m, self.m.rtt_ms
        if rtt is None or rtt <= 0:
            self.need("the pair's RTT")
            for host, who, setting in ((m.destination, self.dst, "tcp_rmem"), (m.source, self.src, "tcp_wmem")):
                if getattr(host, f"{setting}_max") is None:
                    self.need(f"{setting} max of {who}")
            return
        observed = m.tcp.rcv_space_bytes or 0
        dst, src = m.destination, m.source
        if dst.tcp_rmem_max is None:
            self.need(f"tcp_rmem max of {self.dst}")
        else:
            known = receive_window_fraction(dst)
            if known is None:
                self.need(f"the kernel release of {self.dst} (to read tcp_rmem as a window)")
            else:
                f, how = known
                window = dst.tcp_rmem_max * f
                basis = f"{self.conns} × {mb(window)} ÷ {rtt:g} ms (tcp_rmem max {mb(dst.tcp_rmem_max)} × {f:.2g})"
                if observed > 1.25 * window:
                    window = observed
                    basis = f"{self.conns} × {mb(window)} ÷ {rtt:g} ms (the largest window observed)"
                value = _window_rate(self.conns, window, rtt)
                self.add("receive-window", value, basis,
                         {"tcp_rmem_max_bytes": dst.tcp_rmem_max, "window_fraction": round(f, 3),
                          "window_fraction_from": how, "window_bytes": round(window), "rtt_ms": rtt,
                          "connections": self.conns} | _opt("rmem_max_bytes", dst.rmem_max),
                         self.buffer_fix("tcp_rmem", "rmem_max", dst, self.dst, dst.tcp_rmem_max, f, value))
        if src.tcp_wmem_max is None:
            self.need(f"tcp_wmem max of {self.src}")
        else:
            window = src.tcp_wmem_max * WINDOW_FRACTION
            basis = f"{self.conns} × {mb(window)} ÷ {rtt:g} ms (tcp_wmem max {mb(src.tcp_wmem_max)} × " \
                    f"{WINDOW_FRACTION:g})"
            if observed > 1.25 * window:
                window = observed
                basis = f"{self.conns} × {mb(window)} ÷ {rtt:g} ms (the largest window observed)"
            value = _window_rate(self.conns, window, rtt)
            self.add("send-buffer", value, basis,
                     {"tcp_wmem_max_bytes": src.tcp_wmem_max, "window_fraction": WINDOW_FRACTION,
                      "window_bytes": round(window), "rtt_ms": rtt, "connections": self.conns}
                     | _opt("wmem_max_bytes", src.wmem_max),
                     self.buffer_fix("tcp_wmem", "wmem_max", src, self.src, src.tcp_wmem_max, WINDOW_FRACTION,
                                     value))

    def loss(self) -> None:
        m, t = self.m, self.m.tcp
        if t.retransmits is None or not t.data_segs_out:
            self.need("retransmits and data segments sent (the sender's tcp_info)")
            return
        if t.retransmits <= 0:
            return
        cc = (m.source.congestion_control or "").lower()
        if not cc:
            self.need(f"the congestion control of {self.src}")
            return
        if cc not in LOSS_BASED:
            return  # BBR and other model-based senders do not halve on random loss: Mathis does not apply
        mss = t.mss_bytes or (m.source.mtu - HEADER_BYTES if m.source.mtu else None)
        if not mss:
            self.need(f"the MSS (or the MTU of {self.src})")
            return
        if m.rtt_ms is None or m.rtt_ms <= 0:
            self.need("the pair's RTT")
            return
        p = t.retransmits / t.data_segs_out
        value = self.conns * mss * MATHIS_C / (m.rtt_ms / 1000 * math.sqrt(p)) * 8 / 1e9
        fix = (f"find the loss on the path: {t.retransmits} of {t.data_segs_out} segments retransmitted "
               f"(p = {p:.2%}) allows {gb(value)} over {m.rtt_ms:g} ms with {cc}")
        if m.path is not None and m.path.gbps > m.gbps:
            p_need = (self.conns * mss * MATHIS_C * 8 / (m.rtt_ms / 1000 * m.path.gbps * 1e9)) ** 2
            fix += f"; reaching the path's {gb(m.path.gbps)} needs p ≤ {p_need:.2g}"
        fix += "; or a congestion control that tolerates random loss (bbr), or more streams"
        self.add("loss", value, f"{self.conns} × {mss} B × {MATHIS_C} ÷ ({m.rtt_ms:g} ms × √{p:.3g})",
                 {"retransmits": t.retransmits, "data_segs_out": t.data_segs_out, "loss_p": p, "mss_bytes": mss,
                  "rtt_ms": m.rtt_ms, "congestion_control": cc, "connections": self.conns}, fix)

    def hosts(self) -> None:
        for role, host, who in (("source", self.m.source, self.src), ("destination", self.m.destination, self.dst)):
            limit = f"{role}-cpu"
            if host.loopback_gbps is None:
                self.need(f"the loopback ceiling of {who}")
            else:
                self.add(limit, host.loopback_gbps, f"{who}'s loopback: {gb(host.loopback_gbps)}",
                         {"loopback_gbps": host.loopback_gbps},
                         f"{who} reaches only {gb(host.loopback_gbps)} to itself, without the network: its CPU "
                         "(or memory bandwidth) is the ceiling; look at its CPU, interrupts and power settings")
            core = None if host.cores_shared else host.busiest_core_percent
            quota, throttled = host.cpu_quota_used_percent, host.cpu_throttled_percent
            if core is None and quota is None and throttled is None:
                self.need(f"the busiest core of {who}" + (" (its cores are shared with other nodes)"
                                                          if host.cores_shared else ""))
            if core is not None and core >= CORE_BUSY_PERCENT:
                self.add(limit, self.m.gbps, f"a core of {who} {core:.0f} % busy (softirq included)",
                         {"busiest_core_percent": core},
                         f"a core of {who} was {core:.0f} % busy (softirq included) at {gb(self.m.gbps)}: spread "
                         "the NIC's interrupts (RSS, irqbalance), keep the transfer off the interrupt core, or give "
                         "the node more CPU", direct=True)
            elif quota is not None and quota >= CORE_BUSY_PERCENT:
                self.add(limit, self.m.gbps, f"{who}'s processes used {quota:.0f} % of their CPU quota",
                         {"cpu_quota_used_percent": quota},
                         f"{who}'s transfer processes used {quota:.0f} % of their CPU quota at {gb(self.m.gbps)}: "
                         "raise the quota (the pod's CPU limit) or remove it", direct=True)
            elif throttled is not None and throttled >= THROTTLED_PERCENT:
                self.add(limit, self.m.gbps, f"{who}'s CPU quota ran out in {throttled:.0f} % of its periods",
                         {"cpu_throttled_percent": throttled},
                         f"{who}'s CPU quota ran out in {throttled:.0f} % of its periods at {gb(self.m.gbps)}: "
                         "raise the quota (the pod's CPU limit) or remove it", direct=True)

    def storage(self) -> None:
        m = self.m
        for role, host, other, who, op, alone in (
                ("source", m.source, m.destination, self.src, "read", m.source_disk_gbps),
                ("destination", m.destination, m.source, self.dst, "write", m.destination_disk_gbps)):
            if host.storage != "disk":
                continue
            limit = f"{role}-storage"
            ceiling = host.disk_read_gbps if op == "read" else host.disk_write_gbps
            if ceiling is None:
                self.need(f"the disk {op} ceiling of {who} (fio)")
            else:
                self.add(limit, ceiling, f"{who}'s disk path: {op} {gb(ceiling)} (fio, O_DIRECT)",
                         {f"disk_{op}_gbps": ceiling},
                         f"{who}'s disk path {op}s only {gb(ceiling)} (fio: sequential 1 MiB, O_DIRECT, at the "
                         "benchmark's concurrency): a faster device or array (NVMe, more disks in the stripe), or "
                         "spread the files over more disks")
            if other.storage != "disk":
                alone = m.gbps  # this end is the only one on disk: the measurement is its storage's rate
            if m.memory_gbps is None:
                self.need("this pair's memory-to-memory rate (a run with spec.storage both)")
            elif alone is None:
                self.need(f"this pair's rate with {who} alone on disk (a run with spec.storage both)")
            elif alone < (1 - STORAGE_TAX_MIN) * m.memory_gbps:
                tax = 1 - alone / m.memory_gbps
                fix = (f"{who}'s storage costs {tax:.0%} of this pair's rate: {gb(alone)} with its disk against "
                       f"{gb(m.memory_gbps)} memory to memory")
                fix += (f"; its disk path {op}s {gb(ceiling)} (fio), so the device is the ceiling"
                        if ceiling is not None and ceiling <= alone * ABOVE_BOUND else
                        f"; the disk path's own {op} ceiling (fio) is "
                        + ("missing" if ceiling is None else f"higher, {gb(ceiling)}")
                        + ": look at how the mover reads and writes (O_DIRECT, block size, files at once)")
                self.add(limit, alone, f"{who}'s storage alone: {gb(alone)} against {gb(m.memory_gbps)} memory to "
                         f"memory (a {tax:.0%} tax)",
                         {"memory_gbps": m.memory_gbps, f"{role}_disk_gbps": alone, "storage_tax": round(tax, 3)},
                         fix)

    def protocol(self) -> None:
        m = self.m
        if m.protocol == "builtin":
            return
        if m.builtin_gbps is None:
            self.need(f"the built-in mover on this pair at {m.streams} stream(s)")
            return
        self.add("protocol", m.builtin_gbps,
                 f"the built-in mover, same pair and {m.streams} stream(s): {gb(m.builtin_gbps)}",
                 {"builtin_gbps": m.builtin_gbps, "protocol_gbps": m.gbps},
                 f"the built-in mover gets {gb(m.builtin_gbps)} on the same pair and streams, {m.protocol} "
                 f"{gb(m.gbps)} ({m.gbps / m.builtin_gbps:.0%}): the protocol's own cost (its servers' buffers, "
                 "TLS, threads); tune its settings")


def _opt(key: str, value: object) -> dict:
    return {} if value is None else {key: value}


def window_state(tcp: Tcp) -> tuple[str, dict[str, float]] | None:
    """NDT's class from the kernel's fractions: where the sender spent most of its busy time."""
    if tcp.rwnd_limited is None and tcp.sndbuf_limited is None:
        return None
    rwnd, sndbuf = tcp.rwnd_limited or 0.0, tcp.sndbuf_limited or 0.0
    shares = {"receive-window": rwnd, "send-buffer": sndbuf, "network": max(0.0, 1.0 - rwnd - sndbuf)}
    return max(WINDOW_STATES, key=lambda k: shares[k]), shares


def _pick(candidates: Iterable[Bound]) -> Bound | None:
    at = list(candidates)
    if not at:
        return None
    lowest = min(b.gbps for b in at)
    tied = [b for b in at if b.gbps <= lowest * (1 + TIE_BAND) or b.direct]
    return min(tied, key=lambda b: (TIE_ORDER.index(b.limit), b.gbps))


def diagnose(m: Measurement) -> Diagnosis:
    if not (m.gbps >= 0 and math.isfinite(m.gbps)):
        raise ValueError(f"gbps must be a finite rate ≥ 0, got {m.gbps!r}")
    b = _Builder(m)
    b.path()
    b.windows()
    b.loss()
    b.hosts()
    b.storage()
    b.protocol()
    bounds = tuple(b.bounds)
    path = m.path.gbps if m.path and m.path.gbps > 0 else None
    efficiency = m.gbps / path if path else None
    state = window_state(m.tcp)
    candidates = [x for x in bounds if x.limit in TIE_ORDER and x.sits_at]
    reason_extra = ""
    if state is not None:
        named, shares = state
        reason_extra = (f"; TCP waited on the receive window {shares['receive-window']:.0%}, the send buffer "
                        f"{shares['send-buffer']:.0%} and the network {shares['network']:.0%} of its busy time")
        candidates = [x for x in candidates if x.limit not in ("receive-window", "send-buffer") or x.limit == named]
        if named != "network" and not any(x.limit == named for x in bounds):
            who = b.dst if named == "receive-window" else b.src
            setting = "tcp_rmem" if named == "receive-window" else "tcp_wmem"
            missing = [x for x in b.missing if setting in x or "kernel" in x or "RTT" in x]
            candidates.append(Bound(named, m.gbps, 1.0, f"the kernel: {named}-limited {shares[named]:.0%} of the time",
                                    {f"{named.replace('-', '_')}_limited": round(shares[named], 3)},
                                    f"raise net.ipv4.{setting} max on {who} (the size to aim for needs "
                                    f"{', '.join(missing) or 'the pair RTT and path figure'})", True))
    chosen = _pick(candidates)
    if chosen is None:
        proto = next((x for x in bounds if x.limit == "protocol"), None)
        if proto is not None and m.gbps <= PROTOCOL_SHORTFALL * proto.gbps:
            chosen = proto
    if chosen is not None:
        reason = f"{chosen.limit}: {gb(m.gbps)} sits at {chosen.basis}{reason_extra}"
        return Diagnosis(chosen.limit, efficiency, path, chosen, bounds, tuple(b.missing), reason)
    shown = ", ".join(f"{x.limit} {gb(x.gbps)}" for x in bounds) or "none"
    if b.missing:
        reason = f"unknown: {gb(m.gbps)} sits at no bound ({shown}); missing: {'; '.join(b.missing)}{reason_extra}"
    else:
        reason = f"unknown: {gb(m.gbps)} sits at none of its bounds ({shown}){reason_extra}"
    return Diagnosis("unknown", efficiency, path, None, bounds, tuple(b.missing), reason)

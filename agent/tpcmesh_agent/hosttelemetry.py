"""Host telemetry: what the node was doing while a test ran, at this end (the source serves, the destination pulls).

A background thread samples every ``interval`` seconds into a bounded ring (``RING`` samples): the CPU time of every
core (psutil.cpu_times: user, nice, system, idle, iowait, irq, softirq, steal), the CPU time of this agent's own
process tree (the agent with its built-in mover and data server, the XRootD / GridFTP / iperf3 servers it
supervises, the clients a mover starts: psutil), every interface's counters (pyroute2: one RTM_GETLINK dump,
IFLA_STATS64), the driver's drop and error counters of the interfaces holding the agent's addresses (pyroute2's
ethtool ioctl, ETHTOOL_GSTATS: what ``ethtool -S`` prints; drivers without statistics, such as loopback, give
none) and the memory available (psutil).

``summary(since, until, peer)`` summarises the samples that bracket a window (the last one at or before ``since``
to the first at or after ``until``; a fresh sample is taken when the newest is older than ``until``), so it
covers the window and at most one interval either side. Per end (``summarize``, pure):

- ``cpu``: ``cores``; the whole window's ``busy_pct`` (all cores: user + nice + system + irq + softirq over all
  time, steal left out), ``user_pct``, ``system_pct``, ``softirq_pct``, ``iowait_pct``; ``busiest_core_pct``: the
  busiest core's busy share in each interval, averaged over the window (a single-threaded bottleneck that the
  scheduler moves between cores still shows), ``busiest_core_softirq_pct`` its softirq share the same way, and
  ``saturated_pct``: the share of the window in which some core was at least ``SATURATED`` % busy; ``quota``: the
  agent's cgroup CPU quota (``cores``, ``throttled_pct`` of its enforcement periods, ``used_pct`` of it: cgroupcpu),
  null without one; ``shared: true`` when the node's cores are shared with other nodes (``host_cpu_shared``: the
  WAN lab), so that a busy core is no evidence about this node;
- ``processes``: per program of the agent's process tree (``agent`` for the agent itself), ``cpu_seconds`` used in
  the window, ``cpu_pct`` (100 = one core all the time) and how many ``processes`` ran; a process that started and
  ended between two samples is not seen;
- ``interface``: the interface the route to ``peer`` leaves by (else the one that moved the most bytes): its
  ``name`` and the window's changes of ``rx_bytes``, ``tx_bytes``, ``rx_dropped``, ``tx_dropped``, ``rx_errors``,
  ``tx_errors``; ``driver``: the driver's counters whose name says drop, error, discard, miss, fifo or timeout
  that moved in the window (``{}``: none moved; null: the driver gives no statistics or the interface was not
  sampled for them);
- ``memory``: ``available_min_bytes`` (the lowest sampled) and ``total_bytes``;
- ``limits``: read when the summary is made, in the agent's own network namespace (the lab runs agents in network
  namespaces, and net.ipv4.* is per namespace): ``tcp_rmem_max_bytes``, ``tcp_wmem_max_bytes``
  (net.ipv4.tcp_rmem / tcp_wmem, third value), ``rmem_max_bytes``, ``wmem_max_bytes`` (net.core.*: global on
  kernels before they were namespaced, read-only in a child namespace), ``congestion_control`` (the default
  algorithm), the interface's ``mtu`` and ``speed_mbps`` (ethtool's link mode; null when the driver does not say,
  e.g. virtio and loopback);
- ``tcp_sent``: why this end's TCP senders to ``peer`` waited (the built-in data server, XRootD, GridFTP, iperf3):
  every sample reads the tcp_info of the established sockets on the agent's server ports and of GridFTP's data
  connections (pyroute2's inet_diag, the kernel's sock_diag, filtered by local port in the kernel) that sent
  data, and keeps the changes of busy time, rwnd- and sndbuf-limited time,
  retransmits and data segments; the summary gives them in tcpinfo's shape (``busy_ms``,
  ``rwnd_limited_fraction``, ``sndbuf_limited_fraction``, ``retransmits``, ``connections``). A connection that
  opens and closes between two samples is not seen, and one that closes loses its last interval;
- ``window``: ``seconds`` covered and ``samples`` used.
Every figure is null when it could not be read; the summary of a window without two samples is None.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from . import cgroupcpu

log = logging.getLogger(__name__)

RING = 3600  # samples kept: an hour at the default 1 s interval
SATURATED = 95.0  # % busy (softirq included) at which a core is taken as saturated
# tcp_info counters of a sending socket kept per interval (inet_diag's INET_DIAG_INFO names, µs for the times)
SENT_COUNTERS = ("tcpi_bytes_acked", "tcpi_busy_time", "tcpi_rwnd_limited", "tcpi_sndbuf_limited",
                 "tcpi_total_retrans", "tcpi_bytes_retrans", "tcpi_data_segs_out")
LINK_COUNTERS = ("rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors")
DRIVER_COUNTER = re.compile(r"drop|err|discard|miss|fifo|timeout", re.IGNORECASE)
# /proc/sys is read directly: no library reads sysctls, and the files are the kernel's own interface (a read
# there answers for the reading process's network namespace)
SYSCTL = Path("/proc/sys")
AGENT = "agent"
EPHEMERAL_SENDERS = ("globus-gridftp-server",)  # send test data from ports of their own choice (data channels)


@dataclass(frozen=True)
class Sample:
    """One moment of the node: cumulative counters (seconds, bytes, packets) as the kernel keeps them."""

    t: float  # time.time() when the interface counters were read (what a window's bytes come from)
    cpu: tuple[tuple[float, ...], ...]  # per core (user, nice, system, idle, iowait, irq, softirq, steal)
    procs: dict[int, tuple[str, float, float]] = field(default_factory=dict)  # pid -> (program, started, cpu s)
    links: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> LINK_COUNTERS
    driver: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> the driver's drop/error counters
    mem_available: int | None = None
    mem_total: int | None = None
    # what this node's TCP senders did since the previous sample: (peer address, socket cookie) -> SENT_COUNTERS
    # changes, for the sockets that sent data in that interval
    sent: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    quota: cgroupcpu.QuotaCounters | None = None  # the agent's cgroup CPU quota and its counters, if it has one


# ---- the summary (pure) ------------------------------------------------------------------------------------------
_USER, _NICE, _SYSTEM, _IDLE, _IOWAIT, _IRQ, _SOFTIRQ, _STEAL = range(8)


def _core_shares(a: Sequence[float], b: Sequence[float]) -> tuple[float, dict[str, float]] | None:
    """(elapsed core seconds, {busy, user, system, softirq, iowait} as fractions) of one core between two samples."""
    d = [max(0.0, y - x) for x, y in zip(a, b, strict=True)]
    total = sum(d)
    if total <= 0:
        return None
    busy = d[_USER] + d[_NICE] + d[_SYSTEM] + d[_IRQ] + d[_SOFTIRQ]
    return total, {"busy": busy / total, "user": (d[_USER] + d[_NICE]) / total, "system": d[_SYSTEM] / total,
                   "softirq": d[_SOFTIRQ] / total, "iowait": d[_IOWAIT] / total}


def _pct(v: float | None) -> float | None:
    return None if v is None else round(100 * v, 1)


def cpu_summary(samples: Sequence[Sample]) -> dict[str, Any] | None:
    """The ``cpu`` part of a summary (see the module's docstring); None without two samples of the same cores."""
    if len(samples) < 2 or not samples[0].cpu or any(len(s.cpu) != len(samples[0].cpu) for s in samples):
        return None
    first, last = samples[0], samples[-1]
    whole = [c for a, b in zip(first.cpu, last.cpu, strict=True) if (c := _core_shares(a, b))]
    if not whole:
        return None
    weight = sum(t for t, _ in whole)

    def mean(key: str) -> float:
        return sum(t * s[key] for t, s in whole) / weight

    busiest = busiest_softirq = saturated = span = 0.0
    for a, b in zip(samples, samples[1:], strict=False):
        cores = [c[1] for x, y in zip(a.cpu, b.cpu, strict=True) if (c := _core_shares(x, y))]
        dt = b.t - a.t
        if not cores or dt <= 0:
            continue
        top = max(cores, key=lambda s: s["busy"])
        busiest += dt * top["busy"]
        busiest_softirq += dt * top["softirq"]
        saturated += dt if top["busy"] * 100 >= SATURATED else 0.0
        span += dt
    return {
        "cores": len(first.cpu),
        "busy_pct": _pct(mean("busy")), "user_pct": _pct(mean("user")), "system_pct": _pct(mean("system")),
        "softirq_pct": _pct(mean("softirq")), "iowait_pct": _pct(mean("iowait")),
        "busiest_core_pct": _pct(busiest / span) if span else None,
        "busiest_core_softirq_pct": _pct(busiest_softirq / span) if span else None,
        "saturated_pct": _pct(saturated / span) if span else None,
        "quota": cgroupcpu.summary(first.quota, last.quota, last.t - first.t),
    }


def process_summary(samples: Sequence[Sample]) -> dict[str, dict[str, Any]]:
    """The ``processes`` part: CPU per program of the agent's tree over the samples' span. A process already there at
    the first sample counts from it; one that started later counts from its start (all of its CPU time)."""
    if len(samples) < 2:
        return {}
    start, seconds = samples[0], samples[-1].t - samples[0].t
    used: dict[tuple[int, float], tuple[str, float]] = {}  # (pid, started) -> (program, cpu seconds in the window)
    for s in samples[1:]:
        for pid, (name, started, cpu) in s.procs.items():
            before = start.procs.get(pid)
            base = before[2] if before is not None and before[1] == started else 0.0
            used[(pid, started)] = (name, max(0.0, cpu - base))
    out: dict[str, dict[str, Any]] = {}
    for name, cpu in used.values():
        entry = out.setdefault(name, {"cpu_seconds": 0.0, "cpu_pct": None, "processes": 0})
        entry["cpu_seconds"] += cpu
        entry["processes"] += 1
    for entry in out.values():
        entry["cpu_pct"] = round(100 * entry["cpu_seconds"] / seconds, 1) if seconds > 0 else None
        entry["cpu_seconds"] = round(entry["cpu_seconds"], 3)
    return dict(sorted(out.items()))


def interface_summary(samples: Sequence[Sample], name: str | None) -> dict[str, Any] | None:
    """The ``interface`` part for ``name`` (None: the interface that moved the most bytes); None without counters."""
    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    both = [n for n in last.links if n in first.links]
    if name is None:
        if not both:
            return None
        name = max(both, key=lambda n: sum(last.links[n][:2]) - sum(first.links[n][:2]))
    out: dict[str, Any] = {"name": name}
    if name in both:
        out.update({k: max(0, b - a) for k, a, b in zip(LINK_COUNTERS, first.links[name], last.links[name],
                                                          strict=True)})
    else:
        out.update(dict.fromkeys(LINK_COUNTERS))
    a_drv, b_drv = first.driver.get(name), last.driver.get(name)
    out["driver"] = None if a_drv is None or b_drv is None else {
        k: b_drv[k] - a_drv[k] for k in sorted(b_drv) if k in a_drv and b_drv[k] != a_drv[k]}
    return out


def sent_summary(samples: Sequence[Sample], peer: str | None) -> dict[str, Any] | None:
    """The ``tcp_sent`` part: this end's TCP senders towards ``peer`` over the samples' intervals, in tcpinfo's
    shape (``busy_ms``, ``rwnd_limited_fraction``, ``sndbuf_limited_fraction``, ``retransmits``,
    ``bytes_retrans``, ``data_segs_out``, ``connections``); None without a peer or when nothing was sent to it."""
    if peer is None or len(samples) < 2:
        return None
    total = [0] * len(SENT_COUNTERS)
    connections = set()
    for s in samples[1:]:  # each sample holds the changes since the one before it
        for (address, cookie), changes in s.sent.items():
            if address == peer:
                connections.add(cookie)
                total = [a + b for a, b in zip(total, changes, strict=True)]
    if not connections:
        return None
    acked, busy, rwnd, sndbuf, retrans, bytes_retrans, segs = total
    return {"connections": len(connections), "retransmits": retrans, "bytes_retrans": bytes_retrans,
            "data_segs_out": segs, "busy_ms": round(busy / 1000, 3),
            "rwnd_limited_fraction": round(min(1.0, rwnd / busy), 4) if busy else None,
            "sndbuf_limited_fraction": round(min(1.0, sndbuf / busy), 4) if busy else None}


def memory_summary(samples: Sequence[Sample]) -> dict[str, Any]:
    avail = [s.mem_available for s in samples if s.mem_available is not None]
    total = next((s.mem_total for s in reversed(samples) if s.mem_total is not None), None)
    return {"available_min_bytes": min(avail) if avail else None, "total_bytes": total}


def window(ring: Iterable[Sample], since: float, until: float) -> list[Sample]:
    """The samples bracketing [since, until]: the last at or before ``since`` through the first at or after
    ``until`` (fewer at the ring's ends)."""
    ordered = sorted(ring, key=lambda s: s.t)
    lo = max((i for i, s in enumerate(ordered) if s.t <= since), default=0)
    hi = min((i for i, s in enumerate(ordered) if s.t >= until), default=len(ordered) - 1)
    return ordered[lo:hi + 1]


def summarize(samples: Sequence[Sample], interface: str | None = None,
              limits: dict[str, Any] | None = None, peer: str | None = None,
              cpu_shared: bool = False) -> dict[str, Any] | None:
    """One end's host summary from its samples in time order (see the module's docstring); None without two."""
    if len(samples) < 2:
        return None
    cpu = cpu_summary(samples)
    if cpu is not None and cpu_shared:
        cpu["shared"] = True
    return {
        "window": {"seconds": round(samples[-1].t - samples[0].t, 3), "samples": len(samples)},
        "cpu": cpu,
        "processes": process_summary(samples),
        "interface": interface_summary(samples, interface),
        "memory": memory_summary(samples),
        "limits": limits,
        "tcp_sent": sent_summary(samples, peer),
    }


# ---- reading the node --------------------------------------------------------------------------------------------
def _plain(address: str) -> str:
    """An IPv4-mapped IPv6 address (a dual-stack server's IPv4 peer: XRootD listens so) as the IPv4 address."""
    return address.removeprefix("::ffff:") if address.startswith("::ffff:") and "." in address else address


def _sysctl_max(name: str, path: Path = SYSCTL) -> int | None:
    """The last number of a sysctl (tcp_rmem's maximum, rmem_max's only value); None when it cannot be read."""
    try:
        return int((path / name).read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def _sysctl_int(name: str, path: Path = SYSCTL) -> int | None:
    text = _sysctl_text(name, path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _sysctl_text(name: str, path: Path = SYSCTL) -> str | None:
    try:
        return (path / name).read_text().strip() or None
    except OSError:
        return None


def route_interface(peer: str) -> str | None:
    """The interface the kernel's route to ``peer`` leaves by (this network namespace's routes); None: unknown."""
    from pyroute2 import IPRoute

    try:
        with IPRoute() as ipr:
            routes = ipr.route("get", dst=peer)
            index = routes[0].get_attr("RTA_OIF") if routes else None
            if index is None:
                return None
            links = ipr.get_links(index)
            return links[0].get_attr("IFLA_IFNAME") if links else None
    except Exception as e:  # pyroute2 raises NetlinkError, OSError, ValueError for a bad address
        log.info("Finding the interface towards %s failed: %s", peer, e)
        return None


def link_speed_mbps(name: str) -> int | None:
    """The link's speed as the driver reports it (ethtool), None when it does not (virtio, loopback, veth down)."""
    from pyroute2.ethtool import Ethtool

    try:
        with Ethtool() as et:
            speed = et.get_link_mode(name).speed
    except Exception:  # NotSupportedError, NoSuchDevice, NetlinkError: the driver does not say
        return None
    return speed if isinstance(speed, int) and 0 < speed < 10**7 else None


def link_mtu(name: str) -> int | None:
    from pyroute2 import IPRoute

    try:
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=name)
            return ipr.get_links(found[0])[0].get_attr("IFLA_MTU") if found else None
    except Exception:
        return None


def limits(interface: str | None, sysctl: Path = SYSCTL) -> dict[str, Any]:
    """The kernel's limits on TCP in this network namespace, and the interface's MTU and speed (see the module's
    docstring)."""
    return {
        "tcp_rmem_max_bytes": _sysctl_max("net/ipv4/tcp_rmem", sysctl),
        "tcp_wmem_max_bytes": _sysctl_max("net/ipv4/tcp_wmem", sysctl),
        "rmem_max_bytes": _sysctl_max("net/core/rmem_max", sysctl),
        "wmem_max_bytes": _sysctl_max("net/core/wmem_max", sysctl),
        "congestion_control": _sysctl_text("net/ipv4/tcp_congestion_control", sysctl),
        # how much of the receive buffer Linux advertises as window: tcp_adv_win_scale before 6.6, the release says
        # which rule applies (the limit model, dashboard/results/diagnosis/limits.py)
        "tcp_adv_win_scale": _sysctl_int("net/ipv4/tcp_adv_win_scale", sysctl),
        "kernel": os.uname().release,
        "mtu": link_mtu(interface) if interface else None,
        "speed_mbps": link_speed_mbps(interface) if interface else None,
    }


class Sampler:
    """The ring of samples and the thread that fills it (``start``/``stop``); ``summary`` answers a window.
    ``addresses``: the agent's own addresses, whose interfaces' driver counters are sampled too; ``ports``: its
    servers' ports, whose sending sockets make ``tcp_sent``."""

    def __init__(self, interval: float, addresses: Sequence[str] = (), ports: Iterable[int] = (),
                 ring: int = RING, cpu_shared: bool = False, cgroup_root: Path = cgroupcpu.CGROUP_ROOT) -> None:
        self.interval = interval
        self.cpu_shared = cpu_shared
        self.cgroup_root = cgroup_root
        self.ports = frozenset(p for p in ports if p)  # the agent's servers' ports (tcp_sent)
        self.addresses = tuple(a for a in addresses if a)
        self.ring: deque[Sample] = deque(maxlen=ring)
        self._lock = threading.Lock()  # the ring
        self._sampling = threading.Lock()  # one sample at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._me = psutil.Process()
        self._procs: dict[int, psutil.Process] = {}  # psutil keeps each process's identity (pid reuse)
        self._ipr: Any = None
        self._driver_links: set[str] | None = None  # the interfaces whose driver counters are sampled
        self._no_driver_stats: set[str] = set()
        self._sockets: dict[int, tuple[int, ...]] | None = None  # socket cookie -> SENT_COUNTERS, last sample

    # -- one sample --
    def _process_tree(self) -> dict[int, tuple[str, float, float]]:
        out: dict[int, tuple[str, float, float]] = {}
        try:
            tree = [self._me, *self._me.children(recursive=True)]
        except psutil.Error:
            tree = [self._me]
        for p in tree:
            proc = self._procs.setdefault(p.pid, p)
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    name = AGENT if proc.pid == self._me.pid else proc.name()
                    out[proc.pid] = (name, proc.create_time(), t.user + t.system + t.children_user +
                                     t.children_system)
            except psutil.Error:  # ended between the listing and the read
                self._procs.pop(p.pid, None)
        for pid in set(self._procs) - set(out):
            del self._procs[pid]
        return out

    def _links(self) -> dict[str, tuple[int, ...]]:
        from pyroute2 import IPRoute

        if self._ipr is None:
            self._ipr = IPRoute()
        out: dict[str, tuple[int, ...]] = {}
        for link in self._ipr.get_links():
            stats = link.get_attr("IFLA_STATS64") or link.get_attr("IFLA_STATS")
            name = link.get_attr("IFLA_IFNAME")
            if stats and name:
                out[name] = tuple(int(stats.get(k, 0)) for k in LINK_COUNTERS)
        return out

    def _own_interfaces(self) -> set[str]:
        """The interfaces holding the agent's addresses (found once)."""
        if self._driver_links is None:
            found: set[str] = set()
            try:
                from pyroute2 import IPRoute

                with IPRoute() as ipr:
                    for a in ipr.get_addr():
                        if a.get_attr("IFA_ADDRESS") in self.addresses:
                            links = ipr.get_links(a["index"])
                            if links and links[0].get_attr("IFLA_IFNAME") != "lo":
                                found.add(links[0].get_attr("IFLA_IFNAME"))
            except Exception as e:
                log.info("Listing the interfaces of %s failed: %s", ", ".join(self.addresses), e)
            self._driver_links = found
        return self._driver_links

    def _driver(self) -> dict[str, dict[str, int]]:
        from pyroute2.ethtool.ioctl import IoctlEthtool

        out: dict[str, dict[str, int]] = {}
        for name in self._own_interfaces() - self._no_driver_stats:
            eth = IoctlEthtool(name)
            try:
                out[name] = {k: int(v) for k, v in eth.get_statistics() if DRIVER_COUNTER.search(k)}
            except Exception as e:  # NotSupportedError: the driver keeps none; ENODEV: gone
                log.info("The driver of %s gives no statistics (%s): its drops are the kernel's counters only",
                         name, type(e).__name__)
                self._no_driver_stats.add(name)
            finally:
                eth.close()
        return out

    def _sending_ports(self, procs: dict[int, tuple[str, float, float]]) -> set[int]:
        """The local ports this node's test data leaves from: the agent's servers' (``ports``), and the data
        connections of the programs without a fixed one (GridFTP's per-session servers: psutil lists them)."""
        found = set(self.ports)
        for pid, (name, _, _) in procs.items():
            if name not in EPHEMERAL_SENDERS:
                continue
            try:
                found.update(c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp")
                             if c.status == psutil.CONN_ESTABLISHED and c.raddr)
            except psutil.Error:
                continue
        return found

    def _sent(self, procs: dict[int, tuple[str, float, float]]) -> dict[tuple[str, int], tuple[int, ...]]:
        """The established TCP sockets of the agent's servers that sent data since the last call (pyroute2's
        inet_diag, asked for one local port at a time: the kernel filters, so a node with thousands of other
        sockets costs nothing more), their counters' changes; a socket new since then counts from its start (its
        counters are cumulative)."""
        from pyroute2 import DiagSocket

        now: dict[int, tuple[str, tuple[int, ...]]] = {}
        with DiagSocket() as ds:
            ds.bind()
            for port in sorted(self._sending_ports(procs)):
                for family in (socket.AF_INET, socket.AF_INET6):
                    # established sockets, with INET_DIAG_INFO (struct tcp_info)
                    for msg in ds.get_sock_stats(family=family, states=1 << 1, extensions=1 << 1, sport=port):
                        info = msg.get_attr("INET_DIAG_INFO")
                        if info is None or not info.get("tcpi_bytes_acked"):
                            continue  # never sent a byte
                        now[int(msg["idiag_cookie"])] = (_plain(str(msg["idiag_dst"])),
                                                         tuple(int(info.get(k) or 0) for k in SENT_COUNTERS))
        first, before = self._sockets is None, self._sockets or {}
        self._sockets = {cookie: counters for cookie, (_, counters) in now.items()}
        if first:
            return {}  # the baseline: what was sent before the agent started is no test's
        out: dict[tuple[str, int], tuple[int, ...]] = {}
        for cookie, (peer, counters) in now.items():
            old = before.get(cookie, (0,) * len(SENT_COUNTERS))
            if counters[0] > old[0]:  # more bytes acknowledged: it sent in this interval
                out[(peer, cookie)] = tuple(max(0, b - a) for a, b in zip(old, counters, strict=True))
        return out

    def sample(self) -> Sample:
        """Take one sample now and keep it in the ring (one at a time: the thread's, and one a summary asks for,
        share the netlink socket and the counters' last values)."""
        with self._sampling:
            return self._sample()

    def _sample(self) -> Sample:
        cpu = tuple(tuple(getattr(c, f, 0.0) for f in ("user", "nice", "system", "idle", "iowait", "irq",
                                                          "softirq", "steal")) for c in psutil.cpu_times(percpu=True))
        try:
            links = self._links()
        except Exception as e:  # netlink refused (a restricted sandbox): CPU and memory still count
            log.info("Reading the interface counters failed: %s", e)
            links = {}
        # Stamped here, not after the slower reads below (the process tree, the sockets): a sample stamped after
        # them, tens of ms later on a loaded machine, closed a 20 ms window with counters read inside it, and a
        # destination saw 0.12 of the 2 MB it received.
        t = time.time()
        try:
            driver = self._driver()
        except Exception as e:
            log.info("Reading the driver counters failed: %s", e)
            driver = {}
        procs = self._process_tree()
        try:
            sent = self._sent(procs)
        except Exception as e:  # inet_diag refused (a restricted sandbox): no sender view, the rest still counts
            log.info("Reading the TCP sockets failed: %s", e)
            sent = {}
        mem = psutil.virtual_memory()
        s = Sample(t=t, cpu=cpu, procs=procs, links=links, driver=driver,
                   mem_available=int(mem.available), mem_total=int(mem.total), sent=sent,
                   quota=cgroupcpu.read(self.cgroup_root))
        with self._lock:
            self.ring.append(s)
        return s

    # -- the thread --
    def _sample_logged(self) -> None:
        try:
            self.sample()
        except Exception:  # a failed sample must not end the telemetry
            log.exception("Sampling the host failed")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample_logged()

    def start(self) -> Sampler:
        """The first sample now, in the caller (the agent before it says it is ready), then one every interval
        in a thread. Left to the thread, the first sample came late on a loaded machine (the thread's first run,
        the netlink socket's opening): a test begun meanwhile had a window whose first sample was inside it, and
        its byte counters missed what had moved before (1.1 of 2 MB received)."""
        if self.interval > 0 and self._thread is None:
            self._sample_logged()
            self._thread = threading.Thread(target=self._loop, daemon=True, name="host-sampler")
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None

    # -- a window --
    def summary(self, since: float, until: float, peer: str | None = None) -> dict[str, Any] | None:
        """This end's summary of [since, until] (time.time() seconds), the interface towards ``peer`` (an IP);
        None when the agent keeps no telemetry or its samples do not reach back to ``since`` (older than the ring,
        or than the agent)."""
        if self._thread is None:
            return None
        with self._lock:
            newest = self.ring[-1].t if self.ring else None
        if newest is None or newest < until:
            self.sample()
        with self._lock:
            samples = window(self.ring, since, until)
        if len(samples) < 2 or samples[0].t > since + max(2 * self.interval, 1.0):
            return None  # the window began before the oldest sample kept (or the agent): no summary of a part
        name = route_interface(peer) if peer else None
        if name is None:
            busiest = interface_summary(samples, None)
            name = busiest["name"] if busiest else None
        return summarize(samples, name, limits(name), peer, self.cpu_shared)

"""The delay line: a user-space router between TUN devices that releases each packet after its link's delay.

This kernel has no ``sch_netem``, so WAN links are emulated here. The process opens one TUN device per node
(created in the root network namespace; the lab then moves each into its node's namespace, the open file keeps
working), reads IPv4 and IPv6 packets, looks up the destination node by address (or by a /24 network the node
routes, such as the pod network of a `tpcmesh-local cluster` node) and releases the packet on that node's
device once the directed link's one-way delay has passed. A link may also have a rate (a serialisation clock with
a bounded queue, so TCP sees drops instead of an endless queue) and a random loss. A group of nodes may share an
uplink (a site's one shaped connection, the WAN profile's ``uplinks``): a packet between a member and a node
outside the group first passes the group's serialisation clock for its direction, which every member shares.

Run as ``python -m tpcmesh_lab.delayline CONFIG.json``; it prints ``READY`` on stdout once every device
exists, and exits (removing its devices with it) when stdin closes or its parent dies.
"""

from __future__ import annotations

import ctypes
import fcntl
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29
MAX_PACKET = 65536 + 64
READ_BURST = 64
# The most the lateness compensation schedules a packet early (so also the most one can leave early, on a pass where
# the process happens to be on time): the average lateness of a small machine, capped.
EARLIEST_S = 0.0003


@dataclass
class Link:
    delay: float  # seconds, one way
    rate_bps: float | None  # bits per second, None = unlimited
    loss: float  # probability 0..1
    queue_bytes: int  # most bytes waiting for the serialisation clock
    free_at: float = 0.0  # when the link finishes sending what is queued
    sent_packets: int = 0
    dropped_packets: int = 0
    last_release: float = 0.0  # when the packet last scheduled on this link leaves: a wire never reorders

    def admit(self, now: float, size: int, rand: Callable[[], float] = random.random) -> float | None:
        """When a packet of ``size`` bytes arriving ``now`` leaves the link, or None when it is dropped (random
        loss, or the queue in front of the rate limit is full)."""
        if self.loss and rand() < self.loss:
            self.dropped_packets += 1
            return None
        if self.rate_bps:
            start = self.free_at if self.free_at > now else now
            if (start - now) * self.rate_bps / 8 > self.queue_bytes:
                self.dropped_packets += 1
                return None
            self.free_at = start + size * 8 / self.rate_bps
            release = self.free_at + self.delay
        else:
            release = now + self.delay
        self.sent_packets += 1
        return release


def schedule(stages: tuple[Link, ...], now: float, size: int, lateness: float,
             rand: Callable[[], float] = random.random) -> float | None:
    """When a packet arriving ``now`` leaves its last stage (None: dropped), ``lateness`` earlier to make up for the
    line's own late wake-ups, but never before the packet ahead of it on the same link: the compensation moves
    between packets, and a packet overtaking its predecessor would be a reordering no wire makes (a clean link's
    receiver counted an out-of-order packet in a CI run)."""
    release = now
    for stage in stages:  # each stage takes the packet when the one before lets it go
        leaves = stage.admit(release, size, rand)
        if leaves is None:
            return None
        release = leaves
    last = stages[-1]
    if last.delay > lateness:
        release -= lateness
    release = max(release, last.last_release)
    last.last_release = release
    return release


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def routed_networks(nodes: list[dict]) -> dict[bytes, int]:
    """The first three bytes of each node's routed /24 networks (``"networks": ["198.19.129.0/24"]``) -> node."""
    out: dict[bytes, int] = {}
    for i, n in enumerate(nodes):
        for cidr in n.get("networks", []):
            address, _, length = cidr.partition("/")
            if length != "24" or not address.endswith(".0"):
                raise ValueError(f"node {n['name']}: routed network {cidr!r} must be a /24 like 198.19.129.0/24")
            key = socket.inet_aton(address)[:3]
            if key in out:
                raise ValueError(f"node {n['name']}: routed network {cidr} is already routed to another node")
            out[key] = i
    return out


def build_links(config: dict) -> tuple[list[str], dict[bytes, int], list[list[Link | None]]]:
    """Devices, node by address (4 bytes IPv4, 16 bytes IPv6: one map, the lengths never collide), links."""
    nodes = config["nodes"]
    names = [n["device"] for n in nodes]
    by_addr = {socket.inet_aton(n["address"]): i for i, n in enumerate(nodes)}
    by_addr.update({socket.inet_pton(socket.AF_INET6, n["address6"]): i for i, n in enumerate(nodes)
                    if n.get("address6")})
    index = {n["name"]: i for i, n in enumerate(nodes)}
    links: list[list[Link | None]] = [[None] * len(nodes) for _ in nodes]
    for spec in config["links"]:
        i, j = index[spec["from"]], index[spec["to"]]
        rate = spec.get("rate_bps")
        delay = float(spec.get("delay_s", 0.0))
        if rate:
            # A queue of one bandwidth-delay product (at least 16 full packets) like a well-sized router buffer.
            queue = max(int(rate / 8 * max(2 * delay, 0.001)), 16 * 65536)
        else:
            queue = 0
        links[i][j] = Link(delay=delay, rate_bps=rate, loss=float(spec.get("loss", 0.0)), queue_bytes=queue)
    return names, by_addr, links


def build_routes(config: dict, links: list[list[Link | None]]) -> list[list[tuple[Link, ...] | None]]:
    """What a packet from node i to node j passes, in order: the sender's uplink out (when j is outside its
    group), the receiver's uplink in (when i is outside its group), then the pair's own link (its delay)."""
    nodes = config["nodes"]
    index = {n["name"]: i for i, n in enumerate(nodes)}
    group: dict[int, tuple[Link, Link]] = {}
    member_of: dict[int, int] = {}
    for g, up in enumerate(config.get("uplinks") or []):
        rate = float(up["rate_bps"])
        queue = max(int(rate / 8 * 0.05), 16 * 65536)  # 50 ms of the uplink's rate, at least 16 full packets
        group[g] = (Link(0.0, rate, 0.0, queue), Link(0.0, rate, 0.0, queue))  # (out, in)
        for name in up["members"]:
            member_of[index[name]] = g
    routes: list[list[tuple[Link, ...] | None]] = []
    for i, row in enumerate(links):
        out_row: list[tuple[Link, ...] | None] = []
        for j, link in enumerate(row):
            if link is None:
                out_row.append(None)
                continue
            gi, gj = member_of.get(i), member_of.get(j)
            stages = []
            if gi is not None and gi != gj:
                stages.append(group[gi][0])
            if gj is not None and gi != gj:
                stages.append(group[gj][1])
            out_row.append((*stages, link))
        routes.append(out_row)
    return routes


def run(config: dict) -> None:
    names, by_addr, links = build_links(config)
    routes = build_routes(config, links)
    by_net = routed_networks(config["nodes"])
    fds = [open_tun(name) for name in names]
    fd_index = {fd: i for i, fd in enumerate(fds)}
    watch = [*fds, sys.stdin.fileno()]
    print("READY", flush=True)
    heap: list[tuple[float, int, int, bytes]] = []
    seq = 0
    # How late packets leave on average (timer wake-up and scheduling); scheduled that much earlier so the delay
    # a packet sees matches its link's delay also for short (metro) links.
    lateness = 0.0
    rand = random.random
    now_fn = time.monotonic
    while True:
        timeout = max(0.0, heap[0][0] - now_fn()) if heap else None
        readable, _, _ = select.select(watch, [], [], timeout)
        for fd in readable:
            if fd not in fd_index:  # stdin: closed means the lab is gone
                if not os.read(fd, 4096):
                    return
                continue
            src = fd_index[fd]
            row = routes[src]
            for _ in range(READ_BURST):
                try:
                    packet = os.read(fd, MAX_PACKET)
                except BlockingIOError:
                    break
                version = packet[0] >> 4 if packet else 0
                if version == 4 and len(packet) >= 20:
                    dst = by_addr.get(packet[16:20])
                    if dst is None:
                        dst = by_net.get(packet[16:19])
                elif version == 6 and len(packet) >= 40:
                    dst = by_addr.get(packet[24:40])  # the destination address of the fixed header
                else:
                    continue
                if dst is None or dst == src:
                    continue
                stages = row[dst]
                if stages is None:
                    continue
                release = schedule(stages, now_fn(), len(packet), lateness, rand)
                if release is None:
                    continue
                seq += 1
                heapq.heappush(heap, (release, seq, dst, packet))
        now = now_fn()
        while heap and heap[0][0] <= now:
            due, _, dst, packet = heapq.heappop(heap)
            # Capped: on a loaded machine wake-ups are late at random, and a packet must never leave much early.
            lateness = 0.95 * lateness + 0.05 * min(now - due, EARLIEST_S)
            try:
                os.write(fds[dst], packet)
            except (BlockingIOError, OSError):
                pass  # the device's queue is full or it went down: the packet is lost like on a wire


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        libc.prctl(PR_SET_TIMERSLACK, 1)  # wake up on time (nanoseconds of slack, not the default 50 us)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m tpcmesh_lab.delayline CONFIG.json", file=sys.stderr)
        return 2
    _die_with_parent()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(argv[0], encoding="utf-8") as fh:
        config = json.load(fh)
    try:
        run(config)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

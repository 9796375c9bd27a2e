"""A kernel-routed lab: network namespaces joined by veth pairs, with routers that forward in the kernel.

The WAN lab (netns.py) joins its namespaces through the delay line, which forwards in user space and never
decrements a packet's TTL: a tracepath through it sees one hop whatever the profile says. Tests that need real IP
hops (a route change through a router, a link with a smaller MTU, one shaped uplink shared by a site) build them
here. Namespaces are named like the WAN lab's (``tpcm-<pid>-...``), so a later lab removes what a killed run left.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from .netns import PREFIX, LabError, _ip, remove_leftovers, remove_namespace


@dataclass
class Link:
    a: str
    b: str
    a_address: str
    b_address: str
    a_device: str
    b_device: str


@dataclass
class RoutedLab:
    """``with RoutedLab() as lab``: add nodes, link them (a /30 each), route, run commands inside."""

    nodes: dict[str, str] = field(default_factory=dict)  # name -> namespace
    links: list[Link] = field(default_factory=list)
    tag: str = field(default_factory=lambda: f"{os.getpid()}-{os.urandom(2).hex()}")

    def __enter__(self) -> RoutedLab:
        remove_leftovers()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for netns in self.nodes.values():
            remove_namespace(netns)
        self.nodes.clear()

    def add_node(self, name: str, router: bool = False) -> str:
        netns = f"{PREFIX}{self.tag}-{name}"
        _ip("netns", "add", netns)
        self.nodes[name] = netns
        _ip("-n", netns, "link", "set", "dev", "lo", "up")
        if router:
            self.run(name, ["sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
        return netns

    def link(self, a: str, b: str, subnet: str, mtu: int = 1500) -> Link:
        """A veth pair between ``a`` and ``b`` on a /30: ``a`` takes its first address, ``b`` its second."""
        first, second = list(ipaddress.ip_network(subnet).hosts())[:2]
        k = len(self.links)
        dev_a, dev_b = f"v{k}{b}"[:15], f"v{k}{a}"[:15]
        _ip("link", "add", dev_a, "netns", self.nodes[a], "mtu", str(mtu), "type", "veth", "peer", "name", dev_b,
            "netns", self.nodes[b], "mtu", str(mtu))
        prefix = ipaddress.ip_network(subnet).prefixlen
        for node, dev, address in ((a, dev_a, first), (b, dev_b, second)):
            _ip("-n", self.nodes[node], "addr", "add", f"{address}/{prefix}", "dev", dev)
            _ip("-n", self.nodes[node], "link", "set", "dev", dev, "up")
        link = Link(a, b, str(first), str(second), dev_a, dev_b)
        self.links.append(link)
        return link

    def add_address(self, node: str, address: str) -> None:
        """An address of the node's own (on lo), reachable by whichever route the others take to it."""
        _ip("-n", self.nodes[node], "addr", "add", f"{address}/32", "dev", "lo")

    def route(self, node: str, destination: str, via: str) -> None:
        """Set (or replace) ``node``'s route to ``destination`` through the gateway ``via``."""
        _ip("-n", self.nodes[node], "route", "replace", destination, "via", via)

    def command(self, node: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.nodes[node], *argv]

    def run(self, node: str, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 120)
        try:
            return subprocess.run(self.command(node, argv), **kwargs)
        except subprocess.CalledProcessError as e:
            raise LabError(f"`{' '.join(argv)}` in {node} failed: {(e.stderr or '').strip()}") from e

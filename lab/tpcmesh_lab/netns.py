"""The WAN emulation lab: one network namespace per node, joined by the delay line.

Topology: every node gets a namespace ``tpcm-<pid>-<node>`` holding one TUN device ``wan0`` with an address from a
documentation range that collides with no route on the machine, and an IPv6 address from the documentation
prefix 2001:db8::/32 (a /64 named after the IPv4 range, so two labs never share one: ``ipv6_prefix``). The other
end of every TUN device is the delay line process (``delayline.py``), which routes packets between the namespaces
and holds each one for its link's one-way delay (and rate and loss) from the WAN profile. The root namespace is one
more endpoint of the delay line (address ``.1`` and ``::1`` of the /64, no delay), so the local operator reaches
every agent's control API.

Without root, ``ip netns`` or ``/dev/net/tun`` the lab falls back to loopback addresses ``127.0.1.x`` (no delays)
and says so. Everything created is removed by :meth:`Lab.close` - called on exit, on SIGTERM/Ctrl-C, when the delay
line or a process marked critical dies - and a later start removes what a killed run left behind.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import errno
import fcntl
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import diskpath, hostlimits
from .profile import WanProfile

log = logging.getLogger("tpcmesh.local.lab")

PREFIX = "tpcm-"
DEVICE_PREFIX = "tp"
CANDIDATE_SUBNETS = ("198.51.100.0/24", "203.0.113.0/24", "198.18.0.0/24", "198.19.0.0/24", "198.18.100.0/24")
MTU = 65000
LOCK_FILE = Path("/run/tpcmesh-lab.lock")
NETNS_ETC = Path("/etc/netns")
LOOPBACK_BASE = ipaddress.IPv4Address("127.0.1.1")
# Loopback addresses are held with an flock in this directory (shared with the tests' agent fixture) so parallel
# meshes never share one.
LOOPBACK_LOCK_DIR = Path(tempfile.gettempdir()) / "tpcmesh-test-addresses"
LOOPBACK_PROBE_PORTS = (9443, 9464, 9080, 1094, 8444, 2811, 5201)


class LabError(RuntimeError):
    """The lab could not be built; the message says which step failed and why."""


@dataclass
class Node:
    name: str
    address: str
    netns: str | None = None  # None: loopback mode, processes run in the root namespace
    device: str | None = None
    address6: str | None = None  # netns mode: its IPv6 address (the delay line carries both families)
    cpu_group: hostlimits.CpuGroup | None = None  # the profile's cpuQuota: every process started here joins it
    sysctls: dict[str, list[int]] = field(default_factory=dict)  # the profile's buffer maxima, as written
    disk: diskpath.LoopDisk | None = None  # the profile's diskBytes: the agent's disk_dir is its mount
    io_group: diskpath.IoThrottle | None = None  # diskWriteMBps/diskReadMBps: every process started here joins it


@dataclass
class Lab:
    """Build with :meth:`start` (or ``with Lab(profile) as lab``); run processes with :meth:`popen`."""

    profile: WanProfile
    mode: str = "auto"  # auto | netns | loopback
    on_failure: Callable[[str], None] | None = None
    nodes: list[Node] = field(default_factory=list)
    host_address: str = "127.0.0.1"
    host_address6: str | None = None  # netns mode: the root namespace's IPv6 end of the delay line
    subnet: str | None = None
    # node name -> /24 networks the delay line routes to that node besides its address (a cluster's pod networks)
    networks: dict[str, list[str]] = field(default_factory=dict)
    host_device: str | None = None  # the root namespace's TUN device (netns mode)
    emulated: bool = False
    reason: str = ""
    cgroup_root: Path | None = None  # the CPU hierarchy where the nodes' agents see it (hostlimits.cgroup_view)
    _processes: list[tuple[subprocess.Popen, bool, str]] = field(default_factory=list)
    _delayline: subprocess.Popen | None = None
    _tmp: Path | None = None
    _cleanups: list[Callable[[], None]] = field(default_factory=list)
    _held: list[int] = field(default_factory=list)
    _closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- building ---------------------------------------------------------------------------------------------

    def __enter__(self) -> Lab:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in the lab (nodes: {[n.name for n in self.nodes]})")

    def start(self) -> Lab:
        want = self.mode
        if want not in ("auto", "netns", "loopback"):
            raise LabError(f"lab mode must be auto, netns or loopback, got {want!r}")
        problem = netns_unavailable_reason()
        if want == "netns" and problem:
            raise LabError(f"network namespaces requested but unavailable: {problem}")
        self._install_cleanup_hooks()
        if want == "loopback" or problem:
            self.reason = "loopback requested" if want == "loopback" else problem
            self._start_loopback()
        else:
            try:
                self._start_netns()
            except LabError as e:
                self.close()
                if want == "netns":
                    raise
                # Root, but namespaces or TUN devices cannot be made here (e.g. a container without the
                # privileges): what was made is gone; run on loopback like a non-root user.
                self._closed, self._delayline, self._tmp, self.nodes, self.subnet = False, None, None, [], None
                self.reason = f"the WAN lab failed: {e}"
                self._start_loopback()
            except BaseException:
                self.close()
                raise
        return self

    def _start_loopback(self) -> None:
        self.emulated = False
        self.host_address = "127.0.0.1"
        LOOPBACK_LOCK_DIR.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(LOOPBACK_LOCK_DIR, 0o1777)
        addresses: list[str] = []
        for i in range(9 * 254):
            if len(addresses) == len(self.profile.nodes):
                break
            address = f"127.0.{1 + i // 254}.{1 + i % 254}"
            try:
                fd = os.open(LOOPBACK_LOCK_DIR / address, os.O_CREAT | os.O_RDWR, 0o666)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if not _address_free(address):
                os.close(fd)
                continue
            self._held.append(fd)
            addresses.append(address)
        if len(addresses) < len(self.profile.nodes):
            raise LabError("no free loopback addresses 127.0.1.1-127.0.9.254 for the mesh")
        self.nodes = [Node(name=name, address=a) for name, a in zip(self.profile.nodes, addresses, strict=True)]
        log.info(
            "Running on loopback addresses %s-%s without WAN emulation (%s).",
            self.nodes[0].address, self.nodes[-1].address, self.reason,
        )
        if self.profile.hosts:
            log.warning("The profile's host limits (%s) are not applied without the netns lab.",
                        ", ".join(sorted(self.profile.hosts)))

    def _start_netns(self) -> None:
        remove_leftovers()
        self._tmp = Path(tempfile.mkdtemp(prefix="tpcmesh-lab-"))
        pid = os.getpid()
        with _file_lock(LOCK_FILE):
            subnet = pick_subnet()
            self.subnet = str(subnet)
            hosts = list(subnet.hosts())
            prefix6 = ipv6_prefix(subnet)
            self.host_address = str(hosts[0])
            self.host_address6 = str(prefix6[1])
            self.nodes = [
                Node(name=name, address=str(hosts[9 + i]), netns=f"{PREFIX}{pid}-{name}",
                     device=f"{DEVICE_PREFIX}{pid}-{i}", address6=str(prefix6[10 + i]))
                for i, name in enumerate(self.profile.nodes)
            ]
            host_device = self.host_device = f"{DEVICE_PREFIX}{pid}-h"
            self._start_delayline(host_device)
            _ip("link", "set", "dev", host_device, "mtu", str(MTU), "up")
            _ip("addr", "add", f"{self.host_address}/{subnet.prefixlen}", "dev", host_device)
            # nodad: usable at once (duplicate address detection would hold it "tentative" for a second or more)
            _ip("-6", "addr", "add", f"{self.host_address6}/64", "dev", host_device, "nodad")
        for node in self.nodes:
            assert node.netns and node.device
            _ip("netns", "add", node.netns)
            _ip("link", "set", "dev", node.device, "netns", node.netns)
            _ip("-n", node.netns, "link", "set", "dev", "lo", "up")
            _ip("-n", node.netns, "link", "set", "dev", node.device, "name", "wan0")
            node.device = "wan0"
            _ip("-n", node.netns, "link", "set", "dev", "wan0", "mtu", str(MTU), "up")
            _ip("-n", node.netns, "addr", "add", f"{node.address}/{subnet.prefixlen}", "dev", "wan0")
            _ip("-n", node.netns, "-6", "addr", "add", f"{node.address6}/64", "dev", "wan0", "nodad")
            self._write_hosts(node)
        self.emulated = True
        self._apply_host_limits()
        log.info(
            "Created %d network namespaces on %s joined by the delay line (host side %s).",
            len(self.nodes), self.subnet, self.host_address,
        )

    def _apply_host_limits(self) -> None:
        """The profile's ``hosts``: buffer maxima in each node's namespace, its CPU group and busy processes."""
        for node in self.nodes:
            spec = self.profile.host(node.name)
            assert node.netns
            try:
                for name, maximum in spec.sysctls.items():
                    node.sysctls[name] = hostlimits.set_buffer_max(node.netns, name, maximum)
                if spec.cpu_quota is not None:
                    node.cpu_group = hostlimits.CpuGroup.create(node.netns, spec.cpu_quota)
                if spec.disk_bytes is not None:
                    node.disk = diskpath.LoopDisk.create(node.netns[len(PREFIX):], spec.disk_bytes, diskpath.DISK_DIR,
                                                         spec.disk_filesystem)
                if spec.disk_write_mbps is not None or spec.disk_read_mbps is not None:
                    assert node.disk is not None
                    node.io_group = diskpath.IoThrottle.create(
                        f"{node.netns}-io", node.disk.majmin, round((spec.disk_read_mbps or 0) * 1e6),
                        round((spec.disk_write_mbps or 0) * 1e6))
            except hostlimits.LimitError as exc:
                raise LabError(f"the limits of node {node.name} (the profile's hosts): {exc}") from exc
            if node.sysctls or node.cpu_group or node.disk:
                log.info("Limited node %s: %s.", node.name, ", ".join(
                    [f"{k} {' '.join(map(str, v))}" for k, v in node.sysctls.items()]
                    + ([f"{spec.cpu_quota:g} cores ({node.cpu_group.hierarchy.describe()})"] if node.cpu_group else [])
                    + ([f"a {spec.disk_filesystem} disk of {spec.disk_bytes} bytes on {node.disk.device} at "
                        f"{node.disk.mount}"] if node.disk else [])
                    + ([f"disk write {spec.disk_write_mbps or '-'} MB/s, read {spec.disk_read_mbps or '-'} MB/s "
                        f"(cgroup v{node.io_group.hierarchy.version})"] if node.io_group else [])
                    + ([f"{spec.cpu_hogs} busy processes beside it"] if spec.cpu_hogs else [])))
            if node.cpu_group is not None and self.cgroup_root is None:
                self.cgroup_root, remove = hostlimits.cgroup_view(node.cpu_group.hierarchy)
                self.add_cleanup(remove)
            for _ in range(spec.cpu_hogs):
                self.popen(node, [sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)

    def _write_hosts(self, node: Node) -> None:
        """``ip netns exec`` bind-mounts /etc/netns/<ns>/hosts over /etc/hosts: every node's name, and this
        machine's host name as the node's own address (servers like GridFTP resolve their own host name)."""
        assert node.netns
        directory = NETNS_ETC / node.netns
        directory.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost", f"{self.host_address} tpcmesh-host"]
        own = socket.gethostname()
        for n in self.nodes:
            names = [n.name, own] if n is node and own not in (x.name for x in self.nodes) else [n.name]
            lines.append(f"{n.address} {' '.join(names)}")
            if n.address6:  # GridFTP on an IPv6 address looks it up too (no DNS here: it must be in the file)
                lines.append(f"{n.address6} {' '.join(names)}")
        (directory / "hosts").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _start_delayline(self, host_device: str) -> None:
        assert self._tmp
        endpoints: list[dict[str, Any]] = [{"name": "@host", "address": self.host_address,
                                            "address6": self.host_address6, "device": host_device}]
        endpoints += [{"name": n.name, "address": n.address, "address6": n.address6, "device": n.device,
                       "networks": self.networks.get(n.name, [])} for n in self.nodes]
        links: list[dict[str, Any]] = []
        for a in endpoints:
            for b in endpoints:
                if a is b:
                    continue
                if "@host" in (a["name"], b["name"]):
                    links.append({"from": a["name"], "to": b["name"]})
                    continue
                spec = self.profile.link(a["name"], b["name"])
                links.append({
                    "from": a["name"], "to": b["name"], "delay_s": spec.delay_ms / 1000,
                    "rate_bps": spec.rate_mbit * 1e6 if spec.rate_mbit else None, "loss": spec.loss_percent / 100,
                })
        uplinks = [{"name": u.name, "members": list(u.nodes), "rate_bps": u.rate_mbit * 1e6}
                   for u in self.profile.uplinks]
        config_path = self._tmp / "delayline.json"
        config_path.write_text(json.dumps({"nodes": endpoints, "links": links, "uplinks": uplinks}),
                               encoding="utf-8")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
        proc = subprocess.Popen(
            [sys.executable, "-m", "tpcmesh_lab.delayline", str(config_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self._tmp / "delayline.log", "wb"),
            env=env, start_new_session=True, preexec_fn=die_with_parent(),
        )
        self._delayline = proc
        assert proc.stdout
        line = _readline_with_timeout(proc.stdout, 10.0)
        if line.strip() != b"READY":
            proc.kill()
            detail = (self._tmp / "delayline.log").read_text(errors="replace").strip()[-2000:]
            raise LabError(f"the delay line did not start (exit {proc.poll()}): {detail or line!r}")
        threading.Thread(target=self._watch, args=(proc, "the delay line"), daemon=True).start()

    # -- running processes -----------------------------------------------------------------------------------

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` at close, after the lab's processes were stopped."""
        self._cleanups.append(fn)

    def command(self, node: Node | str | None, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run in the node's namespace (None: the root namespace)."""
        n = self.node(node) if isinstance(node, str) else node
        if n is not None and n.netns:
            return ["ip", "netns", "exec", n.netns, *argv]
        return list(argv)

    def popen(self, node: Node | str | None, argv: Sequence[str], *, critical: bool = False,
              **kwargs) -> subprocess.Popen:
        """Start ``argv`` inside the node's namespace (None: the root one) in a session of its own; it is stopped
        at close, and a ``critical`` one that dies before takes the whole lab down."""
        n = self.node(node) if isinstance(node, str) else node
        kwargs.setdefault("start_new_session", True)
        kwargs["preexec_fn"] = self._preexec(n, kwargs.get("preexec_fn", die_with_parent()))
        what = f"{Path(argv[0]).name} on {n.name if n else 'the host'}"
        proc = subprocess.Popen(self.command(n, argv), **kwargs)
        with self._lock:
            self._processes.append((proc, critical, what))
        if critical:
            threading.Thread(target=self._watch, args=(proc, what), daemon=True).start()
        return proc

    def run(self, node: Node | str, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        n = self.node(node) if isinstance(node, str) else node
        if n.cpu_group is not None or n.io_group is not None:
            kwargs["preexec_fn"] = self._preexec(n, kwargs.get("preexec_fn"))
        return subprocess.run(self.command(node, argv), **kwargs)

    @staticmethod
    def _preexec(node: Node | None, then: Callable[[], None] | None) -> Callable[[], None] | None:
        """``then``, after joining the node's CPU group and disk throttle when it has them."""
        groups = [g for g in (node.cpu_group, node.io_group) if g is not None] if node is not None else []
        if not groups:
            return then
        joins = [g.join() for g in groups]

        def preexec() -> None:
            for join in joins:
                join()
            if then is not None:
                then()

        return preexec

    def _watch(self, proc: subprocess.Popen, what: str) -> None:
        code = proc.wait()
        if self._closed:
            return
        message = f"{what} exited unexpectedly with code {code}; the lab was removed"
        log.error("%s.", message)
        self.close()
        if self.on_failure is not None:
            self.on_failure(message)
        else:
            _thread.interrupt_main()

    # -- teardown --------------------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            processes = list(self._processes)
        # the lab's processes first (they may still send through the delay line), all at once: one grace period
        # for all of them, so Ctrl-C stays quick however many agents the lab runs
        terminate_all([proc for proc, _, _ in processes])
        if self._delayline is not None:
            if self._delayline.stdin:
                with contextlib.suppress(OSError):
                    self._delayline.stdin.close()
            terminate_all([self._delayline])
        for node in self.nodes:
            if node.netns:
                remove_namespace(node.netns)
            if node.cpu_group is not None:
                node.cpu_group.remove()
            if node.io_group is not None:
                node.io_group.remove()
            if node.disk is not None:  # after its agent stopped: nothing holds the mount
                node.disk.remove()
        for fn in reversed(self._cleanups):
            try:
                fn()
            except Exception:  # one failed cleanup must not keep the others from running
                log.exception("A cleanup step of the lab failed")
        for fd in self._held:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._held.clear()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
        if self.emulated:
            log.info("Removed the lab's %d network namespaces and the delay line.", len(self.nodes))

    def _install_cleanup_hooks(self) -> None:
        atexit.register(self.close)
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _raise_system_exit)
            if signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGHUP, _raise_system_exit)


PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``signum`` when this process dies, even by SIGKILL (which runs no cleanup
    here). The lab's children run in sessions of their own, so nothing else would stop them; ``ip netns exec``
    execs in place and keeps the setting. A parent that died before the call is caught by the ppid check."""
    import ctypes

    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def _raise_system_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def netns_unavailable_reason() -> str:
    """Empty when namespaces + TUN can be used here; otherwise why not."""
    if os.environ.get("TPCMESH_LOCAL_LOOPBACK"):
        return "TPCMESH_LOCAL_LOOPBACK is set"
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is missing"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, timeout=10)
    except (subprocess.SubprocessError, OSError) as exc:
        return f"`ip netns` does not work here: {exc}"
    return ""


def used_networks() -> list[ipaddress.IPv4Network]:
    nets: list[ipaddress.IPv4Network] = []
    routes = json.loads(_ip("-j", "-4", "route", "show", "table", "all") or "[]")
    for r in routes:
        dst = r.get("dst", "")
        if dst in ("default", "") or r.get("type") in ("broadcast",):
            continue
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.IPv4Network(dst, strict=False))
    for link in json.loads(_ip("-j", "-4", "addr", "show") or "[]"):
        for a in link.get("addr_info", []):
            with contextlib.suppress(ValueError, KeyError):
                nets.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    return nets


def ipv6_prefix(subnet: ipaddress.IPv4Network) -> ipaddress.IPv6Network:
    """The lab's IPv6 /64 in the documentation prefix, named after its IPv4 range (unique per lab, like it):
    198.18.5.0/24 -> 2001:db8:c612:500::/64."""
    a, b, c, _ = subnet.network_address.packed
    return ipaddress.IPv6Network(f"2001:db8:{a:02x}{b:02x}:{c:02x}00::/64")


def pick_subnet(used: Sequence[ipaddress.IPv4Network] | None = None) -> ipaddress.IPv4Network:
    """The first candidate range that overlaps no route or address of this machine (``used``: what is taken; by
    default read with ``ip``)."""
    used = used_networks() if used is None else used
    for candidate in CANDIDATE_SUBNETS:
        net = ipaddress.IPv4Network(candidate)
        if not any(net.overlaps(u) for u in used):
            return net
    raise LabError(f"every candidate range {list(CANDIDATE_SUBNETS)} collides with a route on this machine")


def lab_namespaces() -> list[str]:
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def remove_namespace(name: str) -> None:
    """Kill what runs in the namespace, delete it and its /etc/netns directory."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=10).stdout
        for pid in pids.split():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=10)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def remove_leftovers(*, all_owners: bool = False) -> list[str]:
    """Remove namespaces, /etc/netns dirs and devices of labs whose process is gone; returns what was removed."""
    removed: list[str] = []

    def owner_gone(rest: str) -> bool:
        pid = rest.split("-", 1)[0]
        return all_owners or not pid.isdigit() or (int(pid) != os.getpid() and not _pid_alive(int(pid)))

    for name in lab_namespaces():
        if owner_gone(name[len(PREFIX):]):
            remove_namespace(name)
            removed.append(name)
    if NETNS_ETC.is_dir():
        for d in NETNS_ETC.iterdir():
            if d.name.startswith(PREFIX) and owner_gone(d.name[len(PREFIX):]):
                shutil.rmtree(d, ignore_errors=True)
    for group in hostlimits.lab_groups(PREFIX):
        if owner_gone(group.name[len(PREFIX):]):
            hostlimits.remove_group(group)
            removed.append(str(group))
    removed += diskpath.clean_leftovers(owner_gone)  # loop disks: after the namespaces whose agents used them
    with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
        for link in json.loads(_ip("-j", "link", "show") or "[]"):
            name = link.get("ifname", "")
            if name.startswith(DEVICE_PREFIX) and name[len(DEVICE_PREFIX):].split("-")[0].isdigit():
                if owner_gone(name[len(DEVICE_PREFIX):]):
                    subprocess.run(["ip", "link", "delete", name], capture_output=True, timeout=10)
                    removed.append(name)
    if removed:
        log.info("Removed leftovers of an earlier lab: %s.", ", ".join(removed))
    return removed


def _address_free(address: str) -> bool:
    for port in LOOPBACK_PROBE_PORTS:
        with socket.socket() as s:
            try:
                s.bind((address, port))
            except OSError:
                return False
    return True


def terminate_all(procs: list[subprocess.Popen], grace: float = 3.0) -> None:
    """SIGTERM to each process group, then one shared grace period, then SIGKILL to what is left."""
    alive = [p for p in procs if p.poll() is None]
    for proc in alive:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            with contextlib.suppress(OSError):
                proc.terminate()
    deadline = time.monotonic() + grace
    for proc in alive:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in alive:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)


def _ip(*args: str) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise LabError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result.stdout


def _readline_with_timeout(stream, timeout: float) -> bytes:
    result: list[bytes] = []
    t = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return result[0] if result else b""


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        deadline = time.monotonic() + 60
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(f"another lab holds {path} for over a minute") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)

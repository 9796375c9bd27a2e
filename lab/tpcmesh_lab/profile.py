"""WAN profiles: which nodes the local mesh has and what each link between them looks like.

A profile is a small YAML file (see ``profiles/default.yaml``)::

    kind: WanProfile
    nodes: [site-a, site-b]
    defaultLink: {delayMs: 0.1}          # optional, for pairs not listed
    links:
      - between: [site-a, site-b]        # both directions; use `from`/`to` for one direction only
        delayMs: 20                      # one-way delay
        rateMbit: 500                    # optional rate limit
        lossPercent: 0.01                # optional random loss
    uplinks:                             # optional: one shaped uplink shared by a group of nodes (a site)
      - name: site-a
        nodes: [site-a]                  # every packet between these nodes and any other node passes it
        rateMbit: 200                    # its rate, each direction
    hosts:                               # optional: a node's own limits (faults for `make bench-diagnosis`)
      - node: site-b
        tcpRmemMaxBytes: 3145728         # net.ipv4.tcp_rmem's maximum in the node's namespace
        tcpWmemMaxBytes: 2097152         # net.ipv4.tcp_wmem's maximum in the node's namespace
        cpuQuota: 0.25                   # CPU for everything the node runs, in cores (a cgroup's quota)
        cpuHogs: 1                       # busy processes beside the agent, inside that quota (needs cpuQuota)
        diskBytes: 268435456             # a disk path for disk mode: a loop device of this size on the real disk
        diskFilesystem: ext4             # ext4 (default) or xfs
        diskWriteMBps: 20                # a slow disk: the node's writes to it capped (cgroup io.max/blkio)
        diskReadMBps: 50                 # and its reads (both need diskBytes)

tcp_rmem and tcp_wmem are per network namespace, so a node's buffers change nothing outside it. net.core.rmem_max
and wmem_max are not set: on the kernels seen here they are visible in a namespace but read-only (host-wide), and
the lab never changes host-wide settings. The CPU quota is a cgroup per node (``cpu.max`` on cgroup v2, or
``cpu.cfs_quota_us`` where the cpu controller is on cgroup v1), holding every process the lab starts on the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
DEFAULT_PROFILE = PROFILES_DIR / "default.yaml"
NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
LINK_KEYS = {"between", "from", "to", "delayMs", "rateMbit", "lossPercent"}
UPLINK_KEYS = {"name", "nodes", "rateMbit"}
HOST_KEYS = {"node", "tcpRmemMaxBytes", "tcpWmemMaxBytes", "cpuQuota", "cpuHogs", "diskBytes", "diskFilesystem",
             "diskWriteMBps", "diskReadMBps"}
DISK_BYTES = (16 * 2**20, 2**40)  # ext4 and xfs both format 16 MiB; 1 TiB is a sparse file's sane top
DISK_FILESYSTEMS = ("ext4", "xfs")
XFS_MIN_BYTES = 300 * 10**6  # mkfs.xfs refuses less
DISK_MBPS = (1, 100_000)
BUFFER_BYTES = (4096, 2**31 - 1)  # the kernel's int; 4096 is tcp_rmem's smallest minimum
CPU_QUOTA_CORES = (0.01, 1024.0)  # cgroup cpu.max: at least 1 ms of every 100 ms period
CPU_HOGS = (0, 64)


class ProfileError(ValueError):
    """A WAN profile that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class LinkSpec:
    delay_ms: float = 0.0
    rate_mbit: float | None = None
    loss_percent: float = 0.0

    @property
    def rtt_ms(self) -> float:
        return 2 * self.delay_ms


@dataclass(frozen=True)
class UplinkSpec:
    """A site's shaped uplink: the traffic of all its nodes with nodes outside it shares ``rate_mbit`` (each
    direction), on top of each pair's own link."""

    name: str
    nodes: tuple[str, ...]
    rate_mbit: float


@dataclass(frozen=True)
class HostSpec:
    """A node's own limits: its TCP buffer maxima (per-namespace sysctls) and its CPU (a cgroup quota, busy
    processes beside the agent)."""

    tcp_rmem_max: int | None = None
    tcp_wmem_max: int | None = None
    cpu_quota: float | None = None  # cores
    cpu_hogs: int = 0
    disk_bytes: int | None = None  # a loop disk of this size as the agent's disk_dir (lab/diskpath.py)
    disk_filesystem: str = "ext4"
    disk_write_mbps: float | None = None  # MB/s (SI) the node may write to its disk; None: no cap
    disk_read_mbps: float | None = None

    @property
    def sysctls(self) -> dict[str, int]:
        """The maxima to set: sysctl name -> bytes."""
        out = {}
        if self.tcp_rmem_max is not None:
            out["net.ipv4.tcp_rmem"] = self.tcp_rmem_max
        if self.tcp_wmem_max is not None:
            out["net.ipv4.tcp_wmem"] = self.tcp_wmem_max
        return out


@dataclass
class WanProfile:
    nodes: list[str]
    default: LinkSpec = field(default_factory=LinkSpec)
    links: dict[tuple[str, str], LinkSpec] = field(default_factory=dict)
    source: str = "<memory>"
    uplinks: list[UplinkSpec] = field(default_factory=list)
    hosts: dict[str, HostSpec] = field(default_factory=dict)

    def host(self, node: str) -> HostSpec:
        return self.hosts.get(node, HostSpec())

    def link(self, src: str, dst: str) -> LinkSpec:
        return self.links.get((src, dst), self.default)

    def rtt_ms(self, a: str, b: str) -> float:
        return self.link(a, b).delay_ms + self.link(b, a).delay_ms

    def with_nodes(self, count: int) -> WanProfile:
        """The profile for ``count`` nodes: the first ``count`` of its own, then ``node-N`` on default links."""
        if count < 1:
            raise ProfileError(f"{self.source}: need at least one node, got {count}")
        names = list(self.nodes[:count])
        n = len(names)
        while len(names) < count:
            n += 1
            candidate = f"node-{n}"
            if candidate not in names:
                names.append(candidate)
        links = {k: v for k, v in self.links.items() if k[0] in names and k[1] in names}
        uplinks = [UplinkSpec(u.name, kept, u.rate_mbit) for u in self.uplinks
                   if (kept := tuple(n for n in u.nodes if n in names))]
        hosts = {k: v for k, v in self.hosts.items() if k in names}
        return WanProfile(nodes=names, default=self.default, links=links, source=self.source, uplinks=uplinks,
                          hosts=hosts)


def _link(raw: object, where: str) -> LinkSpec:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: must be a mapping")
    unknown = set(raw) - LINK_KEYS
    if unknown:
        raise ProfileError(f"{where}: unknown field(s) {sorted(unknown)}")
    values: dict[str, float | None] = {}
    for key, attr, low, high in (
        ("delayMs", "delay_ms", 0.0, 10_000.0),
        ("rateMbit", "rate_mbit", 0.001, 1_000_000.0),
        ("lossPercent", "loss_percent", 0.0, 100.0),
    ):
        if key not in raw or raw[key] is None:
            continue
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ProfileError(f"{where}.{key}: must be a number, got {value!r}")
        if not low <= float(value) <= high:
            raise ProfileError(f"{where}.{key}: {value} is outside {low}..{high}")
        values[attr] = float(value)
    return LinkSpec(**values)  # type: ignore[arg-type]


def parse_profile(data: object, source: str = "<memory>") -> WanProfile:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: a WAN profile must be a mapping")
    if data.get("kind", "WanProfile") != "WanProfile":
        raise ProfileError(f"{source}: kind must be WanProfile, got {data.get('kind')!r}")
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ProfileError(f"{source}: nodes must be a non-empty list of names")
    for i, name in enumerate(nodes):
        if not isinstance(name, str) or not NODE_NAME.match(name):
            raise ProfileError(f"{source}: nodes[{i}] {name!r} is not a DNS label (lower case, digits, '-')")
    if len(set(nodes)) != len(nodes):
        raise ProfileError(f"{source}: nodes has duplicates")
    default = _link(data.get("defaultLink") or {}, f"{source}: defaultLink")
    profile = WanProfile(nodes=list(nodes), default=default, source=source)
    for i, raw in enumerate(data.get("links") or []):
        where = f"{source}: links[{i}]"
        if not isinstance(raw, dict):
            raise ProfileError(f"{where}: must be a mapping")
        spec = _link({k: v for k, v in raw.items() if k not in ("between", "from", "to")} | {}, where)
        if "between" in raw:
            pair = raw["between"]
            if not isinstance(pair, list) or len(pair) != 2:
                raise ProfileError(f"{where}.between: must list exactly two nodes")
            directed = [(pair[0], pair[1]), (pair[1], pair[0])]
        elif "from" in raw and "to" in raw:
            directed = [(raw["from"], raw["to"])]
        else:
            raise ProfileError(f"{where}: needs `between: [a, b]` or `from` and `to`")
        for a, b in directed:
            for end in (a, b):
                if end not in profile.nodes:
                    raise ProfileError(f"{where}: {end!r} is not in nodes {profile.nodes}")
            if a == b:
                raise ProfileError(f"{where}: a link needs two different nodes, got {a!r} twice")
            profile.links[(a, b)] = spec
    profile.uplinks = _uplinks(data.get("uplinks") or [], profile.nodes, source)
    profile.hosts = _hosts(data.get("hosts") or [], profile.nodes, source)
    return profile


def _number(raw: dict, key: str, where: str, low: float, high: float, *, integer: bool) -> float | None:
    if key not in raw or raw[key] is None:
        return None
    value = raw[key]
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ProfileError(f"{where}.{key}: must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not low <= value <= high:
        raise ProfileError(f"{where}.{key}: {value} is outside {low:g}..{high:g}")
    return value


def _entries(raw: object, section: str, keys: set[str], source: str) -> list[tuple[str, dict]]:
    """A list of mappings with only ``keys``: each with where it is (``<source>: <section>[i]``)."""
    if not isinstance(raw, list):
        raise ProfileError(f"{source}: {section} must be a list")
    out = []
    for i, entry in enumerate(raw):
        where = f"{source}: {section}[{i}]"
        if not isinstance(entry, dict):
            raise ProfileError(f"{where}: must be a mapping")
        unknown = set(entry) - keys
        if unknown:
            raise ProfileError(f"{where}: unknown field(s) {sorted(unknown)} (known: {sorted(keys)})")
        out.append((where, entry))
    return out


def _hosts(raw: object, nodes: list[str], source: str) -> dict[str, HostSpec]:
    out: dict[str, HostSpec] = {}
    for where, h in _entries(raw, "hosts", HOST_KEYS, source):
        node = h.get("node")
        if node not in nodes:
            raise ProfileError(f"{where}.node: {node!r} is not in nodes {nodes}")
        if node in out:
            raise ProfileError(f"{where}.node: {node!r} has limits already (one hosts entry per node)")
        rmem = _number(h, "tcpRmemMaxBytes", where, *BUFFER_BYTES, integer=True)
        wmem = _number(h, "tcpWmemMaxBytes", where, *BUFFER_BYTES, integer=True)
        quota = _number(h, "cpuQuota", where, *CPU_QUOTA_CORES, integer=False)
        hogs = _number(h, "cpuHogs", where, *CPU_HOGS, integer=True) or 0
        if hogs and quota is None:
            raise ProfileError(f"{where}.cpuHogs: needs cpuQuota, so the busy processes share the node's quota and "
                               "not the machine's other cores")
        disk = _number(h, "diskBytes", where, *DISK_BYTES, integer=True)
        fs = h.get("diskFilesystem", "ext4")
        if fs not in DISK_FILESYSTEMS:
            raise ProfileError(f"{where}.diskFilesystem: {fs!r} is not one of {', '.join(DISK_FILESYSTEMS)}")
        if fs == "xfs" and disk is not None and disk < XFS_MIN_BYTES:
            raise ProfileError(f"{where}.diskBytes: xfs needs at least {XFS_MIN_BYTES} bytes, got {disk}")
        rates = {k: _number(h, k, where, *DISK_MBPS, integer=False) for k in ("diskWriteMBps", "diskReadMBps")}
        for k, v in rates.items():
            if v is not None and disk is None:
                raise ProfileError(f"{where}.{k}: needs diskBytes (the loop disk it throttles)")
        out[node] = HostSpec(None if rmem is None else int(rmem), None if wmem is None else int(wmem),
                             None if quota is None else float(quota), int(hogs),
                             None if disk is None else int(disk), fs, rates["diskWriteMBps"], rates["diskReadMBps"])
    return out


def _uplinks(raw: object, nodes: list[str], source: str) -> list[UplinkSpec]:
    out: list[UplinkSpec] = []
    owner: dict[str, str] = {}
    for where, u in _entries(raw, "uplinks", UPLINK_KEYS, source):
        name = u.get("name")
        if not isinstance(name, str) or not NODE_NAME.match(name):
            raise ProfileError(f"{where}.name: {name!r} is not a DNS label")
        members = u.get("nodes")
        if not isinstance(members, list) or not members:
            raise ProfileError(f"{where}.nodes: must be a non-empty list of nodes")
        for n in members:
            if n not in nodes:
                raise ProfileError(f"{where}.nodes: {n!r} is not in nodes {nodes}")
            if n in owner:
                raise ProfileError(f"{where}.nodes: {n!r} is already behind uplink {owner[n]!r}")
            owner[n] = name
        rate = _link({"rateMbit": u.get("rateMbit")}, where).rate_mbit
        if rate is None:
            raise ProfileError(f"{where}.rateMbit: an uplink needs a rate")
        out.append(UplinkSpec(name, tuple(members), rate))
    return out


def load_profile(path: str | Path | None = None) -> WanProfile:
    """Load a profile file; a bare name (``default``, ``fidelity``) means one of the shipped profiles."""
    if path is None:
        path = DEFAULT_PROFILE
    p = Path(path)
    if not p.exists() and (PROFILES_DIR / f"{path}.yaml").exists():
        p = PROFILES_DIR / f"{path}.yaml"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{p}: cannot read the WAN profile: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{p}: not valid YAML: {exc}") from exc
    return parse_profile(data, str(p))

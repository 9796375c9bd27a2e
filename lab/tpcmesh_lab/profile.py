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


@dataclass
class WanProfile:
    nodes: list[str]
    default: LinkSpec = field(default_factory=LinkSpec)
    links: dict[tuple[str, str], LinkSpec] = field(default_factory=dict)
    source: str = "<memory>"
    uplinks: list[UplinkSpec] = field(default_factory=list)

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
        return WanProfile(nodes=names, default=self.default, links=links, source=self.source, uplinks=uplinks)


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
    return profile


def _uplinks(raw: object, nodes: list[str], source: str) -> list[UplinkSpec]:
    if not isinstance(raw, list):
        raise ProfileError(f"{source}: uplinks must be a list")
    out: list[UplinkSpec] = []
    owner: dict[str, str] = {}
    for i, u in enumerate(raw):
        where = f"{source}: uplinks[{i}]"
        if not isinstance(u, dict):
            raise ProfileError(f"{where}: must be a mapping")
        unknown = set(u) - UPLINK_KEYS
        if unknown:
            raise ProfileError(f"{where}: unknown field(s) {sorted(unknown)}")
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

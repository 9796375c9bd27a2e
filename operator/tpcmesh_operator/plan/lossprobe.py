"""spec.lossProbe: the always-on TWAMP-light mesh between a benchmark's agents (issue #27). PURE.

- ``parse_loss_probe`` / ``to_dict``: the spec field (errors name it, ``spec.lossProbe.ratePps: ...``);
- ``peers_of``: whom one agent probes: every other agent of the benchmark, once per address family both have;
- ``merge``: one agent's configuration (the agent's ``PUT /api/v1/loss/config`` body) from every benchmark that
  probes it. Several benchmarks may share an agent, and an agent has one probe configuration:
  peers, external reflectors and allowed senders are the union; the rate and the packet size the highest asked;
  the period and the clock-error bound the smallest asked; DSCP the highest asked. No benchmark: no peers (the
  agent's reflector then answers nobody and its sender is idle);
- ``same_config``: whether the configuration an agent reports is the one wanted (so it is PUT only on a change);
- ``collector_of``: which benchmark collects an agent's summaries (the first by namespace/name among those that
  probe it), so each summary goes to one dashboard once.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .specerror import SpecError

DEFAULT_PORT = 863  # RFC 8545: the TWAMP-light reflector's well-known port (the agent's default loss_port)
DEFAULT_RATE_PPS = 10.0
MIN_PADDING = 27  # a 14-byte request padded to 41 bytes lets the reflector's reply be as large (RFC 5357 4.2.1)
MAX_PADDING = 8986  # a 9000-byte packet at most (the agent's bound)
DEFAULT_PERIOD_SECONDS = 60
DEFAULT_MAX_CLOCK_ERROR_MS = 1.0
LOSS_TIMEOUT_S = 5.0  # a reply later than this after its period's end counts as lost (below the shortest period)
MAX_RATE_PPS = 1000.0
MAX_EXTERNAL = 100
MAX_PEERS = 2000  # the agent refuses longer lists
FIELDS = ("enabled", "ratePps", "paddingBytes", "dscp", "periodSeconds", "maxClockErrorMs", "externalReflectors",
          "allowedSenders")


@dataclass(frozen=True)
class Reflector:
    """A TWAMP-light reflector outside the mesh (a router, a perfSONAR host): probed by every agent."""

    name: str
    address: str  # canonical IPv4 or IPv6 (as the agent reports it)
    port: int = DEFAULT_PORT


@dataclass(frozen=True)
class LossProbe:
    enabled: bool = False
    rate_pps: float = DEFAULT_RATE_PPS
    padding: int = MIN_PADDING
    dscp: int = 0
    period_s: int = DEFAULT_PERIOD_SECONDS
    max_clock_error_ms: float = DEFAULT_MAX_CLOCK_ERROR_MS
    external_reflectors: tuple[Reflector, ...] = ()
    allowed_senders: tuple[str, ...] = ()


def _address(value: Any, path: str) -> str:
    try:
        if not isinstance(value, str):
            raise TypeError(value)
        return str(ipaddress.ip_address(value))  # canonical, as the agent reports it
    except (TypeError, ValueError):
        raise SpecError(path, f"expected an IPv4 or IPv6 address, got {value!r}") from None


def _number(d: Mapping[str, Any], key: str, path: str, default: float, lo: float, hi: float,
            integer: bool = False) -> Any:
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)):
        raise SpecError(f"{path}.{key}", f"expected {'an integer' if integer else 'a number'}, got {v!r}")
    if not lo <= v <= hi:
        raise SpecError(f"{path}.{key}", f"must be between {lo:g} and {hi:g}, got {v!r}")
    return v


def _reflectors(raw: Any, path: str) -> tuple[Reflector, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_EXTERNAL:
        raise SpecError(path, f"expected a list of at most {MAX_EXTERNAL} {{name, address, port}}, got {raw!r}")
    out: list[Reflector] = []
    for i, r in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(r, Mapping):
            raise SpecError(where, f"expected {{name, address, port}}, got {r!r}")
        unknown = sorted(set(r) - {"name", "address", "port"})
        if unknown:
            raise SpecError(f"{where}.{unknown[0]}", "unknown field (known: name, address, port)")
        name = r.get("name")
        if not isinstance(name, str) or not name or len(name) > 253:
            raise SpecError(f"{where}.name", f"expected a name of 1-253 characters, got {name!r}")
        reflector = Reflector(name, _address(r.get("address"), f"{where}.address"),
                              _number(r, "port", where, DEFAULT_PORT, 1, 65535, integer=True))
        if any((x.address, x.port) == (reflector.address, reflector.port) for x in out):
            raise SpecError(where, f"{reflector.address} port {reflector.port} is listed twice")
        out.append(reflector)
    return tuple(out)


def _senders(raw: Any, path: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_EXTERNAL:
        raise SpecError(path, f"expected a list of at most {MAX_EXTERNAL} IP addresses, got {raw!r}")
    return tuple(sorted({_address(a, f"{path}[{i}]") for i, a in enumerate(raw)}))


def parse_loss_probe(raw: Any, path: str = "spec.lossProbe") -> LossProbe:
    if raw is None:
        return LossProbe()
    if not isinstance(raw, Mapping):
        raise SpecError(path, f"expected an object, got {raw!r}")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", f"unknown field (known: {', '.join(FIELDS)})")
    enabled = raw.get("enabled", False)
    if not isinstance(enabled, bool):
        raise SpecError(f"{path}.enabled", f"expected a boolean, got {enabled!r}")
    return LossProbe(
        enabled=enabled,
        rate_pps=float(_number(raw, "ratePps", path, DEFAULT_RATE_PPS, 0.1, MAX_RATE_PPS)),
        padding=_number(raw, "paddingBytes", path, MIN_PADDING, MIN_PADDING, MAX_PADDING, integer=True),
        dscp=_number(raw, "dscp", path, 0, 0, 63, integer=True),
        period_s=_number(raw, "periodSeconds", path, DEFAULT_PERIOD_SECONDS, 10, 3600, integer=True),
        max_clock_error_ms=float(_number(raw, "maxClockErrorMs", path, DEFAULT_MAX_CLOCK_ERROR_MS, 0.001, 10_000)),
        external_reflectors=_reflectors(raw.get("externalReflectors"), f"{path}.externalReflectors"),
        allowed_senders=_senders(raw.get("allowedSenders"), f"{path}.allowedSenders"),
    )


def to_dict(p: LossProbe) -> dict[str, Any]:
    """The canonical camelCase field; parse_loss_probe(to_dict(p)) == p."""
    out: dict[str, Any] = {"enabled": p.enabled, "ratePps": p.rate_pps, "paddingBytes": p.padding, "dscp": p.dscp,
                           "periodSeconds": p.period_s, "maxClockErrorMs": p.max_clock_error_ms}
    if p.external_reflectors:
        out["externalReflectors"] = [{"name": r.name, "address": r.address, "port": r.port}
                                     for r in p.external_reflectors]
    if p.allowed_senders:
        out["allowedSenders"] = list(p.allowed_senders)
    return out


@dataclass(frozen=True)
class Member:
    """One agent as the mesh sees it: its node, its address per family (ipv4, ipv6) and its loss port."""

    node: str
    addresses: Mapping[str, str] = field(default_factory=dict)
    port: int = DEFAULT_PORT


def peers_of(member: Member, members: Iterable[Member]) -> list[dict[str, Any]]:
    """The agent's peers: each other member once per address family both have (the agent sends from its own
    address of that family), named by its node (the summaries' `peer`)."""
    out = []
    for other in sorted(members, key=lambda m: m.node):
        if other.node == member.node:
            continue
        for family in sorted(set(member.addresses) & set(other.addresses)):
            out.append({"name": other.node, "address": _address(other.addresses[family], "address"),
                        "port": other.port})
    return out


def _union(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Peers or reflectors, one per (address, port) (named by the first name in order, whatever order they come
    in), in a stable order."""
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    for p in sorted(items, key=lambda p: (p["name"], p["address"], p["port"])):
        seen.setdefault((p["address"], p["port"]), {"name": p["name"], "address": p["address"], "port": p["port"]})
    return sorted(seen.values(), key=lambda p: (p["name"], p["address"], p["port"]))


def merge(contributions: Sequence[tuple[LossProbe, Sequence[Mapping[str, Any]]]]) -> dict[str, Any]:
    """The agent's loss-probe configuration from every (spec.lossProbe, peers) that asks for it (module
    docstring); no contribution: the configuration without peers. Every field is given, so a PUT replaces
    whatever was there and an equal GET answer means nothing to do."""
    probes = [lp for lp, _ in contributions]
    peers = _union(p for _, ps in contributions for p in ps)  # past MAX_PEERS the agent refuses it, saying why
    external = _union({"name": r.name, "address": r.address, "port": r.port}
                      for lp in probes for r in lp.external_reflectors)
    return {
        "peers": peers,
        "external_reflectors": external,
        "allowed_senders": sorted({a for lp in probes for a in lp.allowed_senders}),
        "rate_pps": max((lp.rate_pps for lp in probes), default=DEFAULT_RATE_PPS),
        "padding": max((lp.padding for lp in probes), default=MIN_PADDING),
        "dscp": max((lp.dscp for lp in probes), default=0),
        "period_s": float(min((lp.period_s for lp in probes), default=DEFAULT_PERIOD_SECONDS)),
        "loss_timeout_s": LOSS_TIMEOUT_S,
        "max_clock_error_s": min((lp.max_clock_error_ms for lp in probes), default=DEFAULT_MAX_CLOCK_ERROR_MS)
        / 1000,
    }


def same_config(actual: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether the agent's reported configuration (GET /api/v1/loss's `config`) is `wanted` (merge's)."""
    if not isinstance(actual, Mapping):
        return False
    for key, value in wanted.items():
        got = actual.get(key)
        if key in ("peers", "external_reflectors"):
            if not isinstance(got, list) or _union(got) != value:
                return False
        elif key == "allowed_senders":
            if sorted(got or []) != value:
                return False
        elif not isinstance(got, int | float) or abs(got - value) > 1e-9 * max(1.0, abs(value)):
            return False
    return True


def collector_of(benchmarks: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """Of the (namespace, name) of the benchmarks probing an agent, the one that collects its summaries."""
    return min(benchmarks, default=None)

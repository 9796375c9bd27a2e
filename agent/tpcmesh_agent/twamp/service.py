"""One agent's loss probe: a reflector on each of its addresses, a sender to every peer, the outbox.

Configured as a whole (``configure``) from a JSON object, the control API's ``PUT /api/v1/loss/config``::

    {"peers": [{"name": "node-b", "address": "198.51.100.11", "port": 863}, ...],   # mesh members: probed, allowed
     "external_reflectors": [{"name": "ps-host", "address": "2001:db8::5", "port": 863}],  # probed, allowed
     "allowed_senders": ["192.0.2.9"],   # answered, not probed (e.g. a perfSONAR host that probes this node)
     "rate_pps": 10, "padding": 27, "dscp": 0, "period_s": 60, "loss_timeout_s": 5, "max_clock_error_s": 0.001}

The reflector answers only the addresses of ``peers``, ``external_reflectors`` and ``allowed_senders`` (any source
port).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, fields

from .clock import ClockState, read_clock
from .outbox import DEFAULT_CAPACITY, Outbox
from .reflector import Reflector, canonical
from .sender import DEFAULT_PORT, Peer, ProbeConfig, Sender

log = logging.getLogger(__name__)
MAX_PEERS = 2_000


class ConfigError(ValueError):
    """A loss-probe configuration that cannot be used; the message names the field."""


def _peers(raw: object, where: str) -> list[Peer]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where} must be a list of {{name, address, port}}")
    if len(raw) > MAX_PEERS:
        raise ConfigError(f"{where}: at most {MAX_PEERS} entries, got {len(raw)}")
    out = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict) or set(p) - {"name", "address", "port"}:
            raise ConfigError(f"{where}[{i}] must be an object with name, address and port only")
        name, address, port = p.get("name"), p.get("address"), p.get("port", DEFAULT_PORT)
        if not isinstance(name, str) or not name or len(name) > 253:
            raise ConfigError(f"{where}[{i}].name must be a non-empty string")
        try:
            if not isinstance(address, str):
                raise TypeError(address)
            ipaddress.ip_address(address)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}[{i}].address {address!r} is not an IP address") from e
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ConfigError(f"{where}[{i}].port must be an integer 1-65535, got {port!r}")
        out.append(Peer(name, canonical(address), port))
    return out


def _addresses(raw: object) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or len(raw) > MAX_PEERS:
        raise ConfigError(f"allowed_senders must be a list of at most {MAX_PEERS} IP addresses")
    out = set()
    for i, a in enumerate(raw):
        try:
            if not isinstance(a, str):
                raise TypeError(a)
            out.add(canonical(a))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"allowed_senders[{i}] {a!r} is not an IP address") from e
    return frozenset(out)


def parse_config(body: object) -> tuple[ProbeConfig, list[Peer], list[Peer], frozenset[str]]:
    if not isinstance(body, dict):
        raise ConfigError("the loss-probe configuration must be a JSON object")
    known = {f.name for f in fields(ProbeConfig)} | {"peers", "external_reflectors", "allowed_senders"}
    unknown = set(body) - known
    if unknown:
        raise ConfigError(f"unknown field(s) {sorted(unknown)} (known: {sorted(known)})")
    values: dict = {}
    for f in fields(ProbeConfig):
        if f.name in body:
            v = body[f.name]
            if isinstance(v, bool) or not isinstance(v, int | float) or (f.type == "int" and not isinstance(v, int)):
                raise ConfigError(f"{f.name} must be a number, got {v!r}")
            values[f.name] = v
    try:
        config = ProbeConfig(**values).validate()
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return (config, _peers(body.get("peers"), "peers"), _peers(body.get("external_reflectors"), "external_reflectors"),
            _addresses(body.get("allowed_senders")))


class LossProbe:
    def __init__(self, addresses: Iterable[str], *, port: int = DEFAULT_PORT, node: str = "",
                 capacity: int = DEFAULT_CAPACITY, clock: Callable[[], ClockState] = read_clock,
                 on_summary: Callable[[dict], None] | None = None) -> None:
        self.addresses = tuple(addresses)
        self.port = port
        self.node = node
        self.outbox = Outbox(capacity)
        self.config = ProbeConfig()
        self.peers: list[Peer] = []
        self.external: list[Peer] = []
        self.senders: frozenset[str] = frozenset()
        self._allowed: frozenset[str] = frozenset()
        self.reflectors = [Reflector(a, port, self.is_allowed, clock) for a in self.addresses]
        self._extra = on_summary
        self.sender = Sender(self.addresses, self.config, self._summary, node=node, clock=clock)
        self.error: str | None = None
        # (peer, family) -> packets sent and lost over every finished period, and its last summary: a dual-stack
        # peer has one name and a stream per family
        self.totals: dict[tuple[str, int], dict[str, int]] = {}
        self.latest: dict[tuple[str, int], dict] = {}

    def is_allowed(self, address: str) -> bool:
        return address in self._allowed

    def _summary(self, record: dict) -> None:
        key = (record["peer"], record["family"])
        totals = self.totals.setdefault(key, {"sent": 0, "lost": 0})
        totals["sent"] += record["sent"]
        totals["lost"] += record["lost"]
        self.latest[key] = record
        self.outbox.put(record)
        if self._extra is not None:
            self._extra(record)

    def start(self) -> None:
        try:
            for r in self.reflectors:
                r.start()
            self.sender.start()
        except OSError as e:
            self.error = f"the loss probe could not open its UDP sockets on port {self.port}: {e.strerror or e}"
            log.error("%s", self.error)
            self.close_sockets()
            raise

    def close_sockets(self) -> None:
        for r in self.reflectors:
            r.close()

    async def stop(self) -> None:
        await self.sender.stop()
        self.close_sockets()

    def configure(self, body: object) -> dict:
        config, peers, external, senders = parse_config(body)
        self.config, self.peers, self.external, self.senders = config, peers, external, senders
        self._allowed = frozenset(p.key[0] for p in (*peers, *external)) | senders
        if config != self.sender.config:
            self.sender.set_config(config)
        self.sender.set_peers([*peers, *external])
        log.info("Configured the loss probe: %d peers, %d external reflectors, %g packets/s each",
                 len(peers), len(external), config.rate_pps)
        return self.describe()

    def describe(self) -> dict:
        def peer(p: Peer) -> dict:
            return {"name": p.name, "address": p.address, "port": p.port}

        return {**asdict(self.config), "peers": [peer(p) for p in self.peers],
                "external_reflectors": [peer(p) for p in self.external], "allowed_senders": sorted(self.senders)}

    def status(self) -> dict:
        reflector: dict[str, int] = {}
        for r in self.reflectors:
            for k, v in r.counters.items():
                reflector[k] = reflector.get(k, 0) + v
        return {"port": self.port, "error": self.error, "config": self.describe(), "reflector": reflector,
                "sender": dict(self.sender.counters), "outbox": self.outbox.status()}

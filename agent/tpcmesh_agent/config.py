"""The agent's one typed settings object: CLI flag > environment (TPCMESH_AGENT_<NAME>) > default.

Every field is a flag ``--<name-with-dashes>`` and an environment variable ``TPCMESH_AGENT_<NAME_UPPER>``.
Invalid values fail fast at start with a message naming the setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from .protocols import PROTOCOLS as ALL_PROTOCOLS
from .subpath import Subpath

ENV_PREFIX = "TPCMESH_AGENT_"
GRIDFTP_SECURITY = ("gsi", "anonymous")
MIN_TOKEN_LENGTH = 16  # at start-up and for every rotated token


class SettingsError(ValueError):
    """A setting is missing or invalid; the message names it."""


def _parse_size(text: str) -> int:
    """Bytes from '40000000000', '40G' (SI), '8GiB' (binary)."""
    t = text.strip().upper().removesuffix("B")
    units = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}
    for suffix in sorted(units, key=len, reverse=True):
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * units[suffix])
    return int(t)


@dataclass
class Settings:
    address: str = field(default="127.0.0.1", metadata={"help": "IP address every port binds to"})
    address6: str = field(default="", metadata={
        "help": "dual stack: an IPv6 address the control API, the built-in data server and iperf3 also listen on "
                "(address being IPv4); empty: none"})
    pod_ips: tuple[str, ...] = field(default=(), metadata={
        "help": "the pod's addresses, comma-separated (the downward API's status.podIPs; with hostNetwork the "
                "node's): when they hold an IPv4 and an IPv6 address and address6 is not set, the agent is dual "
                "stack: address becomes the IPv4 one (an IPv6 address from status.podIP moves to address6), "
                "address6 the IPv6 one; one family only: address alone"})
    node_name: str = field(default_factory=socket.gethostname, metadata={"help": "node name reported in /info"})
    data_dir: Path = field(default=Path("/dev/shm/tpcmesh-agent"),
                           metadata={"help": "memory-backed directory for test files (sets/, incoming/)"})
    budget_bytes: int = field(default=40 * 10**9,
                              metadata={"help": "most bytes the test files may use (sets + one set received); "
                                                "accepts 40G, 8GiB"})
    disk_dir: Path | None = field(default=None, metadata={
        "help": "disk mode: a directory on real storage (not tmpfs) for test files (sets/, incoming/) of tests that "
                "ask for storage disk; refused when missing, not writable or memory-backed; empty: no disk mode"})
    disk_reserve_bytes: int = field(default=10**9, metadata={
        "help": "bytes a disk test must leave free on disk_dir's filesystem (refused before writing otherwise); "
                "accepts 1G, 512MiB"})
    token_file: Path | None = field(default=None, metadata={"help": "file holding the control API bearer token"})
    tls_cert: Path | None = field(default=None, metadata={"help": "host certificate (PEM)"})
    tls_key: Path | None = field(default=None, metadata={"help": "host key (PEM)"})
    ca_file: Path | None = field(default=None, metadata={"help": "CA bundle (PEM) trusted for peers"})
    client_ca_file: Path | None = field(default=None,
                                        metadata={"help": "require client certificates signed by this CA (mTLS)"})
    protocols: tuple[str, ...] = field(default=ALL_PROTOCOLS, metadata={
        "help": "comma-separated enabled protocols: " + ",".join(ALL_PROTOCOLS)})
    api_port: int = field(default=9443, metadata={"help": "control API port (HTTPS)"})
    metrics_port: int = field(default=9464, metadata={"help": "Prometheus /metrics port (plain HTTP)"})
    builtin_port: int = field(default=9080, metadata={"help": "built-in mover data port"})
    xrootd_root_port: int = field(default=1094, metadata={"help": "XRootD root:// port (peers pull the sets here)"})
    xrootd_root_tpc_port: int = field(default=0, metadata={
        "help": "port of the local XRootD root:// instance that pulls into incoming/ (only this agent connects to "
                "it); 0: a free port, chosen when the agent starts"})
    xrootd_https_port: int = field(default=8444, metadata={"help": "XRootD HTTP(S) port (peers pull the sets here)"})
    xrootd_tpc_port: int = field(default=0, metadata={
        "help": "port of the local XRootD HTTP-TPC instance that pulls into incoming/ (only this agent connects to "
                "it); 0: a free port, chosen when the agent starts"})
    xrootd_token_issuer: str = field(default="", metadata={
        "help": "token mode for XRootD over HTTPS and the built-in mover: the URL of the issuer whose bearer tokens "
                "(WLCG JWT profile) the endpoints require: XRootD's public instance and the built-in data port serve "
                "the sets only to a storage.read:/sets token, XRootD's local TPC instance and the built-in COPY write "
                "/incoming only for a storage.create:/incoming token; empty: no tokens (the sets are served to anyone, "
                "the landing to the agent's certificate or API token)"})
    xrootd_token_issuer_ca: Path | None = field(default=None, metadata={
        "help": "CA (PEM) of the token issuer's HTTPS endpoint; XRootD's token validator trusts only the system's "
                "bundle, so the instances see this CA added to it (a private mount namespace); empty: ca_file"})
    xrootd_token_audience: str = field(default="", metadata={
        "help": "the audience tokens must name for this agent's XRootD instances; empty: "
                "https://<address>:<xrootd_https_port>"})
    gridftp_port: int = field(default=2811, metadata={"help": "GridFTP control port"})
    iperf3_port: int = field(default=5201, metadata={"help": "iperf3 server port"})
    gridftp_security: str = field(default="gsi", metadata={
        "help": "gsi: gsiftp:// with the X509 host certificates (peers must hold a certificate of ca_file; data "
                "channel plain, integrity from checksums); anonymous: ftp:// without authentication"})
    run_user: str = field(default="nobody", metadata={"help": "unprivileged user for servers that refuse root"})
    builtin_tls: bool = field(default=False, metadata={"help": "serve the built-in data port over TLS"})
    builtin_max_rate: int = field(default=0,
                                  metadata={"help": "cap each built-in data connection at this many bytes/s "
                                                    "(0: no cap; emulates a slow source)"})
    marker_interval: float = field(default=5.0, metadata={"help": "seconds between HTTP-TPC perf markers"})
    idle_timeout: float = field(default=60.0, metadata={
        "help": "seconds a peer of the built-in mover may send nothing (and the longest a response header may take) "
                "before the file fails; idle connections to the built-in data port are closed after it too"})
    copy_timeout: float = field(default=3600.0, metadata={
        "help": "longest a COPY to the built-in data port may run; its caller then gets a 'failure:' line"})
    max_streams_x_concurrency: int = field(default=1024,
                                           metadata={"help": "largest streams*concurrency a test may ask for"})
    allow_plain_http: bool = field(default=False,
                                   metadata={"help": "serve the control API without TLS when no certificate is "
                                                     "given (development only)"})
    cert_reload_interval: float = field(default=30.0, metadata={
        "help": "seconds between checks whether tls_cert/tls_key changed (renewed certificates are reloaded)"})
    loss_port: int = field(default=863, metadata={
        "help": "UDP port of the TWAMP-light reflector and loss probes (RFC 8545's twamp-test port 863; a port "
                "below 1024 needs root or CAP_NET_BIND_SERVICE); 0: no loss probes"})
    loss_buffer_summaries: int = field(default=20_000, metadata={
        "help": "most loss-probe summaries kept until a collector acknowledges them (about 1 KiB each; the oldest "
                "are dropped and counted beyond it): 20000 hold 3 h 20 min of 100 peers' minutes"})
    host_sample_interval: float = field(default=1.0, metadata={
        "help": "seconds between samples of the node's CPU, the agent's processes, interfaces and memory (host "
                "telemetry: each test's record summarises both ends' samples over its window, GET /api/v1/host); "
                "0: no host telemetry"})
    host_cpu_shared: bool = field(default=False, metadata={
        "help": "the node's cores are shared with other nodes' agents (the WAN lab runs every node on one machine): "
                "the host telemetry marks its CPU figures shared, and the diagnosis does not take a busy core as "
                "this node's"})
    cgroup_root: Path = field(default=Path("/sys/fs/cgroup"), metadata={
        "help": "where the cgroup filesystem is mounted: the host telemetry reads the agent's own CPU quota there "
                "(the WAN lab gives a bind mount: `ip netns exec` remounts /sys)"})
    log_level: str = field(default="INFO", metadata={"help": "DEBUG, INFO, WARNING, ERROR"})

    # ---- derived -------------------------------------------------------------------------------------------
    sets_dir = Subpath("data_dir", "sets")
    incoming_dir = Subpath("data_dir", "incoming")

    def storage_dir(self, storage: str) -> Path:
        """The directory holding ``storage``'s files (sets/, incoming/): data_dir, or disk_dir for disk."""
        if storage == "disk":
            if self.disk_dir is None:
                raise SettingsError("disk_dir is not set (flag --disk-dir or TPCMESH_AGENT_DISK_DIR)")
            return self.disk_dir
        return self.data_dir

    @property
    def loss_outbox_file(self) -> Path:
        """Where the loss summaries not yet collected wait while the agent is stopped."""
        return self.data_dir / "loss-outbox.json"

    @property
    def ca_dir(self) -> Path | None:
        """A CA directory (<hash>.0 files) derived from ca_file for XRootD/Globus; written on first use."""
        if self.ca_file is None:
            return None
        return self.data_dir / "ca-dir"

    @property
    def gsiftp(self) -> bool:
        return self.gridftp_security == "gsi"

    def gsiftp_missing(self) -> str | None:
        """Why gsiftp cannot run here (no certificate or CA configured), naming the fix; None when it can."""
        if self.gsiftp and (self.tls_cert is None or self.tls_key is None or self.ca_file is None):
            return ("gsiftp needs tls_cert, tls_key and ca_file (the X509 host certificate and the CA peers are "
                    "signed by); set gridftp_security=anonymous for unauthenticated ftp://")
        return None

    def xrootd_audience(self) -> str:
        """The audience XRootD's token validator accepts for this agent."""
        return self.xrootd_token_audience or f"https://{self.address}:{self.xrootd_https_port}"

    def builtin_audience(self) -> str:
        """The audience the built-in data port accepts in token mode: its own URL."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{'https' if self.builtin_tls else 'http'}://{host}:{self.builtin_port}"

    def token_issuer_ca(self) -> Path | None:
        """The CA the token issuer's HTTPS endpoint is checked with."""
        return self.xrootd_token_issuer_ca or self.ca_file

    def port_of(self, protocol: str) -> int | None:
        return {
            "builtin": self.builtin_port,
            "xrootd-https": self.xrootd_https_port,
            "xrootd-root": self.xrootd_root_port,
            "gridftp": self.gridftp_port,
            "iperf3": self.iperf3_port,
        }.get(protocol)

    def token(self) -> str:
        if self.token_file is None:
            raise SettingsError("token_file is not set (flag --token-file or TPCMESH_AGENT_TOKEN_FILE)")
        try:
            tok = self.token_file.read_text().strip()
        except OSError as e:
            raise SettingsError(f"token_file {self.token_file}: {e.strerror}") from e
        if len(tok) < MIN_TOKEN_LENGTH:
            raise SettingsError(f"token_file {self.token_file}: the token must be at least {MIN_TOKEN_LENGTH} "
                                "characters")
        return tok

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every address it listens on: address, and address6 when dual stack."""
        return (self.address, self.address6) if self.address6 else (self.address,)

    def local_address(self, peer: str) -> str:
        """Its address in the family of ``peer`` (an IP literal): what a client socket binds to."""
        return self.address6 if self.address6 and ":" in peer else self.address

    def _dual_stack_from_pod_ips(self) -> None:
        """address and address6 from pod_ips (see its help) when address6 is not set."""
        by_family: dict[int, str] = {}
        for raw in self.pod_ips:
            try:
                ip = ipaddress.ip_address(raw)
            except ValueError as e:
                raise SettingsError(f"pod_ips: {raw!r} is not an IP address (expected the downward API's "
                                    "status.podIPs, e.g. 192.0.2.7,2001:db8::7)") from e
            by_family.setdefault(ip.version, str(ip))
        if self.address6 or len(by_family) < 2:
            return
        if ":" in self.address:  # an IPv6-primary cluster: status.podIP is the IPv6 one
            self.address = by_family[4]
        self.address6 = by_family[6]

    def validate(self) -> Settings:
        try:
            ipaddress.ip_address(self.address)
        except ValueError as e:
            raise SettingsError(f"address {self.address!r} is not an IP address") from e
        self._dual_stack_from_pod_ips()
        if self.address6:
            try:
                six = ipaddress.ip_address(self.address6)
            except ValueError as e:
                raise SettingsError(f"address6 {self.address6!r} is not an IP address") from e
            if six.version != 6 or ":" in self.address:
                raise SettingsError(f"address6 {self.address6!r} must be IPv6 besides an IPv4 address "
                                    f"(address is {self.address!r})")
        unknown = [p for p in self.protocols if p not in ALL_PROTOCOLS]
        if unknown:
            raise SettingsError(f"protocols: unknown {', '.join(unknown)} (known: {', '.join(ALL_PROTOCOLS)})")
        for f in fields(self):
            if f.name.endswith("_port"):
                v = getattr(self, f.name)
                lowest = 0 if f.name in ("xrootd_tpc_port", "xrootd_root_tpc_port", "loss_port") else 1
                if not lowest <= v <= 65535:
                    raise SettingsError(f"{f.name} {v} is not a TCP port ({lowest}-65535)")
        if self.gridftp_security not in GRIDFTP_SECURITY:
            raise SettingsError(f"gridftp_security {self.gridftp_security!r} must be one of "
                                f"{', '.join(GRIDFTP_SECURITY)}")
        if self.disk_reserve_bytes < 0:
            raise SettingsError(f"disk_reserve_bytes {self.disk_reserve_bytes} must be >= 0")
        if self.budget_bytes <= 0:
            raise SettingsError(f"budget_bytes {self.budget_bytes} must be positive")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise SettingsError("tls_cert and tls_key must be given together")
        if self.tls_cert is None and not self.allow_plain_http:
            raise SettingsError("tls_cert/tls_key are required for the HTTPS control API "
                                "(or set allow_plain_http for development)")
        if self.builtin_tls and self.tls_cert is None:
            raise SettingsError("builtin_tls needs tls_cert and tls_key")
        if self.xrootd_token_issuer and (not self.xrootd_token_issuer.startswith("https://")
                                         or self.xrootd_token_issuer.endswith("/")):
            raise SettingsError(f"xrootd_token_issuer {self.xrootd_token_issuer!r}: expected "
                                "https://host[:port][/path] without a trailing slash (token validators fetch keys "
                                "only over HTTPS)")
        if self.xrootd_token_issuer and " " in self.xrootd_audience():
            raise SettingsError(f"xrootd_token_audience {self.xrootd_audience()!r}: expected one audience without "
                                "spaces")
        for name in ("tls_cert", "tls_key", "ca_file", "client_ca_file", "xrootd_token_issuer_ca"):
            p = getattr(self, name)
            if p is not None and not p.is_file():
                raise SettingsError(f"{name} {p} does not exist")
        self.token()
        if self.loss_buffer_summaries < 1:
            raise SettingsError(f"loss_buffer_summaries {self.loss_buffer_summaries} must be at least 1")
        if self.builtin_max_rate < 0:
            raise SettingsError("builtin_max_rate must be >= 0")
        for name in ("marker_interval", "idle_timeout", "copy_timeout"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be > 0")
        if not 0 <= self.host_sample_interval <= 60:
            raise SettingsError(f"host_sample_interval {self.host_sample_interval} must be between 0 (off) and 60 "
                                "seconds")
        return self


def _convert(f: dataclasses.Field, raw: str):
    t = str(f.type)
    try:
        if f.name.endswith("_bytes"):
            return _parse_size(raw)
        if t.startswith("Path"):
            return Path(raw) if raw else None
        if t == "int":
            return int(raw)
        if t == "float":
            return float(raw)
        if t == "bool":
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(raw)
        if t.startswith("tuple"):
            return tuple(p.strip() for p in raw.split(",") if p.strip())
        return raw
    except ValueError as e:
        raise SettingsError(f"{f.name}: cannot read {raw!r} as {t}") from e


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tpcmesh-agent",
        description="tpcmesh agent: runs the protocol servers, holds test files and pulls them from peers as the "
        "third-party-copy destination when the control API asks. Every flag can also be given as the environment "
        f"variable {ENV_PREFIX}<NAME> (e.g. {ENV_PREFIX}DATA_DIR).",
    )
    for f in fields(Settings):
        p.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, metavar=f.name.upper(),
                       help=f.metadata.get("help", ""))
    return p


def load_settings(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    values = {}
    for f in fields(Settings):
        raw = getattr(args, f.name)
        if raw is None:
            raw = environ.get(ENV_PREFIX + f.name.upper())
        if raw is not None:
            values[f.name] = _convert(f, raw)
    return Settings(**values).validate()

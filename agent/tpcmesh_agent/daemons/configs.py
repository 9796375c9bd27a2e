"""Pure builders: the settings -> each protocol server's command line and configuration text.

Nothing here touches the file system or starts a process; the supervisor writes what these return into the
runtime directory. XRootD has no bind-address option: it listens on every address of the host at its port
(two agents on one machine need different XRootD ports); GridFTP and iperf3 bind to the agent's address.

Each XRootD protocol runs as two instances. The public one (``xrootd_https_port``, ``xrootd_root_port``) serves the
test sets read-only to peers: nobody can write through it, and the HTTPS one has no HTTP-TPC handler, so nobody can
make it fetch from or send to a URL of their choosing. The local one (``xrootd_tpc_port``, ``xrootd_root_tpc_port``)
is the destination of the agent's own pulls and writes /incoming; it accepts connections only from the agent's own
addresses, and only the agent may write: over HTTPS its own host certificate (XRootD 5.5 asks the Source for the size
before it checks the writer's rights, so refusing the COPY itself would be too late), over root:// its sss key.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from ..subpath import Subpath

# The Debian package that provides each program (kept in step with hack/debian-packages.txt by a unit test).
PACKAGES: dict[str, str] = {
    "xrootd": "xrootd-server",
    "libXrdHttpTPC-5.so": "xrootd-server-plugins",
    "xrdcp": "xrootd-client",
    "xrdsssadmin": "xrootd-server",
    "libXrdSecsss-5.so": "xrootd-plugins",
    "libXrdAccSciTokens-5.so": "xrootd-scitokens-plugins",
    "unshare": "util-linux",
    "globus-gridftp-server": "globus-gridftp-server-progs",
    "globus-url-copy": "globus-gass-copy-progs",
    "iperf3": "iperf3",
}

# XRootD exports only the test sets (read) and the incoming area (written by pulls).
EXPORTS = ("/sets", "/incoming")
# The identity XrdHttp gives the agent's own host certificate (through the gridmap): the only one that may use the
# local HTTP-TPC instance, i.e. send the COPY that pulls a file into /incoming.
AGENT_IDENTITY = "tpcagent"
# protocol -> the server name of its local TPC instance (the public one is named after the protocol)
TPC_SERVERS = {"xrootd-https": "xrootd-https-tpc", "xrootd-root": "xrootd-root-tpc"}
# xrdcp reaches the local root:// TPC instance at the address it uses to reach the source, which is 127.0.0.1 when
# the source is on loopback: the local instances also take loopback connections (processes of this host only)
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class XrootdPaths:
    """Where one xrootd instance keeps its files (all inside its runtime directory)."""

    runtime_dir: Path
    cert: Path | None = None  # copies readable by the run user
    key: Path | None = None
    ca_dir: Path | None = None
    admin_dir: Path | None = None  # short path: xrootd's admin Unix socket must fit in 108 bytes

    @property
    def admin(self) -> Path:
        return self.admin_dir or self.runtime_dir

    config = Subpath("runtime_dir", "xrootd.cfg")
    log = Subpath("runtime_dir", "xrootd.log")
    scitokens_config = Subpath("runtime_dir", "scitokens.cfg")
    # XDG_CACHE_HOME of the instance: scitokens-cpp keeps the issuer's keys in <it>/scitokens/ (the run user's home,
    # e.g. nobody's /nonexistent, is not writable)
    token_cache = Subpath("runtime_dir", "token-cache")
    # the system CA bundle plus the token issuer's CA, bound over the system one in the instance's mount namespace
    # (xrootd_private_ca_argv)
    ca_bundle = Subpath("runtime_dir", "ca-bundle.crt")
    gridmap = Subpath("runtime_dir", "gridmap")
    authdb = Subpath("runtime_dir", "authdb")


def instance_name(protocol: str, port: int) -> str:
    """xrootd's -n name: unique per port, so several agents on one host keep their admin paths apart."""
    return f"tpcm-{protocol.removeprefix('xrootd-')}-{port}"


def _common_xrootd(settings: Any, paths: XrootdPaths, port: int, exports: tuple[str, ...] = EXPORTS) -> list[str]:
    lines = [f"all.export {e}" for e in exports]
    lines += [
        f"oss.localroot {settings.data_dir}",
        f"all.adminpath {paths.admin}",
        f"all.pidpath {paths.admin}",
        f"xrd.port {port}",
    ]
    return lines


# xfr: concurrent TPC jobs (default 9 would queue an 11-file test); ttl: seconds a rendezvous key lives.
_ROOT_TPC = "ofs.tpc ttl 60 120 xfr 128 pgm /usr/bin/xrdcp --server"


def _local_only(settings: Any) -> list[str]:
    """Connections only from this host's addresses the agent uses (``xrd.allow``: every other host is refused
    when it connects); a dual-stack agent's xrdcp reaches the root:// one at its IPv6 address when the source is
    IPv6 (the TPC rendezvous wants the address that reaches the source)."""
    # an IPv6 address in brackets: XRootD compares the client's address in that form (bare, it never matches)
    return [f"xrd.allow host {f'[{a}]' if ':' in a else a}"
            for a in dict.fromkeys((settings.address, LOOPBACK, *settings.addresses))]


def xrootd_root_config(settings: Any, paths: XrootdPaths) -> str:
    """The public root:// instance: the test sets, read-only, as the source of native third-party copies (the
    destination runs ``xrdcp --server`` to pull; the source needs ofs.tpc for the rendezvous)."""
    lines = _common_xrootd(settings, paths, settings.xrootd_root_port, exports=("/sets r/o",))
    lines.append(_ROOT_TPC)
    return "\n".join(lines) + "\n"


def xrootd_root_tpc_config(settings: Any, paths: XrootdPaths) -> str:
    """The local root:// instance, destination of the agent's own ``xrdcp --tpc only`` pulls into /incoming: only
    connections from the agent's own host (``xrd.allow``), and only a client holding the agent's sss key
    (``root_tpc_keytab``, made at each start) may use it: the key names it AGENT_IDENTITY, the one identity the
    authorization rules (``xrootd_authdb``) let write or read."""
    lines = _common_xrootd(settings, paths, settings.xrootd_root_tpc_port, exports=("/incoming",))
    lines += [
        _ROOT_TPC,
        *_local_only(settings),
        "xrootd.seclib libXrdSec.so",
        f"sec.protocol sss -s {root_tpc_keytab(settings)}",
        "sec.protbind * only sss",
        "ofs.authorize 1",
        f"acc.authdb {paths.authdb}",
        "acc.audit deny",
    ]
    return "\n".join(lines) + "\n"


def root_tpc_keytab(settings: Any) -> Path:
    """The sss keytab the agent's xrdcp and its local root:// instance share (in the instance's runtime directory,
    which no server exports)."""
    return Path(settings.data_dir) / "servers" / TPC_SERVERS["xrootd-root"] / "sss.keytab"


def sss_keytab_argv(keytab: Path) -> list[str]:
    """XRootD's own tool making a keytab with one new random key for AGENT_IDENTITY (it asks before creating the
    file: answer y on stdin)."""
    return ["xrdsssadmin", "-k", "tpcmesh", "-u", AGENT_IDENTITY, "-g", AGENT_IDENTITY, "add", str(keytab)]


def xrdcp_sss_env(keytab: Path) -> dict[str, str]:
    """The environment that makes xrdcp authenticate with the agent's sss key (servers without security
    configured, like a source's public instance, ask for none)."""
    return {"XrdSecPROTOCOL": "sss", "XrdSecSSSKT": str(keytab)}


def _xrootd_tls(paths: XrootdPaths, port: int) -> list[str]:
    if paths.cert is None or paths.key is None or paths.ca_dir is None:
        raise ValueError("xrootd-https needs tls_cert, tls_key and ca_file: the HTTP-TPC handler loads only with TLS")
    # The root protocol must listen somewhere; it shares the HTTP port (XrdHttp takes the HTTP connections).
    return [f"xrd.protocol XrdHttp:{port} libXrdHttp.so", f"xrd.tls {paths.cert} {paths.key}",
            f"xrd.tlsca certdir {paths.ca_dir}"]


# Want-Digest: adler32 is answered (RFC 3230 Digest), computed when asked: third-party clients (gfal2, FTS) compare
# a copy's checksum at both ends; without it XRootD answers such a request 405.
CHECKSUM = "xrootd.chksum adler32"


def xrootd_https_config(settings: Any, paths: XrootdPaths) -> str:
    """The public xrootd-https instance: the test sets, read-only, over HTTPS (and plain HTTP on the same port) for
    peers to pull from. No HTTP-TPC handler: a COPY sent here is not understood."""
    port = settings.xrootd_https_port
    lines = _common_xrootd(settings, paths, port, exports=("/sets r/o",))
    lines += [*_xrootd_tls(paths, port), CHECKSUM]
    if settings.xrootd_token_issuer:
        lines += _token_authorization(paths)
    return "\n".join(lines) + "\n"


def xrootd_tpc_config(settings: Any, paths: XrootdPaths) -> str:
    """The local xrootd-https instance, destination of the agent's own HTTP-TPC pulls into /incoming. TLS is
    required (without xrd.tls the handler silently does not load). Only the agent's host may connect
    (``xrd.allow``), and only its own host certificate, mapped by the gridmap (``xrootd_gridmap``) to
    AGENT_IDENTITY, may write or read (``ofs.authorize`` with ``xrootd_authdb``)."""
    port = settings.xrootd_tpc_port
    lines = _common_xrootd(settings, paths, port, exports=("/incoming",))
    lines += [*_xrootd_tls(paths, port), CHECKSUM]
    lines += ["http.exthandler xrdtpc libXrdHttpTPC.so", *_local_only(settings)]
    if settings.xrootd_token_issuer:
        lines += _token_authorization(paths)
    else:
        lines += [f"http.gridmap {paths.gridmap}", "ofs.authorize 1", f"acc.authdb {paths.authdb}", "acc.audit deny"]
    return "\n".join(lines) + "\n"


# Token mode (settings.xrootd_token_issuer): the SciTokens authorization plugin is the only one (no '++' before it,
# no chained default), so a request without a valid token is refused whatever else it presents.
TOKEN_PLUGIN = "libXrdAccSciTokens.so"


def _token_authorization(paths: XrootdPaths) -> list[str]:
    return [
        # XrdHttp hands the Authorization header to the authorization plugins as the 'authz' CGI element
        "http.header2cgi Authorization authz",
        "ofs.authorize 1",
        f"ofs.authlib {TOKEN_PLUGIN} config={paths.scitokens_config}",
        # warnings name why a token was refused (expired, audience, unknown issuer or key) without the token
        "scitokens.trace error warning",
    ]


def scitokens_config(issuer: str, audience: str) -> str:
    """The plugin's INI file: tokens of ``issuer`` naming ``audience``, their scopes relative to '/' (so
    storage.read:/sets grants reading /sets); a request without a token is refused (onmissing deny)."""
    for name, value in (("issuer", issuer), ("audience", audience)):
        if not value or any(c in value for c in " ,\n[]"):
            raise ValueError(f"token {name} {value!r} cannot be written into the SciTokens configuration")
    return (f"[Global]\naudience = {audience}\nonmissing = deny\n\n"
            f"[Issuer tpcmesh]\nissuer = {issuer}\nbase_path = /\n")


SYSTEM_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def bundle_has(bundle: bytes, ca_pem: bytes) -> bool:
    """Whether every certificate of ``ca_pem`` is already in the PEM ``bundle``."""
    def ders(pem: bytes) -> set[bytes]:
        try:
            with warnings.catch_warnings():  # the system bundle holds a few old roots cryptography frowns upon
                warnings.simplefilter("ignore")
                return {c.public_bytes(Encoding.DER) for c in x509.load_pem_x509_certificates(pem)}
        except ValueError:  # no certificate in it
            return set()

    wanted = ders(ca_pem)
    return bool(wanted) and wanted <= ders(bundle)


def xrootd_private_ca_argv(bundle: Path, argv: list[str]) -> list[str]:
    """Run ``argv`` in a private mount namespace where ``bundle`` is bound over the system CA bundle: scitokens-cpp
    0.7 fetches the issuer's keys with libcurl, which trusts only the file compiled into Debian's libcurl (no
    setting or environment variable of the plugin, the library or libcurl changes it). Needs CAP_SYS_ADMIN."""
    script = 'mount --bind "$0" "$1" && shift && exec "$@"'  # $0: the bundle, $1: the system's
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(bundle), str(SYSTEM_CA_BUNDLE),
            *argv]


def xrootd_authdb() -> str:
    """XrdAcc rules of the local TPC instance: the agent's identity may do anything in /incoming; nobody else
    anything."""
    return f"u {AGENT_IDENTITY} /incoming a\n"


def xrootd_gridmap(agent_dn: str) -> str:
    """XrdHttp's gridmap: the agent's own certificate subject, in OpenSSL's one-line form (``/O=x/CN=y``), is
    AGENT_IDENTITY; other certificates of the CA get no name. Refuses a subject the gridmap would read as a pattern
    (a leading '^' or a trailing '$' or '+') or could not quote."""
    if not agent_dn.startswith("/") or agent_dn.endswith(("$", "+")) or '"' in agent_dn or "\n" in agent_dn:
        raise ValueError(f"host certificate subject {agent_dn!r} cannot be written into XRootD's gridmap")
    return f'"{agent_dn}" {AGENT_IDENTITY}\n'


def xrootd_argv(protocol: str, port: int, paths: XrootdPaths, run_user: str | None) -> list[str]:
    argv = ["xrootd", "-c", str(paths.config), "-l", str(paths.log), "-n", instance_name(protocol, port)]
    if run_user:
        argv[1:1] = ["-R", run_user]
    return argv


def gridftp_restrict_paths(settings: Any) -> str:
    """What a GridFTP client may touch: the test sets (read), the incoming area (read and write) and /dev/null (write,
    the sink). Nothing else of the host, whatever the server's user could open."""
    return ",".join([f"R{settings.sets_dir}", f"RW{settings.incoming_dir}", "W/dev/null"])


def gridftp_argv(settings: Any, log_file: Path, anonymous_user: str, anonymous_group: str,
                 address: str | None = None) -> list[str]:
    """GridFTP with the data dir as home, so URL paths are ``~/sets/...``, restricted to the sets and the incoming
    area (gridftp_restrict_paths). gsiftp (``settings.gsiftp``): GSI authentication with the host certificate
    (X509_USER_CERT/KEY, X509_CERT_DIR in the environment, see gridftp_env), then the client's subject must be in
    the grid-mapfile (``-auth-level 1``, GRIDMAP in the environment): the agent itself and the mesh's members
    (gridmap.py), whose sessions run as the server's own user. Anonymous: ftp://, sessions as ``anonymous_user``.
    It binds one address (``address``, default the agent's): a dual-stack agent runs a second server on address6.
    Each transfer it serves is one line of ``transfers.log`` beside ``log_file`` (globus' NetLogger format: file,
    bytes, streams, TYPE=RETR/STOR, DEST=[the data channel's peer], CODE): what the server itself did, e.g. that a
    third-party copy into an external endpoint was sent from this server (gridftp_transfer_log)."""
    if settings.gsiftp:
        access = ["-auth-level", "1"]
    else:
        access = ["-aa", "-anonymous-user", anonymous_user, "-anonymous-group", anonymous_group]
    return [
        "globus-gridftp-server",
        "-control-interface", address or settings.address,
        "-data-interface", address or settings.address,
        "-p", str(settings.gridftp_port),
        *access,
        "-home-dir", str(settings.data_dir),
        "-restrict-paths", gridftp_restrict_paths(settings),
        "-log-level", "error,warn",
        "-logfile", str(log_file),
        "-log-transfer", str(log_file.parent / TRANSFER_LOG),
    ]


TRANSFER_LOG = "transfers.log"
TRANSFER_LOG_MAX_BYTES = 16 << 20  # a line is about 400 bytes: some 40 000 transfers


def gridftp_transfer_log(log_dir: Path) -> Path:
    """The GridFTP server's transfer log in ``log_dir``, called as the server starts: one over
    TRANSFER_LOG_MAX_BYTES is moved to ``.1`` first (replacing the older one)."""
    path = log_dir / TRANSFER_LOG
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > TRANSFER_LOG_MAX_BYTES:
            path.replace(path.with_name(TRANSFER_LOG + ".1"))
    return path


def trim_gridftp_transfer_logs(data_dir: str | Path) -> None:
    """Empty a running GridFTP server's transfer log once it passed TRANSFER_LOG_MAX_BYTES (called before each
    GridFTP test): it lives on the agent's memory-backed volume and a long-lived server would grow it without end.
    Truncated in place, as the server keeps it open (its next line lands at its own offset: at worst a sparse gap,
    which costs no memory)."""
    for path in (Path(data_dir) / "servers").glob(f"gridftp*/{TRANSFER_LOG}"):
        with contextlib.suppress(OSError):
            if path.stat().st_size > TRANSFER_LOG_MAX_BYTES:
                os.truncate(path, 0)


def gridftp_env(cert: Path, key: Path, ca_dir: Path, gridmap: Path | None = None) -> dict[str, str]:
    """The GSI environment of a GridFTP server or client: its credential and the CA directory it trusts; a server's
    also names its grid-mapfile (``gridmap``)."""
    env = {"X509_USER_CERT": str(cert), "X509_USER_KEY": str(key), "X509_CERT_DIR": str(ca_dir)}
    if gridmap is not None:
        env["GRIDMAP"] = str(gridmap)
    return env


def iperf3_argv(settings: Any, address: str | None = None) -> list[str]:
    # -J: a client's --get-server-output then carries the sender's JSON (retransmits, cwnd, RTT of a -R test)
    return ["iperf3", "-s", "-J", "-B", address or settings.address, "-p", str(settings.iperf3_port)]


def supervised_argv(argv: list[str], switch_user: str | None, switch_group: str | None,
                    setpriv: str | None) -> list[str]:
    """Wrap a server's argv in ``setpriv --pdeathsig KILL`` so it dies with the agent even when the agent is
    killed outright; ``switch_user`` also drops privileges there (used for xrootd instead of its ``-R``, which
    would clear the parent-death signal when xrootd changes its own user)."""
    if setpriv is None:
        return argv
    wrapped = [setpriv]
    if switch_user:
        wrapped += ["--reuid", switch_user, "--regid", switch_group or switch_user, "--clear-groups"]
    return [*wrapped, "--pdeathsig", "KILL", *argv]

"""A pair of plain XRootD HTTPS instances with no authentication at all: the "none" rows of the bench's XRootD
HTTP-TPC authorization table (agent/bench/movers_auth.py) and their test.

Not the agents': an agent never runs an anonymous landing (its local HTTP-TPC instance always checks the agent's host
certificate or a token), and must not. The source serves ``<sets_root>/sets`` read-only to anyone; the landing has
the HTTP-TPC handler and lets anyone write ``/incoming`` (no ``ofs.authorize``, so no check of any kind). Both speak
HTTPS with a host certificate of the agents' CA (the TLS work is the same as in the token and x509 rows), their
configuration built from the agents' own pieces (tpcmesh_agent.daemons.configs), and take connections from loopback
only (``xrd.allow``: XRootD listens on every address of the host, and an anonymous writer must not be reachable from
elsewhere).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from tpcmesh_agent.daemons import configs
from tpcmesh_agent.daemons.supervisor import find_library, free_port
from tpcmesh_operator.credentials import pki

from tests.support.agents import TestPKI
from tests.support.serving import serving

HOST = configs.LOOPBACK
RUN_USER = "nobody"
TPC_HANDLER = "libXrdHttpTPC-5.so"


@dataclass(frozen=True)
class AnonymousXrootd:
    role: str  # source | landing
    port: int
    root: Path  # oss.localroot
    address: str = HOST

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"


@dataclass(frozen=True)
class AnonymousPair:
    source: AnonymousXrootd
    landing: AnonymousXrootd
    ca_file: Path  # what a client verifies both with (the agents' CA)

    @property
    def incoming(self) -> Path:
        """The landing's /incoming on disk (writable by the run user)."""
        return self.landing.root / "incoming"


def anonymous_config(role: str, root: Path, port: int, paths: configs.XrootdPaths) -> str:
    """The configuration of one instance: the agents' TLS, export and checksum lines, no authorization at all."""
    exports = ("/sets r/o",) if role == "source" else ("/incoming",)
    lines = configs._common_xrootd(SimpleNamespace(data_dir=root), paths, port, exports)
    lines += [*configs._xrootd_tls(paths, port), configs.CHECKSUM, f"xrd.allow host {HOST}"]
    if role == "landing":
        lines.append("http.exthandler xrdtpc libXrdHttpTPC.so")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _instance(role: str, root: Path, work: Path, agents_pki: TestPKI, ca_dir: Path) -> Iterator[AnonymousXrootd]:
    pw = pwd.getpwnam(RUN_USER)
    runtime = work / role
    runtime.mkdir()
    os.chown(runtime, pw.pw_uid, pw.pw_gid)
    port = free_port()
    cert, key = runtime / "host.crt", runtime / "host.key"
    pki.issue_host_cert(agents_pki.ca, f"anonymous-{role}-{port}", [HOST]).write(cert, key)
    os.chown(key, pw.pw_uid, pw.pw_gid)  # xrootd reads it as the run user, and refuses a key others may read
    paths = configs.XrootdPaths(runtime, cert, key, ca_dir)
    paths.config.write_text(anonymous_config(role, root, port, paths))
    name = f"anon-{role}"
    setpriv = shutil.which("setpriv")  # as the agents' supervisor: drop to the run user, die with this process
    argv = (configs.supervised_argv(configs.xrootd_argv(name, port, paths, None), RUN_USER, "nogroup", setpriv)
            if setpriv else configs.xrootd_argv(name, port, paths, RUN_USER))
    with serving(argv, HOST, port, runtime / "stdout.log",
                 [runtime / configs.instance_name(name, port) / "xrootd.log"], f"the anonymous {role} xrootd",
                 cwd=runtime):
        yield AnonymousXrootd(role, port, root)


@contextlib.contextmanager
def anonymous_xrootd_pair(agents_pki: TestPKI, sets_root: Path) -> Iterator[AnonymousPair]:
    """Start the source (serving ``sets_root/sets``, which the run user must be able to read, e.g. an agent's data
    directory) and the landing (its own /incoming on /dev/shm); root needed (the instances run as nobody)."""
    if shutil.which("xrootd") is None or find_library(TPC_HANDLER) is None:
        raise RuntimeError("the anonymous pair needs xrootd (Debian xrootd-server) and its HTTP-TPC handler "
                           f"{TPC_HANDLER} (xrootd-server-plugins)")
    if not (sets_root / "sets").is_dir():
        raise RuntimeError(f"the anonymous source would serve {sets_root / 'sets'}, which is not a directory")
    work = Path(tempfile.mkdtemp(prefix="tpcm-anon-", dir="/dev/shm"))  # short: xrootd's admin socket path
    try:
        os.chmod(work, 0o755)
        ca_dir = pki.write_ca_dir(agents_pki.ca_file.read_bytes(), work / "ca-dir")
        landing_root = work / "landing-root"
        (landing_root / "incoming").mkdir(parents=True)
        pw = pwd.getpwnam(RUN_USER)
        for d in (landing_root, landing_root / "incoming"):
            os.chown(d, pw.pw_uid, pw.pw_gid)
        with (_instance("source", sets_root, work, agents_pki, ca_dir) as source,
              _instance("landing", landing_root, work, agents_pki, ca_dir) as landing):
            yield AnonymousPair(source, landing, agents_pki.ca_file)
    finally:
        shutil.rmtree(work, ignore_errors=True)

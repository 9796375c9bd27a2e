"""An "external" GridFTP endpoint for the tests: Debian's globus-gridftp-server outside the agents, as another site
runs it, with its own CA (its host certificate and the users' certificates are signed by it), GSI authentication
only (gsiftp://), a grid-mapfile naming the one user DN it accepts (mapped to ``nobody``), and ``-restrict-paths``
to the site's store directory: nothing else of the host may be read or written.

Paths on it are the host's own (the store is below a temporary directory: ``ExternalGridftp.path``). The client
credential the site hands out is an X509 proxy made with grid-proxy-init from the user's certificate
(``proxy_pem``); ``stranger_proxy_pem`` is one of a CA the site does not trust (a wrong credential).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tpcmesh_agent.cadir import one_line_dn, write_ca_dir
from tpcmesh_agent.daemons.supervisor import free_port
from tpcmesh_operator.credentials import pki

from tests.support.agents import TestPKI
from tests.support.serving import serving

HOST = "127.0.0.1"
RUN_USER = "nobody"


@dataclass
class ExternalGridftp:
    address: str
    port: int
    root: Path  # the temporary directory below which the store lives
    site_pki: TestPKI
    agents_ca_file: Path  # the agents' CA plus this site's: give it to the agents as their ca_file
    proxy_pem: str  # the site user's X509 proxy (what its credentials Secret holds as "proxy")
    stranger_proxy_pem: str  # a proxy of a CA the site does not trust
    log: Path
    transfer_log: Path  # the server's -log-transfer file: one NetLogger line per transfer (see transfers())

    @property
    def url(self) -> str:
        return f"gsiftp://{self.address}:{self.port}"

    @property
    def store(self) -> str:
        """The directory the site lets clients use (absolute on the host, as GridFTP paths are)."""
        return str(self.root / "store")

    def files(self) -> list[str]:
        """Every file below the store, relative to it."""
        base = Path(self.store)
        return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())


def transfers(transfer_log: Path) -> list[dict[str, str]]:
    """The transfers a globus-gridftp-server logged with -log-transfer (NetLogger lines of KEY=value): each a dict
    with FILE, NBYTES, TYPE (RETR: it sent the file, STOR: it received it), DEST (``[address]``: the peer of the
    data channel, the other server in a third-party copy), CODE (226: done), ..."""
    if not transfer_log.exists():
        return []
    return [dict(field.partition("=")[::2] for field in line.split()) for line in transfer_log.read_text().splitlines()
            if line.strip()]


def _proxy(work: Path, ca: pki.KeyPair, name: str) -> tuple[str, str]:
    """A proxy of a user certificate of ``ca`` (grid-proxy-init, as a site user makes one)."""
    kp = pki.issue_host_cert(ca, name, [HOST])
    cert, key, proxy = work / f"{name}.crt", work / f"{name}.key", work / f"{name}.proxy"
    kp.write(cert, key)
    os.chmod(key, 0o600)
    subprocess.run(["grid-proxy-init", "-cert", str(cert), "-key", str(key), "-out", str(proxy), "-q",
                    "-valid", "12:00"], check=True, capture_output=True, timeout=60,
                   env={**os.environ, "X509_CERT_DIR": str(work / "ca-dir")})
    return proxy.read_text(), one_line_dn(kp.cert_pem)


@contextlib.contextmanager
def external_gridftp(agents_pki: TestPKI, name: str = "site-g") -> Iterator[ExternalGridftp]:
    """Start the endpoint (as root: the server maps the user's DN to ``nobody`` for each session)."""
    if shutil.which("globus-gridftp-server") is None or shutil.which("grid-proxy-init") is None:
        raise RuntimeError("the external endpoint needs globus-gridftp-server-progs and globus-proxy-utils")
    work = Path(tempfile.mkdtemp(prefix=f"tpcmesh-{name}-", dir="/dev/shm"))
    os.chmod(work, 0o755)
    ca = pki.create_ca(f"{name} site CA")
    site_dir = work / "pki"
    site_dir.mkdir(mode=0o755)
    (site_dir / "ca.crt").write_bytes(ca.cert_pem)
    site = TestPKI(ca_file=site_dir / "ca.crt", ca_dir=site_dir / "ca-dir", ca=ca, directory=site_dir)
    write_ca_dir(site.ca_file, site.ca_dir)
    pw = pwd.getpwnam(RUN_USER)
    store = work / "store"
    store.mkdir()
    os.chown(store, pw.pw_uid, pw.pw_gid)
    cert, key = site.host_cert(name, [HOST])
    os.chmod(key, 0o600)
    # the server trusts its own CA and the agents' (whose clients may present their host certificates)
    agents_and_site = work / "agents-and-site-ca.pem"
    agents_and_site.write_bytes(agents_pki.ca_file.read_bytes() + site.ca_file.read_bytes())
    ca_dir = work / "ca-dir"
    write_ca_dir(agents_and_site, ca_dir)
    stranger_ca = pki.create_ca("a CA the site does not trust")
    stranger_dir = work / "stranger"
    stranger_dir.mkdir()
    (stranger_dir / "ca.crt").write_bytes(stranger_ca.cert_pem)
    write_ca_dir(stranger_dir / "ca.crt", stranger_dir / "ca-dir")
    proxy, user_dn = _proxy(site_dir, ca, f"{name}-user")
    stranger, _ = _proxy(stranger_dir, stranger_ca, "stranger")
    gridmap = work / "grid-mapfile"
    gridmap.write_text(f'"{user_dn}" {RUN_USER}\n')
    port = free_port()
    log, transfer_log = work / "gridftp.log", work / "transfers.log"
    argv = ["globus-gridftp-server", "-control-interface", HOST, "-data-interface", HOST, "-p", str(port),
            "-restrict-paths", f"RW{store}", "-log-level", "error,warn,info", "-logfile", str(log),
            "-log-transfer", str(transfer_log)]
    env = {**os.environ, "X509_USER_CERT": str(cert), "X509_USER_KEY": str(key), "X509_CERT_DIR": str(ca_dir),
           "GRIDMAP": str(gridmap)}
    x = ExternalGridftp(HOST, port, work, site, agents_and_site, proxy, stranger, log, transfer_log)
    try:
        with serving(argv, HOST, port, work / "stdout.log", [log], "the external globus-gridftp-server", env=env):
            yield x
    finally:
        shutil.rmtree(work, ignore_errors=True)

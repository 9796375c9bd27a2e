"""An "external" storage endpoint for the tests: a real XRootD outside the agents, as another site runs it.

``scheme="davs"`` (the default) serves HTTPS with HTTP-TPC; ``scheme="root"`` serves root:// only, TLS required
(``xrootd.tls all``), the ztn security protocol (a bearer token, sent only over TLS) as its only authentication, and
native root:// TPC (``ofs.tpc``: it pulls from an agent's public root:// instance when an xrdcp --tpc targets it).

It has its own CA (its host certificate and its token issuer's are signed by it, not by the agents' CA), its own
token issuer (the operator's issuer code, run as the site's), HTTPS with the HTTP-TPC handler (it pulls when sent a
COPY), adler32 answered to Want-Digest, and SciTokens as its only authorization: nothing is read or written without
a token of its issuer whose scopes cover the path. It trusts the agents' CA, so it can pull from their public
instances; the agents must be given its CA (``agents_ca_file``), as a site installs the grid's CA bundle.
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

from tpcmesh_agent.cadir import write_ca_dir
from tpcmesh_agent.daemons import configs
from tpcmesh_agent.daemons.supervisor import find_library, free_port
from tpcmesh_operator.credentials import pki
from tpcmesh_operator.credentials.tokens.claims import TokenRequest
from tpcmesh_operator.credentials.tokens.issuer import TokenIssuer

from tests.support.agents import TestPKI
from tests.support.serving import Supervised, serving
from tests.support.tokens import running_issuer

HOST = "127.0.0.1"
RUN_USER = "nobody"


@dataclass
class ExternalXrootd:
    address: str
    port: int
    root: Path  # oss.localroot: what the endpoint stores, for the test to look at
    issuer: TokenIssuer
    site_pki: TestPKI
    agents_ca_file: Path  # the agents' CA plus this site's: give it to the agents as their ca_file
    log: Path
    scheme: str = "davs"
    server: Supervised | None = None  # its process and restarts, once started

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}:{self.port}"

    @property
    def audience(self) -> str:
        return f"https://{self.address}:{self.port}" if self.scheme == "davs" else self.url

    def token(self, *scopes: str, audience: str | None = None) -> str:
        return self.issuer.issue(TokenRequest("tpcmesh-operator", audience or self.audience, scopes, 3600))

    def files(self) -> list[str]:
        """Every file the endpoint holds, relative to its root."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())


def _site_pki(directory: Path, name: str) -> TestPKI:
    ca = pki.create_ca(f"{name} site CA")
    directory.mkdir(parents=True)
    os.chmod(directory, 0o755)
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    return TestPKI(ca_file=directory / "ca.crt", ca_dir=pki.write_ca_dir(ca.cert_pem, directory / "ca-dir"), ca=ca,
                   directory=directory)


def _config(x: ExternalXrootd, admin: Path, cert: Path, key: Path, ca_dir: Path, scitokens: Path) -> str:
    if x.scheme == "root":
        return "\n".join([
            "all.export /store", f"oss.localroot {x.root}", f"all.adminpath {admin}", f"all.pidpath {admin}",
            f"xrd.port {x.port}", f"xrd.tls {cert} {key}", f"xrd.tlsca certdir {ca_dir}", "xrootd.tls all",
            configs.CHECKSUM, "xrootd.seclib libXrdSec.so", "sec.protocol ztn", "sec.protbind * only ztn",
            "ofs.tpc ttl 60 120 pgm /usr/bin/xrdcp --server", "ofs.authorize 1",
            f"ofs.authlib {configs.TOKEN_PLUGIN} config={scitokens}", "scitokens.trace error warning", "",
        ])
    return "\n".join([
        "all.export /store", f"oss.localroot {x.root}", f"all.adminpath {admin}", f"all.pidpath {admin}",
        f"xrd.port {x.port}", f"xrd.protocol XrdHttp:{x.port} libXrdHttp.so", f"xrd.tls {cert} {key}",
        f"xrd.tlsca certdir {ca_dir}", configs.CHECKSUM, "http.exthandler xrdtpc libXrdHttpTPC.so",
        "http.header2cgi Authorization authz", "ofs.authorize 1",
        f"ofs.authlib {configs.TOKEN_PLUGIN} config={scitokens}", "scitokens.trace error warning", "",
    ])


@contextlib.contextmanager
def external_xrootd(agents_pki: TestPKI, name: str = "site-x", scheme: str = "davs") -> Iterator[ExternalXrootd]:
    """Start the endpoint (root needed: the SciTokens plugin trusts the site issuer's CA only through a CA bundle
    bound over the system's in a private mount namespace, as the agents do)."""
    if shutil.which("xrootd") is None or find_library(configs.TOKEN_PLUGIN.replace(".so", "-5.so")) is None:
        raise RuntimeError("the external endpoint needs xrootd-server, xrootd-server-plugins and "
                           "xrootd-scitokens-plugins")
    work = Path(tempfile.mkdtemp(prefix=f"tpcmesh-{name}-", dir="/dev/shm"))
    os.chmod(work, 0o755)
    site = _site_pki(work / "pki", name)
    pw = pwd.getpwnam(RUN_USER)
    root, admin, logs = work / "root", work / "admin", work / "logs"
    for d in (root / "store", admin, logs):
        d.mkdir(parents=True)
    for d in (root, root / "store", admin, logs):
        os.chown(d, pw.pw_uid, pw.pw_gid)
    port = free_port()
    cert, key = site.host_cert(name, [HOST])
    os.chown(key, pw.pw_uid, pw.pw_gid)
    os.chmod(key, 0o600)  # xrootd refuses a key others may read
    # the CA directory it verifies peers with: its own CA and the agents' (it pulls from their public instances)
    agents_and_site = work / "agents-and-site-ca.pem"
    agents_and_site.write_bytes(agents_pki.ca_file.read_bytes() + site.ca_file.read_bytes())
    ca_dir = work / "ca-dir"
    write_ca_dir(agents_and_site, ca_dir)
    log = logs / f"ext-{port}" / "xrootd.log"  # xrootd -n <name> puts its log in a directory of that name
    with running_issuer(site, f"{name}-issuer") as issuer:
        x = ExternalXrootd(HOST, port, root, issuer, site, agents_and_site, log, scheme)
        scitokens = work / "scitokens.cfg"
        scitokens.write_text(f"[Global]\naudience = {x.audience}\nonmissing = deny\n\n"
                             f"[Issuer {name}]\nissuer = {issuer.issuer}\nbase_path = /\n")
        config = work / "xrootd.cfg"
        config.write_text(_config(x, admin, cert, key, ca_dir, scitokens))
        bundle = work / "ca-bundle.pem"
        system = configs.SYSTEM_CA_BUNDLE.read_bytes() if configs.SYSTEM_CA_BUNDLE.is_file() else b""
        bundle.write_bytes(system.rstrip(b"\n") + b"\n" + site.ca_file.read_bytes())
        cache = work / "cache"
        cache.mkdir(mode=0o700)
        os.chown(cache, pw.pw_uid, pw.pw_gid)
        argv = configs.xrootd_private_ca_argv(bundle, ["xrootd", "-R", RUN_USER, "-c", str(config), "-l",
                                                        str(logs / "xrootd.log"), "-n", f"ext-{port}"])
        try:
            with serving(argv, HOST, port, work / "stdout.log", [log], "the external xrootd", cwd=logs,
                         env={**os.environ, "XDG_CACHE_HOME": str(cache)}) as x.server:
                yield x
        finally:
            shutil.rmtree(work, ignore_errors=True)

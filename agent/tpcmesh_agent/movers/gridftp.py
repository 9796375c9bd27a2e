"""GridFTP third-party copy: ``globus-url-copy -p <streams>`` from the source's GridFTP server to the local one.

Both servers have their data dir as home, so URLs are ``gsiftp://host:port/~/sets/<set>/<name>`` (source) and
``gsiftp://<local>:port/~/incoming/<test>/<name>`` (destination), in disk mode ``~/disk/sets/...`` and
``~/disk/incoming/...`` (daemons.configs.disk_links; the agent fsyncs each landed file, external.land_on_disk); the
data flows server to server. gsiftp (the
default): globus-url-copy authenticates to both servers with this agent's host certificate (a private copy in a
temporary directory outside the data dir, as Globus insists on a key only its user can read) and ``-nodcau`` leaves
the data channels plain TCP (integrity from the checksums). ``gridftp_security=anonymous``: ``ftp://`` without
credentials.
Destination ``sink``: the local server writes to ``/dev/null`` (as the papers did); a successful copy (the servers'
226 reply) counts the whole file, a failed one the last byte count ``globus-url-copy -vb`` printed. Those bytes are
known only when a copy ends (``Progress.end_only``): the record's peak spreads them over each file's time.

External endpoints (spec.externalEndpoints with a gsiftp:// URL) are third-party copies too, as FTS drives GridFTP:
between this agent's server and the endpoint's, globus-url-copy holding a credential per side (``-src-cred``,
``-dst-cred``): the agent's host certificate and key (one file in the client's private directory) for its own
server, the site's X509 credential (``job.x509``: a proxy, or a certificate and key, written to one private file)
for the endpoint; the agent's CA directory holds the sites' CAs with their signing policies, and ``-nodcau`` leaves
the data channel between the two servers plain TCP. An anonymous (ftp://) agent's server needs no credential: the
site's is then the default one (X509_USER_PROXY; globus-url-copy loads a credential for each side and the ftp://
side ignores it).
- as a source: ``gsiftp://<endpoint><path>/<set>/<name>`` -> ``gsiftp://<this agent's server>/~/incoming/<test>/
  <name>``, timed by the stored file's growth, its adler32 checked here too;
- as a destination: ``gsiftp://<this agent's server>/~/sets/<set>/<name>`` -> ``gsiftp://<endpoint><dir>/<name>``
  (``-cd``), bytes known when each copy ends (``Progress.end_only``); that time includes both servers' adler32
  (globus-url-copy asks the source's before the copy, the destination's after it: about 0.5 s each per 200 MB
  here).
Both ends' servers compute the file's adler32 (``-verify-checksum -checksum-alg ADLER32``: ``CKSM ADLER32`` to
each) and globus-url-copy compares them. Each server's data channel must reach the other's (the endpoint connects
to this agent's server in a pull, this agent's server to the endpoint's in a push), as between agents, and in one
address family: the agent's server in the endpoint's (an IPv6 endpoint needs a dual-stack agent). Every
transfer the agent's server serves is a line of its transfer log (daemons/configs.py, gridftp_argv).
globus-url-copy cannot delete: the operator removes the copies (gfal2, external_io.py).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .. import versions
from ..atomic import write_atomically
from ..daemons.configs import gridftp_env, trim_gridftp_transfer_logs
from .base import (
    FileResult,
    FileSpec,
    Mover,
    MoverUnavailable,
    Progress,
    TransferJob,
    X509Credential,
    run_files_concurrently,
    url_host,
)
from .external import (
    copy_one_file,
    missing,
    now,
    prepare_destination,
    private_file,
    pull_external,
    run_program,
    short,
    source_sets,
)


class GridftpMover(Mover):
    protocol = "gridftp"
    implementation = "globus-gridftp-server"

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self._client_dir: Path | None = None  # the client's private copy of the host credential (never in data_dir)

    async def peer_version(self, job: TransferJob) -> str | None:
        """The source server's version from its greeting (a pull; a push's peer is an external endpoint: unknown)."""
        if job.remote is not None:
            return None
        return await versions.gridftp_banner_version(job.source.host, job.source.port)

    def close(self) -> None:
        if self._client_dir is not None:
            shutil.rmtree(self._client_dir, ignore_errors=True)
            self._client_dir = None

    def available(self) -> str | None:
        return missing("globus-url-copy") or missing("globus-gridftp-server") or self.settings.gsiftp_missing()

    @property
    def scheme(self) -> str:
        return "gsiftp" if self.settings.gsiftp else "ftp"

    def client_options(self) -> tuple[list[str], dict[str, str] | None]:
        """globus-url-copy's extra flags and environment: none for ftp://; for gsiftp the credential and -nodcau."""
        s = self.settings
        if not s.gsiftp:
            return [], None
        if self._client_dir is None:
            self._client_dir = Path(tempfile.mkdtemp(prefix="tpcm-gridftp-client-"))  # 0700, this user's
        cert, key = self._client_dir / "usercert.pem", self._client_dir / "userkey.pem"
        for src, dst, mode in ((s.tls_cert, cert, 0o644), (s.tls_key, key, 0o600)):
            write_atomically(dst, Path(src).read_bytes(), mode)  # refreshed when the host certificate is renewed
        return ["-nodcau"], gridftp_env(cert, key, Path(s.ca_dir))

    def local_hostport(self, source_host: str) -> str:
        """This agent's GridFTP server in the source's family (the two servers open the data channel between
        them, which cannot cross families): a dual-stack agent's IPv6 one for an IPv6 source."""
        return f"{url_host(self.settings.local_address(source_host))}:{self.settings.gridftp_port}"

    @staticmethod
    def family_flags(source_host: str) -> list[str]:
        """globus-url-copy resolves IPv4 only unless told (``-ipv6``: "Address family for hostname not
        supported" for an IPv6 URL otherwise)."""
        return ["-ipv6"] if ":" in source_host else []

    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
        deadline = self.begin(job, progress)
        trim_gridftp_transfer_logs(self.settings.data_dir)
        if job.remote is not None:
            return await self._push(job, deadline, progress)
        dest = prepare_destination(self.settings, job, self.protocol) if job.destination_dir is not None else None
        if not job.source.is_agent:
            if dest is None:
                raise MoverUnavailable("a pull from an external gsiftp:// endpoint supports only destination 'store'")
            return await self._pull_external(job, dest, deadline, progress)

        flags, env = self.client_options()
        flags = [*flags, *self.family_flags(job.source.host)]
        local = self.local_hostport(job.source.host)

        async def pull(spec: FileSpec) -> FileResult:
            src = f"{self.scheme}://{job.source.hostport()}/~{source_sets(job)}/{job.file_set}/{spec.name}"
            if dest is None:
                return await self._sink(job, spec, src, deadline, progress, flags, env)
            dst = f"{self.scheme}://{local}/~{dest}/{spec.name}"
            argv = ["globus-url-copy", *flags, "-p", str(job.streams), "-fast", src, dst]
            return await copy_one_file(argv, job, spec, deadline, progress, env=env)

        return await run_files_concurrently(job, pull)

    async def _sink(self, job: TransferJob, spec: FileSpec, src: str, deadline: float, progress: Progress,
                    flags: list[str], env: dict[str, str] | None) -> FileResult:
        argv = ["globus-url-copy", *flags, "-vb", "-p", str(job.streams), "-fast", src,
                f"{self.scheme}://{self.local_hostport(job.source.host)}/dev/null"]
        result = FileResult(name=spec.name, size=spec.size, started_at=now())
        progress.end_only = True  # /dev/null does not grow: the bytes are known once the copy has ended
        proc = await run_program(argv, deadline, env=env)
        result.finished_at = now()
        counts = [int(n) for n in BYTES_RE.findall(proc.stdout)]
        result.bytes = min(counts[-1], spec.size) if counts else 0
        if proc.timed_out:
            result.error = f"timed out after {job.timeout:g} s"
        elif proc.returncode != 0:
            result.error = f"globus-url-copy exited with {proc.returncode}: {short(proc.stderr or proc.stdout)}"
        else:
            result.bytes = spec.size  # the destination server confirmed the complete file (226)
        progress.add_bytes(result.bytes)
        progress.files_done += 1
        return result


    def _host_credential(self) -> Path:
        """The agent's host certificate and key in one file (what ``-src-cred``/``-dst-cred`` take), in the
        client's private directory beside the copies client_options makes."""
        self.client_options()
        assert self._client_dir is not None
        s = self.settings
        path = self._client_dir / "hostcred.pem"
        write_atomically(path, Path(s.tls_cert).read_bytes().rstrip(b"\n") + b"\n" + Path(s.tls_key).read_bytes(),
                         0o600)
        return path

    @contextlib.contextmanager
    def _third_party(self, cred: X509Credential | None, agent_side: str,
                     ) -> Iterator[tuple[list[str], dict[str, str]]]:
        """globus-url-copy's flags and environment for a third-party copy between this agent's server (the
        ``agent_side``: "src" or "dst") and an external endpoint, a credential per side (see the module's
        docstring). The site's is written to a private temporary directory, removed after the test."""
        env: dict[str, str] = {}
        if self.settings.ca_dir is not None:
            env["X509_CERT_DIR"] = str(self.settings.ca_dir)
        with tempfile.TemporaryDirectory(prefix="tpcm-gsiftp-") as d:
            pem = ""
            if cred is not None and cred.proxy:
                pem = cred.proxy
            elif cred is not None and cred.cert and cred.key:
                pem = cred.cert.rstrip("\n") + "\n" + cred.key
            if not pem:
                raise MoverUnavailable("a gsiftp:// external endpoint needs the site's X509 credential (x509: a proxy, "
                                       "or a certificate and key)")
            site = private_file(Path(d) / "site-cred.pem", pem)
            flags = ["-nodcau"]
            if self.settings.gsiftp:
                other = "dst" if agent_side == "src" else "src"
                flags += [f"-{agent_side}-cred", str(self._host_credential()), f"-{other}-cred", site]
            else:
                env["X509_USER_PROXY"] = site
            yield flags, env

    def _checksum_flags(self, job: TransferJob) -> list[str]:
        """Both servers compute the file's adler32 (``CKSM ADLER32``) and globus-url-copy compares them: the checksum
        the mesh uses everywhere. Debian's server offers MD5, ADLER32, SHA1, SHA256 and SHA512 (its FEAT reply);
        CRC32 is refused ("500 Unknown checksum algorithm")."""
        return ["-verify-checksum", "-checksum-alg", "ADLER32"] if job.verify_checksums else []

    async def _pull_external(self, job: TransferJob, dest: str, deadline: float,
                             progress: Progress) -> list[FileResult]:
        """From the endpoint's server into this agent's (third party), timed by the stored file's growth; the
        received file's adler32 is also checked here against what the operator published (finish_file)."""
        local = self.local_hostport(job.source.host)
        family = self.family_flags(job.source.host)
        with self._third_party(job.x509, "dst") as (flags, env):
            def command(spec: FileSpec, target: Path) -> tuple[str, list[str]]:
                src = f"gsiftp://{job.source.hostport()}{job.source.path}/{job.file_set}/{spec.name}"
                dst = f"{self.scheme}://{local}/~{dest}/{target.name}"
                # globus-url-copy does not say which server refused: an error names both
                return f"{src} (third party into {dst})", ["globus-url-copy", *flags, *family,
                                                           *self._checksum_flags(job), "-p", str(job.streams),
                                                           "-fast", src, dst]

            return await pull_external(job, deadline, progress, env, command)

    async def _push(self, job: TransferJob, deadline: float, progress: Progress) -> list[FileResult]:
        """Into an external endpoint (job.remote): from this agent's server to the endpoint's (third party), the
        adler32 of both ends compared by globus-url-copy."""
        remote = job.remote
        assert remote is not None
        progress.end_only = True  # the remote's file cannot be watched: bytes count when each copy has ended
        host = urlsplit(remote.url).hostname or ""
        local = self.local_hostport(host)
        family = self.family_flags(host)
        with self._third_party(job.x509, "src") as (flags, env):
            async def push(spec: FileSpec) -> FileResult:
                result = FileResult(name=spec.name, size=spec.size, started_at=now())
                src = f"{self.scheme}://{local}/~/sets/{job.file_set}/{spec.name}"
                argv = ["globus-url-copy", *flags, *family, "-cd", *self._checksum_flags(job), "-p", str(job.streams),
                        "-fast", src, f"{remote.url}/{spec.name}"]
                proc = await run_program(argv, deadline, env=env)
                result.finished_at = now()
                if proc.timed_out:
                    result.error = f"remote {remote.url}: timed out after {job.timeout:g} s"
                elif proc.returncode != 0:  # globus-url-copy does not say which server refused: both are named
                    result.error = (f"remote {remote.url} (third party from {src}): globus-url-copy exited with "
                                    f"{proc.returncode}: {short(proc.stderr or proc.stdout)}")
                else:  # the whole file (the endpoint's 226), and with -verify-checksum the adler32 of both ends
                    result.bytes = spec.size
                    result.checksum_ok = True if job.verify_checksums else None
                progress.add_bytes(result.bytes)
                progress.files_done += 1
                return result

            return await run_files_concurrently(job, push)


BYTES_RE = re.compile(r"(\d+) bytes")

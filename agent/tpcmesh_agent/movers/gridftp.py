"""GridFTP third-party copy: ``globus-url-copy -p <streams>`` from the source's GridFTP server to the local one.

Both servers have their data dir as home, so URLs are ``gsiftp://host:port/~/sets/<set>/<name>`` (source) and
``gsiftp://<local>:port/~/incoming/<test>/<name>`` (destination); the data flows server to server. gsiftp (the
default): globus-url-copy authenticates to both servers with this agent's host certificate (a private copy in a
temporary directory outside the data dir, as Globus insists on a key only its user can read) and ``-nodcau`` leaves
the data channels plain TCP (integrity from the checksums). ``gridftp_security=anonymous``: ``ftp://`` without
credentials.
Destination ``sink``: the local server writes to ``/dev/null`` (as the papers did); a successful copy (the servers'
226 reply) counts the whole file, a failed one the last byte count ``globus-url-copy -vb`` printed. Those bytes are
known only when a copy ends (``Progress.end_only``): the record's peak spreads them over each file's time.

External endpoints (spec.externalEndpoints with a gsiftp:// URL), with the site's X509 credential (``job.x509``: a
proxy, or a certificate and key, written to a private directory for globus-url-copy) and the agent's CA directory
(which holds the sites' CAs with their signing policies):
- as a source: a plain pull, ``globus-url-copy gsiftp://<endpoint><path>/<set>/<name> file://<incoming file>`` (the
  site's credential is not one the agent's own server accepts, so no third-party copy into it);
- as a destination: a push from the agent's copy of the set, ``globus-url-copy -cd -verify-checksum
  file://<sets>/<set>/<name> gsiftp://<endpoint><dir>/<name>`` (globus-url-copy compares the MD5 of both ends; it
  cannot ask the server for adler32 of a local file). globus-url-copy cannot delete: the operator removes the
  copies (gfal2, external_io.py).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..atomic import write_atomically
from ..servers.configs import gridftp_env
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
)


class GridftpMover(Mover):
    protocol = "gridftp"

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self._client_dir: Path | None = None  # the client's private copy of the host credential (never in data_dir)

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
        why = self.available()
        if why:
            raise MoverUnavailable(why)
        deadline = time.monotonic() + job.timeout
        progress.files_total = len(job.files)
        if job.remote is not None:
            return await self._push(job, deadline, progress)
        dest = prepare_destination(self.settings, job, self.protocol) if job.destination_dir is not None else None
        if not job.source.is_agent:
            if job.destination_dir is None:
                raise MoverUnavailable("a pull from an external gsiftp:// endpoint supports only destination 'store'")
            return await self._pull_external(job, deadline, progress)

        flags, env = self.client_options()
        flags = [*flags, *self.family_flags(job.source.host)]
        local = self.local_hostport(job.source.host)

        async def pull(spec: FileSpec) -> FileResult:
            src = f"{self.scheme}://{job.source.hostport()}/~/sets/{job.file_set}/{spec.name}"
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


    @contextlib.contextmanager
    def _site_env(self, cred: X509Credential | None) -> Iterator[dict[str, str]]:
        """globus-url-copy's environment for an external endpoint: the site's credential in files only this user
        reads (a private temporary directory, removed after the test), the agent's CA directory."""
        env: dict[str, str] = {}
        if self.settings.ca_dir is not None:
            env["X509_CERT_DIR"] = str(self.settings.ca_dir)
        with tempfile.TemporaryDirectory(prefix="tpcm-gsiftp-") as d:
            if cred is not None and cred.proxy:
                env["X509_USER_PROXY"] = private_file(Path(d) / "proxy.pem", cred.proxy)
            elif cred is not None and cred.cert and cred.key:
                env["X509_USER_CERT"] = private_file(Path(d) / "usercert.pem", cred.cert)
                env["X509_USER_KEY"] = private_file(Path(d) / "userkey.pem", cred.key)
            yield env

    async def _pull_external(self, job: TransferJob, deadline: float, progress: Progress) -> list[FileResult]:
        def command(spec: FileSpec, target: Path) -> tuple[str, list[str]]:
            src = f"gsiftp://{job.source.hostport()}{job.source.path}/{job.file_set}/{spec.name}"
            return src, ["globus-url-copy", "-nodcau", "-p", str(job.streams), "-fast", src, f"file://{target}"]

        with self._site_env(job.x509) as env:
            return await pull_external(job, deadline, progress, env, command)

    async def _push(self, job: TransferJob, deadline: float, progress: Progress) -> list[FileResult]:
        """Into an external endpoint (job.remote): from this agent's copy of the set, MD5 compared at both ends."""
        remote = job.remote
        assert remote is not None
        progress.end_only = True  # the remote's file cannot be watched: bytes count when each copy has ended
        sets = Path(self.settings.sets_dir) / job.file_set
        with self._site_env(job.x509) as env:
            async def push(spec: FileSpec) -> FileResult:
                result = FileResult(name=spec.name, size=spec.size, started_at=now())
                argv = ["globus-url-copy", "-nodcau", "-cd", "-verify-checksum", "-p", str(job.streams), "-fast",
                        f"file://{sets / spec.name}", f"{remote.url}/{spec.name}"]
                proc = await run_program(argv, deadline, env=env)
                result.finished_at = now()
                if proc.timed_out:
                    result.error = f"remote {remote.url}: timed out after {job.timeout:g} s"
                elif proc.returncode != 0:
                    result.error = (f"remote {remote.url}: globus-url-copy exited with {proc.returncode}: "
                                    f"{short(proc.stderr or proc.stdout)}")
                else:  # the whole file, and the MD5 of both ends matched (-verify-checksum)
                    result.bytes, result.checksum_ok = spec.size, True
                progress.add_bytes(result.bytes)
                progress.files_done += 1
                return result

            return await run_files_concurrently(job, push)


BYTES_RE = re.compile(r"(\d+) bytes")

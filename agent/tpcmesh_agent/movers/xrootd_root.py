"""XRootD native third-party copy over root://: ``xrdcp --tpc only root://source//sets/… root://local//incoming/…``.

The destination XRootD (this agent's local root:// TPC instance on ``xrootd_root_tpc_port``, which takes
connections from this host only, and only from a client holding the agent's sss key) runs ``xrdcp --server`` to
pull from the source's public instance. XRootD's TPC rendezvous checks that the pull comes from the host named in
the destination URL, so the local server is addressed by the address this host uses to reach the source (on
loopback that is 127.0.0.1; XRootD listens on every address). ``xrdcp --tpc only`` polls for completion (about
0.8 s per copy here), so each file's end is taken from the destination file reaching its size when that was seen.

External endpoints (spec.externalEndpoints with a root:// URL), with the site's bearer token (``tokens.read`` /
``remote_destination.token``) handed to xrdcp through a private file (``BEARER_TOKEN_FILE``: the ztn protocol,
sent only over TLS; the endpoint's CA is in the agent's CA directory, ``X509_CERT_DIR``):
- as a source: a plain pull, ``xrdcp root://<endpoint>//<path>/sets/<set>/<name> <incoming file>`` (the site's
  token is not delegated to the local TPC instance, so the agent's client reads it itself);
- as a destination: ``xrdcp --tpc first root://<this agent's public instance>//sets/… root://<endpoint>//<dir>/…``
  (the endpoint pulls from the agent, the way FTS drives root TPC; xrdcp streams the file itself when the endpoint
  cannot), then the copy's size and adler32 as the endpoint reports them (``xrdfs stat`` / ``query checksum``),
  then its removal (``xrdfs rm``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..daemons.configs import TPC_SERVERS, root_tpc_keytab, xrdcp_sss_env
from .base import FileResult, FileSpec, Progress, TransferJob, run_files_concurrently
from .external import (
    copy_one_file,
    local_source_address,
    missing,
    now,
    prepare_destination,
    private_file,
    pull_external,
    read_back,
    run_client,
    short,
    source_sets,
)
from .xrootd import XrootdMover

# fail fast on an endpoint that does not answer (xrdcp's defaults retry for minutes)
CLIENT_ENV = {"XRD_CONNECTIONRETRY": "1", "XRD_CONNECTIONWINDOW": "10", "XRD_REQUESTTIMEOUT": "60"}
CHECKSUM_RE = re.compile(r"^adler32\s+([0-9a-fA-F]{1,8})\s*$", re.MULTILINE)
SERVER_ERROR = "[3012]"  # kXR_ServerError, as xrdfs prints it: asked again (read_back)
SIZE_RE = re.compile(r"^Size:\s+(\d+)\s*$", re.MULTILINE)


class XrootdRootMover(XrootdMover):
    protocol = "xrootd-root"
    local_server = TPC_SERVERS["xrootd-root"]

    def available(self) -> str | None:
        return missing("xrdcp") or missing("xrootd")

    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
        deadline = self.begin(job, progress)
        if job.remote is not None:
            return await self._push(job, deadline, progress)
        dest = prepare_destination(self.settings, job, self.protocol)
        if not job.source.is_agent:
            return await self._pull_external(job, deadline, progress)
        local = await asyncio.to_thread(local_source_address, job.source.host, job.source.port)
        local = f"[{local}]" if ":" in local else local
        env = {"XRD_CONNECTIONRETRY": "1", **xrdcp_sss_env(root_tpc_keytab(self.settings))}

        async def pull(spec: FileSpec) -> FileResult:
            src = f"root://{job.source.hostport()}/{source_sets(job)}/{job.file_set}/{spec.name}"
            dst = f"root://{local}:{self.settings.xrootd_root_tpc_port}/{dest}/{spec.name}"
            argv = ["xrdcp", "--tpc", "only", "--force", "--nopbar", "--streams", str(job.streams), src, dst]
            return await copy_one_file(argv, job, spec, deadline, progress, env=env)

        return await run_files_concurrently(job, pull)

    @contextlib.contextmanager
    def _site_env(self, token: str | None) -> Iterator[dict[str, str]]:
        """xrdcp's environment for an external endpoint: the token in a file only this user reads (never on a
        command line, which any local user could see), the agent's CA directory (which holds the sites' CAs)."""
        env = dict(CLIENT_ENV)
        if self.settings.ca_dir is not None:
            env["X509_CERT_DIR"] = str(self.settings.ca_dir)
        with tempfile.TemporaryDirectory(prefix="tpcm-root-") as d:
            if token:
                env["BEARER_TOKEN_FILE"] = private_file(Path(d) / "token", token)
            yield env

    async def _pull_external(self, job: TransferJob, deadline: float, progress: Progress) -> list[FileResult]:
        def command(spec: FileSpec, target: Path) -> tuple[str, list[str]]:
            src = f"root://{job.source.hostport()}/{job.source.path}/{job.file_set}/{spec.name}"
            return src, ["xrdcp", "--force", "--nopbar", "--streams", str(job.streams), src, str(target)]

        with self._site_env(job.tokens.read if job.tokens else None) as env:
            return await pull_external(job, deadline, progress, env, command, retry_crash=True)

    async def _push(self, job: TransferJob, deadline: float, progress: Progress) -> list[FileResult]:
        """Into an external endpoint (job.remote): native TPC from this agent's public instance."""
        remote = job.remote
        assert remote is not None
        progress.end_only = True  # the remote's file cannot be watched: bytes count when each copy has ended
        host, _, directory = remote.url.removeprefix("root://").partition("/")
        with self._site_env(remote.token) as env:
            async def push(spec: FileSpec) -> FileResult:
                src = f"root://{job.source.hostport()}/{job.source.path}/{job.file_set}/{spec.name}"
                dst = f"{remote.url}/{spec.name}"
                result = FileResult(name=spec.name, size=spec.size, started_at=now())
                argv = ["xrdcp", "--tpc", "first", "--force", "--nopbar", "--streams", str(job.streams), src, dst]
                proc = await run_client(argv, deadline, env=env)
                result.finished_at = now()
                if proc.timed_out:
                    error: str | None = f"timed out after {job.timeout:g} s"
                elif proc.returncode != 0:
                    error = f"xrdcp exited with {proc.returncode}: {short(proc.stderr or proc.stdout)}"
                else:
                    error = await self._check(job, spec, result, f"root://{host}", f"{directory}/{spec.name}",
                                              deadline, env)
                    if error is None and remote.remove:
                        error = await self._remove(f"root://{host}", f"{directory}/{spec.name}", deadline, env)
                if error is not None:
                    result.error = f"remote {remote.url}: {error}"
                progress.add_bytes(result.bytes)
                progress.files_done += 1
                return result

            return await run_files_concurrently(job, push)

    async def _check(self, job: TransferJob, spec: FileSpec, result: FileResult, server: str, path: str,
                     deadline: float, env: dict[str, str]) -> str | None:
        """The copy's size and adler32 as the endpoint reports them."""
        stat = await run_client(["xrdfs", server, "stat", path], deadline, env=env)
        if stat.returncode != 0:
            return f"the copy cannot be read back: xrdfs stat: {short(stat.stderr or stat.stdout)}"
        m = SIZE_RE.search(stat.stdout)
        result.bytes = int(m.group(1)) if m else 0
        if result.bytes != spec.size:
            return f"received {result.bytes} of {spec.size} bytes"
        if job.verify_checksums and spec.checksum:
            query = await read_back(
                lambda: run_client(["xrdfs", server, "query", "checksum", path], deadline, env=env),
                lambda q: SERVER_ERROR in q.stderr + q.stdout)
            c = CHECKSUM_RE.search(query.stdout) if query.returncode == 0 else None
            if c is None:
                return f"the remote reports no adler32: {short(query.stderr or query.stdout)}"
            got = "adler32:" + c.group(1).lower().zfill(8)
            result.checksum_ok = got == spec.checksum
            if not result.checksum_ok:
                return f"checksum mismatch: the remote has {got}, the source published {spec.checksum}"
        return None

    async def _remove(self, server: str, path: str, deadline: float, env: dict[str, str]) -> str | None:
        proc = await run_client(["xrdfs", server, "rm", path], deadline, env=env)
        if proc.returncode != 0:
            return f"the copy was made but could not be removed: xrdfs rm: {short(proc.stderr or proc.stdout)}"
        return None

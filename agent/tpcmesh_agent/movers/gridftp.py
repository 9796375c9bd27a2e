"""GridFTP third-party copy: ``globus-url-copy -p <streams>`` from the source's GridFTP server to the local one.

Both servers run anonymously with their data dir as home, so URLs are ``ftp://host:port/~/sets/<set>/<name>``
(source) and ``ftp://<local>:port/~/incoming/<test>/<name>`` (destination); the data flows server to server.
Destination ``sink``: the local server writes to ``/dev/null`` (as the papers did); a successful copy (the servers'
226 reply) counts the whole file, a failed one the last byte count ``globus-url-copy -vb`` printed.
"""

from __future__ import annotations

import re
import time
from typing import Any

from .base import FileResult, FileSpec, Mover, MoverUnavailable, Progress, TransferJob, run_files_concurrently
from .external import copy_one_file, missing, now, prepare_destination, run_program, short


class GridftpMover(Mover):
    protocol = "gridftp"

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def available(self) -> str | None:
        return missing("globus-url-copy") or missing("globus-gridftp-server")

    def local_hostport(self) -> str:
        host = self.settings.address
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{self.settings.gridftp_port}"

    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
        why = self.available()
        if why:
            raise MoverUnavailable(why)
        dest = prepare_destination(self.settings, job, self.protocol) if job.destination_dir is not None else None
        deadline = time.monotonic() + job.timeout
        progress.files_total = len(job.files)

        async def pull(spec: FileSpec) -> FileResult:
            src = f"ftp://{job.source.hostport()}/~/sets/{job.file_set}/{spec.name}"
            if dest is None:
                return await self._sink(job, spec, src, deadline, progress)
            dst = f"ftp://{self.local_hostport()}/~{dest}/{spec.name}"
            argv = ["globus-url-copy", "-p", str(job.streams), "-fast", src, dst]
            return await copy_one_file(argv, job, spec, deadline, progress)

        return await run_files_concurrently(job, pull)

    async def _sink(self, job: TransferJob, spec: FileSpec, src: str, deadline: float,
                    progress: Progress) -> FileResult:
        argv = ["globus-url-copy", "-vb", "-p", str(job.streams), "-fast", src,
                f"ftp://{self.local_hostport()}/dev/null"]
        result = FileResult(name=spec.name, size=spec.size, started_at=now())
        proc = await run_program(argv, deadline)
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


BYTES_RE = re.compile(r"(\d+) bytes")

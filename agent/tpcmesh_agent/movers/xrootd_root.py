"""XRootD native third-party copy over root://: ``xrdcp --tpc only root://source//sets/… root://local//incoming/…``.

The destination XRootD (this agent's local root:// TPC instance on ``xrootd_root_tpc_port``, which takes
connections from this host only, and only from a client holding the agent's sss key) runs ``xrdcp --server`` to
pull from the source's public instance. XRootD's TPC rendezvous checks that the pull comes from the host named in
the destination URL, so the local server is addressed by the address this host uses to reach the source (on
loopback that is 127.0.0.1; XRootD listens on every address). ``xrdcp --tpc only`` polls for completion (about
0.8 s per copy here), so each file's end is taken from the destination file reaching its size when that was seen.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..servers.configs import TPC_SERVERS, root_tpc_keytab, xrdcp_sss_env
from .base import FileResult, FileSpec, Mover, MoverUnavailable, Progress, TransferJob, run_files_concurrently
from .external import copy_one_file, local_source_address, missing, prepare_destination


class XrootdRootMover(Mover):
    protocol = "xrootd-root"
    local_server = TPC_SERVERS["xrootd-root"]

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def available(self) -> str | None:
        return missing("xrdcp") or missing("xrootd")

    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
        why = self.available()
        if why:
            raise MoverUnavailable(why)
        dest = prepare_destination(self.settings, job, self.protocol)
        local = await asyncio.to_thread(local_source_address, job.source.host, job.source.port)
        local = f"[{local}]" if ":" in local else local
        deadline = time.monotonic() + job.timeout
        progress.files_total = len(job.files)
        env = {"XRD_CONNECTIONRETRY": "1", **xrdcp_sss_env(root_tpc_keytab(self.settings))}

        async def pull(spec: FileSpec) -> FileResult:
            src = f"root://{job.source.hostport()}//sets/{job.file_set}/{spec.name}"
            dst = f"root://{local}:{self.settings.xrootd_root_tpc_port}/{dest}/{spec.name}"
            argv = ["xrdcp", "--tpc", "only", "--force", "--nopbar", "--streams", str(job.streams), src, dst]
            return await copy_one_file(argv, job, spec, deadline, progress, env=env)

        return await run_files_concurrently(job, pull)

"""What the two XRootD movers (xrootd_https.py, xrootd_root.py) share: the implementation, and how the source's
version is asked."""

from __future__ import annotations

from .. import versions
from .base import Mover, TransferJob


class XrootdMover(Mover):
    """A mover whose destination side is this agent's XRootD (abstract: the protocol's module gives the run)."""

    implementation = "xrootd"

    async def peer_version(self, job: TransferJob) -> str | None:
        """The source agent's XRootD, asked ``query config version`` on its public port (the root protocol shares
        it); an external endpoint's is not asked (it may want the site's credential): unknown."""
        if job.remote is not None or not job.source.is_agent:
            return None
        return await versions.xrootd_server_version(job.source.host, job.source.port)

"""Files replaced in one rename: a server starting meanwhile reads the old file or the new one, never a truncated
or half-written one (XRootD failed at start reading a host key the agent was copying again for GridFTP)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int = 0o644,
                     prepare: Callable[[Path], None] | None = None) -> bool:
    """Replace ``path`` with ``data`` (created with ``mode``; ``prepare(tmp)`` may chown it before the rename).
    A file that already holds ``data`` is left alone; returns whether it was written."""
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)  # the umask may have narrowed it
    if prepare is not None:
        prepare(tmp)
    os.replace(tmp, path)
    return True

"""A test server as a context: started in its own session, waited for until it listens, killed with its children
on the way out. The external and anonymous XRootD endpoints and the external GridFTP server share it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def wait_listening(host: str, port: int, proc: subprocess.Popen, logs: Sequence[Path], what: str,
                   timeout: float = 30.0) -> None:
    """Until the server listens on host:port; its logs' ends when it exits first. `what` names it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = " | ".join(p.read_text(errors="replace")[-1500:] for p in logs if p.exists())
            raise RuntimeError(f"{what} exited with {proc.returncode}: {said}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout:g} s")


@contextlib.contextmanager
def serving(argv: Sequence[str], host: str, port: int, stdout: Path, logs: Sequence[Path], what: str,
            **popen: Any) -> Iterator[subprocess.Popen]:
    """Run `argv` (its output in `stdout`) until the block ends; `logs` (stdout first) are quoted if it dies."""
    with open(stdout, "wb") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen)
    try:
        wait_listening(host, port, proc, [stdout, *logs], what)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # its session: xrootd's and gridftp's children too
        proc.wait(timeout=10)

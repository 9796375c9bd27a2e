"""Reading a root:// copy back from an endpoint: a server error to the checksum query ("[3012] Program failed", seen
from XRootD 5.5.3 right after a TPC copy into it under load) is asked again; a definite answer is not. The endpoint
here is an ``xrdfs`` on PATH that answers as XRootD's client prints (the real exchange is in
tests/integration/operator/test_operator_external_root.py; the transient cannot be produced on demand)."""

from __future__ import annotations

import asyncio
import os
import stat
import time
import uuid
from pathlib import Path

from tpcmesh_agent.movers.base import Endpoint, FileResult, FileSpec, TransferJob
from tpcmesh_agent.movers.external import READBACK_ATTEMPTS
from tpcmesh_agent.movers.xrootd_root import XrootdRootMover

SPEC = FileSpec("f1", 5, "adler32:05c801f0")
SERVER_ERROR = "[ERROR] Server responded with an error: [3012] Program failed"
DENIED = "[ERROR] Server responded with an error: [3010] Permission denied"


def _xrdfs(tmp_path: Path, failures: int, error: str) -> tuple[dict[str, str], Path]:
    """An xrdfs whose first ``failures`` checksum queries print ``error``; it counts the queries in a file."""
    count = tmp_path / "queries"
    count.write_text("0")
    script = tmp_path / "bin" / "xrdfs"
    script.parent.mkdir()
    script.write_text(f"""#!/bin/sh
case "$2" in
  stat) echo "Path:   $3"; echo "Size:   5"; exit 0;;
  query) n=$(($(cat {count}) + 1)); echo $n > {count}
         if [ $n -le {failures} ]; then echo "{error}" >&2; exit 51; fi
         echo "adler32 05c801f0"; exit 0;;
esac
exit 2
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{script.parent}:{os.environ['PATH']}"}, count


def _check(env: dict[str, str]) -> tuple[str | None, FileResult]:
    job = TransferJob(test_id=str(uuid.uuid4()), protocol="xrootd-root", source=Endpoint("127.0.0.1", 1094),
                      files=(SPEC,), file_set="1x5", concurrency=1, streams=1, timeout=30, destination_dir=None)
    result = FileResult(name=SPEC.name, size=SPEC.size)
    error = asyncio.run(XrootdRootMover()._check(job, SPEC, result, "root://site:1094", "/store/f1",
                                                 time.monotonic() + 30, env))
    return error, result


def test_a_server_error_to_the_checksum_query_is_asked_again(tmp_path):
    env, count = _xrdfs(tmp_path, 2, SERVER_ERROR)
    error, result = _check(env)
    assert error is None and result.checksum_ok is True
    assert count.read_text().strip() == "3"


def test_a_server_error_that_stays_is_reported_after_the_last_attempt(tmp_path):
    env, count = _xrdfs(tmp_path, READBACK_ATTEMPTS, SERVER_ERROR)
    error, _ = _check(env)
    assert error is not None and "the remote reports no adler32" in error and "[3012]" in error
    assert count.read_text().strip() == str(READBACK_ATTEMPTS)


def test_a_refusal_is_not_asked_again(tmp_path):
    env, count = _xrdfs(tmp_path, 1, DENIED)
    error, _ = _check(env)
    assert error is not None and "Permission denied" in error
    assert count.read_text().strip() == "1"

"""The bench's "none" pair (tests/support/anonymous_xrootd.py), with real XRootD: nothing is asked of a client on
either side (no certificate, no token), the source stays read-only, and an HTTP-TPC COPY from the source into the
landing works, sent as the bench sends it (movers_auth.AuthBench.by_hand) and checked byte for byte."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import tempfile
import uuid
import zlib
from pathlib import Path

import httpx
import pytest
from tpcmesh_agent.files import FileSets, spec_from_name

from tests.support.anonymous_xrootd import anonymous_xrootd_pair
from tests.unit.agent.test_bench_movers_text import _auth

pytestmark = pytest.mark.integration

SIZE = 100_000
SET = f"11x{SIZE}"  # the name the bench's route asks for


@pytest.fixture(scope="module")
def served(tpcmesh_pki):
    root = Path(tempfile.mkdtemp(prefix="tpcm-anon-test-", dir="/dev/shm"))
    os.chmod(root, 0o755)
    try:
        files = FileSets(root / "sets", 10**8).ensure(spec_from_name(SET))
        with anonymous_xrootd_pair(tpcmesh_pki, root) as pair:
            yield pair, files
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _client(pair) -> httpx.Client:
    """No client certificate, no Authorization header: only the CA, to check the servers' certificates."""
    return httpx.Client(verify=ssl.create_default_context(cafile=str(pair.ca_file)), timeout=30)


def _adler32(data: bytes) -> str:
    return f"adler32:{zlib.adler32(data):08x}"


def test_the_source_serves_the_sets_to_anyone_and_takes_no_write(served):
    pair, files = served
    with _client(pair) as c:
        r = c.get(f"{pair.source.url}/sets/{SET}/{files[0].name}")
        assert r.status_code == 200, r.text
        assert _adler32(r.content) == files[0].checksum
        put = c.put(f"{pair.source.url}/sets/{SET}/intruder.dat", content=b"x" * 10)
    assert put.status_code >= 400, put.text  # exported r/o
    assert not (pair.source.root / "sets" / SET / "intruder.dat").exists()


def test_the_landing_takes_an_anonymous_write(served):
    pair, _ = served
    with _client(pair) as c:
        r = c.put(f"{pair.landing.url}/incoming/put-{uuid.uuid4()}.dat", content=b"y" * 1000)
    assert r.status_code in (200, 201), r.text  # XRootD 5.5 answers a PUT "200 :-)"
    (landed,) = [p for p in pair.incoming.iterdir() if p.name.startswith("put-")]
    assert landed.read_bytes() == b"y" * 1000
    landed.unlink()


def test_a_copy_between_them_works_without_any_credential(served):
    """curl with the bench's headers and nothing else (no --cert, no token): the landing pulls from the source."""
    pair, files = served
    target = pair.incoming / f"copy-{uuid.uuid4()}.dat"
    out = subprocess.run(["curl", "-sS", "--noproxy", "*", "-X", "COPY", "--cacert", str(pair.ca_file),
                          "-H", "Credential: none", "-H", "X-Number-Of-Streams: 2",
                          "-H", f"Source: {pair.source.url}/sets/{SET}/{files[1].name}",
                          f"{pair.landing.url}/incoming/{target.name}"], capture_output=True, text=True, timeout=60)
    assert out.stdout.rstrip().endswith("success: Created"), out.stdout + out.stderr  # a failed TPC answers 201 too
    assert _adler32(target.read_bytes()) == files[1].checksum
    target.unlink()


def test_the_bench_sends_its_none_copies_to_the_pair(served):
    """The bench's own by-hand COPYs on the none route, 8 streams x 11 files at once: a figure, not a failure."""
    pair, files = served
    auth = _auth()
    logged: list[str] = []
    bench = auth.AuthBench(SIZE, 1, logged.append, api=None)
    gbps = bench.by_hand(auth.anonymous_route(pair, SIZE), [f.as_dict() for f in files], 8, 11, None)
    assert isinstance(gbps, float) and gbps > 0, logged
    assert list(pair.incoming.iterdir()) == []  # the bench cleans its landing directory up

"""Interoperability with a real third-party client: gfal2 (Debian python3-gfal2 with gfal2-plugin-http, the library
FTS drives) copies between two agents in token mode, pull mode only (the destination pulls: no streaming through
the client, no fallback), with a bearer token per endpoint from the operator's real issuer and adler32 compared at
both ends, against the agents' XRootD instances and against their built-in endpoints."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import uuid
from pathlib import Path

import pytest
from tpcmesh_agent.files import adler32_of
from tpcmesh_operator.credentials.tokens.claims import CREATE_INCOMING, READ_SETS, TokenRequest

from tests.integration.agent.test_protocols import xrootd_ports

pytestmark = pytest.mark.integration

COUNT, SIZE = 1, 2_000_003
SYSTEM_PYTHON = "/usr/bin/python3"  # the only interpreter Debian's python3-gfal2 is installed for
DRIVER = Path(__file__).parents[2] / "support" / "gfal_copy.py"
# the destination's token: create to land the file, read so gfal2 may stat it and ask its checksum (FTS asks for
# the same pair: a landing is checked after the copy)
READ_INCOMING = "storage.read:/incoming"


@pytest.fixture(scope="module")
def gfal2_available():
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import gfal2"], capture_output=True, text=True)
    assert probe.returncode == 0, ("gfal2 is missing: install the Debian packages python3-gfal2 and "
                                   f"gfal2-plugin-http (hack/debian-packages.txt): {probe.stderr.strip()}")


@pytest.fixture(scope="module")
def pair(module_agent_factory, token_issuers):
    agents = [module_agent_factory(protocols=("builtin", "xrootd-https"), run_user="nobody",
                                   xrootd_token_issuer=token_issuers[0].issuer, **xrootd_ports()) for _ in range(2)]
    fs = agents[0].file_set(count=COUNT, size=SIZE)
    return agents[0], agents[1], fs


def _tpc_port(a) -> int:
    return a.get("/api/v1/info").json()["servers"]["xrootd-https-tpc"]["port"]


def _source(a, kind: str, fs: dict) -> tuple[str, str]:
    """(URL, token audience) of the set's first file at agent ``a``'s built-in or XRootD endpoint."""
    f = fs["files"][0]["name"]
    if kind == "builtin":
        aud = f"http://{a.address}:{a.builtin_port}"
        return f"{aud}/files/{fs['name']}/{f}", aud
    return (f"davs://{a.address}:{a.ports['xrootd_https_port']}/sets/{fs['name']}/{f}",
            f"https://{a.address}:{a.ports['xrootd_https_port']}")


def _landing(a, kind: str) -> tuple[str, str, Path]:
    """(URL, token audience, file) of a new landing in agent ``a``'s /incoming: the built-in COPY endpoint, or the
    local XRootD TPC instance (it takes connections from the agent's host only: the tests run there)."""
    name = f"gfal-{uuid.uuid4()}"
    incoming = a.data_dir / "data" / "incoming"
    if kind == "builtin":
        aud = f"http://{a.address}:{a.builtin_port}"
        return f"{aud}/files/incoming/{name}", aud, incoming / name
    (incoming / name).mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(incoming / name, nobody.pw_uid, nobody.pw_gid)  # XRootD runs as the agent's run_user
    return (f"davs://{a.address}:{_tpc_port(a)}/incoming/{name}/f", f"https://{a.address}:{a.ports['xrootd_https_port']}",
            incoming / name / "f")


def gfal_copy(dst_agent, **req) -> dict:
    env = {**os.environ, "X509_CERT_DIR": str(dst_agent.data_dir / "data" / "ca-dir")}
    r = subprocess.run([SYSTEM_PYTHON, str(DRIVER)], input=json.dumps(req), capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _tokens(issuer, s_aud: str, d_aud: str) -> dict[str, str]:
    return {"source_token": issuer.issue(TokenRequest("gfal", s_aud, (READ_SETS,), 300)),
            "destination_token": issuer.issue(TokenRequest("gfal", d_aud, (CREATE_INCOMING, READ_INCOMING), 300))}


KINDS = [("builtin", "builtin"), ("xrootd", "xrootd"), ("xrootd", "builtin"), ("builtin", "xrootd")]


@pytest.mark.parametrize(("src_kind", "dst_kind"), KINDS)
def test_gfal_pulls_with_tokens_and_compares_checksums(gfal2_available, pair, token_issuers, src_kind, dst_kind):
    src, dst, fs = pair
    s_url, s_aud = _source(src, src_kind, fs)
    d_url, d_aud, landed = _landing(dst, dst_kind)
    out = gfal_copy(dst, source=s_url, destination=d_url, streams=2, checksum="both",
                    **_tokens(token_issuers[0], s_aud, d_aud))
    assert out["ok"], out["error"]
    assert f"adler32:{out['checksum']}" == fs["files"][0]["checksum"] == adler32_of(landed)


@pytest.mark.parametrize("dst_kind", ["builtin", "xrootd"])
def test_gfal_catches_a_corrupt_copy_by_the_checksums(gfal2_available, pair, token_issuers, dst_kind):
    """A source file changed under its published checksum (same size): the copy lands, and gfal2's comparison of
    the source's checksum with the destination's fails it. Both ends are asked, not only the source."""
    src, dst, _ = pair
    fs = src.file_set(count=1, size=SIZE + 1)
    (src.data_dir / "data" / "sets" / fs["name"] / fs["files"][0]["name"]).write_bytes(bytes(SIZE + 1))
    s_url, s_aud = _source(src, "builtin", fs)  # the built-in source answers from the set's manifest
    d_url, d_aud, _ = _landing(dst, dst_kind)
    out = gfal_copy(dst, source=s_url, destination=d_url, checksum="both", **_tokens(token_issuers[0], s_aud, d_aud))
    assert not out["ok"]
    assert "checksum" in out["error"].lower() and "mismatch" in out["error"].lower(), out["error"]


@pytest.mark.parametrize("dst_kind", ["builtin", "xrootd"])
def test_gfal_reports_a_refused_token(gfal2_available, pair, token_issuers, dst_kind):
    """An expired read token: the built-in source refuses it and gfal2's error carries the reason."""
    src, dst, fs = pair
    ours, _, skew = token_issuers
    s_url, s_aud = _source(src, "builtin", fs)
    d_url, d_aud, landed = _landing(dst, dst_kind)
    tokens = _tokens(ours, s_aud, d_aud)
    skew[0] = -3600.0
    try:
        tokens["source_token"] = ours.issue(TokenRequest("gfal", s_aud, (READ_SETS,), 300))
    finally:
        skew[0] = 0.0
    out = gfal_copy(dst, source=s_url, destination=d_url, checksum="none", **tokens)
    assert not out["ok"] and "403" in out["error"], out["error"]
    assert "token refused (expired): the token expired" in out["error"], out["error"]
    assert not landed.exists() or landed.stat().st_size == 0

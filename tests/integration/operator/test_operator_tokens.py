"""spec.auth: token through the run executor, with the real parts: two real agents in token mode (their XRootD
instances with libXrdAccSciTokens, their built-in endpoints with the agent's validator) trust the operator's real
issuer; the executor mints each transfer's read and create tokens. xrootd-https and builtin pulls succeed and record
auth "token"; without an issuer the same spec fails each TPC test naming the fix; no token is kept in the status."""

from __future__ import annotations

import json
import uuid

import pytest
from tpcmesh_operator.agents import Agent, AgentsClient
from tpcmesh_operator.runs import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory
from tpcmesh_operator.spec import parse_spec

from tests.integration.agent.test_protocols import xrootd_ports
from tests.support.tokens import running_issuer

pytestmark = pytest.mark.integration

FAST = ExecutorOptions(poll_interval=0.1, unreachable_grace=1.0, timeout_grace=5.0, delivery_max_seconds=1.0)
SPEC = {"protocols": ["xrootd-https", "builtin"], "streams": [1, 4], "concurrency": 2, "auth": "token",
        "fileSet": {"count": 2, "size": "1MB"}, "latency": {"enabled": False}, "loopback": {"enabled": False},
        "timeoutSeconds": 60, "retries": 0}


@pytest.fixture(scope="module")
def issuer(tpcmesh_pki):
    with running_issuer(tpcmesh_pki, "issuer") as ours:
        yield ours


@pytest.fixture(scope="module")
def mesh(module_agent_factory, issuer, tmp_path_factory):
    token = "mesh-" + uuid.uuid4().hex
    f = tmp_path_factory.mktemp("tok") / "token"
    f.write_text(token + "\n")
    handles = [module_agent_factory(protocols=("xrootd-https", "builtin"), run_user="nobody", token_file=f,
                                    xrootd_token_issuer=issuer.issuer, **xrootd_ports()) for _ in range(2)]
    agents = [Agent(node=h.name, address=h.address,
                    ports={"control": h.api_port, "builtin": h.builtin_port,
                           "xrootd-https": h.ports["xrootd_https_port"]}) for h in handles]
    return token, agents


async def _run(mesh, tpcmesh_pki, issuer) -> dict:
    token, agents = mesh
    info = RunInfo("default", "tok-bench", f"tok-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))
    async with AgentsClient(token, tpcmesh_pki.ca_file) as ac:
        return await RunExecutor(parse_spec(SPEC), info, StaticDirectory(agents), ac, None, MemoryStatusStore(),
                                 options=FAST, token_issuer=issuer).execute()


async def test_token_mode_pulls_succeed_and_record_their_mode(mesh, tpcmesh_pki, issuer) -> None:
    st = await _run(mesh, tpcmesh_pki, issuer)
    assert (st["planned"], st["succeeded"], st["failed"]) == (8, 8, 0), st.get("recentFailures")
    assert {m["auth"] for m in st["outbox"]} == {"token"} and len(st["outbox"]) == 8
    assert {m["checksum"] for m in st["outbox"]} == {"ok"}
    assert "eyJ" not in json.dumps(st)  # no JWT (base64url of '{"') anywhere in the status


async def test_token_mode_without_an_issuer_names_the_fix(mesh, tpcmesh_pki) -> None:
    st = await _run(mesh, tpcmesh_pki, None)
    assert st["failed"] == 8 and st["succeeded"] == 0
    assert all("runs no token issuer" in f["error"] and "spec.auth: x509" in f["error"]
               for f in st["recentFailures"]), st["recentFailures"]

"""spec.auth: token through the run executor, with the real parts: two real agents in token mode (their XRootD
instances with libXrdAccSciTokens, their built-in endpoints with the agent's validator) trust the operator's real
issuer; the executor mints each transfer's read and create tokens. xrootd-https and builtin pulls succeed and record
auth "token"; without an issuer the same spec fails each TPC test naming the fix; no token is kept in the status."""

from __future__ import annotations

import json
import uuid

import pytest
from tpcmesh_operator.credentials.tokens.external import ExternalIssuer
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import Agent, AgentsClient
from tpcmesh_operator.run.executor import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory

from tests.integration.agent.test_protocols import xrootd_ports
from tests.support.tokens import running_issuer, running_site_issuer

pytestmark = pytest.mark.integration

FAST = ExecutorOptions(poll_interval=0.1, unreachable_grace=1.0, timeout_grace=5.0, delivery_max_seconds=1.0)
SPEC = {"protocols": ["xrootd-https", "builtin"], "streams": [1, 4], "concurrency": 2, "auth": "token",
        "fileSet": {"count": 2, "size": "1MB"}, "latency": {"enabled": False}, "loopback": {"enabled": False},
        "timeoutSeconds": 60, "retries": 0}


@pytest.fixture(scope="module")
def issuer(tpcmesh_pki):
    with running_issuer(tpcmesh_pki, "issuer") as ours:
        yield ours


def _token_mesh(factory, issuer_url: str, tmp_path_factory) -> tuple[str, list[Agent]]:
    """Two real agents whose XRootD and built-in endpoints accept only ``issuer_url``'s tokens."""
    token = "mesh-" + uuid.uuid4().hex
    f = tmp_path_factory.mktemp("tok") / "token"
    f.write_text(token + "\n")
    handles = [factory(protocols=("xrootd-https", "builtin"), run_user="nobody", token_file=f,
                       xrootd_token_issuer=issuer_url, **xrootd_ports()) for _ in range(2)]
    return token, [Agent(node=h.name, address=h.address,
                         ports={"control": h.api_port, "builtin": h.builtin_port,
                                "xrootd-https": h.ports["xrootd_https_port"]}) for h in handles]


@pytest.fixture(scope="module")
def mesh(module_agent_factory, issuer, tmp_path_factory):
    return _token_mesh(module_agent_factory, issuer.issuer, tmp_path_factory)


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
    # failed rows carry the mode too: the dashboard shows them in the token cells, not in cells without a mode
    assert [m.get("auth") for m in st["outbox"]] == ["token"] * 8


@pytest.fixture(scope="module")
def site_issuer(tpcmesh_pki):
    with running_site_issuer(tpcmesh_pki, {"tpcmesh-operator": "s3cret"}) as theirs:
        yield theirs


@pytest.fixture(scope="module")
def site_mesh(module_agent_factory, site_issuer, tmp_path_factory):
    """Agents that accept only the site issuer's tokens (what the chart's tokens.mode external sets up)."""
    return _token_mesh(module_agent_factory, site_issuer.issuer, tmp_path_factory)


async def test_an_external_issuers_tokens_authorise_the_pulls(site_mesh, tpcmesh_pki, site_issuer) -> None:
    """Token mode with the site's own issuer: the operator asks it for every token (client credentials), the agents'
    XRootD and built-in endpoints validate them against its JWKS."""
    external = ExternalIssuer(site_issuer.issuer, "tpcmesh-operator", "s3cret", tpcmesh_pki.ca_file)
    try:
        st = await _run(site_mesh, tpcmesh_pki, external)
    finally:
        external.close()
    assert (st["planned"], st["succeeded"], st["failed"]) == (8, 8, 0), st.get("recentFailures")
    assert {m["auth"] for m in st["outbox"]} == {"token"}
    assert "eyJ" not in json.dumps(st)


async def test_an_external_issuer_refusing_the_client_fails_each_test_naming_it(site_mesh, tpcmesh_pki,
                                                                                 site_issuer) -> None:
    external = ExternalIssuer(site_issuer.issuer, "tpcmesh-operator", "wrong", tpcmesh_pki.ca_file)
    try:
        st = await _run(site_mesh, tpcmesh_pki, external)
    finally:
        external.close()
    assert st["failed"] == 8 and st["succeeded"] == 0
    for f in st["recentFailures"]:
        assert f"token issuer {site_issuer.issuer} refused a token" in f["error"] and "HTTP 401" in f["error"] \
            and "Bad client credentials" in f["error"], f["error"]

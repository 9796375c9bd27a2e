"""Token mode with the real parts: an agent's XRootD HTTPS instances validate bearer tokens of the operator's real
issuer (libXrdAccSciTokens fetching the JWKS over HTTPS through the issuer's discovery document). The public
instance serves /sets only to a storage.read:/sets token, the local TPC instance writes /incoming only for a
storage.create:/incoming token; an expired token, a wrong audience, a wrong scope, a token of another issuer and a
missing token are each refused with 403, and the agent's refusal_reason names which."""

from __future__ import annotations

import os
import pwd
import ssl
import time
import uuid

import httpx
import pytest
from tpcmesh_agent.tokens import Expectation, refusal_reason
from tpcmesh_operator.credentials.tokens.claims import CREATE_INCOMING, READ_SETS, TokenRequest

from tests.integration.agent.test_protocols import xrootd_ports
from tests.support.tokens import token_for

pytestmark = pytest.mark.integration

COUNT, SIZE = 1, 100_003


@pytest.fixture(scope="module")
def issuers(token_issuers):
    return token_issuers


@pytest.fixture(scope="module")
def agent(module_agent_factory, issuers):
    ours, _, _ = issuers
    a = module_agent_factory(protocols=("xrootd-https",), run_user="nobody", xrootd_token_issuer=ours.issuer,
                             **xrootd_ports())
    files = a.file_set(count=COUNT, size=SIZE)["files"]
    tpc_port = a.get("/api/v1/info").json()["servers"]["xrootd-https-tpc"]["port"]
    return a, files, tpc_port


def _client(agent_handle) -> httpx.Client:
    return httpx.Client(verify=ssl.create_default_context(cafile=str(agent_handle.ca_file)), timeout=30)


def _audience(a) -> str:
    return f"https://{a.address}:{a.ports['xrootd_https_port']}"


def _token(issuers, a, case: str, scope: str) -> str | None:
    return token_for(issuers, _audience(a), case, scope)


def _landing_dir(a) -> str:
    """A test's directory in /incoming, owned by the servers' run user as the movers make it (prepare_destination);
    XRootD writes files only there."""
    name = str(uuid.uuid4())
    d = a.data_dir / "data" / "incoming" / name
    d.mkdir()
    pw = pwd.getpwnam("nobody")
    os.chown(d, pw.pw_uid, pw.pw_gid)
    return f"/incoming/{name}"


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


REFUSALS = {"missing": "no bearer token", "expired": "expired", "wrong audience": "audience",
            "wrong scope": "does not grant", "another issuer": "issued by"}


def test_a_read_token_reads_the_sets(agent, issuers):
    a, files, _ = agent
    r, _ = _send(a, files, 0, "read", _token(issuers, a, "valid", READ_SETS))
    assert r.status_code == 200, r.text
    assert len(r.content) == SIZE


def test_a_create_token_writes_into_incoming_once(agent, issuers):
    a, _, tpc_port = agent
    url = f"https://{a.address}:{tpc_port}{_landing_dir(a)}/f"
    token = _token(issuers, a, "valid", CREATE_INCOMING)
    with _client(a) as c:
        r = c.put(url, content=b"x" * 1000, headers=_headers(token))
        assert r.status_code in (200, 201), r.text
        # storage.create does not overwrite (WLCG: that is storage.modify): XRootD maps it to exclusive create
        again = c.put(url, content=b"y" * 1000, headers=_headers(token))
    assert again.status_code == 403, again.text
    assert (a.data_dir / "data" / url.split("/", 3)[3]).read_bytes() == b"x" * 1000


def _send(a, files, tpc_port, operation: str, token: str | None) -> tuple[httpx.Response, str]:
    """A read of a set file from the public instance, or a write into /incoming through the landing instance."""
    with _client(a) as c:
        if operation == "read":
            path = f"/sets/{COUNT}x{SIZE}/{files[0]['name']}"
            return c.get(f"https://{a.address}:{a.ports['xrootd_https_port']}{path}", headers=_headers(token)), path
        path = f"{_landing_dir(a)}/f"
        return c.put(f"https://{a.address}:{tpc_port}{path}", content=b"x" * 1000, headers=_headers(token)), path


@pytest.mark.parametrize("case", list(REFUSALS))
@pytest.mark.parametrize(("operation", "scope"), [("read", READ_SETS), ("create", CREATE_INCOMING)])
def test_refused_without_a_valid_token_and_the_reason_is_named(agent, issuers, operation, scope, case):
    """The public instance reads /sets, the landing instance writes /incoming, only for a valid token of the right
    scope; XRootD says only 403 'permission denied', refusal_reason says why."""
    a, files, tpc_port = agent
    token = _token(issuers, a, case, scope)
    r, path = _send(a, files, tpc_port, operation, token)
    assert r.status_code == 403, (case, r.status_code, r.text)
    assert "permission denied" in r.text
    if operation == "create":
        assert not (a.data_dir / "data" / path.lstrip("/")).exists()
    reason = refusal_reason(token, Expectation(issuers[0].issuer, _audience(a), operation, path), time.time())
    assert REFUSALS[case] in reason, reason


# ---- HTTP-TPC pull between two agents with tokens -------------------------------------------------------------

SENT: list[str] = []  # every token the pulls used: none may show up in a log, record, status or metric
RECORDS: list[str] = []


@pytest.fixture(scope="module")
def dst(module_agent_factory, issuers):
    return module_agent_factory(protocols=("xrootd-https",), run_user="nobody", xrootd_token_issuer=issuers[0].issuer,
                                **xrootd_ports())


def _pull(src, dst, files, read: str, create: str, streams: int = 1) -> dict:
    SENT.extend((read, create))
    rec = dst.transfer(protocol="xrootd-https", source={"host": src.address, "port": src.ports["xrootd_https_port"]},
                       file_set={"count": COUNT, "size": SIZE}, files=files, streams=streams, timeout_seconds=60,
                       destination="store", tokens={"read": read, "create": create}, timeout=90)
    RECORDS.append(dst.get(f"/api/v1/transfers/{rec['test_id']}").text)  # the record as the API serves it
    return rec


@pytest.mark.parametrize("streams", [1, 4])
def test_token_pull_moves_the_set(agent, dst, issuers, streams):
    """The destination's COPY carries the create token; XRootD forwards the read token to the source
    (TransferHeaderAuthorization), which serves /sets only to it."""
    src, files, _ = agent
    ours = issuers[0]
    read = ours.issue(TokenRequest(dst.name, _audience(src), (READ_SETS,), 300))
    create = ours.issue(TokenRequest(dst.name, _audience(dst), (CREATE_INCOMING,), 300))
    rec = _pull(src, dst, files, read, create, streams)
    assert rec["status"] == "succeeded", rec
    assert rec["checksum"] == "ok" and rec["total_bytes"] == COUNT * SIZE


@pytest.mark.parametrize(("which", "says"), [
    ("read", "read token: the token is for audience"),  # the source refuses what XRootD forwarded
    ("create", "create token: the token's scope 'storage.read:/sets' does not grant create"),
])
def test_token_pull_refused_names_which_token_and_why(agent, dst, issuers, which, says):
    src, files, _ = agent
    ours = issuers[0]
    good_read = ours.issue(TokenRequest(dst.name, _audience(src), (READ_SETS,), 300))
    good_create = ours.issue(TokenRequest(dst.name, _audience(dst), (CREATE_INCOMING,), 300))
    if which == "read":  # a read token for the destination itself, not the source
        rec = _pull(src, dst, files, ours.issue(TokenRequest(dst.name, _audience(dst), (READ_SETS,), 300)),
                    good_create)
    else:
        rec = _pull(src, dst, files, good_read, ours.issue(TokenRequest(dst.name, _audience(dst), (READ_SETS,), 300)))
    assert rec["status"] == "failed", rec
    assert says in rec["error"], rec["error"]
    assert ("403" if which == "read" else "401") in rec["error"]  # XrdHttpTPC refuses a COPY with 401


def test_tokens_never_appear_in_logs_records_status_or_metrics(agent, dst):
    src = agent[0]
    assert SENT, "run with the pull tests"
    seen = {"destination log": dst.log(), "source log": src.log(), "destination metrics": dst.metrics(),
            "records": "\n".join(RECORDS), "destination info (status)": dst.get("/api/v1/info").text}
    for handle, label in ((src, "source"), (dst, "destination")):
        for path in handle.data_dir.rglob("*.log"):
            seen[f"{label} {path.relative_to(handle.data_dir)}"] = path.read_text(errors="replace")
    assert len([w for w in seen if w.endswith("xrootd.log")]) == 4, sorted(seen)  # both instances of both agents
    for token in SENT:
        for part in (token, token.split(".")[2]):  # the whole token or its signature alone
            leaked = [where for where, text in seen.items() if part in text]
            assert not leaked, f"a token appears in {leaked}"

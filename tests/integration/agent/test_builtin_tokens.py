"""Token mode of the built-in mover with the real parts: two real agents whose built-in endpoints check bearer
tokens of the operator's real issuer (keys through its discovery document and JWKS over HTTPS). The data port serves
/sets only to a storage.read:/sets token, the COPY lands a file only for a storage.create:/incoming token and sends
TransferHeaderAuthorization's token to the source; the agent-driven pull sends the read token and checks the create
token the same way. Each refusal (missing, expired, wrong audience, wrong scope, other issuer) fails with its reason;
no token shows up in a log, record, status or metric."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from tpcmesh_operator.credentials.tokens.claims import CREATE_INCOMING, READ_SETS

from tests.support.tokens import token_for

pytestmark = pytest.mark.integration

COUNT, SIZE = 2, 300_007
SENT: list[str] = []  # every token sent: none may show up in a log, record, status or metric
RECORDS: list[str] = []  # the finished records of the agent-driven pulls, as the API returned them
CHECKS = ("missing", "expired", "wrong audience", "wrong scope", "other issuer")


@pytest.fixture(scope="module")
def issuers(token_issuers):
    return token_issuers


@pytest.fixture(scope="module")
def agents(module_agent_factory, issuers):
    src, dst = (module_agent_factory(protocols=("builtin",), xrootd_token_issuer=issuers[0].issuer)
                for _ in range(2))
    fs = src.file_set(count=COUNT, size=SIZE)
    return src, dst, fs


def _aud(a) -> str:
    return f"http://{a.address}:{a.builtin_port}"


def _token(issuers, a, case: str, scope: str) -> str | None:
    """A token for agent ``a``'s built-in endpoint: valid, or wrong in the way ``case`` names."""
    token = token_for(issuers, _aud(a), case, scope)
    if token:
        SENT.append(token)
    return token


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _set_url(a, fs, i: int = 0) -> str:
    return f"http://{a.address}:{a.builtin_port}/files/{fs['name']}/{fs['files'][i]['name']}"


def _copy(dst, name: str, source: str, create: str | None, read: str | None, **extra: str) -> httpx.Response:
    headers = {"Source": source, "Credential": "none", "X-Number-Of-Streams": "2", **_auth(create), **extra}
    if read:
        headers["TransferHeaderAuthorization"] = f"Bearer {read}"
    return httpx.request("COPY", f"http://{dst.address}:{dst.builtin_port}/files/incoming/{name}", headers=headers,
                         timeout=60)


def test_the_data_port_serves_the_sets_only_to_a_read_token(agents, issuers):
    src, _, fs = agents
    ok = httpx.get(_set_url(src, fs), headers=_auth(_token(issuers, src, "valid", READ_SETS)), timeout=30)
    assert ok.status_code == 200 and len(ok.content) == SIZE


@pytest.mark.parametrize("case", CHECKS)
def test_the_data_port_refuses_and_names_why(agents, issuers, case):
    src, _, fs = agents
    token = _token(issuers, src, case, READ_SETS)
    for method in ("GET", "HEAD"):  # a HEAD has no body: the reason phrase says it
        r = httpx.request(method, _set_url(src, fs), headers=_auth(token), timeout=30)
        assert r.status_code == (401 if case == "missing" else 403), (case, r.status_code)
        assert r.reason_phrase.startswith(f"token refused ({case}): "), r.reason_phrase
        if method == "GET":
            assert r.text.startswith(f"token refused ({case}): "), r.text


def test_a_copy_with_tokens_lands_the_file_verified(agents, issuers):
    src, dst, fs = agents
    name = f"copied-{uuid.uuid4()}"
    r = _copy(dst, name, _set_url(src, fs), _token(issuers, dst, "valid", CREATE_INCOMING),
              _token(issuers, src, "valid", READ_SETS), RequireChecksumVerification="true")
    assert r.status_code == 202 and r.text.rstrip("\n").splitlines()[-1] == "success: Created", r.text
    assert (dst.data_dir / "data" / "incoming" / name).stat().st_size == SIZE


@pytest.mark.parametrize("case", CHECKS)
def test_a_copy_is_refused_for_a_bad_create_token_and_names_why(agents, issuers, case):
    src, dst, fs = agents
    name = f"refused-{uuid.uuid4()}"
    r = _copy(dst, name, _set_url(src, fs), _token(issuers, dst, case, CREATE_INCOMING),
              _token(issuers, src, "valid", READ_SETS))
    assert r.status_code == (401 if case == "missing" else 403), (case, r.status_code, r.text)
    assert r.text.startswith(f"token refused ({case}): "), r.text
    assert not (dst.data_dir / "data" / "incoming" / name).exists()


@pytest.mark.parametrize("case", CHECKS)
def test_a_copy_fails_when_the_source_refuses_the_forwarded_token(agents, issuers, case):
    src, dst, fs = agents
    name = f"unread-{uuid.uuid4()}"
    r = _copy(dst, name, _set_url(src, fs), _token(issuers, dst, "valid", CREATE_INCOMING),
              _token(issuers, src, case, READ_SETS))
    last = r.text.rstrip("\n").splitlines()[-1]
    assert r.status_code == 202 and last.startswith("failure: "), r.text
    assert f"answered {401 if case == 'missing' else 403} token refused ({case}): " in last, last
    assert not (dst.data_dir / "data" / "incoming" / name).exists()


def _pull(src, dst, fs, read: str | None, create: str | None, streams: int = 1) -> dict:
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                        file_set={"count": COUNT, "size": SIZE}, files=fs["files"], streams=streams,
                        timeout_seconds=60, destination="store", tokens={"read": read, "create": create}, timeout=90)
    RECORDS.append(dst.get(f"/api/v1/transfers/{rec['test_id']}").text)
    return rec


@pytest.mark.parametrize("streams", [1, 4])
def test_an_agent_driven_pull_with_tokens_moves_the_set(agents, issuers, streams):
    src, dst, fs = agents
    rec = _pull(src, dst, fs, _token(issuers, src, "valid", READ_SETS),
                _token(issuers, dst, "valid", CREATE_INCOMING), streams)
    assert rec["status"] == "succeeded", rec
    assert rec["checksum"] == "ok" and rec["total_bytes"] == COUNT * SIZE


@pytest.mark.parametrize("which", ["read", "create"])
@pytest.mark.parametrize("case", [c for c in CHECKS if c != "missing"])  # the API takes only two JWTs
def test_an_agent_driven_pull_with_a_bad_token_fails_naming_which_and_why(agents, issuers, which, case):
    src, dst, fs = agents
    read = _token(issuers, src, case if which == "read" else "valid", READ_SETS)
    create = _token(issuers, dst, case if which == "create" else "valid", CREATE_INCOMING)
    rec = _pull(src, dst, fs, read, create)
    assert rec["status"] == "failed", rec
    assert f"{which} token: " in rec["error"] and f"token refused ({case}): " in rec["error"], rec["error"]


def test_tokens_never_appear_in_logs_records_status_or_metrics(agents):
    src, dst, _ = agents
    assert len(SENT) > 20, "run with the other tests of this module"
    time.sleep(0.2)  # the last request's log line
    seen = {"destination metrics": dst.metrics(), "source metrics": src.metrics(),
            "destination info (status)": dst.get("/api/v1/info").text, "records": "\n".join(RECORDS)}
    for handle, label in ((src, "source"), (dst, "destination")):  # logs, stored records, state: all but the data
        for path in handle.data_dir.rglob("*"):
            if path.is_file() and not {"sets", "incoming"} & set(path.relative_to(handle.data_dir).parts):
                seen[f"{label} {path.relative_to(handle.data_dir)}"] = path.read_text(errors="replace")
    assert any(w.endswith("agent.log") for w in seen) and len(RECORDS) >= 10, sorted(seen)
    for token in SENT:
        for part in (token, token.split(".")[2]):
            leaked = [where for where, text in seen.items() if part in text]
            assert not leaked, f"a token appears in {leaked}"

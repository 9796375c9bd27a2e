"""External endpoints (spec.externalEndpoints) through the run executor, with real parts only: two real agents and
an "external" XRootD started outside them (its own CA, its own token issuer, SciTokens as its only authorization;
tests/support/external_xrootd.py).

- As a source: the operator uploads the set once (an HTTP-TPC COPY the endpoint runs from an agent, then it checks
  every file's size and adler32 itself) and each agent pulls from the endpoint with the site's token.
- As a destination: the agent sends the COPY to the endpoint (HTTP-TPC pull from the agent's public instance, the way
  FTS drives it); the copy's adler32 is read back and the copy removed.
- Nothing lands outside the endpoint's path; deleting the benchmark's files works, and a failed cleanup says why.
- A wrong credential, an unreachable endpoint and a path the endpoint refuses fail each external pair with a reason
  naming the endpoint; the mesh's own pairs are untouched.
"""

from __future__ import annotations

import json
import ssl

import httpx
import pytest
from tpcmesh_operator.external.access import StaticCredentials
from tpcmesh_operator.external.cleanup import clean_up
from tpcmesh_operator.external.copies import EXTERNAL_LABEL, bench_dir
from tpcmesh_operator.plan.spec import parse_spec, to_dict
from tpcmesh_operator.run.executor import RunExecutor

from tests.integration.agent.test_protocols import xrootd_ports
from tests.support.external_runs import COUNT, SIZE, one_endpoint_spec, run_external, trusting_mesh, with_endpoint
from tests.support.external_xrootd import external_xrootd
from tests.support.tokens import running_issuer
from tests.unit.operator.test_operator_contract import validator

pytestmark = pytest.mark.integration

PATH = "/store/tpcmesh"
SCOPES = (f"storage.read:{PATH}", f"storage.create:{PATH}", f"storage.modify:{PATH}")


@pytest.fixture(scope="module")
def site(tpcmesh_pki):
    with external_xrootd(tpcmesh_pki) as x:
        yield x


@pytest.fixture(scope="module")
def mesh(module_agent_factory, site, tmp_path_factory):
    """Two x509-mode agents that trust the site's CA beside their own (their ca_file holds both)."""
    return trusting_mesh(module_agent_factory, tmp_path_factory.mktemp("ext"), site.agents_ca_file, "xrootd-https",
                         xrootd_ports, "xrootd_https_port")


def _spec(site, url=None, path=PATH, role="both", auth="x509"):
    return parse_spec(one_endpoint_spec("xrootd-https", {"name": "site-x", "url": url or site.url, "path": path,
                                                         "credentials": "site-x-cred", "role": role}, auth))


async def _run(mesh, tpcmesh_pki, site, spec, token, name="ext-bench",
               issuer=None) -> tuple[dict, list, RunExecutor]:
    return await run_external(mesh, tpcmesh_pki.ca_file, spec, {"site-x-cred": {"token": token}},
                              str(site.site_pki.ca_file), name, token_issuer=issuer)


def _credentials(token: str) -> StaticCredentials:
    return StaticCredentials({"site-x-cred": {"token": token}})


def _external(st: dict) -> list[dict]:
    return with_endpoint(st, "site-x")


async def test_external_source_and_destination_with_real_copies(mesh, tpcmesh_pki, site) -> None:
    token = site.token(*SCOPES)
    st, events, ex = await _run(mesh, tpcmesh_pki, site, _spec(site), token)
    ext = _external(st)
    assert (st["planned"], st["succeeded"], st["failed"]) == (6, 6, 0), st.get("recentFailures")
    assert len(ext) == 4  # each agent from and to the endpoint
    assert {m["checksum"] for m in ext} == {"ok"} and {m["total_bytes"] for m in ext} == {COUNT * SIZE}
    assert {m["destination_kind"] for m in ext} == {"store"}  # a copy into the endpoint is stored there, then removed
    assert st["externals"] == {"site-x": "ready"}
    assert any(e[1] == "ExternalFilesReady" for e in events), events
    # the set is there once, under the benchmark's directory in the path; every copy into the endpoint is gone
    sets = f"{PATH.lstrip('/')}/{bench_dir('default', 'ext-bench')}/sets/{COUNT}x{SIZE}"
    assert site.files() == [f"{sets}/{f}" for f in sorted(_set_names(st))]
    assert all(p.startswith(PATH.lstrip("/") + "/") for p in site.files())
    # the grid's nodes: the endpoint is flagged external; no token anywhere in the status
    batch = ex._batch(st["outbox"])
    node = next(n for n in batch["nodes"] if n["name"] == "site-x")
    assert node["external"] is True and node["labels"][EXTERNAL_LABEL] == "true"
    assert node["labels"][f"{EXTERNAL_LABEL}-url"] == site.url
    assert not [n for n in batch["nodes"] if n["name"] != "site-x" and n.get("external")]
    validator("ingestBatch").validate(batch)  # the measurement contract
    assert token not in json.dumps(st) and token.split(".")[2] not in json.dumps(st)

    # a second run finds the files there and uploads nothing
    st2, events2, _ = await _run(mesh, tpcmesh_pki, site, _spec(site), token)
    assert st2["succeeded"] == 6 and not [e for e in events2 if "upload" in e[2].lower() and e[0] == "Warning"]

    # the benchmark deleted: its files go, the directories too; a neighbour with a name that starts the same stays
    neighbour = f"{PATH}/{bench_dir('default', 'ext-bench')}-2/keep"
    with httpx.Client(verify=ssl.create_default_context(cafile=str(site.site_pki.ca_file))) as c:
        assert c.put(site.audience + neighbour, content=b"x", headers={"Authorization": f"Bearer {token}"}
                     ).status_code in (200, 201)
    said: list = []
    problems = await clean_up(to_dict(ex.spec), "default", "ext-bench", _credentials(token),
                              lambda *e: said.append(e), str(site.site_pki.ca_file))
    assert problems == [] and site.files() == [neighbour.lstrip("/")]
    assert said == [("Normal", "ExternalCleanedUp", f"Removed {PATH}/default.ext-bench from external endpoint site-x")]
    assert not (site.root / PATH.lstrip("/") / bench_dir("default", "ext-bench")).exists()


def _set_names(st) -> list[str]:
    return sorted({f["name"] for m in st["outbox"] for f in m.get("files") or []})


@pytest.mark.parametrize("case", ["wrong credential", "unreachable", "refused path"])
async def test_failures_name_the_endpoint(mesh, tpcmesh_pki, site, case) -> None:
    from tpcmesh_agent.daemons.supervisor import free_port

    token = site.token(*SCOPES)
    url, path = None, PATH
    if case == "wrong credential":  # a token of the agents' side, not the site's issuer: wrong audience
        token = site.token(*SCOPES, audience="https://elsewhere.example:1094")
    elif case == "unreachable":
        url = f"davs://127.0.0.1:{free_port()}"
    else:  # the token covers /store/tpcmesh only
        path = "/store/other"
    st, events, _ = await _run(mesh, tpcmesh_pki, site, _spec(site, url=url, path=path), token,
                               name=f"fail-{case.replace(' ', '-')}")
    ext = _external(st)
    assert len(ext) == 4 and {m["status"] for m in ext} == {"failed"}, ext
    for m in ext:
        assert m["error"].startswith("external endpoint site-x ("), m["error"]
    says = {"wrong credential": "403", "unreachable": "unreachable", "refused path": "403"}[case]
    assert all(says in m["error"] for m in ext), [m["error"] for m in ext]
    # the mesh's own pair is measured as usual
    assert st["succeeded"] == 2
    assert any(e[1] == "ExternalUploadFailed" and "site-x" in e[2] for e in events), events
    assert [p for p in site.files() if "other" in p] == []


async def test_copies_the_endpoint_will_not_remove_or_overwrite_fail_naming_it(mesh, tpcmesh_pki, site) -> None:
    """A token that may create (storage.create) but not modify: the operator's own preparation passes; the first
    agent's COPY lands but its removal is refused (the pair fails: the copy stayed, reported, not hidden); the next
    agent's COPY of the same name is refused (no overwrite without modify). Both through the agents' COPY path,
    with the endpoint's own words."""
    token = site.token(f"storage.read:{PATH}", f"storage.create:{PATH}")
    st, _, _ = await _run(mesh, tpcmesh_pki, site, _spec(site, role="destination"), token, name="no-modify")
    ext = _external(st)
    assert len(ext) == 2 and {m["status"] for m in ext} == {"failed"}, ext
    assert all(m["error"].startswith("external endpoint site-x (") for m in ext), ext
    errors = sorted(m["error"] for m in ext)
    assert any("the copy was made but could not be removed: DELETE answered 403" in e for e in errors), errors
    assert any("answered the COPY with 401" in e and "permission denied" in e for e in errors), errors
    stayed = [p for p in site.files() if "no-modify" in p]
    assert stayed and all("/incoming/" in p for p in stayed), stayed


@pytest.mark.parametrize("case", ["unreachable", "refused"])
async def test_a_failed_cleanup_says_why(site, case) -> None:
    from tpcmesh_agent.daemons.supervisor import free_port

    url = f"davs://127.0.0.1:{free_port()}" if case == "unreachable" else None
    token = site.token(f"storage.read:{PATH}", f"storage.create:{PATH}", f"storage.modify:{PATH}")
    keep = f"{PATH}/default.stays/sets/f"
    with httpx.Client(verify=ssl.create_default_context(cafile=str(site.site_pki.ca_file))) as c:
        assert c.put(site.audience + keep, content=b"x", headers={"Authorization": f"Bearer {token}"}
                     ).status_code in (200, 201)
    if case == "refused":  # may read and list, not delete
        token = site.token(f"storage.read:{PATH}")
    said: list = []
    problems = await clean_up(to_dict(_spec(site, url=url)), "default", "stays", _credentials(token),
                              lambda *e: said.append(e), str(site.site_pki.ca_file))
    assert problems and all("external endpoint site-x" in p for p in problems), problems
    assert ("unreachable" if case == "unreachable" else "refused to delete") in problems[0]
    assert [(t, r) for t, r, _ in said] == [("Warning", "ExternalCleanupFailed")]
    assert f"from {PATH}/default.stays on external endpoint site-x" in said[0][2]
    assert keep.lstrip("/") in site.files()  # nothing claimed removed that is still there


@pytest.fixture(scope="module")
def agents_issuer(tpcmesh_pki):
    with running_issuer(tpcmesh_pki, "agents-issuer") as ours:
        yield ours


@pytest.fixture(scope="module")
def token_mesh(module_agent_factory, site, agents_issuer, tmp_path_factory):
    """Two token-mode agents: their public instances serve /sets only to a read token of the agents' issuer."""
    return trusting_mesh(module_agent_factory, tmp_path_factory.mktemp("ext-tok"), site.agents_ca_file,
                         "xrootd-https", xrootd_ports, "xrootd_https_port", xrootd_token_issuer=agents_issuer.issuer)


async def test_token_mode_the_endpoint_pulls_with_a_read_token_minted_for_the_agent(token_mesh, tpcmesh_pki, site,
                                                                                     agents_issuer) -> None:
    """Two issuers, as between two sites: the endpoint's COPY carries the site's token, and the read token the
    operator minted for the agent's public instance (forwarded by the endpoint, the way FTS does); the agents'
    landings take the create tokens minted for them, the site's token reads from the endpoint."""
    token = site.token(*SCOPES)
    st, _, _ = await _run(token_mesh, tpcmesh_pki, site, _spec(site, auth="token"), token, name="tok-bench",
                          issuer=agents_issuer)
    assert (st["planned"], st["succeeded"], st["failed"]) == (6, 6, 0), st.get("recentFailures")
    ext = _external(st)
    assert {m["auth"] for m in ext} == {"token"} and {m["checksum"] for m in ext} == {"ok"}
    assert "eyJ" not in json.dumps(st)  # no JWT (the site's or ours) in the status


async def test_token_mode_without_the_read_token_the_agent_refuses_the_endpoint(token_mesh, tpcmesh_pki, site) -> None:
    """The same without the agents' issuer: no read token for the agent, so the agent's public instance refuses
    the endpoint's pull (the copy into the endpoint fails with the endpoint's report of it, naming the endpoint)."""
    token = site.token(*SCOPES)
    st, _, _ = await _run(token_mesh, tpcmesh_pki, site, _spec(site, role="destination", auth="x509"), token,
                          name="tok-refused")
    ext = _external(st)
    assert len(ext) == 2 and {m["status"] for m in ext} == {"failed"}, ext
    assert all(m["error"].startswith("external endpoint site-x (") and "HTTP-TPC failed" in m["error"]
               and "403" in m["error"] and "/sets/" in m["error"] for m in ext), [m["error"] for m in ext]

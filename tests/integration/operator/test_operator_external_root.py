"""root:// external endpoints (spec.externalEndpoints with url root://...) through the run executor, with real parts
only: two real agents measuring xrootd-root and an "external" XRootD started outside them that serves root:// only,
TLS required, its own CA and token issuer, the ztn protocol as its only authentication and SciTokens as its only
authorization (tests/support/external_xrootd.py, scheme "root").

- As a source: the operator uploads the set once (the endpoint pulls it from an agent's public root:// instance:
  xrdcp --tpc first), checks every file's size and adler32 with xrdfs, and each agent pulls from the endpoint with
  the site's token (xrdcp, the token over ztn).
- As a destination: the agent runs xrdcp --tpc first into the endpoint; the copy's adler32 is read back and the copy
  removed.
- Deleting the benchmark removes its files over root://; a wrong credential, an unreachable endpoint and a path the
  endpoint refuses fail each external pair with a reason naming the endpoint; the mesh's own pair is untouched.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tpcmesh_operator.external.access import StaticCredentials
from tpcmesh_operator.external.cleanup import clean_up
from tpcmesh_operator.external.copies import bench_dir
from tpcmesh_operator.plan.spec import parse_spec, to_dict
from tpcmesh_operator.run.executor import RunExecutor

from tests.integration.agent.test_protocols import xrootd_ports
from tests.support.external_runs import (
    COUNT,
    SIZE,
    one_endpoint_spec,
    run_external,
    trusting_mesh,
    with_endpoint,
)
from tests.support.external_xrootd import external_xrootd
from tests.unit.operator.test_operator_contract import validator

pytestmark = pytest.mark.integration

PATH = "/store/tpcmesh"
SCOPES = (f"storage.read:{PATH}", f"storage.create:{PATH}", f"storage.modify:{PATH}")


@pytest.fixture(scope="module")
def site(tpcmesh_pki):
    with external_xrootd(tpcmesh_pki, scheme="root") as x:
        yield x


@pytest.fixture(scope="module")
def mesh(module_agent_factory, site, tmp_path_factory):
    return trusting_mesh(module_agent_factory, tmp_path_factory.mktemp("ext-root"), site.agents_ca_file,
                         "xrootd-root", xrootd_ports, "xrootd_root_port")


def _spec(site, url=None, path=PATH, role="both"):
    return parse_spec(one_endpoint_spec("xrootd-root", {"name": "site-r", "url": url or site.url, "path": path,
                                                        "credentials": "site-r-cred", "role": role}))


def _credentials(token: str) -> StaticCredentials:
    return StaticCredentials({"site-r-cred": {"token": token}})


async def _run(mesh, tpcmesh_pki, site, spec, token, name="root-bench") -> tuple[dict, list, RunExecutor]:
    return await run_external(mesh, tpcmesh_pki.ca_file, spec, {"site-r-cred": {"token": token}},
                              str(site.site_pki.ca_file), name)


def _external(st: dict) -> list[dict]:
    return with_endpoint(st, "site-r")


def _put(site, token: str, path: str) -> None:
    """A file written at the endpoint over root:// with the site's token (as another user of the site would)."""
    env = {**os.environ, "BEARER_TOKEN": token, "X509_CERT_DIR": str(site.site_pki.ca_dir), "XRD_CONNECTIONRETRY": "1"}
    subprocess.run(["xrdfs", site.url, "mkdir", "-p", path.rsplit("/", 1)[0]], env=env, check=True, timeout=60)
    src = site.root.parent / "put-source"
    src.write_bytes(b"x")
    subprocess.run(["xrdcp", "-f", "--nopbar", str(src), f"{site.url}/{path}"], env=env, check=True, timeout=60)


async def test_root_source_and_destination_with_real_copies(mesh, tpcmesh_pki, site) -> None:
    token = site.token(*SCOPES)
    st, events, ex = await _run(mesh, tpcmesh_pki, site, _spec(site), token)
    ext = _external(st)
    assert (st["planned"], st["succeeded"], st["failed"]) == (6, 6, 0), st.get("recentFailures")
    assert len(ext) == 4 and {m["protocol"] for m in ext} == {"xrootd-root"}
    assert {m["checksum"] for m in ext} == {"ok"} and {m["total_bytes"] for m in ext} == {COUNT * SIZE}
    assert st["externals"] == {"site-r": "ready"}
    assert any(e[1] == "ExternalFilesReady" for e in events), events
    sets = f"{PATH.lstrip('/')}/{bench_dir('default', 'root-bench')}/sets/{COUNT}x{SIZE}"
    names = sorted({f["name"] for m in st["outbox"] for f in m.get("files") or []})
    assert site.files() == [f"{sets}/{f}" for f in names]  # the set once; every copy into the endpoint removed
    validator("ingestBatch").validate(ex._batch(st["outbox"]))
    assert token not in json.dumps(st) and token.split(".")[2] not in json.dumps(st)

    # a second run finds the files there and uploads nothing
    st2, events2, _ = await _run(mesh, tpcmesh_pki, site, _spec(site), token)
    assert st2["succeeded"] == 6 and not [e for e in events2 if e[0] == "Warning"], events2

    # deleted: the benchmark's directory goes over root://; a neighbour whose name starts the same stays
    neighbour = f"{PATH}/{bench_dir('default', 'root-bench')}-2/keep"
    _put(site, token, neighbour)
    said: list = []
    problems = await clean_up(to_dict(ex.spec), "default", "root-bench", _credentials(token),
                              lambda *e: said.append(e), str(site.site_pki.ca_file))
    assert problems == [] and site.files() == [neighbour.lstrip("/")]
    assert said == [("Normal", "ExternalCleanedUp", f"Removed {PATH}/default.root-bench from external endpoint site-r")]
    assert not (site.root / PATH.lstrip("/") / bench_dir("default", "root-bench")).exists()


@pytest.mark.parametrize("case", ["wrong credential", "unreachable", "refused path"])
async def test_failures_name_the_endpoint(mesh, tpcmesh_pki, site, case) -> None:
    from tpcmesh_agent.daemons.supervisor import free_port

    token = site.token(*SCOPES)
    url, path = None, PATH
    if case == "wrong credential":  # a token of the site's issuer for another audience
        token = site.token(*SCOPES, audience="root://elsewhere.example:1094")
    elif case == "unreachable":
        url = f"root://127.0.0.1:{free_port()}"
    else:  # the token covers /store/tpcmesh only
        path = "/store/other"
    st, events, _ = await _run(mesh, tpcmesh_pki, site, _spec(site, url=url, path=path), token,
                               name=f"rfail-{case.replace(' ', '-')}")
    ext = _external(st)
    assert len(ext) == 4 and {m["status"] for m in ext} == {"failed"}, ext
    for m in ext:
        assert m["error"].startswith("external endpoint site-r (root://127.0.0.1:"), m["error"]
    says = {"wrong credential": "permission denied", "unreachable": "unreachable", "refused path": "permission denied"}
    assert all(says[case] in m["error"] for m in ext), [m["error"] for m in ext]
    assert st["succeeded"] == 2  # the mesh's own pair is measured as usual
    assert any(e[1] in ("ExternalUploadFailed", "ExternalEndpointFailed") and "site-r" in e[2] for e in events), events
    assert [p for p in site.files() if "other" in p or "rfail" in p] == []


async def test_copies_into_the_endpoint_fail_naming_it_when_it_refuses_them(mesh, tpcmesh_pki, site) -> None:
    """A token that may read but not write: the agents' copies into the endpoint fail with its own words (the
    operator's directory there was made with a token that could; the agents' xrdcp is refused)."""
    good = site.token(*SCOPES)
    st, _, ex = await _run(mesh, tpcmesh_pki, site, _spec(site, role="destination"), good, name="root-ro")
    assert st["succeeded"] == 4, st.get("recentFailures")
    read_only = site.token(f"storage.read:{PATH}")
    st, _, _ = await _run(mesh, tpcmesh_pki, site, _spec(site, role="destination"), read_only, name="root-ro")
    ext = _external(st)
    assert len(ext) == 2 and {m["status"] for m in ext} == {"failed"}, ext
    assert all(m["error"].startswith("external endpoint site-r (") and "permission denied" in m["error"].lower()
               for m in ext), [m["error"] for m in ext]
    assert [p for p in site.files() if "root-ro" in p] == []


@pytest.mark.parametrize("case", ["unreachable", "refused"])
async def test_a_failed_cleanup_says_why(site, case) -> None:
    from tpcmesh_agent.daemons.supervisor import free_port

    url = f"root://127.0.0.1:{free_port()}" if case == "unreachable" else None
    token = site.token(*SCOPES)
    keep = f"{PATH}/default.rstays/sets/f"
    _put(site, token, keep)
    if case == "refused":  # may read and list, not delete
        token = site.token(f"storage.read:{PATH}")
    said: list = []
    problems = await clean_up(to_dict(_spec(site, url=url)), "default", "rstays", _credentials(token),
                              lambda *e: said.append(e), str(site.site_pki.ca_file))
    assert problems and all("external endpoint site-r" in p for p in problems), problems
    assert ("unreachable" if case == "unreachable" else "refused to delete") in problems[0], problems
    assert [(t, r) for t, r, _ in said] == [("Warning", "ExternalCleanupFailed")]
    assert f"from {PATH}/default.rstays on external endpoint site-r" in said[0][2]
    assert keep.lstrip("/") in site.files()

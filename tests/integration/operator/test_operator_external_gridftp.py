"""gsiftp:// external endpoints (spec.externalEndpoints with url gsiftp://...) through the run executor, with real
parts only: two real agents measuring gridftp and an "external" globus-gridftp-server started outside them, with its
own CA, GSI authentication only, a grid-mapfile naming its one user and -restrict-paths to its store
(tests/support/external_gridftp.py). The site's credential is an X509 proxy made with grid-proxy-init.

- Every copy is third party, between an agent's GridFTP server (the agent's host certificate) and the endpoint's
  (the site's proxy): the agents' servers' transfer logs and the endpoint's name each other as the data channel's
  peer, which a copy through the agent's own client (a file:// end) would not.
- As a source: the operator uploads the set once (an agent's server sends it, globus-url-copy -cd), checks every
  file's size and adler32 through gfal2 (the server's CKSM), and each agent's server receives it from the endpoint.
- As a destination: the agent's server sends its copy of the set (-verify-checksum: both servers' adler32); the
  operator removes the copies (globus-url-copy cannot delete; gfal2 can).
- Agents whose own servers are anonymous (ftp://) copy third party too, with the site's credential only.
- An agent asked directly with a refused credential names both servers' URLs (globus-url-copy does not always say
  which refused).
- Deleting the benchmark removes its files over gsiftp; a wrong credential, an unreachable endpoint and a path the
  endpoint refuses fail each external pair with a reason naming the endpoint (the operator's own gfal2 checks
  catch them before an agent copies); the mesh's own pair is untouched.
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

from tests.support.external_gridftp import external_gridftp, transfers
from tests.support.external_runs import COUNT, SIZE, one_endpoint_spec, run_external, trusting_mesh, with_endpoint
from tests.unit.operator.test_operator_contract import validator

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def site(tpcmesh_pki):
    with external_gridftp(tpcmesh_pki) as x:
        yield x


def _agents(factory, site, directory, **options):
    """Two agents measuring gridftp (``options``: their settings): the mesh (its token, its agents) and the agents'
    handles (their data dirs hold their servers' logs)."""
    from tpcmesh_agent.daemons.supervisor import free_port

    handles: list = []

    def start(**settings):
        handles.append(factory(**settings))
        return handles[-1]

    mesh = trusting_mesh(start, directory, site.agents_ca_file, "gridftp", lambda: {"gridftp_port": free_port()},
                         "gridftp_port", **options)
    return mesh, handles


@pytest.fixture(scope="module")
def agents(module_agent_factory, site, tmp_path_factory):
    return _agents(module_agent_factory, site, tmp_path_factory.mktemp("ext-gsiftp"))


@pytest.fixture(scope="module")
def mesh(agents):
    return agents[0]


def _served(handle) -> list[dict[str, str]]:
    """What the agent's own GridFTP server logged as transferred (its -log-transfer file)."""
    return transfers(handle.data_dir / "data" / "servers" / "gridftp" / "transfers.log")


def _spec(site, url=None, path=None, role="both"):
    return parse_spec(one_endpoint_spec("gridftp", {"name": "site-g", "url": url or site.url,
                                                    "path": path or site.store, "credentials": "site-g-cred",
                                                    "role": role}))


def _credentials(proxy: str) -> StaticCredentials:
    return StaticCredentials({"site-g-cred": {"proxy": proxy}})


async def _run(mesh, tpcmesh_pki, site, spec, proxy, name="ftp-bench") -> tuple[dict, list, RunExecutor]:
    return await run_external(mesh, tpcmesh_pki.ca_file, spec, {"site-g-cred": {"proxy": proxy}},
                              str(site.site_pki.ca_file), name)


def _external(st: dict) -> list[dict]:
    return with_endpoint(st, "site-g")


def _put(site, relative: str) -> None:
    """A file written at the endpoint over gsiftp with the site's proxy (as another user of the site would)."""
    proxy = site.root / "put-proxy"
    if not proxy.exists():
        proxy.touch(mode=0o600)
        proxy.write_text(site.proxy_pem)
    src = site.root / "put-source"
    src.write_bytes(b"x")
    env = {**os.environ, "X509_USER_PROXY": str(proxy), "X509_CERT_DIR": str(site.site_pki.ca_dir)}
    subprocess.run(["globus-url-copy", "-nodcau", "-cd", f"file://{src}", f"{site.url}{site.store}/{relative}"],
                   env=env, check=True, capture_output=True, timeout=60)


def _assert_third_party(handles, site, ext: list[dict], names: list[str], before: dict[str, int],
                        site_before: int) -> None:
    """The run's copies (``ext``: its external measurements) were third party. Each agent's own server sent its set
    to the endpoint (as a test; one of them also uploaded the set) and received the endpoint's copy into the test's
    incoming directory, the endpoint the data channel's peer (as the in-mesh pair's, the unbound side shows as
    127.0.0.1 here: the test's directory tells them apart); the endpoint sent its copies to the agents' addresses.
    A copy by the agent's client (a file:// end) leaves no line in the agent's server's log and shows the client's
    127.0.0.1 to the endpoint. ``before``/``site_before``: how many lines the logs had before the run."""
    site_peer, sent_by_all = f"[{site.address}]", 0
    for h in handles:
        served = [t for t in _served(h)[before[h.name]:] if t["DEST"] == site_peer and t["CODE"] == "226"]
        sent = sorted(t["FILE"].rsplit("/", 1)[1] for t in served if t["TYPE"] == "RETR")
        assert sorted(set(sent)) == names and len(sent) in (len(names), 2 * len(names)), (h.name, served)
        [test_id] = [m["id"] for m in ext if (m["source"], m["destination"]) == ("site-g", h.name)]
        received = sorted(t["FILE"].rsplit("/", 1)[1] for t in served
                          if t["TYPE"] == "STOR" and f"/incoming/{test_id}/" in t["FILE"])
        assert received == names, (h.name, test_id, served)
        assert {t["NBYTES"] for t in served} == {str(SIZE)}
        sent_by_all += len(sent)
    assert sent_by_all == 3 * len(names)  # two tests into the endpoint and the set's upload
    peers = sorted(t["DEST"] for t in transfers(site.transfer_log)[site_before:] if t["TYPE"] == "RETR")
    assert peers == sorted(f"[{h.address}]" for h in handles for _ in names), peers


async def test_gsiftp_source_and_destination_with_real_copies(agents, mesh, tpcmesh_pki, site) -> None:
    before = {h.name: len(_served(h)) for h in agents[1]}
    site_before = len(transfers(site.transfer_log))
    st, events, ex = await _run(mesh, tpcmesh_pki, site, _spec(site), site.proxy_pem)
    ext = _external(st)
    assert (st["planned"], st["succeeded"], st["failed"]) == (6, 6, 0), st.get("recentFailures")
    assert len(ext) == 4 and {m["protocol"] for m in ext} == {"gridftp"}
    assert {m["checksum"] for m in ext} == {"ok"} and {m["total_bytes"] for m in ext} == {COUNT * SIZE}
    assert st["externals"] == {"site-g": "ready"}
    assert any(e[1] == "ExternalFilesReady" for e in events), events
    sets = f"{bench_dir('default', 'ftp-bench')}/sets/{COUNT}x{SIZE}"
    names = sorted({f["name"] for m in st["outbox"] for f in m.get("files") or []})
    assert site.files() == [f"{sets}/{f}" for f in names]  # the set once; every copy into the endpoint removed

    _assert_third_party(agents[1], site, ext, names, before, site_before)
    validator("ingestBatch").validate(ex._batch(st["outbox"]))
    assert "PRIVATE KEY" not in json.dumps(st) and "BEGIN CERTIFICATE" not in json.dumps(st)

    # a second run finds the files there and uploads nothing
    st2, events2, _ = await _run(mesh, tpcmesh_pki, site, _spec(site), site.proxy_pem)
    assert st2["succeeded"] == 6 and not [e for e in events2 if e[0] == "Warning"], events2

    # deleted: the benchmark's directory goes over gsiftp; a neighbour whose name starts the same stays
    neighbour = f"{bench_dir('default', 'ftp-bench')}-2/keep"
    _put(site, neighbour)
    said: list = []
    problems = await clean_up(to_dict(ex.spec), "default", "ftp-bench", _credentials(site.proxy_pem),
                              lambda *e: said.append(e), str(site.site_pki.ca_file))
    assert problems == [] and site.files() == [neighbour]
    assert said == [("Normal", "ExternalCleanedUp",
                     f"Removed {site.store}/default.ftp-bench from external endpoint site-g")]


@pytest.mark.parametrize("case", ["wrong credential", "unreachable", "refused path"])
async def test_failures_name_the_endpoint(mesh, tpcmesh_pki, site, case) -> None:
    from tpcmesh_agent.daemons.supervisor import free_port

    proxy, url, path = site.proxy_pem, None, None
    if case == "wrong credential":  # a proxy of a CA the site does not trust
        proxy = site.stranger_proxy_pem
    elif case == "unreachable":
        url = f"gsiftp://127.0.0.1:{free_port()}"
    else:  # -restrict-paths: the store only
        path = str(site.root / "other")
    st, events, _ = await _run(mesh, tpcmesh_pki, site, _spec(site, url=url, path=path), proxy,
                               name=f"gfail-{case.replace(' ', '-')}")
    ext = _external(st)
    assert len(ext) == 4 and {m["status"] for m in ext} == {"failed"}, ext
    for m in ext:
        assert m["error"].startswith("external endpoint site-g (gsiftp://127.0.0.1:"), m["error"]
    says = {"wrong credential": "credentials were refused", "unreachable": "unreachable",
            "refused path": "Path not allowed"}
    assert all(says[case] in m["error"] for m in ext), [m["error"] for m in ext]
    assert st["succeeded"] == 2  # the mesh's own pair is measured as usual
    assert any(e[1] in ("ExternalUploadFailed", "ExternalEndpointFailed") and "site-g" in e[2] for e in events), events
    assert not (site.root / "other").exists() and [p for p in site.files() if "gfail" in p] == []


@pytest.mark.parametrize("case", ["unreachable", "refused"])
async def test_a_failed_cleanup_says_why(site, case) -> None:
    from tpcmesh_agent.daemons.supervisor import free_port

    url = f"gsiftp://127.0.0.1:{free_port()}" if case == "unreachable" else None
    keep = "default.gstays/sets/f"
    _put(site, keep)
    proxy = site.stranger_proxy_pem if case == "refused" else site.proxy_pem
    said: list = []
    problems = await clean_up(to_dict(_spec(site, url=url)), "default", "gstays", _credentials(proxy),
                              lambda *e: said.append(e), str(site.site_pki.ca_file))
    assert problems and all("external endpoint site-g" in p for p in problems), problems
    assert ("unreachable" if case == "unreachable" else "credentials were refused") in problems[0], problems
    assert [(t, r) for t, r, _ in said] == [("Warning", "ExternalCleanupFailed")]
    assert f"from {site.store}/default.gstays on external endpoint site-g" in said[0][2]
    assert keep in site.files()


@pytest.mark.parametrize("direction", ["into the endpoint", "from the endpoint"])
def test_a_refused_third_party_copy_names_both_servers(agents, site, direction) -> None:
    """An agent asked directly (the operator's own checks would catch a wrong credential first): globus-url-copy
    does not always say which of the two servers refused, so the error names the endpoint's URL and the agent's."""
    h = agents[1][0]
    files = h.file_set(count=COUNT, size=SIZE)["files"]
    own = f"gsiftp://{h.address}:{h.ports['gridftp_port']}/~/"
    body = {"protocol": "gridftp", "file_set": {"count": COUNT, "size": SIZE}, "files": files, "concurrency": 1,
            "streams": 1, "timeout_seconds": 60, "x509": {"proxy": site.stranger_proxy_pem}}
    if direction == "into the endpoint":
        url = f"{site.url}{site.store}/direct"
        rec = h.transfer(source={"host": h.address, "port": h.ports["gridftp_port"]},
                         remote_destination={"url": url}, **body)
        expected = [f"remote {url} (third party from {own}sets/{COUNT}x{SIZE}/{f['name']}): " for f in files]
    else:
        path = f"{site.store}/direct/sets"
        rec = h.transfer(source={"host": site.address, "port": site.port, "path": path}, destination="store", **body)
        expected = [f"source {site.url}{path}/{COUNT}x{SIZE}/{f['name']} (third party into {own}incoming/"
                    for f in files]
    assert rec["status"] == "failed", rec
    errors = sorted(f["error"] for f in rec["files"])
    assert [e[:len(x)] for e, x in zip(errors, sorted(expected), strict=True)] == sorted(expected), errors
    assert all("530" in e for e in errors), errors  # GSI authentication refused (the stranger's proxy)
    assert [p for p in site.files() if "direct" in p] == []


def test_the_sites_users_are_refused_by_the_agents_gridftp_though_the_agents_trust_their_ca(agents, site,
                                                                                            tmp_path) -> None:
    """Trusting a site's CA for its gsiftp:// endpoint does not open the agents' GridFTP servers to the site's users:
    the agents' own certificates and the mesh's members get in (the grid-mapfile), the site's user is refused at
    login, though the agent's CA directory trusts the CA that signed the user's proxy (-auth-level 0 let it read the
    sets and write into incoming/)."""
    mesh, handles = agents
    h = handles[0]
    files = h.file_set(count=COUNT, size=SIZE, mesh=[a.name for a in handles])["files"]
    url = f"gsiftp://{h.address}:{h.ports['gridftp_port']}/~/sets/{COUNT}x{SIZE}/{files[0]['name']}"
    proxy = tmp_path / "site-user-proxy"
    proxy.touch(mode=0o600)
    proxy.write_text(site.proxy_pem)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("X509_")}, "X509_USER_PROXY": str(proxy),
           "X509_CERT_DIR": str(h.data_dir / "data" / "ca-dir")}
    r = subprocess.run(["globus-url-copy", "-nodcau", url, f"file://{tmp_path / 'read'}"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "Gridmap lookup failure: Could not map /O=tpcmesh/CN=site-g-user" in r.stderr, r
    assert not (tmp_path / "read").exists() or (tmp_path / "read").stat().st_size == 0
    put = tmp_path / "planted"
    put.write_bytes(b"x")
    w = subprocess.run(["globus-url-copy", "-nodcau", f"file://{put}",
                        f"gsiftp://{h.address}:{h.ports['gridftp_port']}/~/incoming/planted"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert w.returncode != 0 and "Could not map" in w.stderr, w
    assert not (h.data_dir / "data" / "incoming" / "planted").exists()


@pytest.fixture(scope="module")
def anonymous_agents(module_agent_factory, site, tmp_path_factory):
    return _agents(module_agent_factory, site, tmp_path_factory.mktemp("ext-gsiftp-anon"),
                   gridftp_security="anonymous")


async def test_anonymous_agents_copy_third_party_too(anonymous_agents, tpcmesh_pki, site) -> None:
    """Agents whose own servers are anonymous (ftp://): the site's credential is the only one, for the endpoint."""
    mesh, handles = anonymous_agents
    before, site_before = {h.name: len(_served(h)) for h in handles}, len(transfers(site.transfer_log))
    st, _, ex = await _run(mesh, tpcmesh_pki, site, _spec(site), site.proxy_pem, name="ftp-anon")
    ext = _external(st)
    assert (st["planned"], st["succeeded"], st["failed"]) == (6, 6, 0), st.get("recentFailures")
    assert {m["checksum"] for m in ext} == {"ok"} and {m["total_bytes"] for m in ext} == {COUNT * SIZE}
    names = sorted({f["name"] for m in ext for f in m.get("files") or []})
    _assert_third_party(handles, site, ext, names, before, site_before)
    assert await clean_up(to_dict(ex.spec), "default", "ftp-anon", _credentials(site.proxy_pem), lambda *e: None,
                          str(site.site_pki.ca_file)) == []

"""The built-in mover interoperates with real XRootD both ways over HTTP-TPC:
a real XRootD destination (the agent's local TPC instance, which takes COPYs only from the agent itself) pulls from
the built-in data server, and the built-in COPY endpoint pulls from a real XRootD source over HTTPS."""

from __future__ import annotations

import os
import pwd

import httpx
import pytest
from tpcmesh_agent.files import adler32_of
from tpcmesh_agent.markers import parse

from tests.integration.agent.test_protocols import ALL, xrootd_ports

pytestmark = pytest.mark.integration

COUNT, SIZE = 2, 3_000_017


@pytest.fixture(scope="module")
def pair(module_agent_factory):
    src = module_agent_factory(protocols=ALL, run_user="nobody", **xrootd_ports())
    dst = module_agent_factory(protocols=ALL, run_user="nobody", **xrootd_ports())
    files = src.file_set(count=COUNT, size=SIZE)["files"]
    return src, dst, files


def tpc_port(agent) -> int:
    """The port of the agent's local XRootD HTTP-TPC instance (chosen when it started)."""
    return agent.get("/api/v1/info").json()["servers"]["xrootd-https-tpc"]["port"]


def own_identity(agent) -> httpx.Client:
    """A client of the agent's local XRootD TPC instance as the agent's mover is: from the agent's address, with
    its host certificate."""
    ctx = agent.ssl_context()
    ctx.load_cert_chain(str(agent.cert_file), str(agent.key_file))
    return httpx.Client(transport=httpx.HTTPTransport(verify=ctx, local_address=agent.address), timeout=30)


@pytest.mark.parametrize("streams", [1, 4])
def test_xrootd_destination_pulls_from_the_builtin_server(pair, streams):
    src, dst, files = pair
    target = dst.data_dir / "data" / "incoming" / f"interop-{streams}"
    target.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(target, nobody.pw_uid, nobody.pw_gid)  # XRootD runs as the agent's run_user
    f = files[0]
    source = f"http://{src.address}:{src.builtin_port}/files/{COUNT}x{SIZE}/{f['name']}"
    url = f"https://{dst.address}:{tpc_port(dst)}/incoming/{target.name}/{f['name']}"
    with own_identity(dst) as c:  # only the agent's own certificate may write into /incoming
        r = c.request("COPY", url, headers={"Source": source, "Credential": "none",
                                            "X-Number-Of-Streams": str(streams)})
    assert r.status_code == 201, r.text
    result = parse(r.text)
    assert result.ok, result.message
    assert result.markers, "XRootD sends a first marker"
    assert (target / f["name"]).stat().st_size == f["size"]
    assert adler32_of(target / f["name"]) == f["checksum"]


def test_xrootd_destination_reports_a_missing_builtin_file(pair):
    src, dst, _ = pair
    target = dst.data_dir / "data" / "incoming" / "interop-missing"
    target.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(target, nobody.pw_uid, nobody.pw_gid)
    source = f"http://{src.address}:{src.builtin_port}/files/{COUNT}x{SIZE}/not-there"
    url = f"https://{dst.address}:{tpc_port(dst)}/incoming/{target.name}/x"
    with own_identity(dst) as c:
        r = c.request("COPY", url, headers={"Source": source, "Credential": "none"})
    assert r.status_code == 201  # XRootD answers 201 even for a failed copy: only the body tells
    result = parse(r.text)
    assert not result.ok
    assert "404" in result.message


@pytest.mark.parametrize("streams", [1, 4])
def test_builtin_copy_endpoint_pulls_from_xrootd_over_https(pair, streams):
    src, dst, files = pair
    f = files[1]
    source = f"https://{src.address}:{src.ports['xrootd_https_port']}/sets/{COUNT}x{SIZE}/{f['name']}"
    name = f"from-xrootd-{streams}"
    url = f"http://{dst.address}:{dst.builtin_port}/files/incoming/{name}"
    headers = {"Source": source, "Credential": "none", "X-Number-Of-Streams": str(streams),
               "Authorization": f"Bearer {dst.token}"}
    with httpx.Client(timeout=30) as c:
        r = c.request("COPY", url, headers=headers)
    assert r.status_code in (201, 202), r.text
    result = parse(r.text)
    assert result.ok, result.message
    stored = dst.data_dir / "data" / "incoming" / name
    assert stored.stat().st_size == f["size"]
    assert adler32_of(stored) == f["checksum"]

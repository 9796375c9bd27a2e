"""Who the agent's GridFTP server admits (daemons/gridmap.py): the grid-mapfile made from the host certificate and the
mesh's members the operator named; the real globus-gridftp-server reading it is tested in
tests/integration/agent/test_protocols.py."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from tpcmesh_agent.config import Settings
from tpcmesh_agent.daemons import gridmap
from tpcmesh_agent.daemons.gridmap import GridftpAccess, MeshError
from tpcmesh_operator.credentials import pki


def _settings(tmp_path: Path, node: str = "node-a", **kw) -> Settings:
    ca = pki.create_ca("unit CA")
    kp = pki.issue_host_cert(ca, node, ["127.0.1.9"])
    kp.write(tmp_path / "host.crt", tmp_path / "host.key")
    base = dict(address="127.0.1.9", node_name=node, data_dir=tmp_path / "data", protocols=("gridftp",),
                tls_cert=tmp_path / "host.crt", tls_key=tmp_path / "host.key", ca_file=tmp_path / "host.crt",
                run_user="nobody")
    base.update(kw)
    return Settings(**base)


def _user() -> str:
    return "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


def test_the_grid_mapfile_lists_the_agent_itself_until_the_operator_names_members(tmp_path):
    access = GridftpAccess(_settings(tmp_path))
    assert access.members() == []
    assert access.write().read_text() == f'"/O=tpcmesh/CN=node-a" {_user()}\n'
    assert access.gridmap == tmp_path / "data" / "servers" / "grid-mapfile"


def test_members_are_mapped_to_the_servers_own_user_under_the_subject_the_ca_gives_their_node(tmp_path):
    access = GridftpAccess(_settings(tmp_path))
    assert access.set_members(["node-c", "node-b", "node-c", "node-a"]) == ["node-a", "node-b", "node-c"]
    assert access.gridmap.read_text() == "".join(f'"/O=tpcmesh/CN={n}" {_user()}\n'
                                                 for n in ("node-a", "node-b", "node-c"))
    assert access.gridmap.stat().st_mode & 0o777 == 0o644  # the server's user reads it
    # the newest list replaces the last one: a node no longer named is no longer admitted
    access.set_members(["node-b"])
    assert "node-c" not in access.gridmap.read_text()
    assert access.gridmap.read_text().splitlines() == [f'"/O=tpcmesh/CN=node-a" {_user()}',
                                                       f'"/O=tpcmesh/CN=node-b" {_user()}']


def test_the_members_survive_a_restart_and_a_damaged_list_admits_only_the_agent(tmp_path, caplog):
    settings = _settings(tmp_path)
    GridftpAccess(settings).set_members(["node-b"])
    again = GridftpAccess(settings)  # a restarted agent: same data dir
    assert again.members() == ["node-b"]
    assert "CN=node-b" in again.write().read_text()
    again.state.write_text("{not json")
    assert again.members() == []
    assert "only this agent's own certificate is admitted" in caplog.text
    assert again.write().read_text() == f'"/O=tpcmesh/CN=node-a" {_user()}\n'
    again.state.write_text(json.dumps({"members": ["Bad Name"]}))
    assert again.members() == []


def _signed(ca: pki.KeyPair, *attributes: x509.NameAttribute) -> bytes:
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(list(attributes))).sign(pki.new_key(),
                                                                                                 hashes.SHA256())
    return pki.sign_csr(ca, csr.public_bytes(Encoding.PEM))


def test_a_members_subject_keeps_every_other_part_of_the_agents_own():
    ca = pki.create_ca("unit CA")
    own = _signed(ca, x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tpcmesh"),
                  x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "dtn"),
                  x509.NameAttribute(NameOID.COMMON_NAME, "node-a"))
    assert gridmap.member_subject(own, "node-b") == "/O=tpcmesh/OU=dtn/CN=node-b"
    no_cn = _signed(ca, x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tpcmesh"))
    with pytest.raises(MeshError, match="has no single CN"):
        gridmap.member_subject(no_cn, "node-b")


@pytest.mark.parametrize(("given", "words"), [
    ("node-a", "mesh must be a list of at most"),
    (["node-a", "Node_B"], "'Node_B' is not a node name"),
    (['a" b'], "is not a node name"),
    ([""], "'' is not a node name"),
    ([None], "None is not a node name"),
    (["x" * 254], "is not a node name"),
])
def test_a_member_list_that_is_not_node_names_is_refused_naming_the_entry(tmp_path, given, words):
    access = GridftpAccess(_settings(tmp_path))
    access.set_members(["node-b"])
    with pytest.raises(MeshError, match=words.replace("(", r"\(")):
        access.set_members(given)
    assert access.members() == ["node-b"]  # unchanged


def test_a_subject_the_grid_mapfile_cannot_hold_is_refused():
    assert gridmap.gridmap_text(["/O=x/CN=a", "/O=x/CN=a"], "nobody") == '"/O=x/CN=a" nobody\n'
    for bad in ('/O=x/CN=a"b', "/O=x/CN=a\nb", "O=x/CN=a", "/O=x/CN=a\\b"):
        with pytest.raises(MeshError, match="cannot be written into the grid-mapfile"):
            gridmap.gridmap_text([bad], "nobody")


def test_an_anonymous_agent_keeps_the_members_but_writes_no_grid_mapfile(tmp_path):
    access = GridftpAccess(_settings(tmp_path, gridftp_security="anonymous"))
    assert access.set_members(["node-b"]) == ["node-b"]
    assert access.members() == ["node-b"] and not access.gridmap.exists()
    (tmp_path / "builtin").mkdir()
    without_gridftp = GridftpAccess(_settings(tmp_path / "builtin", protocols=("builtin",)))
    without_gridftp.set_members(["node-b"])
    assert not without_gridftp.gridmap.exists()


def test_concurrent_member_lists_and_server_starts_never_tear_the_files(tmp_path):
    """Two runs naming members at once (the control API's threads) and a server start rewriting the grid-mapfile:
    each write is whole, and the files end as one of the lists."""
    from concurrent.futures import ThreadPoolExecutor

    settings = _settings(tmp_path)
    lists = [[f"node-{i}", f"node-{i + 1}"] for i in range(8)]

    def name(i: int) -> None:
        access = GridftpAccess(settings)
        for _ in range(40):
            access.set_members(lists[i])
            access.write()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(name, range(8)))  # raises what a thread raised
    final = GridftpAccess(settings).members()
    assert final in lists
    assert GridftpAccess(settings).gridmap.read_text().count("\n") == 3  # the agent and the two members

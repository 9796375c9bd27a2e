"""The control API of a real agent: authentication, bad input, file sets, info, RTT probe, metrics, mTLS."""

from __future__ import annotations

import uuid

import httpx
import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def agent(module_agent_factory):
    return module_agent_factory()


def _transfer_body(**over):
    body = {"test_id": str(uuid.uuid4()), "protocol": "builtin", "source": {"host": "127.0.1.250", "port": 9080},
            "file_set": {"count": 1, "size": 1000}}
    body.update(over)
    return body


def test_health_needs_no_token_but_the_api_does(agent):
    anon = agent.client(token="")
    assert anon.get("/healthz").json() == {"status": "ok"}
    assert anon.get("/readyz").json() == {"status": "ready"}
    for method, path in [("GET", "/api/v1/info"), ("POST", "/api/v1/transfers"), ("POST", "/api/v1/filesets"),
                         ("GET", f"/api/v1/transfers/{uuid.uuid4()}"), ("POST", "/api/v1/probes/rtt"),
                         ("POST", "/api/v1/probes/path")]:
        r = anon.request(method, path, json={})
        assert r.status_code == 401, (method, path)
        assert "bearer token" in r.json()["error"]
    wrong = agent.client(token=agent.token[:-1] + ("x" if agent.token[-1] != "x" else "y"))
    assert wrong.get("/api/v1/info").status_code == 401
    basic = agent.client(token="")
    assert basic.get("/api/v1/info", headers={"Authorization": f"Basic {agent.token}"}).status_code == 401
    assert agent.get("/api/v1/info").status_code == 200


def test_token_rotation_is_read_from_the_file(agent_factory):
    agent = agent_factory()
    agent.token_file.write_text("a-new-token-of-enough-length\n")
    assert agent.get("/api/v1/info").status_code == 401
    assert agent.client(token="a-new-token-of-enough-length").get("/api/v1/info").status_code == 200


def test_a_rotated_token_that_is_too_short_is_refused_and_logged_once(agent_factory):
    agent = agent_factory()
    agent.token_file.write_text("short\n")
    for _ in range(5):
        assert agent.get("/api/v1/info").status_code == 200  # the last good token stays
        assert agent.client(token="short").get("/api/v1/info").status_code == 401
    agent.token_file.unlink()
    for _ in range(3):
        assert agent.get("/api/v1/info").status_code == 200
    agent.token_file.write_text("a-new-token-of-enough-length\n")
    assert agent.client(token="a-new-token-of-enough-length").get("/api/v1/info").status_code == 200
    assert agent.get("/api/v1/info").status_code == 401
    log = agent.log()
    assert log.count("holds a token shorter than 16 characters; keeping the last token") == 1, log
    assert log.count("could not be read (No such file or directory); keeping the last token") == 1, log
    assert log.count("Rotated the API token") == 1


def test_info(agent):
    info = agent.get("/api/v1/info").json()
    assert info["node"] == agent.name and info["address"] == agent.address and info["version"]
    assert set(info["protocols"]) == {"builtin", "xrootd-https", "xrootd-root", "gridftp", "iperf3"}
    assert info["protocols"]["builtin"] == {"available": True, "running": True, "port": agent.builtin_port,
                                            "message": None, "restarts": 0}
    for p in ("xrootd-https", "xrootd-root", "gridftp", "iperf3"):  # the fixture enables only builtin
        assert info["protocols"][p]["available"] is False
        assert info["protocols"][p]["message"] == "disabled by the protocols setting"


@pytest.mark.parametrize("over, status, words", [
    ({"protocol": "scp"}, 422, "protocol 'scp' is unknown"),
    ({"test_id": "not-a-uuid"}, 422, "test_id must be a UUID"),
    ({"file_set": {"count": 1, "size": -5}}, 422, "file_set.size -5 is out of range"),
    ({"file_set": {"count": 1, "size": 10**18}}, 422, "file_set.size 1000000000000000000 is out of range"),
    ({"file_set": {"count": -1, "size": 10}}, 422, "file_set.count -1 is out of range"),
    ({"file_set": {"dataset": "gigantic"}}, 422, "file_set.dataset 'gigantic' is unknown"),
    ({"files": [{"name": "../../etc/passwd", "size": 10}]}, 422, "files[0].name '../../etc/passwd' is invalid"),
    ({"files": [{"name": "a/b", "size": 10}]}, 422, "files[0].name 'a/b' is invalid"),
    ({"files": [{"name": "a", "size": -1}]}, 422, "size -1 is out of range"),
    ({"files": [{"name": "a", "size": 1, "checksum": "md5:x"}]}, 422, "files[0].checksum must look like adler32"),
    ({"streams": 0}, 422, "streams 0 is out of range (1..100)"),
    ({"streams": 101}, 422, "streams 101 is out of range (1..100)"),
    ({"concurrency": 0}, 422, "concurrency 0 is out of range"),
    ({"streams": 100, "concurrency": 100}, 422, "streams*concurrency 10000 exceeds 1024"),
    ({"timeout_seconds": -1}, 422, "timeout_seconds must be a number"),
    ({"destination": "disk"}, 422, "destination must be 'store' or 'sink'"),
    ({"source": None}, 422, "source must be an object"),
    ({"source": {"host": "bad host!", "port": 1}}, 422, "source.host 'bad host!' is not a valid host name"),
    ({"source": {"host": "127.0.0.1", "port": 0}}, 422, "port 0 is out of range"),
    ({"protocol": "iperf3"}, 422, "protocol iperf3 is unavailable on this agent: disabled by the protocols setting"),
    ({"file_set": {"count": 3, "size": 10**9}}, 422, "does not fit the budget"),
    ({"duration_seconds": 2}, 422, "duration_seconds applies to iperf3 only, not 'builtin'"),
    ({"protocol": "iperf3", "duration_seconds": 0}, 422, "duration_seconds 0 is out of range (1..300)"),
    ({"protocol": "iperf3", "duration_seconds": 30, "timeout_seconds": 30}, 422,
     "duration_seconds 30 must be shorter than timeout_seconds 30"),
    ({"congestion_control": "warp9"}, 422, "congestion control 'warp9' is not usable on this node"),
    ({"congestion_control": "BBR; rm"}, 422, "congestion_control must be an algorithm name"),
    ({"protocol": "gridftp", "congestion_control": "bbr"}, 422, "congestion_control applies to builtin and iperf3"),
])
def test_bad_transfer_requests_are_refused_naming_the_field(agent, over, status, words):
    r = agent.post("/api/v1/transfers", json=_transfer_body(**over))
    assert r.status_code == status, r.text
    assert words in r.json()["error"]
    assert agent.get("/api/v1/info").json()["running_test_id"] is None


def test_malformed_bodies(agent):
    r = agent.post("/api/v1/transfers", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    r = agent.post("/api/v1/transfers", json=[1, 2])
    assert r.status_code == 400 and "JSON object" in r.json()["error"]
    assert agent.get(f"/api/v1/transfers/{uuid.uuid4()}").status_code == 404
    for wait in ("soon", "-1", "31", "nan"):
        r = agent.get(f"/api/v1/transfers/{uuid.uuid4()}?wait={wait}")
        assert r.status_code == 422 and "wait must be a number of seconds from 0 to 30" in r.json()["error"], wait


def test_file_sets_and_budget(agent_factory):
    a, b = agent_factory(), agent_factory(budget_bytes=10**6)
    fs = a.file_set(count=3, size=1234)
    assert fs["name"] == "3x1234" and fs["total_bytes"] == 3 * 1234
    assert [f["name"] for f in fs["files"]] == ["file-0000.dat", "file-0001.dat", "file-0002.dat"]
    assert all(f["size"] == 1234 and f["checksum"].startswith("adler32:") for f in fs["files"])
    assert a.file_set(count=3, size=1234, verify=True) == fs  # reuse, verified
    assert b.file_set(count=3, size=1234) == fs  # identical on every agent
    r = b.post("/api/v1/filesets", json={"count": 2, "size": 400_000})
    assert r.status_code == 422
    assert r.json()["error"].startswith("file set 2x400000 needs 800000 bytes plus 800000 to receive one set")
    assert not (b.data_dir / "data" / "sets" / "2x400000").exists()  # refused before writing
    assert b.get("/api/v1/filesets").json() == {"file_sets": ["3x1234"]}
    for bad, words in [({"count": 0, "size": 1}, "file_set.count 0"), ({"dataset": "x"}, "dataset 'x' is unknown"),
                       ({"size": "big"}, "file_set.size must be an integer")]:
        r = a.post("/api/v1/filesets", json=bad)
        assert r.status_code == 422 and words in r.json()["error"]
    assert a.delete("/api/v1/filesets/3x1234").json() == {"deleted": "3x1234"}
    assert a.delete("/api/v1/filesets/3x1234").status_code == 404
    assert a.delete("/api/v1/filesets/..").status_code in (404, 422)


def test_rtt_probe(agent_factory):
    a, b = agent_factory.many(2)
    r = a.post("/api/v1/probes/rtt", json={"host": b.address, "port": b.api_port, "count": 5}).json()
    assert r["samples"] == 5 and r["error"] is None
    assert 0 < r["min_ms"] <= r["median_ms"] <= r["max_ms"] < 5000
    closed = a.post("/api/v1/probes/rtt", json={"host": b.address, "port": 9, "count": 2}).json()
    assert closed["samples"] == 0 and closed["min_ms"] is None and "refused" in closed["error"].lower()
    named = a.post("/api/v1/probes/rtt", json={"host": "localhost", "port": 9, "count": 1}).json()  # /etc/hosts
    assert named["samples"] == 0 and "refused" in named["error"].lower() and named["host"] == "localhost"
    bad = a.post("/api/v1/probes/rtt", json={"host": b.address, "port": 70000})
    assert bad.status_code == 422 and "port must be an integer 1-65535" in bad.json()["error"]
    assert a.post("/api/v1/probes/rtt", json={"host": b.address, "count": 1000}).status_code == 422


def test_path_probe(agent_factory):
    a, b = agent_factory.many(2)
    r = a.post("/api/v1/probes/path", json={"host": b.address, "max_hops": 4}).json()
    assert r["error"] is None and r["reached"] and [h["address"] for h in r["hops"]] == [b.address], r
    assert r["interface"] == "lo" and r["interface_mtu"] == 65536 and r["pmtu"] == 65535
    for body, message in [({"host": "-f"}, "host must be"), ({"host": b.address, "max_hops": 0}, "max_hops must")]:
        bad = a.post("/api/v1/probes/path", json=body)
        assert bad.status_code == 422 and message in bad.json()["error"]


def test_metrics_endpoint(agent):
    text = agent.metrics()
    for name in ("tpcmesh_agent_active_transfers", "tpcmesh_agent_server_up"):
        assert f"# TYPE {name} gauge" in text
    assert "# TYPE tpcmesh_agent_transfers_total counter" in text
    assert "# TYPE tpcmesh_agent_bytes_total counter" in text
    assert agent.metric("tpcmesh_agent_server_up", server="builtin") == 1.0


def test_mtls_requires_a_client_certificate(agent_factory, tpcmesh_pki):
    agent = agent_factory(client_ca_file=str(tpcmesh_pki.ca_file))
    assert agent.client(token="").get("/healthz").status_code == 200  # probes need no certificate
    r = agent.get("/api/v1/info")
    assert r.status_code == 401 and "client certificate" in r.json()["error"]
    cert, key = tpcmesh_pki.host_cert("operator-client", ["127.0.0.1"])
    ctx = agent.ssl_context()
    ctx.load_cert_chain(str(cert), str(key))
    with httpx.Client(base_url=agent.base_url, verify=ctx,
                      headers={"Authorization": f"Bearer {agent.token}"}) as c:
        assert c.get("/api/v1/info").status_code == 200


def test_agents_can_share_a_token_file(agent_factory, tmp_path):
    f = tmp_path / "shared-token"
    f.write_text("shared-token-0123456789\n")
    a, b = agent_factory(token_file=f), agent_factory(token_file=f)
    assert a.token == b.token == "shared-token-0123456789"
    assert a.get("/api/v1/info").status_code == b.get("/api/v1/info").status_code == 200


def test_renewed_host_certificate_is_reloaded(agent_factory, tpcmesh_pki):
    import socket
    import ssl
    import time

    from cryptography import x509

    agent = agent_factory(cert_reload_interval=0.2)

    def served_serial() -> int:
        ctx = ssl.create_default_context(cafile=str(agent.ca_file))
        with socket.create_connection((agent.address, agent.api_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=agent.address) as tls:
                return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number

    old = served_serial()
    assert old == x509.load_pem_x509_certificate(agent.cert_file.read_bytes()).serial_number
    from tpcmesh_operator.credentials import pki

    pki.issue_host_cert(tpcmesh_pki.ca, agent.name, [agent.address]).write(agent.cert_file, agent.key_file)
    new = x509.load_pem_x509_certificate(agent.cert_file.read_bytes()).serial_number
    deadline = time.monotonic() + 15
    while served_serial() != new:
        assert time.monotonic() < deadline, "renewed certificate not served"
        time.sleep(0.1)
    assert agent.get("/api/v1/info").status_code == 200


def test_file_sets_created_at_once_share_one_budget(agent_factory):
    """Two different sets asked for at the same time, each fitting the budget alone but not together: one is
    refused (the budget check counts a set still being written), and what the agent holds stays in the budget."""
    from concurrent.futures import ThreadPoolExecutor

    size = 100 * 10**6
    agent = agent_factory(budget_bytes=250 * 10**6)  # one set (100 MB) + room to receive it fits; two do not

    def create(n: int) -> httpx.Response:
        with agent.client(timeout=120) as c:
            return c.post("/api/v1/filesets", json={"count": 1, "size": size + n})

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(create, (0, 1)))
    assert sorted(r.status_code for r in answers) == [200, 422], [r.text for r in answers]
    refused = next(r for r in answers if r.status_code == 422).json()["error"]
    assert "exceed the budget of 250000000 bytes" in refused and "other sets hold 1000000" in refused, refused
    assert len(agent.get("/api/v1/filesets").json()["file_sets"]) == 1


def test_first_reuse_after_a_restart_verifies_checksums(agent_factory):
    """Files may change while no agent runs: the first request for a set after a start checks every checksum and
    rewrites what does not match."""
    first = agent_factory()
    made = first.file_set(count=2, size=100_000)
    data = first.data_dir / "data"
    first.stop()
    victim = data / "sets" / made["name"] / made["files"][1]["name"]
    victim.write_bytes(b"\0" * 100_000)  # same size: only a checksum sees it
    again = agent_factory(data_dir=data)
    assert again.file_set(count=2, size=100_000) == made
    from tpcmesh_agent.files import adler32_of

    assert adler32_of(victim) == made["files"][1]["checksum"]

"""Two real agents on loopback addresses of their own, with the real XRootD, GridFTP and iperf3 servers: one
transfer per protocol with 1 and 8 streams at concurrency 11, records checked field by field and by the contract."""

from __future__ import annotations

import shutil
import socket
import statistics
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.agent.test_builtin_transfers import _validator

pytestmark = pytest.mark.integration

COUNT, SIZE = 11, 1_000_003
TPC = ("xrootd-https", "xrootd-root", "gridftp")
ALL = ("builtin", *TPC, "iperf3")


def free_port() -> int:
    """A port free on every address (XRootD cannot bind to one address: it listens on all of them)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def xrootd_ports() -> dict[str, int]:
    return {"xrootd_root_port": free_port(), "xrootd_https_port": free_port()}


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def start_pair(factory, count: int, size: int) -> tuple:
    """A source and a destination agent running every protocol, and the source's set of ``count`` x ``size``; the
    destination is named a member of the mesh, as an operator's run does (the source's GridFTP admits it)."""
    src = factory(protocols=ALL, run_user="nobody", **xrootd_ports())
    dst = factory(protocols=ALL, run_user="nobody", **xrootd_ports())
    files = src.file_set(count=count, size=size, mesh=[dst.name])["files"]
    return src, dst, files


@pytest.fixture(scope="module")
def pair(module_agent_factory):
    return start_pair(module_agent_factory, COUNT, SIZE)


def check_tpc_record(rec: dict, files: list[dict], protocol: str, streams: int, count: int = COUNT,
                     size: int = SIZE) -> None:
    """A stored test of ``count`` files of ``size`` bytes at concurrency ``count``, checked field by field."""
    _validator().validate(rec)
    assert rec["status"] == "succeeded", (rec["error"], rec)
    assert rec["error"] is None
    assert (rec["protocol"], rec["streams"], rec["concurrency"]) == (protocol, streams, count)
    assert rec["destination_kind"] == "store"
    assert rec["file_count"] == count and rec["file_size"] == size
    assert rec["total_bytes"] == count * size
    assert rec["checksum"] == "ok"
    by_name = {f["name"]: f for f in rec["files"]}
    assert sorted(by_name) == sorted(f["name"] for f in files)
    start, end = _t(rec["started_at"]), _t(rec["finished_at"])
    for f in files:
        got = by_name[f["name"]]
        assert got["size"] == got["bytes"] == f["size"]
        assert got["error"] is None
        assert got["checksum_ok"] is True
        assert start <= _t(got["started_at"]) <= _t(got["finished_at"]) <= end
    mean = statistics.fmean(f["seconds"] for f in rec["files"])
    assert rec["mean_transfer_seconds"] == pytest.approx(mean)
    assert rec["throughput_gbps"] == pytest.approx(rec["total_bytes"] * 8 / 1e9 / mean)
    assert rec["aggregate_gbps"] == pytest.approx(rec["total_bytes"] * 8 / 1e9 / rec["wall_seconds"])
    assert rec["throughput_gbps"] > 0 and rec["aggregate_gbps"] > 0


def test_every_server_runs_and_is_reported(pair):
    _, dst, _ = pair
    info = dst.get("/api/v1/info").json()
    for p in ALL:
        st = info["protocols"][p]
        assert st["available"] is True and st["running"] is True, (p, st)
        assert st["restarts"] == 0, f"{p} restarted: {st}\n{dst.log()[-4000:]}"
    assert info["protocols"]["xrootd-root"]["port"] == dst.ports["xrootd_root_port"]
    assert info["protocols"]["gridftp"]["port"] == dst.ports["gridftp_port"]


@pytest.mark.parametrize("streams", [1, 8])
@pytest.mark.parametrize("protocol", ("builtin", *TPC))
def test_tpc_protocol_moves_the_set(pair, protocol, streams):
    src, dst, files = pair
    port = src.ports[{"builtin": "builtin_port", "xrootd-https": "xrootd_https_port",
                      "xrootd-root": "xrootd_root_port", "gridftp": "gridftp_port"}[protocol]]
    rec = dst.transfer(protocol=protocol, source={"host": src.address, "port": port},
                       file_set={"count": COUNT, "size": SIZE}, files=files, concurrency=COUNT, streams=streams,
                       timeout_seconds=60, destination="store", timeout=90)
    check_tpc_record(rec, files, protocol, streams)
    # the destination's host telemetry names the program that did its part, with the CPU it took
    program = {"builtin": "agent", "xrootd-https": "xrootd", "xrootd-root": "xrootd",
               "gridftp": "globus-gridftp-server"}[protocol]
    processes = rec["host"]["destination"]["processes"]
    assert program in processes and processes[program]["cpu_seconds"] > 0, processes
    # the received files were removed after verification: nothing is left in incoming/
    assert not list((dst.data_dir / "data" / "incoming").iterdir())


@pytest.mark.parametrize("streams, destination", [(1, "sink"), (8, "store")])
def test_iperf3_measures_the_received_rate(pair, streams, destination):
    """iperf3 moves no file: even when asked to store, the record is a sink (and no file set budget applies). Its
    peak is the fastest of its 1 s intervals, near its mean rate (not the whole run's bytes in one second)."""
    src, dst, _ = pair
    t0 = time.monotonic()
    rec = dst.transfer(protocol="iperf3", source={"host": src.address, "port": src.ports["iperf3_port"]},
                       file_set={"count": 1, "size": 60 * 10**9}, concurrency=1, streams=streams, timeout_seconds=6,
                       destination=destination, timeout=30)
    _validator().validate(rec)
    assert rec["status"] == "succeeded", rec
    assert rec["streams"] == streams and rec["destination_kind"] == "sink"
    [f] = rec["files"]
    assert f["name"] == "iperf3" and f["bytes"] == rec["total_bytes"] > 10**6
    assert 2.9 < f["seconds"] < 3.5  # iperf3 ran for 3 s (half the 6 s timeout)
    assert rec["throughput_gbps"] == pytest.approx(f["bytes"] * 8 / 1e9 / f["seconds"])
    assert 0.95 <= rec["peak_gbps"] / rec["throughput_gbps"] < 2, rec  # the sampled end-jump would give ~3
    # the sender's own figures came back with --get-server-output (the agent's iperf3 server prints JSON)
    sender = f["tcp"]["sender"]
    assert sender["connections"] == streams and isinstance(sender["retransmits"], int)
    assert sender["cwnd_max_bytes"] > 0 and sender["min_rtt_ms"] > 0 and rec["tcp"]["sender"]["congestion"]
    assert rec["tcp"]["retransmits"] == sender["retransmits"]
    assert time.monotonic() - t0 < 15


def test_iperf3_sends_with_the_congestion_control_asked_for(pair):
    src, dst, _ = pair
    for algorithm in ("cubic", "bbr"):
        rec = dst.transfer(protocol="iperf3", source={"host": src.address, "port": src.ports["iperf3_port"]},
                           file_set={"count": 1, "size": 1000}, concurrency=1, streams=1, timeout_seconds=60,
                           duration_seconds=1, congestion_control=algorithm, timeout=30)
        assert rec["status"] == "succeeded", rec
        assert rec["congestion_control"] == algorithm and rec["tcp"]["sender"]["congestion"] == [algorithm]


def test_iperf3_runs_for_the_requested_duration(pair):
    src, dst, _ = pair
    rec = dst.transfer(protocol="iperf3", source={"host": src.address, "port": src.ports["iperf3_port"]},
                       file_set={"count": 1, "size": 1000}, concurrency=1, streams=1, timeout_seconds=60,
                       duration_seconds=2, timeout=30)
    assert rec["status"] == "succeeded", rec
    [f] = rec["files"]
    assert 1.9 < f["seconds"] < 2.5  # not the default (half the 60 s timeout, at most 10 s)


@pytest.mark.parametrize("protocol", ["xrootd-https", "xrootd-root"])
def test_sink_is_refused_clearly_by_xrootd_movers(pair, protocol):
    src, dst, files = pair
    port = src.ports[protocol.replace("-", "_") + "_port"]
    rec = dst.transfer(protocol=protocol, source={"host": src.address, "port": port},
                       file_set={"count": COUNT, "size": SIZE}, files=files, concurrency=1, streams=1,
                       timeout_seconds=20, destination="sink", timeout=30)
    assert rec["status"] == "failed"
    assert "supports only destination 'store'" in rec["error"]


@pytest.mark.parametrize("streams", [1, 8])
def test_gridftp_sink_writes_to_dev_null(pair, streams):
    src, dst, files = pair
    rec = dst.transfer(protocol="gridftp", source={"host": src.address, "port": src.ports["gridftp_port"]},
                       file_set={"count": COUNT, "size": SIZE}, files=files, concurrency=COUNT, streams=streams,
                       timeout_seconds=30, destination="sink", timeout=40)
    _validator().validate(rec)
    assert rec["status"] == "succeeded", (rec["error"], [f["error"] for f in rec["files"]])
    assert rec["destination_kind"] == "sink" and rec["checksum"] == "skipped"
    assert rec["total_bytes"] == COUNT * SIZE
    assert all(f["bytes"] == f["size"] == SIZE and f["checksum_ok"] is None for f in rec["files"])
    # the bytes are known only when each copy ends: spread over the copies' times, the peak can be no more than
    # all files at their own mean rates at once (end-jumps sampled by the second could be far more)
    assert 0 < rec["peak_gbps"] <= 1.001 * sum(f["bytes"] * 8 / 1e9 / f["seconds"] for f in rec["files"]), rec


def test_missing_source_file_fails_with_the_servers_reason(pair):
    src, dst, _ = pair
    ghost = [{"name": "no-such-file", "size": 10}]
    for protocol, key in (("xrootd-https", "xrootd_https_port"), ("xrootd-root", "xrootd_root_port"),
                          ("gridftp", "gridftp_port")):
        rec = dst.transfer(protocol=protocol, source={"host": src.address, "port": src.ports[key]},
                           file_set={"count": COUNT, "size": SIZE}, files=ghost, concurrency=1, streams=1,
                           timeout_seconds=20, destination="store", timeout=40)
        _validator().validate(rec)
        assert rec["status"] == "failed", (protocol, rec)
        [f] = rec["files"]
        assert f["bytes"] == 0
        assert f["error"], protocol
        assert "no-such-file" in f["error"] or "No such file" in f["error"] or "404" in f["error"], f["error"]


# server -> (program, a part of its command line that tells it from the agent's other servers)
PROGRAM = {name: ("xrootd", f"/{name}/xrootd.cfg")
           for name in ("xrootd-https", "xrootd-https-tpc", "xrootd-root", "xrootd-root-tpc")}
PROGRAM["gridftp"] = ("globus-gridftp-server", "")
# protocol -> the server doing its destination side (its public server serves the source side)
LOCAL_SERVER = {"xrootd-https": "xrootd-https-tpc", "xrootd-root": "xrootd-root-tpc"}


def server_group(agent, server: str) -> int:
    """The process group of one of ``agent``'s protocol servers."""
    import os

    from tests.integration.agent.test_supervisor import server_pids

    program, tag = PROGRAM[server]
    pids = [p for p in server_pids(program, str(agent.data_dir)) if tag in open(f"/proc/{p}/cmdline").read()]
    groups = {os.getpgid(p) for p in pids}
    assert len(groups) == 1, (server, pids)
    return groups.pop()


def start_then_kill_server(pair, protocol: str, victim, keep_dead: socket.socket | None = None) -> tuple[dict, bool]:
    """Freeze ``victim``'s server of ``protocol`` (the destination's: the one doing its destination side), start a
    test (source -> destination) against it, and SIGKILL the server once the test is under way. Returns the started
    test and whether ``keep_dead`` (an unbound socket) took the server's port before the supervisor restarted it:
    then the restart fails until the caller closes it, and a client that reconnects (globus-url-copy does) finds
    no server."""
    import os
    import signal

    src, dst, files = pair
    group = server_group(victim, LOCAL_SERVER.get(protocol, protocol) if victim is dst else protocol)
    key = {"xrootd-https": "xrootd_https_port", "xrootd-root": "xrootd_root_port", "gridftp": "gridftp_port"}
    os.killpg(group, signal.SIGSTOP)
    try:
        started = dst.start_transfer(protocol=protocol, source={"host": src.address, "port": src.ports[key[protocol]]},
                                     file_set={"count": COUNT, "size": SIZE}, files=files, concurrency=COUNT,
                                     streams=1, timeout_seconds=25, destination="store")
        time.sleep(1.0)
        assert dst.get(f"/api/v1/transfers/{started['test_id']}").json()["status"] == "running"
    finally:
        os.killpg(group, signal.SIGKILL)
    blocked = False
    deadline = time.monotonic() + 0.45  # the supervisor waits 0.5 s before it restarts
    while keep_dead is not None and not blocked and time.monotonic() < deadline:
        try:  # the port is busy until the killed server is gone, then until its restart
            keep_dead.bind((victim.address, victim.ports[key[protocol]]))
            blocked = True
        except OSError:
            time.sleep(0.005)
    return started, blocked


@pytest.mark.parametrize("protocol", TPC)
def test_source_server_killed_mid_transfer(pair, protocol):
    """The source's server freezes with the copies in flight, then dies: a clear failed record, no hang, the
    destination agent unharmed, and the source's supervisor restarts its server."""

    from tests.integration.agent.test_supervisor import wait_for

    src, dst, files = pair
    with socket.socket() as blocker:
        started, blocked = start_then_kill_server(pair, protocol, victim=src, keep_dead=blocker)
        t0 = time.monotonic()
        rec = dst.wait_transfer(started["test_id"], timeout=40)
    _validator().validate(rec)
    if rec["status"] == "succeeded":
        # only a client that reconnected to the restarted source may succeed, and then with every byte verified
        assert protocol == "gridftp" and not blocked, rec
        assert rec["checksum"] == "ok" and rec["total_bytes"] == COUNT * SIZE, rec
    else:
        assert rec["status"] == "failed", rec
        assert rec["error"]
        assert all(f["error"] for f in rec["files"] if f["bytes"] < f["size"])
    assert time.monotonic() - t0 < 28, "the failure must not wait for more than the job timeout"
    assert dst.alive()
    restarted = wait_for(lambda: src.get("/api/v1/info").json()["protocols"][protocol]["running"], 15,
                         f"{protocol} restart on the source")
    assert restarted
    assert src.get("/api/v1/info").json()["protocols"][protocol]["restarts"] >= 1


@pytest.mark.parametrize("protocol", TPC)
def test_local_server_killed_mid_transfer_is_named_in_the_record(pair, protocol):
    """The destination's own server dies under the copies (as when the OOM killer picks it): the record says so,
    with the exit status and the likely cause, instead of only the cut connection the client saw."""

    from tests.integration.agent.test_supervisor import wait_for

    src, dst, files = pair
    started, _ = start_then_kill_server(pair, protocol, victim=dst)
    rec = dst.wait_transfer(started["test_id"], timeout=40)
    if rec["status"] == "succeeded":  # globus-url-copy may reconnect to the restarted server: all bytes verified
        assert protocol == "gridftp" and rec["checksum"] == "ok" and rec["total_bytes"] == COUNT * SIZE, rec
    else:
        assert rec["status"] == "failed", rec
        assert f"the local {protocol} server died during the test: exited with status -9" in rec["error"], rec
        assert "OOM killer" in rec["error"]
    assert wait_for(lambda: dst.get("/api/v1/info").json()["protocols"][protocol]["running"], 15,
                    f"{protocol} restart on the destination")


@pytest.mark.parametrize("protocol", TPC)
def test_timeout_and_cancel_stop_the_copies(pair, protocol):
    """A source that stops answering: the job timeout ends the test with 'timed out'; DELETE cancels a test; both
    promptly, with the mover's child programs gone."""
    import os
    import signal

    from tests.integration.agent.test_supervisor import server_pids

    src, dst, files = pair
    group = server_group(src, protocol)
    key = {"xrootd-https": "xrootd_https_port", "xrootd-root": "xrootd_root_port", "gridftp": "gridftp_port"}
    body = dict(protocol=protocol, source={"host": src.address, "port": src.ports[key[protocol]]},
                file_set={"count": COUNT, "size": SIZE}, files=files[:2], concurrency=2, streams=1,
                destination="store")
    os.killpg(group, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        rec = dst.transfer(timeout_seconds=2, timeout=20, **body)
        assert time.monotonic() - t0 < 8
        assert rec["status"] == "failed" and "timed out" in rec["error"], rec
        _validator().validate(rec)

        started = dst.start_transfer(timeout_seconds=60, **body)
        time.sleep(0.5)
        t0 = time.monotonic()
        r = dst.delete(f"/api/v1/transfers/{started['test_id']}")
        assert r.status_code in (200, 202), r.text
        rec = dst.wait_transfer(started["test_id"], timeout=15)
        assert time.monotonic() - t0 < 8
        assert rec["status"] == "cancelled", rec
        client = {"xrootd-root": "xrdcp", "gridftp": "globus-url-copy"}.get(protocol)
        if client:
            time.sleep(0.2)
            assert not server_pids(client, src.address), f"{client} still running after cancel"
    finally:
        os.killpg(group, signal.SIGCONT)


def test_only_the_agent_itself_can_make_its_xrootd_pull(pair):
    """xrootd-https's public port serves the sets read-only and has no HTTP-TPC handler; the local TPC instance takes
    connections only from the agent's own address, and COPYs only from its own host certificate. Another host is
    refused before XRootD contacts the Source (no request forgery), nobody else reads what arrived, and peers still
    pull the sets from the public port. (From the agent's own address XRootD 5.5 asks the Source for the size before
    it refuses an unauthenticated writer: only processes sharing the node's address get that far.)"""
    import httpx

    from tests.integration.agent.test_interop import own_identity

    src, dst, files = pair
    tpc_port = dst.get("/api/v1/info").json()["servers"]["xrootd-https-tpc"]["port"]
    public, tpc = (f"https://{dst.address}:{port}" for port in (dst.ports["xrootd_https_port"], tpc_port))
    decoy = socket.create_server(("127.0.0.1", 0))  # the Source an attacker names: must never be contacted
    decoy.settimeout(0.5)
    forged = {"Source": f"http://127.0.0.1:{decoy.getsockname()[1]}/secret", "Credential": "none"}
    incoming = dst.data_dir / "data" / "incoming"

    def client(local_address: str, cert=None) -> httpx.Client:
        ctx = dst.ssl_context()
        if cert is not None:
            ctx.load_cert_chain(str(cert.cert_file), str(cert.key_file))
        return httpx.Client(transport=httpx.HTTPTransport(verify=ctx, local_address=local_address), timeout=30)

    try:
        with client(src.address) as c:  # the public port: a COPY is not understood
            r = c.request("COPY", f"{public}/incoming/forged", headers=forged)
            assert r.status_code in (400, 405), (r.status_code, r.text)
            with pytest.raises(httpx.TransportError):  # the TPC port: not from another address
                c.request("COPY", f"{tpc}/incoming/forged", headers=forged)
        with pytest.raises(TimeoutError):
            decoy.accept()
        closed = {"Source": f"http://127.0.0.1:{free_port()}/nothing-listens", "Credential": "none"}
        for label, cert in (("anonymous", None), ("another agent's certificate", src)):
            with client(dst.address, cert) as c:  # from the agent's own address, but not as the agent
                r = c.request("COPY", f"{tpc}/incoming/forged", headers=closed)
            assert r.status_code == 401 and "permission denied" in r.text, (label, r.status_code, r.text)
        assert not list(incoming.iterdir())
    finally:
        decoy.close()

    # the agent's own pull works; nobody else reads what it stored
    probe = incoming / "auth-probe"
    probe.mkdir()
    os_chown_nobody(probe)
    name = files[0]["name"]
    with own_identity(dst) as c:
        r = c.request("COPY", f"{tpc}/incoming/auth-probe/{name}", headers={
            "Source": f"https://{src.address}:{src.ports['xrootd_https_port']}/sets/{COUNT}x{SIZE}/{name}",
            "Credential": "none"})
    assert r.status_code == 201 and r.text.rstrip().endswith("success: Created"), r.text
    assert (probe / name).stat().st_size == SIZE
    with client(dst.address) as c:
        assert c.get(f"{tpc}/incoming/auth-probe/{name}").status_code == 403
        assert c.get(f"{public}/incoming/auth-probe/{name}").status_code in (403, 404)
    with client(dst.address) as c:  # a peer's anonymous pull from the source's sets
        got = c.get(f"https://{src.address}:{src.ports['xrootd_https_port']}/sets/{COUNT}x{SIZE}/{name}")
    assert got.status_code == 200 and len(got.content) == SIZE
    shutil.rmtree(probe)  # the module's other tests expect an empty incoming/


def test_root_public_instance_is_read_only_and_the_local_one_takes_only_this_agent(pair, tmp_path):
    """The public root:// instance exports the sets read-only (nothing can be written or pulled into it); the local
    TPC instance drops connections from other hosts before they say anything, and on this host refuses every
    client without the agent's sss key: anonymous, or holding a key of its own for the same name."""
    import subprocess

    src, dst, files = pair
    upload = tmp_path / "planted"
    upload.write_bytes(b"x" * 1000)
    public = f"root://{dst.address}:{dst.ports['xrootd_root_port']}"
    for target in (f"{public}//incoming/planted", f"{public}//sets/planted"):
        r = subprocess.run(["xrdcp", "--nopbar", str(upload), target], capture_output=True, text=True, timeout=60,
                           env={**__import__("os").environ, "XRD_CONNECTIONRETRY": "1"})
        assert r.returncode != 0, (target, r.stdout, r.stderr)
    pulled = subprocess.run(["xrdcp", "--tpc", "only", "--nopbar",
                             f"root://{src.address}:{src.ports['xrootd_root_port']}//sets/{COUNT}x{SIZE}/"
                             f"{files[0]['name']}", f"{public}//incoming/pulled"],
                            capture_output=True, text=True, timeout=60,
                            env={**__import__("os").environ, "XRD_CONNECTIONRETRY": "1"})
    assert pulled.returncode != 0, pulled.stdout
    data = dst.data_dir / "data"
    assert not [p for p in (data / "incoming/planted", data / "incoming/pulled", data / "sets/planted") if p.exists()]

    tpc_port = dst.get("/api/v1/info").json()["servers"]["xrootd-root-tpc"]["port"]
    with socket.socket() as s:  # from another address of this machine: XRootD closes at once
        s.bind((src.address, 0))
        s.settimeout(10)
        s.connect((dst.address, tpc_port))
        s.sendall(b"\0" * 20)  # the root:// handshake
        try:
            assert s.recv(16) == b""
        except ConnectionResetError:
            pass

    from tpcmesh_agent.daemons import configs

    stranger = tmp_path / "stranger.keytab"  # same key name and identity as the agent's, another key
    subprocess.run(configs.sss_keytab_argv(stranger), input="y\n", text=True, capture_output=True, check=True)
    local = f"root://{dst.address}:{tpc_port}"
    source = f"root://{src.address}:{src.ports['xrootd_root_port']}//sets/{COUNT}x{SIZE}/{files[0]['name']}"
    for who, extra in (("anonymous", {}), ("stranger", configs.xrdcp_sss_env(stranger))):
        env = {**__import__("os").environ, "XRD_CONNECTIONRETRY": "1", **extra}
        for argv in (["xrdcp", "--nopbar", str(upload), f"{local}//incoming/planted"],
                     ["xrdcp", "--tpc", "only", "--nopbar", source, f"{local}//incoming/pulled"]):
            r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode != 0, (who, argv, r.stdout, r.stderr)
            assert "auth" in (r.stdout + r.stderr).lower(), (who, r.stderr)  # refused as unauthenticated
    assert not [p for p in (data / "incoming/planted", data / "incoming/pulled") if p.exists()]


def os_chown_nobody(path) -> None:
    import os
    import pwd

    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)


def test_a_test_that_would_exhaust_memory_is_refused_up_front(module_agent_factory, pair):
    """XRootD's multi-stream HTTP-TPC buffers in RAM (measured: 8.8 GB for 11 x 1 GB files x 8 streams, then the
    OOM killer): a test whose worst case exceeds what the node has is refused with the figures and the fix."""
    src, _, _ = pair
    big = module_agent_factory(protocols=("xrootd-https",), run_user="nobody", budget_bytes=10**13,
                               **xrootd_ports())
    files = [{"name": f"big-{i:02d}.dat", "size": 60 * 10**9} for i in range(50)]
    r = big.post("/api/v1/transfers", json={
        "test_id": "6f1d7a64-5b7e-4d0a-9d43-2f7c1b0f6a11", "protocol": "xrootd-https",
        "source": {"host": src.address, "port": src.ports["xrootd_https_port"]},
        "file_set": {"count": 50, "size": 60 * 10**9}, "files": files, "concurrency": 50, "streams": 8,
        "timeout_seconds": 60, "destination": "store"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert "this test needs up to" in error and "available" in error
    assert "up to 107.4 GB because XRootD's multi-stream HTTP-TPC buffers" in error
    assert "lower concurrency or streams" in error
    assert big.get("/api/v1/transfers/6f1d7a64-5b7e-4d0a-9d43-2f7c1b0f6a11").status_code == 404


def gsiftp_credential(tmp_path, ca, name: str) -> dict[str, str]:
    """A client credential (X509_USER_CERT/KEY) signed by ``ca``, for globus-url-copy."""
    import os

    from tpcmesh_operator.credentials import pki

    kp = pki.issue_host_cert(ca, name, ["127.0.0.1"])
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    kp.write(cert, key)
    os.chmod(key, 0o600)
    return {"X509_USER_CERT": str(cert), "X509_USER_KEY": str(key)}


def globus_url_copy(tmp_path, agent, src_url: str, dst_url: str, cred: dict[str, str]):
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("X509_")}
    env.update({"X509_CERT_DIR": str(agent.data_dir / "data" / "ca-dir"),
                "X509_USER_PROXY": str(tmp_path / "no-proxy"), **cred})
    return subprocess.run(["globus-url-copy", "-nodcau", src_url, dst_url], env=env, capture_output=True,
                          text=True, timeout=60)


def gsiftp_proxy(tmp_path, cred: dict[str, str], ca_dir) -> dict[str, str]:
    """An X509 proxy of ``cred`` (grid-proxy-init, as a grid user delegates), for globus-url-copy."""
    import subprocess

    proxy = tmp_path / (Path(cred["X509_USER_CERT"]).stem + ".proxy")
    subprocess.run(["grid-proxy-init", "-cert", cred["X509_USER_CERT"], "-key", cred["X509_USER_KEY"], "-out",
                    str(proxy), "-q", "-valid", "1:00"], check=True, capture_output=True, timeout=60,
                   env={"PATH": "/usr/bin:/bin", "X509_CERT_DIR": str(ca_dir)})
    return {"X509_USER_PROXY": str(proxy)}


def name_members(src, members: list[str]) -> None:
    """What an operator's run does as it starts: the set prepared on the source, naming the mesh's members."""
    assert src.post("/api/v1/filesets", json={"count": COUNT, "size": SIZE, "mesh": members}).status_code == 200
    assert src.get("/api/v1/info").json()["mesh"] == sorted(members)


NOT_A_MEMBER = "Gridmap lookup failure: Could not map /O=tpcmesh/CN="


def test_gsiftp_admits_only_the_mesh_members(pair, tpcmesh_pki, tmp_path):
    """The agents' GridFTP servers speak gsiftp: no anonymous ftp://, no certificate of another CA, and of the
    agents' own CA only the mesh's members (the agent itself and the nodes the operator named): a certificate of
    that CA whose node is not a member is refused at login. A node named later gets in, and one no longer named is
    refused, at the next connection, without a restart of the server. A member's proxy counts as the member."""
    from tpcmesh_operator.credentials import pki

    from tests.integration.agent.test_supervisor import server_pids

    src, dst, files = pair
    path = f"{src.address}:{src.ports['gridftp_port']}/~/sets/{COUNT}x{SIZE}/{files[0]['name']}"
    expected = (src.data_dir / "data" / "sets" / f"{COUNT}x{SIZE}" / files[0]["name"]).read_bytes()
    servers = server_pids("globus-gridftp-server", src.address)

    def fetch(url: str, cred: dict[str, str], out: str):
        return globus_url_copy(tmp_path, src, url, f"file://{tmp_path / out}", cred)

    def fetched(out: str) -> bytes:
        return (tmp_path / out).read_bytes() if (tmp_path / out).exists() else b""

    anonymous = fetch(f"ftp://{path}", {}, "anonymous")
    assert anonymous.returncode != 0 and "Must perform GSSAPI authentication" in anonymous.stderr, anonymous
    stranger = fetch(f"gsiftp://{path}", gsiftp_credential(tmp_path, pki.create_ca("someone else's CA"), "stranger"),
                     "stranger")
    assert stranger.returncode != 0 and "530" in stranger.stderr, stranger
    assert fetched("stranger") == b""
    outsider = fetch(f"gsiftp://{path}", gsiftp_credential(tmp_path, tpcmesh_pki.ca, "outsider"), "outsider")
    assert outsider.returncode != 0 and f"{NOT_A_MEMBER}outsider" in outsider.stderr, outsider
    assert fetched("outsider") == b""

    joining = gsiftp_credential(tmp_path, tpcmesh_pki.ca, "joining-node")
    refused = fetch(f"gsiftp://{path}", joining, "before")
    assert refused.returncode != 0 and f"{NOT_A_MEMBER}joining-node" in refused.stderr, refused
    try:
        name_members(src, [dst.name, "joining-node"])
        member = fetch(f"gsiftp://{path}", joining, "member")
        assert member.returncode == 0, member
        assert fetched("member") == expected
        proxy = fetch(f"gsiftp://{path}", gsiftp_proxy(tmp_path, joining, src.data_dir / "data" / "ca-dir"),
                      "proxy")
        assert proxy.returncode == 0, proxy
        assert fetched("proxy") == expected
    finally:
        name_members(src, [dst.name])
    left = fetch(f"gsiftp://{path}", joining, "left")
    assert left.returncode != 0 and f"{NOT_A_MEMBER}joining-node" in left.stderr, left
    assert fetched("left") == b""
    assert server_pids("globus-gridftp-server", src.address)[:1] == servers[:1], "the GridFTP server was restarted"
    # the mesh's own transfer still runs (the destination's host certificate, a member)
    rec = dst.transfer(protocol="gridftp", source={"host": src.address, "port": src.ports["gridftp_port"]},
                       file_set={"count": COUNT, "size": SIZE}, files=files, concurrency=COUNT, streams=1,
                       timeout_seconds=60, destination="store", timeout=90)
    check_tpc_record(rec, files, "gridftp", 1)


def test_a_mesh_member_list_that_is_not_one_is_refused(pair):
    """``mesh`` must be node names: anything else is a 422 naming the entry, and the members stay as they were."""
    src, dst, _ = pair
    for bad, words in (("node-a", "mesh must be a list"), (["Node_A"], "'Node_A' is not a node name"),
                       (['a"b'], "is not a node name"), ([1], "1 is not a node name")):
        r = src.post("/api/v1/filesets", json={"count": COUNT, "size": SIZE, "mesh": bad})
        assert r.status_code == 422 and words in r.json()["error"], (bad, r.text)
    assert src.get("/api/v1/info").json()["mesh"] == [dst.name]


def test_gsiftp_reaches_only_the_sets_and_incoming(pair, tpcmesh_pki, tmp_path):
    """Even a trusted peer reads only the test sets and writes only into incoming/: not the host key the server
    uses (kept outside the data dir), not the rest of the data dir, not the host's files."""
    import os

    from tests.integration.agent.test_supervisor import server_pids

    src, dst, files = pair
    base = f"gsiftp://{src.address}:{src.ports['gridftp_port']}"
    cred = gsiftp_credential(tmp_path, tpcmesh_pki.ca, dst.name)  # a member's certificate
    pids = server_pids("globus-gridftp-server", src.address)
    environ = dict(v.split("=", 1) for v in open(f"/proc/{pids[0]}/environ").read().split("\0") if "=" in v)
    key = environ["X509_USER_KEY"]
    assert "PRIVATE KEY" in open(key).read()
    data = src.data_dir / "data"
    assert not key.startswith(str(data)), key
    leaked = [p for p in data.rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes()]
    assert not leaked, f"private keys under the data dir: {leaked}"

    def read(url: str):
        out = tmp_path / f"read-{abs(hash(url))}"
        r = globus_url_copy(tmp_path, src, url, f"file://{out}", cred)
        return r, out.read_bytes() if out.exists() else b""

    for url in (f"{base}{key}", f"{base}/etc/passwd", f"{base}/~/servers/gridftp/stdout.log",
                f"{base}/~/servers/gridftp/transfers.log",
                f"{base}/~/ca-dir/ca.pem", f"{base}{data}/ca-dir/ca.pem"):
        r, got = read(url)
        assert r.returncode != 0 and got == b"", (url, r.stdout, r.stderr)
        assert "not allowed" in r.stderr.lower() or "permission denied" in r.stderr.lower() \
            or "550" in r.stderr, (url, r.stderr)
    ok, got = read(f"{base}/~/sets/{COUNT}x{SIZE}/{files[0]['name']}")
    assert ok.returncode == 0 and len(got) == SIZE, ok.stderr

    upload = tmp_path / "upload"
    upload.write_bytes(b"x" * 1000)
    incoming = data / "incoming" / "gsiftp-probe"
    incoming.mkdir()
    os.chown(incoming, *[getattr(__import__("pwd").getpwnam("nobody"), a) for a in ("pw_uid", "pw_gid")])
    for target in (f"{base}/~/sets/{COUNT}x{SIZE}/planted", f"{base}/~/planted", f"{base}/tmp/planted-by-peer"):
        r = globus_url_copy(tmp_path, src, f"file://{upload}", target, cred)
        assert r.returncode != 0, (target, r.stdout)
    assert not (data / "sets" / f"{COUNT}x{SIZE}" / "planted").exists() and not (data / "planted").exists()
    assert not os.path.exists("/tmp/planted-by-peer")
    w = globus_url_copy(tmp_path, src, f"file://{upload}", f"{base}/~/incoming/gsiftp-probe/ok", cred)
    assert w.returncode == 0, w.stderr
    assert (incoming / "ok").read_bytes() == upload.read_bytes()


@pytest.mark.parametrize("streams", [1, 8])
def test_gridftp_anonymous_mode_still_moves_the_set(module_agent_factory, streams):
    """gridftp_security=anonymous (ftp://, as the papers' benchmarks ran): the same transfer, record checked."""
    anon = {"protocols": ("builtin", "gridftp"), "run_user": "nobody", "gridftp_security": "anonymous"}
    src = module_agent_factory(**anon)
    dst = module_agent_factory(**anon)
    files = src.file_set(count=COUNT, size=SIZE)["files"]
    rec = dst.transfer(protocol="gridftp", source={"host": src.address, "port": src.ports["gridftp_port"]},
                       file_set={"count": COUNT, "size": SIZE}, files=files, concurrency=COUNT, streams=streams,
                       timeout_seconds=60, destination="store", timeout=90)
    check_tpc_record(rec, files, "gridftp", streams)


def test_the_mesh_members_survive_an_agent_restart(agent_factory, tpcmesh_pki, tmp_path):
    """The member list lives in the agent's data dir: a restarted agent (same settings, same data dir, as a
    container restarted in its pod) admits the same members and still refuses the others, before any new run."""
    import dataclasses
    import subprocess

    from tests.support.agents import wait_ready
    from tests.support.paths import VENV_BIN

    agent = agent_factory(protocols=("builtin", "gridftp"), run_user="nobody")
    files = agent.file_set(count=1, size=SIZE, mesh=["peer-a", "peer-b"])["files"]
    url = f"gsiftp://{agent.address}:{agent.ports['gridftp_port']}/~/sets/1x{SIZE}/{files[0]['name']}"
    environ = dict(v.split("=", 1) for v in open(f"/proc/{agent.process.pid}/environ").read().split("\0") if "=" in v)
    agent.stop()
    log = open(agent.log_file, "ab")
    restarted = dataclasses.replace(agent, process=subprocess.Popen(
        [str(VENV_BIN / "tpcmesh-agent")], env=environ, stdout=log, stderr=subprocess.STDOUT, start_new_session=True),
        _client=None)
    try:
        wait_ready(restarted)
        assert restarted.get("/api/v1/info").json()["mesh"] == ["peer-a", "peer-b"]
        member = globus_url_copy(tmp_path, restarted, url, f"file://{tmp_path / 'member'}",
                                 gsiftp_credential(tmp_path, tpcmesh_pki.ca, "peer-b"))
        assert member.returncode == 0, member
        assert (tmp_path / "member").stat().st_size == SIZE
        other = globus_url_copy(tmp_path, restarted, url, f"file://{tmp_path / 'other'}",
                                gsiftp_credential(tmp_path, tpcmesh_pki.ca, "peer-c"))
        assert other.returncode != 0 and f"{NOT_A_MEMBER}peer-c" in other.stderr, other
    finally:
        restarted.stop()
        log.close()
        agent.process = restarted.process  # the factory's teardown stops this one

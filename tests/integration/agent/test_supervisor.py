"""The protocol-server supervisor inside a real agent: a killed server is restarted and counted; a missing program
makes its protocols unavailable with the Debian package named, and the other servers keep working."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest
from tpcmesh_agent.daemons.supervisor import port_open

from tests.integration.agent.test_protocols import xrootd_ports

pytestmark = pytest.mark.integration


def server_pids(program: str, marker: str) -> list[int]:
    """Pids of ``program`` processes whose command line mentions ``marker`` (an address or a data dir)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0].decode(errors="replace")) == program and marker.encode() in b" ".join(
                argv):
            pids.append(int(d.name))
    return pids


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def test_killed_server_is_restarted_and_counted(agent_factory):
    agent = agent_factory(protocols=("builtin", "iperf3", "gridftp"), run_user="nobody")
    [pid] = server_pids("iperf3", agent.address)
    os.kill(pid, signal.SIGKILL)

    def restarted():
        st = agent.get("/api/v1/info").json()["protocols"]["iperf3"]
        return st if st["restarts"] == 1 and st["running"] else None

    st = wait_for(restarted, 10, "iperf3 restart")
    assert st["available"] is True
    assert "exited" in (st["message"] or "") or st["message"] is None
    assert wait_for(lambda: port_open(agent.address, agent.ports["iperf3_port"]), 10, "iperf3 listening again")
    [new_pid] = server_pids("iperf3", agent.address)
    assert new_pid != pid
    other = agent.get("/api/v1/info").json()["protocols"]["gridftp"]
    assert other["running"] is True and other["restarts"] == 0
    assert agent.metric("tpcmesh_agent_server_up", server="iperf3") == 1.0


def test_a_crashed_server_names_its_signal_and_reaches_the_sessions_report(agent_factory):
    from tests.support import serving

    agent = agent_factory(protocols=("builtin", "iperf3"), run_user="nobody")
    [pid] = server_pids("iperf3", agent.address)
    os.kill(pid, signal.SIGSEGV)
    wait_for(lambda: agent.get("/api/v1/info").json()["protocols"]["iperf3"]["restarts"] == 1, 10, "iperf3 restart")
    before = len(serving.CRASHES)
    agent.stop()
    [crash] = serving.CRASHES[before:]
    assert crash.what == f"the agent {agent.name}'s iperf3" and crash.how == "exited with status -11 (SIGSEGV)"


def test_missing_program_is_reported_with_its_package_and_the_rest_works(agent_factory, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("iperf3", "globus-gridftp-server", "globus-url-copy", "openssl"):
        (bin_dir / program).symlink_to(shutil.which(program))
    monkeypatch.setenv("PATH", str(bin_dir))  # no xrootd, no xrdcp
    agent = agent_factory(protocols=("builtin", "xrootd-https", "xrootd-root", "gridftp", "iperf3"),
                          run_user="nobody", **xrootd_ports())
    protocols = agent.get("/api/v1/info").json()["protocols"]
    for p in ("xrootd-https", "xrootd-root"):
        assert protocols[p]["available"] is False, protocols[p]
        assert protocols[p]["running"] is False
        assert "xrootd-server" in protocols[p]["message"] or "xrootd-client" in protocols[p]["message"]
    for p in ("gridftp", "iperf3", "builtin"):
        assert protocols[p]["available"] is True and protocols[p]["running"] is True, protocols[p]
    assert port_open(agent.address, agent.ports["iperf3_port"])
    assert port_open(agent.address, agent.ports["gridftp_port"])
    assert agent.metric("tpcmesh_agent_server_up", server="xrootd-root") == 0.0
    assert agent.metric("tpcmesh_agent_server_up", server="gridftp") == 1.0
    # a transfer on the missing protocol ends clearly, not in a hang
    r = agent.post("/api/v1/transfers", json={
        "test_id": "8b0d7c58-3c55-4d8e-9f57-8fd1d7f0b001", "protocol": "xrootd-root",
        "source": {"host": "127.0.0.1", "port": 1}, "file_set": {"count": 1, "size": 10}, "timeout_seconds": 5})
    if r.status_code == 202:
        rec = agent.wait_transfer(r.json()["test_id"], timeout=20)
        assert rec["status"] == "failed" and "xrootd" in rec["error"], rec
    else:
        assert r.status_code in (409, 422, 503) and "xrootd" in r.text, r.text


def test_servers_die_with_an_agent_killed_outright(agent_factory):
    agent = agent_factory(protocols=("builtin", "xrootd-root", "gridftp", "iperf3"), run_user="nobody",
                          **xrootd_ports())
    marker = str(agent.data_dir)
    before = {p: server_pids(p, marker) + server_pids(p, agent.address)
              for p in ("xrootd", "globus-gridftp-server", "iperf3")}
    assert all(before.values()), before
    nobody = pwd.getpwnam("nobody").pw_uid
    assert all(os.stat(f"/proc/{pid}").st_uid == nobody for pid in server_pids("xrootd", marker))
    config = (agent.data_dir / "data" / "servers" / "xrootd-root" / "xrootd.cfg").read_text()
    private = Path(next(line.split()[1] for line in config.splitlines() if line.startswith("all.adminpath"))).parent
    agent.kill()  # SIGKILL: no chance to stop the servers itself
    wait_for(lambda: not any(server_pids(p, marker) + server_pids(p, agent.address) for p in before), 10,
             "the servers' exit after the agent was killed")
    shutil.rmtree(private)  # what the killed agent could not remove: its /tmp directory (key copies, sockets)


def test_a_server_that_cannot_start_says_why(agent_factory):
    """XRootD's port is taken: it keeps failing, is retried with backoff, and the status carries XRootD's reason."""
    blocker = socket.socket()
    blocker.bind(("0.0.0.0", 0))
    blocker.listen()
    try:
        port = blocker.getsockname()[1]
        agent = agent_factory(protocols=("builtin", "xrootd-root", "iperf3"), run_user="nobody",
                              xrootd_root_port=port, xrootd_https_port=xrootd_ports()["xrootd_https_port"])
        st = wait_for(lambda: (s := agent.get("/api/v1/info").json()["protocols"]["xrootd-root"])["restarts"] >= 2
                      and s, 20, "two restarts of xrootd-root")
        assert st["running"] is False or st["restarts"] >= 2
        assert "address already in use" in st["message"], st
        assert agent.get("/api/v1/info").json()["protocols"]["iperf3"]["running"] is True
    finally:
        blocker.close()


def test_a_stopped_agent_leaves_nothing_of_xrootd_in_tmp(agent_factory):
    """XRootD writes /tmp/xrootd.<instance>.env (a fixed place) and the agent keeps its admin sockets under /tmp
    (short socket paths): both are gone once the agent has stopped."""
    ports = xrootd_ports()
    agent = agent_factory(protocols=("builtin", "xrootd-root", "xrootd-https"), run_user="nobody", **ports)
    servers = agent.get("/api/v1/info").json()["servers"]
    envs = [Path(f"/tmp/xrootd.tpcm-root-{ports['xrootd_root_port']}.env"),
            Path(f"/tmp/xrootd.tpcm-https-{ports['xrootd_https_port']}.env"),
            Path(f"/tmp/xrootd.tpcm-https-tpc-{servers['xrootd-https-tpc']['port']}.env"),
            Path(f"/tmp/xrootd.tpcm-root-tpc-{servers['xrootd-root-tpc']['port']}.env")]
    wait_for(lambda: all(p.exists() for p in envs), 10, "XRootD's env files")
    admin_dirs = set()
    for p in envs:
        fields = dict(kv.split("=", 1) for kv in p.read_text().strip().split("&"))
        admin_dirs.add(Path(fields["apath"]).parents[1])
    assert all(str(d).startswith("/tmp/tpcm-") and d.is_dir() for d in admin_dirs), admin_dirs
    agent.stop()
    assert not [p for p in envs if p.exists()]
    assert not [d for d in admin_dirs if d.exists()]


async def test_a_server_whose_chosen_port_was_taken_moves_to_a_free_one(tmp_path):
    """A port the agent chose (free_port) may be taken before its server binds it (another agent starting beside
    it was given the same one; CI saw a local TPC instance fail to bind for good): the supervisor restarts that
    server on a new free port and says so; a real process, a real bind."""
    import asyncio
    import dataclasses
    import sys

    from tpcmesh_agent.daemons.supervisor import ManagedServer, ServerSpec, ServerSupervisor, free_port

    from tests.unit.agent.test_server_configs import _settings

    server_code = ("import socket, sys, time\n"
                   "s = socket.socket(); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen()\n"
                   "time.sleep(600)\n")

    def spec_on(port: int) -> ServerSpec:
        return ServerSpec("toy", port, "127.0.0.1", (), lambda: [sys.executable, "-c", server_code, str(port)],
                          tmp_path / f"toy-{port}.log", tmp_path)

    supervisor = ServerSupervisor(_settings(data_dir=tmp_path))
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        moved: list[int] = []

        def repick() -> ServerSpec:
            moved.append(free_port())
            return spec_on(moved[-1])

        server = ManagedServer(dataclasses.replace(spec_on(taken), repick=repick))
        server.task = asyncio.create_task(supervisor._watch(server))
        try:
            for _ in range(200):
                if moved and port_open("127.0.0.1", moved[-1]):
                    break
                await asyncio.sleep(0.1)
            assert moved and server.spec.port == moved[-1] != taken and port_open("127.0.0.1", moved[-1])
            assert server.restarts == 1 and "address already in use" in server.last_exit_message.lower()
            assert f"moved to port {moved[-1]}" in server.last_exit_message
        finally:
            supervisor._stopping = True
            if server.process is not None and server.process.returncode is None:
                server.process.kill()
            await asyncio.wait_for(server.task, 10)


def test_an_agents_local_tpc_instances_may_move_but_configured_ports_do_not(tmp_path):
    from tpcmesh_agent.daemons.supervisor import ServerSupervisor

    from tests.unit.agent.test_server_configs import _settings

    chosen = _settings(data_dir=tmp_path, protocols=("xrootd-https",))
    spec = {s.name: s for s in ServerSupervisor(chosen).specs()}["xrootd-https-tpc"]
    assert spec.port == chosen.xrootd_tpc_port and spec.repick is not None
    again = spec.repick()
    assert again.port == chosen.xrootd_tpc_port and again.repick is not None  # the movers read the new port
    fixed = _settings(data_dir=tmp_path, protocols=("xrootd-https",), xrootd_tpc_port=19999)
    assert [(s.port, s.repick) for s in ServerSupervisor(fixed).specs() if s.name == "xrootd-https-tpc"] == [
        (19999, None)]
    public = {s.name: s for s in ServerSupervisor(fixed).specs()}["xrootd-https"]
    assert public.repick is None  # the public ports are the chart's: never moved

"""The WAN emulation lab against the real kernel: namespaces, the delay line, rates, cleanup after crashes."""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import pytest
from tpcmesh_lab.netns import DEVICE_PREFIX, NETNS_ETC, Lab, lab_namespaces, netns_unavailable_reason
from tpcmesh_lab.profile import parse_profile

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
]

CONNECT_RTT = """
import socket, sys, time
samples = []
for _ in range(int(sys.argv[2])):
    s = socket.socket()
    t = time.perf_counter()
    try:
        s.connect((sys.argv[1], 9))  # nothing listens: the RST ends the handshake after one round trip
    except OSError:
        pass
    samples.append((time.perf_counter() - t) * 1000)
    s.close()
print(" ".join(f"{x:.3f}" for x in samples))
"""


def two_nodes(**link) -> object:
    return parse_profile({"nodes": ["near", "far"], "links": [{"between": ["near", "far"], **link}]}, "test")


def leftovers(pid: int) -> list[str]:
    found = [n for n in lab_namespaces() if n.startswith(f"tpcm-{pid}-")]
    if NETNS_ETC.is_dir():
        found += [str(d) for d in NETNS_ETC.iterdir() if d.name.startswith(f"tpcm-{pid}-")]
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout)
    found += [x["ifname"] for x in links if x["ifname"].startswith(f"{DEVICE_PREFIX}{pid}-")]
    return found


def connect_rtts(lab: Lab, src: str, dst_address: str, count: int = 21) -> list[float]:
    out = lab.run(src, [sys.executable, "-c", CONNECT_RTT, dst_address, str(count)], capture_output=True,
                  text=True, check=True).stdout
    return [float(x) for x in out.split()]


def test_namespaces_are_created_named_and_removed():
    lab = Lab(two_nodes(delayMs=1)).start()
    try:
        assert lab.emulated
        names = [n.netns for n in lab.nodes]
        assert all(n and n.startswith(f"tpcm-{os.getpid()}-") for n in names)
        assert set(names) <= set(lab_namespaces())
        # Name resolution inside a namespace comes from its own hosts file (GridFTP needs it).
        # (both families: getent answers the IPv6 address first when the hosts file has one)
        far = {lab.node("far").address, lab.node("far").address6}
        out = lab.run("near", ["getent", "ahostsv4", "far"], capture_output=True, text=True, check=True).stdout
        assert out.split()[0] == lab.node("far").address
        out = lab.run("near", ["getent", "hosts", "far"], capture_output=True, text=True, check=True).stdout
        assert out.split()[0] in far
        own = lab.run("far", ["getent", "hosts", socket.gethostname()], capture_output=True, text=True).stdout
        assert own.split()[0] in far
        # The addresses collide with no route outside the lab: the only route to them is the lab's device.
        routes = subprocess.run(["ip", "-j", "route", "get", lab.node("far").address], capture_output=True,
                                text=True, check=True).stdout
        assert json.loads(routes)[0]["dev"].startswith(f"{DEVICE_PREFIX}{os.getpid()}-")
    finally:
        lab.close()
    assert leftovers(os.getpid()) == []


def test_rtt_between_namespaces_matches_the_profile():
    with Lab(two_nodes(delayMs=10)) as lab:
        rtts = connect_rtts(lab, "near", lab.node("far").address)
        # The path's latency is the least RTT seen (as ping's min); the median also carries the machine's
        # scheduling noise (this 2-core machine runs whole test suites at once), so it gets a looser bound.
        assert min(rtts) == pytest.approx(20.0, rel=0.10), rtts
        assert 18.0 <= statistics.median(rtts) <= 25.0, rtts
        # The root namespace reaches every node with no added delay (the local operator talks to agents from there).
        host = []
        for _ in range(5):
            start = time.perf_counter()
            with pytest.raises(OSError):
                socket.create_connection((lab.node("near").address, 9), timeout=2)
            host.append((time.perf_counter() - start) * 1000)
        assert min(host) < 2, host


def test_rate_limit_holds():
    with Lab(two_nodes(delayMs=2, rateMbit=100)) as lab:
        far = lab.node("far")
        server = lab.popen("far", ["iperf3", "-s", "-1", "-B", far.address], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        out = lab.run("near", ["iperf3", "-c", far.address, "-t", "3", "-O", "1", "-J"], capture_output=True,
                      text=True, timeout=30).stdout
        server.wait(10)
        mbit = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
        assert 80 <= mbit <= 102, mbit


def test_a_crashed_delay_line_takes_the_whole_lab_down():
    failed = threading.Event()
    messages: list[str] = []
    lab = Lab(two_nodes(delayMs=1), on_failure=lambda m: (messages.append(m), failed.set())).start()
    sleeper = lab.popen("far", ["sleep", "600"])
    assert lab._delayline is not None
    os.kill(lab._delayline.pid, signal.SIGKILL)
    assert failed.wait(15), "the lab did not notice its delay line died"
    assert "delay line" in messages[0]
    assert sleeper.wait(10) is not None
    assert leftovers(os.getpid()) == []


def test_leftovers_of_a_killed_lab_are_removed_at_the_next_start(tmp_path):
    script = (
        "import os, signal\n"
        "from tpcmesh_lab.netns import Lab\n"
        "from tpcmesh_lab.profile import parse_profile\n"
        "lab = Lab(parse_profile({'nodes': ['a', 'b']})).start()\n"
        "print('UP', os.getpid(), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "UP" in proc.stdout, proc.stderr
    dead_pid = int(proc.stdout.split()[1])
    stale = [n for n in lab_namespaces() if n.startswith(f"tpcm-{dead_pid}-")]
    assert len(stale) == 2, "the killed run left no namespaces: nothing to test"
    with Lab(two_nodes(delayMs=1)):
        assert leftovers(dead_pid) == []


def test_a_crashed_critical_process_takes_the_whole_lab_down():
    failed = threading.Event()
    lab = Lab(two_nodes(delayMs=1), on_failure=lambda m: failed.set()).start()
    agent = lab.popen("near", ["sleep", "600"], critical=True)
    other = lab.popen("far", ["sleep", "600"])
    os.kill(agent.pid, signal.SIGKILL)
    assert failed.wait(15), "the lab did not notice its critical process died"
    assert other.wait(10) is not None
    assert leftovers(os.getpid()) == []


def test_auto_mode_falls_back_to_loopback_when_the_lab_cannot_be_built(monkeypatch):
    from tpcmesh_lab import netns

    def no_subnet():
        raise netns.LabError("every candidate range collides with a route on this machine")

    monkeypatch.setattr(netns, "pick_subnet", no_subnet)
    with Lab(two_nodes(delayMs=1)) as lab:
        assert not lab.emulated and "collides" in lab.reason
        assert all(n.address.startswith("127.0.") and n.netns is None for n in lab.nodes)
    assert leftovers(os.getpid()) == []
    with pytest.raises(netns.LabError, match="collides"):
        Lab(two_nodes(delayMs=1), mode="netns").start()
    assert leftovers(os.getpid()) == []

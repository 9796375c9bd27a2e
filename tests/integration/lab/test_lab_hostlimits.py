"""A lab node's own limits against the real kernel (issue #26): the WAN profile's ``hosts`` set tcp_rmem/tcp_wmem
maxima in a node's namespace (never the host's), and a CPU quota for everything the node runs. Over a delayed link
a small receive buffer (or send buffer) caps one stream where a large one does not, and the limit model names it;
a quota'd agent pulls more slowly than one without."""

from __future__ import annotations

import json
import os
import secrets
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
from results.diagnosis import cells
from results.diagnosis.limits import Host, Measurement, diagnose
from tpcmesh_lab.hostlimits import cpu_unavailable_reason
from tpcmesh_lab.mesh import Certificates, start_agents
from tpcmesh_lab.netns import Lab, netns_unavailable_reason
from tpcmesh_lab.profile import parse_profile
from tpcmesh_operator.run.agents import DEFAULT_PORTS

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
]

MiB = 1 << 20
DELAY_MS = 10  # each way: RTT 20 ms
SMALL = 1 * MiB  # one stream: at most 1 MiB per 20 ms = 0.42 Gbit/s
LARGE = 64 * MiB
IPERF3_PORT = "5311"
SECONDS = 3
# cores: 7 ms of every 100 ms. The machine has fast and slow spells and the starved end's rate moves with them far
# more than the free end's: at 0.1 the built-in mover into the starved node was 3.2 x and 11 x slower than the free
# one an hour apart, and 1.98 x (2 x asserted) in a third run; at 0.05 one run took 40 s and another did not finish a
# pull in 200 s; at 0.02 a TLS handshake with the starved agent outlasted 120 s in a CI run. 0.07 passed in a slow
# spell (318 s) and a fast one (15 s, built-in 2.4 x slower), then 1.91 x in a CI run (2 x asserted then).
QUOTA = 0.07


def patiently(client: httpx.Client, method: str, url: str, deadline: float, **kwargs) -> httpx.Response:
    """The request, sent again while it times out (the starved agent answers its control API when its quota lets
    it; transfers are idempotent by test_id, so a POST sent twice starts one), until ``deadline`` (monotonic)."""
    while True:
        try:
            response = client.request(method, url, **kwargs)
        except httpx.TimeoutException:
            assert time.monotonic() < deadline, "the starved agent's control API did not answer in time"
            continue
        response.raise_for_status()
        return response


def host_sysctl(name: str) -> str:
    return Path("/proc/sys", *name.split(".")).read_text().strip()


def iperf3(lab: Lab, source: str, destination: str) -> float:
    """One stream from source to destination (the destination's client receives, -R), Gbit/s."""
    server = lab.popen(source, ["iperf3", "-s", "-1", "-B", lab.node(source).address, "-p", IPERF3_PORT],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = lab.run(destination, ["iperf3", "-c", lab.node(source).address, "-p", IPERF3_PORT, "-R", "-t",
                                    str(SECONDS), "-O", "1", "-J"], capture_output=True, text=True, timeout=60)
        data = json.loads(out.stdout)
        assert "error" not in data, data["error"]
        return float(data["end"]["sum_received"]["bits_per_second"]) / 1e9
    finally:
        server.wait(10)


def test_small_buffers_in_a_namespace_cap_one_stream_over_a_delayed_link_and_the_model_names_them():
    before = {name: host_sysctl(name) for name in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")}
    profile = parse_profile({
        "nodes": ["src", "thin-src", "small-dst", "large-dst"], "defaultLink": {"delayMs": DELAY_MS},
        "hosts": [{"node": "src", "tcpWmemMaxBytes": LARGE}, {"node": "thin-src", "tcpWmemMaxBytes": SMALL},
                  {"node": "small-dst", "tcpRmemMaxBytes": SMALL}, {"node": "large-dst", "tcpRmemMaxBytes": LARGE}],
    }, "buffers")
    with Lab(profile, mode="netns") as lab:
        assert lab.node("small-dst").sysctls["net.ipv4.tcp_rmem"][2] == SMALL
        seen = lab.run("small-dst", ["sysctl", "-n", "net.ipv4.tcp_rmem"], capture_output=True, text=True).stdout
        assert seen.split()[2] == str(SMALL)
        assert {name: host_sysctl(name) for name in before} == before  # the host's own values are untouched
        rates = {"receive": iperf3(lab, "src", "small-dst"), "send": iperf3(lab, "thin-src", "large-dst"),
                 "large": iperf3(lab, "src", "large-dst")}
    assert {name: host_sysctl(name) for name in before} == before
    print("one stream, 20 ms RTT: " + ", ".join(f"{k} {v:.3f} Gbit/s" for k, v in rates.items()))
    window_rate = SMALL * 8 / (2 * DELAY_MS / 1000) / 1e9
    for case in ("receive", "send"):
        assert rates[case] <= 1.1 * window_rate, rates  # no more than the window allows
        assert rates["large"] >= 2 * rates[case], rates
    kernel = os.uname().release
    rtt = 2 * DELAY_MS
    big_src = Host(name="src", kernel=kernel, tcp_wmem_max=LARGE)
    big_dst = Host(name="large-dst", kernel=kernel, tcp_rmem_max=LARGE)
    receive = diagnose(Measurement(gbps=rates["receive"], protocol="iperf3", rtt_ms=rtt, source=big_src,
                                   destination=Host(name="small-dst", kernel=kernel, tcp_rmem_max=SMALL)))
    send = diagnose(Measurement(gbps=rates["send"], protocol="iperf3", rtt_ms=rtt, destination=big_dst,
                                source=Host(name="thin-src", kernel=kernel, tcp_wmem_max=SMALL)))
    print(receive.reason, send.reason, sep="\n")
    assert receive.limit == "receive-window" and "tcp_rmem max on small-dst" in receive.fix
    assert send.limit == "send-buffer" and "tcp_wmem max on thin-src" in send.fix


@pytest.mark.skipif(bool(cpu_unavailable_reason()), reason=f"no CPU quota here: {cpu_unavailable_reason()}")
@pytest.mark.timeout(900)  # four transfers, each waited for up to 200 s on a slow machine
def test_an_agent_under_a_cpu_quota_is_slower(tmp_path):
    """src sends to free and to starved; starved's agent (and the iperf3 it runs) is in a CPU group whose quota is
    cut to QUOTA once the agents are up (the agent starts in seconds, not minutes). A receiver's copy into user
    space is its own work; the sender's and the delay line's mostly are not (a quota'd sender was not slower)."""
    files = {"count": 2, "size": 64_000_000}
    profile = parse_profile({"nodes": ["src", "free", "starved"], "defaultLink": {"delayMs": 0.1},
                             "hosts": [{"node": "starved", "cpuQuota": 1}]}, "cpu")
    tmp_path.chmod(0o755)
    with Lab(profile, mode="netns") as lab:
        group = lab.node("starved").cpu_group
        assert group is not None and group.path.is_dir()
        certs = Certificates.create(tmp_path / "pki", lab.nodes)
        token = secrets.token_urlsafe(32)
        start_agents(lab, certs, token, tmp_path, budget_bytes=10**9, protocols=("builtin", "iperf3"), wait=120)
        assert group.pids(), "the starved node's agent is not in its CPU group"
        group.set_quota(QUOTA)
        throttled_before = group.throttled()
        ctx = ssl.create_default_context(cafile=str(certs.ca_file))
        control = DEFAULT_PORTS["control"]
        rates, cpus, ends = {}, {}, {}
        with httpx.Client(verify=ctx, timeout=60, headers={"Authorization": f"Bearer {token}"}) as client:
            client.post(f"https://{lab.node('src').address}:{control}/api/v1/filesets", json=files
                        ).raise_for_status()
            for protocol in ("iperf3", "builtin"):
                for dst in ("free", "starved"):
                    base = f"https://{lab.node(dst).address}:{control}/api/v1/transfers"
                    tid = str(uuid.uuid4())
                    # the starved agent answers its control API slowly, more so on a loaded machine; its transfer
                    # ends by its own timeout
                    deadline = time.monotonic() + 200
                    patiently(client, "POST", base, deadline, json={
                        "test_id": tid, "protocol": protocol, "streams": 1, "concurrency": 2, "file_set": files,
                        "source": {"host": lab.node("src").address, "port": DEFAULT_PORTS[protocol]},
                        "timeout_seconds": 100, "destination": "sink",
                        **({"duration_seconds": 2} if protocol == "iperf3" else {})})
                    while (rec := patiently(client, "GET", f"{base}/{tid}", deadline).json())["status"] == "running":
                        assert time.monotonic() < deadline, f"the {protocol} pull into {dst} did not finish"
                        time.sleep(0.2)
                    assert rec["status"] == "succeeded", rec.get("error")
                    rates[(protocol, dst)] = rec["aggregate_gbps"]
                    ends[(protocol, dst)] = (rec.get("host") or {}).get("destination") or {}
                    cpus[(protocol, dst)] = ends[(protocol, dst)].get("cpu") or {}
        throttled = group.throttled() - throttled_before
    print(f"from src (0.2 ms RTT, 1 stream) into free / into starved ({QUOTA} cores): " + ", ".join(
        f"{p} {rates[(p, 'free')]:.3f} / {rates[(p, 'starved')]:.3f} Gbit/s" for p in ("iperf3", "builtin"))
        + f"; the starved node's group was throttled in {throttled} periods during the tests")
    assert throttled > 0
    # Slower, by a margin the machine's spells cannot close; how much slower is not the product's finding (the free
    # end is bound by the delay line, the starved one by the quota, and the two move apart with the machine: 1.9 x
    # to 11 x for the built-in mover in six runs). What the product must find is the quota, checked below.
    for protocol in ("iperf3", "builtin"):
        assert rates[(protocol, "starved")] <= 0.75 * rates[(protocol, "free")], rates
    # the agents' own telemetry: the starved agent read its group's quota and how often it ran out; every lab
    # node's cores are the machine's, so none of them is taken as the node's own (host_cpu_shared). At a few
    # hundredths of a core the starved agent's own sampler falls behind, so a short test (iperf3's 2 s) may get no
    # summary at all
    print({k: v.get("quota") for k, v in cpus.items()})
    for p in ("iperf3", "builtin"):
        assert cpus[(p, "free")]["shared"] is True and cpus[(p, "free")]["quota"] is None
    starved = [cpus[(p, "starved")] for p in ("iperf3", "builtin") if cpus[(p, "starved")]]
    assert starved, "no summary of the starved agent's host"
    for cpu in starved:
        assert cpu["shared"] is True
        assert cpu["quota"]["cores"] == pytest.approx(QUOTA)
        assert cpu["quota"]["throttled_pct"] >= 50, cpu["quota"]
    # and the limit model, fed the starved end's telemetry as the dashboard feeds it, names that end's CPU
    for protocol in ("iperf3", "builtin"):
        if not cpus[(protocol, "starved")]:
            continue
        end = cells.host_end(ends[(protocol, "starved")], "starved", None)
        d = diagnose(Measurement(gbps=rates[(protocol, "starved")], protocol=protocol, rtt_ms=0.2,
                                 source=Host(name="src"), destination=end))
        assert d.limit == "destination-cpu" and "starved's CPU quota ran out" in d.fix, d.reason


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@pytest.mark.skipif(bool(cpu_unavailable_reason()), reason=f"no CPU quota here: {cpu_unavailable_reason()}")
def test_cpu_hogs_run_inside_the_nodes_quota():
    profile = parse_profile({"nodes": ["busy"], "hosts": [{"node": "busy", "cpuQuota": 0.2, "cpuHogs": 1}]}, "hog")
    with Lab(profile, mode="netns") as lab:
        group = lab.node("busy").cpu_group
        assert group is not None
        time.sleep(0.5)
        hogs = [pid for pid in group.pids() if "while True" in Path(f"/proc/{pid}/cmdline").read_text()]
        assert len(hogs) == 1, group.pids()
        start = cpu_seconds(hogs[0])
        time.sleep(2)
        used = cpu_seconds(hogs[0]) - start
        assert group.throttled() > 0
    print(f"a busy loop under a 0.2-core quota used {used:.2f} s of CPU in 2 s")
    assert 0.1 <= used <= 0.6  # 0.4 s allowed; a whole core would be 2 s

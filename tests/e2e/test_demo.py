"""`tpcmesh-local demo` end to end: real agents, the real dashboard, the operator's executor, the lab.

Drives the command headless with a short benchmark, then checks what the dashboard stored (REST API) and that the
grid page renders. As root with namespaces the stored RTTs show the profile's delays; with the loopback switch (what
a non-root user gets) it still measures.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from tpcmesh_lab.delayline import EARLIEST_S
from tpcmesh_lab.netns import lab_namespaces, netns_unavailable_reason
from tpcmesh_lab.stallmeter import StallMeter

from tests.support.paths import REPO, VENV_BIN

pytestmark = pytest.mark.e2e

ALL = ["builtin", "xrootd-https", "xrootd-root", "gridftp", "iperf3"]
BENCHMARK = """\
apiVersion: tpcmesh.io/v1alpha1
kind: TransferBenchmark
metadata:
  name: {name}
spec:
  protocols: [{protocols}]
  streams: [1]
  concurrency: 2
  fileSet: {{count: 2, size: 2MB}}
  latency: {{enabled: true, count: 5}}
  iperf3: {{durationSeconds: 1}}
  timeoutSeconds: 60
  retries: 1
  pairs:
    mode: explicit
    explicit:
{pairs}
"""
PROFILE = """\
kind: WanProfile
nodes: [east, east-metro, west]
links:
  - {between: [east, east-metro], delayMs: 1}
  - {between: [east, west], delayMs: 15}
  - {between: [east-metro, west], delayMs: 15}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Demo:
    """A `tpcmesh-local demo` process whose output is collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, prefix: Sequence[str] = ()) -> None:
        self.lines: list[str] = []
        # Ctrl-C as a terminal sends it: a test run started in the background (`cmd &` in a script) inherits
        # SIGINT ignored, and Python then never turns it into KeyboardInterrupt, so the demo would not stop
        self.proc = subprocess.Popen([*prefix, str(VENV_BIN / "tpcmesh-local"), "demo", *args], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})},
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None:
                time.sleep(0.2)
                raise AssertionError(f"demo exited with {self.proc.returncode} before {prefix!r}:\n{self.output}")
            time.sleep(0.2)
        raise AssertionError(f"no {prefix!r} within {timeout} s:\n{self.output}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(5)
        return self.proc.returncode


def measurements(base: str, benchmark: str) -> list[dict]:
    r = httpx.get(f"{base}/api/v1/measurements/", params={"benchmark": f"local/{benchmark}", "limit": 1000},
                  timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    return body["results"] if isinstance(body, dict) else body


def check_protocols_offered(output: str, agents: int) -> None:
    """Every agent offers every protocol: the suite installs all their Debian programs (hack/setup.sh), so one that
    is missing is a failure here, not a silently smaller grid."""
    offered = [line for line in output.splitlines() if re.match(r"  \S+ at \S+: ", line)]
    assert len(offered) == agents, output
    for line in offered:
        assert set(line.split(": ", 1)[1].split(", ")) == set(ALL), line
    assert "Left out" not in output, output


# The least of the probe's samples (each the kernel's handshake RTT) is the path's latency as the user-space delay
# line makes it: at least the profile's less what its lateness compensation takes off each pass (EARLIEST_S, when
# the process happens to be on time: the kernel saw 0.236 ms on a 0.3 ms RTT), at most the profile's + 10 % and
# DELAYLINE_OVERHEAD_MS on a quiet machine (1.4 ms measured by bench-fidelity), plus what the machine's own stops
# added to a round trip's four waits for it (a read and a release each way), measured beside the demo by a
# StallMeter (0 on a quiet machine; a slow CI machine once added 2.7-5 ms to every pair).
DELAYLINE_OVERHEAD_MS = 1.5


def rtt_in_profile(want_ms: float, got_ms: float, machine_ms: float) -> bool:
    return want_ms - 2 * EARLIEST_S * 1000 <= got_ms <= want_ms * 1.1 + DELAYLINE_OVERHEAD_MS + machine_ms


def benchmark(name: str, pairs: list[tuple[str, str]]) -> str:
    """The short benchmark: every protocol, 1 stream, 2 x 2 MB files, 1 s iperf3 tests (its default is 10 s, the
    loopback round's included), on the given directed pairs only (the suite's time budget: a full mesh of 3 agents
    would be 6 pairs)."""
    listed = "\n".join(f"      - {{source: {a}, destination: {b}}}" for a, b in pairs)
    return BENCHMARK.format(name=name, protocols=", ".join(ALL), pairs=listed)


def check_grid(base: str, name: str, got: list[dict], protocols: set[str], pairs: list[tuple[str, str]],
               must_succeed: set[str]) -> None:
    """Every available protocol has a measured cell for every pair; those in must_succeed succeeded there."""
    nodes = sorted({n for p in pairs for n in p})
    for proto in protocols:
        cells = {(m["source"], m["destination"]): m for m in got if m["protocol"] == proto}
        assert set(cells) == set(pairs), f"{proto}: measured {sorted(cells)} of {sorted(pairs)}"
        if proto in must_succeed:
            bad = {k: m["error"] for k, m in cells.items() if m["status"] != "succeeded"}
            assert not bad, f"{proto} failed: {bad}"
        page = httpx.get(f"{base}/grid/local/{name}/", params={"protocol": proto}, timeout=30)
        assert page.status_code == 200, page.text[:2000]
        assert all(n in page.text for n in nodes)
    moved = [m for m in got if m["protocol"] == "builtin"]
    assert moved and all(m["throughput_gbps"] > 0 and m["total_bytes"] == 4_000_000 for m in moved), moved


@pytest.mark.netns
@pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}")
def test_demo_in_the_wan_lab_serves_a_grid_with_the_profile_delays(tmp_path: Path):
    pairs = [("east", "east-metro"), ("east-metro", "west"), ("west", "east")]
    (tmp_path / "bench.yaml").write_text(benchmark("e2e-lab", pairs))
    (tmp_path / "profile.yaml").write_text(PROFILE)
    demo = Demo(["--agents", "3", "--benchmark", str(tmp_path / "bench.yaml"), "--profile",
                 str(tmp_path / "profile.yaml"), "--port", str(free_port())])
    try:
        with StallMeter() as meter:
            url = demo.wait_for("Grid: ", 200).split(" ", 1)[1]
            demo.wait_for("Serving until Ctrl-C", 10)
        machine_ms = meter.median_bound_ms(4)
        base = url.split("/grid/")[0]
        assert "WAN lab: 3 network namespaces" in demo.output
        # The grid's address comes before the run, so people watch the cells fill in round by round.
        early = demo.output.index(f"Grid (cells fill in as each round is delivered): {url}")
        assert early < demo.output.index("Run Succeeded"), demo.output
        got = measurements(base, "e2e-lab")
        check_protocols_offered(demo.output, 3)
        check_grid(base, "e2e-lab", got, set(ALL), pairs, must_succeed=set(ALL))
        # the default: HTTP-TPC pulls authorized by the demo's own token issuer
        assert "Token issuer (WLCG JWT" in demo.output
        assert {m["auth"] for m in got if m["protocol"] in ("xrootd-https", "builtin")} == {"token"}
        rtt = {(m["source"], m["destination"]): m for m in got if m["protocol"] == "rtt"}
        assert set(rtt) == set(pairs)
        for (a, b), m in rtt.items():
            want = 30.0 if "west" in (a, b) else 2.0
            assert rtt_in_profile(want, m["rtt_min_ms"], machine_ms), (a, b, m, meter.summary())
            # the median also carries the machine's scheduling noise
            assert m["rtt_ms"] < (10.0 if want < 10 else want * 1.5) + machine_ms, (a, b, m, meter.summary())
    finally:
        code = demo.stop()
    assert code in (0, 130), demo.output
    pid = demo.proc.pid
    assert not [n for n in lab_namespaces() if n.startswith(f"tpcm-{pid}-")]


def as_non_root() -> tuple[list[str], dict[str, str], str]:
    """How to run the demo as a user without root: ourselves if we are one; as root, in a new user namespace
    (`unshare -U`: uid 65534 there, no privileges over the machine's network); else the loopback switch."""
    if os.geteuid() != 0:
        return [], {}, "not root"
    if shutil.which("unshare") and subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-U", "--"], {}, "not root"
    return [], {"TPCMESH_LOCAL_LOOPBACK": "1"}, "TPCMESH_LOCAL_LOOPBACK is set"


def test_demo_once_without_root_falls_back_to_loopback_and_still_measures(tmp_path: Path):
    (tmp_path / "bench.yaml").write_text(benchmark("e2e-loopback", [("site-a-1", "site-a-2")]))
    state = tmp_path / "state"
    prefix, env, reason = as_non_root()
    demo = Demo(["--once", "--agents", "2", "--benchmark", str(tmp_path / "bench.yaml"), "--port", str(free_port()),
                 "--state-dir", str(state)], env=env, prefix=prefix)
    assert demo.proc.wait(240) == 0, demo.output
    demo.stop()
    assert f"No WAN emulation ({reason})" in demo.output
    assert "Grid: http://127.0.0.1:" in demo.output
    # The run is over and its dashboard stopped: serve the same SQLite database again and read it back.
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{state / 'dashboard.sqlite3'}",
           "PYTHONPATH": str(REPO / "dashboard")}
    server = subprocess.Popen([str(VENV_BIN / "gunicorn"), "--chdir", str(REPO / "dashboard"), "--bind",
                               f"127.0.0.1:{port}", "config.wsgi"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)  # also after an answer other than 200 (a server still starting)
        else:
            raise AssertionError(f"the re-served dashboard never answered /healthz with 200 at {base}")
        got = measurements(base, "e2e-loopback")
        check_protocols_offered(demo.output, 2)
        # Without root every protocol must work except GridFTP, whose server changes its gid (only root may); its
        # cells then show as failed in the grid, with the reason.
        check_grid(base, "e2e-loopback", got, set(ALL), [("site-a-1", "site-a-2")],
                   must_succeed=set(ALL) - {"gridftp"})
        assert {m["protocol"] for m in got} >= {"builtin", "rtt"}
    finally:
        server.terminate()
        server.wait(10)


def test_a_bad_benchmark_is_named(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: TransferBenchmark\nmetadata: {name: x}\nspec: {streams: [0]}\n")
    result = subprocess.run([str(VENV_BIN / "tpcmesh-local"), "demo", "--once", "--benchmark", str(bad)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "TPCMESH_LOCAL_LOOPBACK": "1"})
    assert result.returncode != 0
    assert str(bad) in result.stderr and "streams" in result.stderr, result.stderr


# --- the default WAN profile, and a demo killed with SIGKILL -------------------------------------------------------
# Latency only (no protocol, no loopback round): what these tests check are the RTTs and the demo's processes
RTT_BENCHMARK = """\
apiVersion: tpcmesh.io/v1alpha1
kind: TransferBenchmark
metadata:
  name: e2e-default-profile
spec:
  protocols: []
  latency: {enabled: true, count: 5}
  loopback: {enabled: false}
  timeoutSeconds: 60
  retries: 1
"""


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (the demo's children run in sessions of their own but keep it as parent)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def running(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            alive.add(pid)
    return alive


def kill_and_clean_up(demo: Demo) -> None:
    """SIGKILL the demo (no cleanup of its own runs), then `tpcmesh-local cleanup`: nothing of it may be left."""
    pid = demo.proc.pid
    children = descendants(pid)
    assert len(children) >= 3, f"the demo runs agents and the dashboard: {children}"
    data = Path("/dev/shm") / f"tpcmesh-local-{pid}"
    assert data.is_dir()
    demo.proc.kill()
    demo.proc.wait(10)
    result = subprocess.run([str(VENV_BIN / "tpcmesh-local"), "cleanup"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 40  # agents and gunicorn stop on their parent-death SIGTERM, gracefully
    while running(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:120] for p in running(children)}
    assert not left, f"processes of the killed demo still run: {left}"
    assert not data.exists(), result.stdout
    assert not list(Path(tempfile.gettempdir()).glob(f"tpcmesh-local-{pid}-*")), "the demo's state dir is left"
    assert not [n for n in lab_namespaces() if n.startswith(f"tpcm-{pid}-")]


@pytest.mark.netns
@pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}")
def test_default_profile_delays_show_in_the_rtts_and_a_killed_demo_is_cleaned_up(tmp_path: Path):
    """The shipped profile (0.3 ms in a site, 2 ms metro, 53 ms cross-country RTT) in what the agents measure; then
    the demo is SIGKILLed while serving and `tpcmesh-local cleanup` leaves nothing behind."""
    from tpcmesh_lab.profile import load_profile

    (tmp_path / "bench.yaml").write_text(RTT_BENCHMARK)
    demo = Demo(["--benchmark", str(tmp_path / "bench.yaml"), "--port", str(free_port())])
    try:
        with StallMeter() as meter:
            url = demo.wait_for("Grid: ", 240).split(" ", 1)[1]
            demo.wait_for("Serving until Ctrl-C", 10)
        machine_ms = meter.median_bound_ms(4)
        assert "WAN lab: 4 network namespaces" in demo.output
        got = measurements(url.split("/grid/")[0], "e2e-default-profile")
        profile = load_profile(None)
        rtt = {(m["source"], m["destination"]): m for m in got if m["protocol"] == "rtt"}
        assert len(rtt) == 12, sorted(rtt)  # the full mesh of the profile's four nodes
        seen = {pair: (round(profile.rtt_ms(*pair), 3), m["rtt_min_ms"]) for pair, m in rtt.items()}
        # each pair within what the delay line makes of its delay; the classes apart
        for pair, (want, got_ms) in seen.items():
            assert want in (0.3, 2.0, 53.0), (pair, want)
            assert rtt_in_profile(want, got_ms, machine_ms), (seen, meter.summary())
        classes = {w: [g for ww, g in seen.values() if ww == w] for w in (0.3, 2.0, 53.0)}
        assert max(classes[0.3]) < min(classes[2.0]) and max(classes[2.0]) < min(classes[53.0]), seen
        kill_and_clean_up(demo)
    finally:
        demo.stop()


def test_a_killed_loopback_demo_leaves_nothing_after_cleanup(tmp_path: Path):
    """Loopback mode (a user without root): no namespaces to sweep, so the agents and gunicorn must go on their
    own when the demo dies (parent-death signal), and cleanup removes the data in /dev/shm."""
    (tmp_path / "bench.yaml").write_text(RTT_BENCHMARK)
    demo = Demo(["--agents", "2", "--benchmark", str(tmp_path / "bench.yaml"), "--port", str(free_port())],
                env={"TPCMESH_LOCAL_LOOPBACK": "1"})
    try:
        demo.wait_for("Serving until Ctrl-C", 180)
        kill_and_clean_up(demo)
    finally:
        demo.stop()

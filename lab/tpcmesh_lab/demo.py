"""`tpcmesh-local demo`: a measured mesh on this machine, no cluster.

Starts N real agents in the WAN lab (or on loopback), the dashboard on SQLite, runs the TransferBenchmark YAML once
through the operator's own spec parser, planner and run executor (``tpcmesh_operator.run.executor``), delivers to the
dashboard, prints the grid's URL and serves until Ctrl-C (``--once``: exits after the run).
"""

from __future__ import annotations

import _thread
import asyncio
import dataclasses
import datetime as dt
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

import yaml
from tpcmesh_operator.credentials.tokens.issuer import TokenIssuer
from tpcmesh_operator.credentials.tokens.server import IssuerServer
from tpcmesh_operator.plan.spec import BenchmarkSpec, SpecError, load_manifest
from tpcmesh_operator.run.agents import AgentsClient
from tpcmesh_operator.run.delivery import ResultsClient
from tpcmesh_operator.run.executor import (
    ExecutorOptions,
    JsonFileStatusStore,
    Progress,
    RunExecutor,
    RunInfo,
    StaticDirectory,
)

from .mesh import (
    ALL_PROTOCOLS,
    DATA_PREFIX,
    Certificates,
    MeshError,
    remove_stale_data,
    start_agents,
    start_dashboard,
)
from .netns import Lab, LabError
from .profile import ProfileError, load_profile

log = logging.getLogger("tpcmesh.local")
REPO = Path(__file__).resolve().parents[2]
DEFAULT_BENCHMARK = REPO / "manifests" / "examples" / "quick-benchmark.yaml"
LOCAL_CLUSTER = "local"  # the local mode's cluster in the archive (federation: each cluster delivers as its own)
NAMESPACE = "local"
CHART_LIBRARY = REPO / "dashboard" / "results" / "static" / "vendor" / "chart.umd.min.js"


class DemoError(RuntimeError):
    pass


@dataclasses.dataclass
class DemoOptions:
    agents: int = 4
    benchmark: Path = DEFAULT_BENCHMARK
    profile: str | None = None
    once: bool = False
    port: int = 8000
    mode: str = "auto"  # auto | netns | loopback
    state_dir: Path | None = None
    keep_state: bool = False
    auth: str = "token"  # token: an issuer started here signs each HTTP-TPC pull's tokens; x509: host certificates


def load_benchmark(path: Path) -> tuple[str, BenchmarkSpec]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except OSError as e:
        raise DemoError(f"{path}: cannot read the benchmark: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise DemoError(f"{path}: not valid YAML: {e}") from e
    docs = [d for d in docs if isinstance(d, dict) and d.get("kind") in ("TransferBenchmark", "TransferRun")]
    if not docs:
        raise DemoError(f"{path}: holds no TransferBenchmark")
    try:
        return load_manifest(docs[0])
    except SpecError as e:
        raise DemoError(f"{path}: {e}") from e


class ProgressDisplay:
    """One status line: pairs done/total, the round, live Gbit/s (redrawn in place on a terminal)."""

    def __init__(self, out: TextIO = sys.stdout, interval: float = 2.0) -> None:
        self.out = out
        self.tty = out.isatty()
        self.interval = interval
        self._last = ""
        self._last_time = 0.0
        self._lock = threading.Lock()

    def __call__(self, p: Progress) -> None:
        line = (f"  tests {p.done}/{p.total} done ({p.failed} failed) | round {min(p.round + 1, p.rounds)}"
                f"/{p.rounds} | {p.gbps:6.2f} Gbit/s now")
        if p.running:
            line += " | " + ", ".join(p.running[:3]) + (" ..." if len(p.running) > 3 else "")
        with self._lock:
            now = time.monotonic()
            if self.tty:
                self.out.write("\r\033[K" + line[:160])
                self.out.flush()
            elif line != self._last and (now - self._last_time >= self.interval or p.done == p.total):
                self.out.write(line + "\n")
                self.out.flush()
                self._last_time = now
            self._last = line

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


def start_issuer(lab: Lab, certs: Certificates) -> TokenIssuer:
    """The operator's token issuer on the lab's host address (the agents in their namespaces reach it there), its
    HTTPS certificate from the lab's CA; stopped with the lab."""
    cert, key = certs.hosts["issuer"]
    server = IssuerServer(lab.host_address, 0, cert, key)
    issuer = TokenIssuer(f"https://{lab.host_address}:{server.port}")
    server.serve(issuer)
    lab.add_cleanup(server.stop)
    return issuer


def say(message: str) -> None:
    print(message, flush=True)


async def run_benchmark(name: str, spec: BenchmarkSpec, agents: list, agent_token: str, ca_file: Path,
                        dashboard_url: str, dashboard_token: str, state: Path,
                        display: ProgressDisplay, token_issuer: TokenIssuer | None = None) -> dict[str, Any]:
    """The operator's run executor, once, against the local agents and dashboard."""
    now = dt.datetime.now(dt.UTC)
    run = RunInfo(benchmark_namespace=NAMESPACE, benchmark_name=name,
                  run_name=f"{name}-{now.strftime('%Y%m%d%H%M%S')}", run_uid=str(uuid.uuid4()),
                  benchmark_uid=f"local-{name}", scheduled_at=now.isoformat().replace("+00:00", "Z"),
                  cluster=LOCAL_CLUSTER)

    def on_event(type_: str, reason: str, message: str) -> None:
        if type_ != "Normal":
            log.warning("%s: %s", reason, message)

    async with AgentsClient(agent_token, ca_file) as agents_client, \
            ResultsClient(dashboard_url, dashboard_token) as results_client:
        executor = RunExecutor(
            spec, run, StaticDirectory([a.agent() for a in agents]), agents_client, results_client,
            JsonFileStatusStore(state / "run-status.json"),
            # tests here are short (seconds): a 0.5 s poll made each round wait ~0.25 s for nothing
            options=ExecutorOptions(poll_interval=0.2, delivery_max_seconds=60),
            on_progress=display, on_event=on_event, token_issuer=token_issuer,
        )
        status = await executor.execute()
    display.finish()
    return status


def choose_protocols(spec: BenchmarkSpec, agents: list) -> tuple[BenchmarkSpec, dict[str, str]]:
    """Keep the benchmark's protocols every agent offers here; say why the others are left out."""
    from tpcmesh_operator.plan.planner import RTT

    left_out: dict[str, str] = {}
    keep = []
    for proto in spec.protocols:
        if proto == RTT:
            keep.append(proto)
            continue
        missing = [a for a in agents if proto not in a.available()]
        if missing:
            msg = ((missing[0].info.get("protocols") or {}).get(proto) or {}).get("message") or "not available"
            left_out[proto] = f"{msg} (on {missing[0].node.name})"
        else:
            keep.append(proto)
    if spec.protocols and not keep:  # (none listed: a latency-only benchmark, which the spec parser allows)
        raise DemoError(f"none of the benchmark's protocols {list(spec.protocols)} is available here: {left_out}")
    loopback = spec.loopback
    missing = [a for a in agents if loopback.protocol not in a.available()]
    if loopback.enabled and missing:  # the built-in mover is always there
        left_out[f"loopback {loopback.protocol}"] = f"not available on {missing[0].node.name}: builtin instead"
        loopback = dataclasses.replace(loopback, protocol="builtin")
    return dataclasses.replace(spec, protocols=tuple(keep), loopback=loopback), left_out


def demo(opts: DemoOptions) -> int:
    try:
        name, spec = load_benchmark(Path(opts.benchmark))
        profile = load_profile(opts.profile).with_nodes(opts.agents)
    except (DemoError, ProfileError) as e:
        print(f"tpcmesh-local: {e}", file=sys.stderr)
        return 2
    remove_stale_data()
    state = Path(opts.state_dir) if opts.state_dir else Path(tempfile.mkdtemp(prefix=f"{DATA_PREFIX}{os.getpid()}-"))
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o755)
    if opts.port:
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", opts.port))
        except OSError as e:
            print(f"tpcmesh-local: port {opts.port} on 127.0.0.1 is not free for the dashboard ({e.strerror}); "
                  "pick another with --port (0: any free port)", file=sys.stderr)
            return 2
    failures: list[str] = []

    def on_failure(message: str) -> None:
        failures.append(message)
        _thread.interrupt_main()

    lab = Lab(profile, mode=opts.mode, on_failure=on_failure)
    try:
        lab.start()
        if lab.emulated:
            say(f"WAN lab: {len(lab.nodes)} network namespaces on {lab.subnet}, delays from {profile.source}:")
            for i, a in enumerate(lab.nodes):
                for b in lab.nodes[i + 1:]:
                    link = profile.link(a.name, b.name)
                    extra = f", {link.rate_mbit:g} Mbit/s" if link.rate_mbit else ""
                    say(f"  {a.name} <-> {b.name}: RTT {profile.rtt_ms(a.name, b.name):g} ms{extra}")
        else:
            say(f"No WAN emulation ({lab.reason}): agents run on loopback addresses "
                f"{', '.join(n.address for n in lab.nodes)} with no added delay.")
        certs = Certificates.create(state / "pki", lab.nodes, {"issuer": lab.host_address})
        issuer = None
        if opts.auth == "token" and os.geteuid() != 0:
            say("Token mode needs root (XRootD's token plugin trusts only the system CA bundle, which each agent "
                "replaces in a mount namespace of its own): HTTP-TPC pulls use the host certificates (--auth x509).")
            spec = dataclasses.replace(spec, auth=spec.auth or "x509")
        elif opts.auth == "token":
            issuer = start_issuer(lab, certs)
            say(f"Token issuer (WLCG JWT, keys at {issuer.issuer}/.well-known/openid-configuration): each HTTP-TPC "
                "pull gets a read and a create token")
        token = secrets.token_urlsafe(32)
        budget = max(2 * 10**9, 3 * (spec.file_set.count or 1) * (spec.file_set.size or 0))
        say(f"Starting {len(lab.nodes)} agents ...")
        agents = start_agents(lab, certs, token, state, budget_bytes=budget, protocols=ALL_PROTOCOLS,
                              token_issuer=issuer.issuer if issuer else "", disk=spec.uses_disk)
        for agent in agents:
            say(f"  {agent.node.name} at {agent.node.address}: {', '.join(agent.available()) or 'no protocol'}")
        spec, left_out = choose_protocols(spec, agents)
        for proto, why in left_out.items():
            say(f"  Left out {proto}: {why}")
        say("Starting the dashboard (SQLite) ...")
        dashboard = start_dashboard(lab, state, opts.port)
        if not CHART_LIBRARY.is_file():
            say(f"  Plots are unavailable on the pair and comparison pages: {CHART_LIBRARY.name} is not installed "
                "(hack/setup.sh installs it with npm); the grid works.")
        what = (f"protocols {', '.join(spec.protocols)}, streams {list(spec.streams)}, {spec.file_set.name} files"
                if spec.protocols else "latency only")
        say(f"Running TransferBenchmark {name} from {opts.benchmark} once: {what}")
        grid_url = f"{dashboard.url}/grid/{NAMESPACE}/{name}/"
        say(f"Grid (cells fill in as each round is delivered): {grid_url}")
        status = asyncio.run(run_benchmark(name, spec, agents, token, certs.ca_file, dashboard.url, dashboard.token,
                                           state, ProgressDisplay(), issuer))
        say(f"Run {status.get('phase')}: {status.get('message')}; {status.get('delivered', 0)} measurements "
            f"delivered, {len(status.get('outbox') or [])} undelivered.")
        recent = status.get("recentFailures") or []
        if status.get("failed", 0) > len(recent):
            say(f"  The latest {len(recent)} of {status['failed']} failed tests:")
        for f in recent:
            say(f"  {f.get('key')}: {f.get('status')}: {f.get('error')}")
        say(f"Grid: {grid_url}")
        ok = status.get("phase") == "Succeeded" and not status.get("outbox")
        if opts.once:
            return 0 if ok else 1
        say("Serving until Ctrl-C ...")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        if failures:
            print(f"tpcmesh-local: {failures[0]}", file=sys.stderr)
            return 1
        say("\nStopping ...")
        return 130
    except (LabError, MeshError, DemoError, ProfileError) as e:
        print(f"tpcmesh-local: {e}", file=sys.stderr)
        return 1
    finally:
        lab.close()
        if not opts.keep_state and not opts.state_dir:
            shutil.rmtree(state, ignore_errors=True)

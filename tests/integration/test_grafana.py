"""Every query of the chart's Grafana dashboards (charts/tpcmesh/dashboards/, hack/grafana.py), asked of a REAL
Prometheus (Debian's `prometheus`) that scrapes a REAL lab, returns data.

The lab: three tpcmesh-agent processes (each also supervising an iperf3 server; one sends at 0.5 MB/s per
connection, 4 Mbit/s: every test from it is critical under the benchmark's 20 Mbit/s threshold while the others, on
loopback, stay far above, so the dashboard finds a node problem), the real dashboard (gunicorn + Django on the
suite's PostgreSQL), and the operator's run executor in this process with its metrics
served the way the operator serves them (prometheus_client's start_http_server on the default registry). One run
of the mesh (RTT, builtin, each node's loopback) is delivered; then a run whose outbox holds a record the dashboard
refuses (a pair of one node) is delivered too. Prometheus scrapes the three jobs every second.

Template variables are resolved as Grafana resolves them: `label_values(selector, label)` through Prometheus' series
API, in order (so `$destination` follows `$source`): All (its allValue, `.*`) where the variable offers it, else the
lab's own job or node, as a person would pick; `$__range`, `$__interval` and `$__rate_interval` from the lab's time
range and scrape interval.
"""

from __future__ import annotations

import asyncio
import math
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import start_http_server
from tpcmesh_lab.controlplane import free_port, stop_process
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import Agent, AgentsClient
from tpcmesh_operator.run.delivery import ResultsClient
from tpcmesh_operator.run.executor import ExecutorOptions, MemoryStatusStore, RunExecutor, RunInfo, StaticDirectory
from tpcmesh_operator.run.measurements import now_iso

from tests.support.grafana import Target, committed, targets, variables
from tests.support.live_dashboard import running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SCRAPE_SECONDS = 1
JOBS = {"operator": "tpcmesh-operator", "agent": "tpcmesh-agent", "dashboard": "tpcmesh-dashboard"}
SPEC = {"protocols": ["builtin"], "streams": [1], "concurrency": 2, "fileSet": {"count": 2, "size": "1MB"},
        "latency": {"enabled": True, "count": 2}, "loopback": {"enabled": True, "protocol": "builtin"},
        "thresholds": {"goodGbps": 0.04, "warnGbps": 0.02}, "timeoutSeconds": 30, "retries": 0}
JOB_VARIABLES = {"operator_job": JOBS["operator"], "agent_job": JOBS["agent"], "dashboard_job": JOBS["dashboard"]}
FAST = ExecutorOptions(poll_interval=0.1, unreachable_grace=2.0, timeout_grace=5.0, delivery_max_seconds=10.0)


class Prometheus:
    """A real Prometheus server on a fresh TSDB in ``workdir``, scraping ``jobs`` (name -> host:port targets)."""

    def __init__(self, workdir: Path, jobs: dict[str, list[str]]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {"global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "scrape_timeout": f"{SCRAPE_SECONDS}s",
                             "evaluation_interval": f"{SCRAPE_SECONDS}s"},
                  "scrape_configs": [{"job_name": name, "static_configs": [{"targets": hosts}]}
                                     for name, hosts in jobs.items()]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(shutil.which("prometheus")), f"--config.file={workdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=out, stderr=subprocess.STDOUT)
        self.wait(lambda: httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200, 60, "ready")

    def wait(self, ready, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if ready():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"Prometheus not {what} after {seconds} s: {self.log.read_text()[-3000:]}")

    def api(self, path: str, **params: str) -> Any:
        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", f"{path} {params}: {r.text[:2000]}"
        return body["data"]

    def targets_up(self) -> bool:
        active = self.api("targets", state="active")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def stop(self) -> None:
        stop_process(self.proc, grace=15)


class Lab:
    def __init__(self, prometheus: Prometheus, nodes: list[str], start: float, end: float) -> None:
        self.prometheus, self.nodes, self.start, self.end = prometheus, nodes, start, end


def refused_run(nodes: list[str]) -> tuple[RunInfo, dict]:
    """A finished run whose outbox holds two RTT records; the dashboard refuses the second (a pair of one node)."""
    info = RunInfo("default", "grafana-refused", f"grafana-refused-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))
    t = now_iso()
    outbox = [{"id": str(uuid.uuid4()), "source": src, "destination": dst, "protocol": "rtt", "status": "succeeded",
               "error": None, "started_at": t, "finished_at": t, "rtt_ms": 0.1, "rtt_min_ms": 0.1, "rtt_max_ms": 0.2}
              for src, dst in [(nodes[0], nodes[1]), (nodes[0], nodes[0])]]
    status = {"phase": "Succeeded", "startTime": t, "completionTime": t, "planned": 2, "done": 2, "succeeded": 2,
              "failed": 0, "delivered": 0, "rejected": [], "rejectedCount": 0, "outbox": outbox, "agents": []}
    return info, status


async def run_lab(agents: list[Agent], token: str, ca_file: Path, dashboard) -> None:
    async with AgentsClient(token, ca_file) as ac, ResultsClient(dashboard.url, dashboard.token) as rc:
        info = RunInfo("default", "grafana", f"grafana-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))
        st = await RunExecutor(parse_spec(SPEC), info, StaticDirectory(agents), ac, rc, MemoryStatusStore(),
                               options=FAST).execute()
        assert st["phase"] == "Succeeded" and st["failed"] == 0 and st["undelivered"] == 0, st.get("message")
        info, status = refused_run([a.node for a in agents])
        refused = RunExecutor(parse_spec({}), info, StaticDirectory([]), None, rc,
                              MemoryStatusStore(status), options=FAST)
        await refused.load()
        assert await refused.deliver(10) == 0
        assert refused.status["rejectedCount"] == 1 and refused.status["delivered"] == 1, refused.status


@pytest.fixture(scope="module")
def lab(module_agent_factory, postgres_server, tmp_path_factory) -> Iterator[Lab]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is missing: install Debian's prometheus package (hack/setup.sh does, as root)")
    work = tmp_path_factory.mktemp("grafana")
    token = "mesh-" + uuid.uuid4().hex
    (work / "token").write_text(token + "\n")
    handles = [module_agent_factory(token_file=work / "token", protocols=("builtin", "iperf3"), **extra)
               for extra in ({}, {}, {"builtin_max_rate": 500_000})]
    agents = [Agent(node=h.name, address=h.address, ports={"control": h.api_port, "builtin": h.builtin_port})
              for h in handles]
    operator_port = free_port()
    server, _ = start_http_server(operator_port, addr="127.0.0.1")  # as tpcmesh_operator.main serves its metrics
    try:
        with running(postgres_server, work) as dashboard:
            prometheus = Prometheus(work, {
                JOBS["operator"]: [f"127.0.0.1:{operator_port}"],
                JOBS["agent"]: [f"{h.address}:{h.metrics_port}" for h in handles],
                JOBS["dashboard"]: [f"127.0.0.1:{dashboard.port}"]})
            try:
                start = time.time()
                prometheus.wait(prometheus.targets_up, 30, "scraping every target")
                asyncio.run(run_lab(agents, token, handles[0].ca_file, dashboard))
                # the dashboard finds the slow node's problem in the background, after the ingest
                node_problem = 'tpcmesh_dashboard_problems{kind="node"}'
                prometheus.wait(lambda: bool(prometheus.api("query", query=node_problem)["result"]), 30,
                                "seeing the slow node's problem")
                time.sleep(3 * SCRAPE_SECONDS)  # a few scrapes after the last change
                yield Lab(prometheus, [a.node for a in agents], start, time.time())
            finally:
                prometheus.stop()
    finally:
        server.shutdown()
        server.server_close()


# --- Grafana's substitution -----------------------------------------------------------------------------------------

def duration(seconds: float) -> str:
    return f"{max(1, math.ceil(seconds))}s"


def builtins(lab: Lab) -> dict[str, str]:
    step = SCRAPE_SECONDS
    return {"__range": duration(lab.end - lab.start), "__interval": duration(step),
            "__rate_interval": duration(max(step + SCRAPE_SECONDS, 4 * SCRAPE_SECONDS))}


def substitute(text: str, values: dict[str, str]) -> str:
    """$name and ${name} of a known variable replaced; anything else (a regex group's $1) left as it is."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m[1] or m[2], m[0]), text)


def resolve(board: dict, lab: Lab) -> dict[str, str]:
    values = builtins(lab)
    for v in variables(board):
        if v["type"] == "datasource":
            continue
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", v["query"])
        assert m, f"{board['uid']}: variable {v['name']}: {v['query']}"
        series = lab.prometheus.api("series", **{"match[]": substitute(m[1], values), "start": str(lab.start),
                                                 "end": str(lab.end)})
        options = sorted({s[m[2]] for s in series if m[2] in s})
        assert options, f"{board['uid']}: variable {v['name']} has no value ({v['query']})"
        if v.get("includeAll"):
            values[v["name"]] = v["allValue"]
        elif v["name"] in JOB_VARIABLES:
            assert JOB_VARIABLES[v["name"]] in options, f"{board['uid']}: variable {v['name']}: {options}"
            values[v["name"]] = JOB_VARIABLES[v["name"]]
        else:  # a node of this lab (this process' registry may still hold other tests' nodes), else the first
            values[v["name"]] = next((o for o in options if o in lab.nodes), options[0])
    return values


def answer(target: Target, values: dict[str, str], lab: Lab) -> list[dict]:
    expr = substitute(target.expr, values)
    if target.instant:
        return lab.prometheus.api("query", query=expr, time=str(lab.end))["result"]
    return lab.prometheus.api("query_range", query=expr, start=str(lab.start), end=str(lab.end),
                              step=str(SCRAPE_SECONDS))["result"]


def has_a_number(result: list[dict]) -> bool:
    samples = [s["value"] for s in result if "value" in s] + [v for s in result for v in s.get("values", [])]
    return any(math.isfinite(float(value)) for _, value in samples)


# --- the tests ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("uid", sorted(committed()))
def test_every_query_of_the_dashboard_returns_data(lab, uid):
    board = committed()[uid]
    values = resolve(board, lab)
    empty = []
    for target in targets(board):
        result = answer(target, values, lab)
        if not has_a_number(result):
            empty.append(f"{target}: {substitute(target.expr, values)}")
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_every_metric_the_lab_exported_is_on_a_dashboard(lab):
    names = lab.prometheus.api("label/__name__/values", start=str(lab.start), end=str(lab.end))
    # *_created: prometheus_client's creation timestamps of the operator's and the dashboard's counters, no figure
    ours = {n for n in names if n.startswith("tpcmesh_") and not n.endswith("_created")}
    exprs = [t.expr for b in committed().values() for t in targets(b)]

    def shown(name: str) -> bool:  # a histogram's _sum and _count go with its _bucket
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        return any(re.search(rf"\b({name}|{base}_bucket)\b", e) for e in exprs)

    missing = sorted(n for n in ours if not shown(n))
    assert not missing, f"scraped but on no dashboard: {missing}"
    assert len(ours) == 24, sorted(ours)  # every family the programs define (a histogram thrice): the lab made each

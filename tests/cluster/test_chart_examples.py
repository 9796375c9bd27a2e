"""The shipped examples work with a default `helm install` as the README does it (release and namespace `tpcmesh`):
their results go to a Service and Secret the chart renders, and the agents' memory fits their biggest tests.

Memory is judged with the agent's own code: the destination agent's refusal check (`runner.memory_shortfall`, with
the movers' `memory_needed`) and its storage budget, against what the rendered pod has at test time.
"""

from __future__ import annotations

import re
import subprocess
import urllib.parse
from pathlib import Path

import pytest
import yaml
from tpcmesh_agent import files as agent_files
from tpcmesh_agent import memory as agent_memory
from tpcmesh_agent import runner as agent_runner
from tpcmesh_agent.movers import mover_class
from tpcmesh_agent.movers.base import Endpoint, FileSpec, TransferJob
from tpcmesh_operator.plan.spec import load_manifest

from tests.support.controlplane import K8S_VERSION, binary
from tests.support.paths import REPO

pytestmark = pytest.mark.cluster

CHART = REPO / "charts" / "tpcmesh"
RELEASE = NAMESPACE = "tpcmesh"  # README: helm install tpcmesh charts/tpcmesh --namespace tpcmesh
EXAMPLES = sorted((REPO / "manifests" / "examples").glob("*.yaml"))
FILE_MOVERS = ("builtin", "xrootd-https", "xrootd-root", "gridftp")


def readme_benchmarks() -> list[dict]:
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    docs = [yaml.safe_load(b) for b in blocks]
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "TransferBenchmark"]


def benchmarks() -> list[tuple[str, dict]]:
    out = [(p.name, d) for p in EXAMPLES for d in yaml.safe_load_all(p.read_text())
           if isinstance(d, dict) and d.get("kind") == "TransferBenchmark"]
    out += [(f"README.md:{d['metadata']['name']}", d) for d in readme_benchmarks()]
    assert len(out) >= 4
    return out


BENCHMARKS = benchmarks()


def render(*sets: str) -> list[dict]:
    helm = binary("helm")
    if helm is None:
        pytest.skip("helm is not built; run `make control-plane`")
    out = subprocess.run([str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version",
                          K8S_VERSION.lstrip("v"), *sets], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def defaults() -> list[dict]:
    return render()


def service_for(host: str, namespace: str) -> tuple[str, str]:
    """(service, namespace) a cluster DNS name points at: svc, svc.ns, svc.ns.svc, svc.ns.svc.cluster.local."""
    parts = host.split(".")
    if len(parts) == 1:
        return parts[0], namespace
    if len(parts) == 2 or parts[2:] in (["svc"], ["svc", "cluster", "local"]):
        return parts[0], parts[1]
    raise AssertionError(f"{host} is not a cluster Service name")


@pytest.mark.parametrize(("where", "doc"), [pytest.param(*b, id=b[0]) for b in BENCHMARKS
                                           if b[1]["spec"].get("results")])
def test_results_go_to_the_rendered_dashboard_service_and_token_secret(defaults, where, doc):
    results = doc["spec"]["results"]
    url = urllib.parse.urlsplit(results["url"])
    assert url.scheme == "http", f"{where}: the chart's dashboard Service speaks plain HTTP, not {url.scheme}"
    name, ns = service_for(url.hostname or "", NAMESPACE)
    port = url.port or 80
    services = {(d["metadata"]["name"], d["metadata"]["namespace"]): d for d in defaults if d["kind"] == "Service"}
    assert (name, ns) in services, f"{where}: results.url {results['url']} names Service {ns}/{name}; the chart " \
                                   f"renders {sorted(services)}"
    ports = [p["port"] for p in services[name, ns]["spec"]["ports"]]
    assert port in ports, f"{where}: results.url {results['url']} uses port {port}; Service {ns}/{name} has {ports}"
    secret = results["tokenSecret"]
    rendered = {d["metadata"]["name"]: d for d in defaults if d["kind"] == "Secret"}
    assert secret["name"] in rendered, f"{where}: tokenSecret {secret['name']} is not among {sorted(rendered)}"
    assert secret.get("key", "token") in rendered[secret["name"]]["data"]


def agent_pod(docs: list[dict]) -> tuple[dict, dict]:
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "agent")


def values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def jobs_of(doc: dict) -> list[TransferJob]:
    """The destination-side jobs the operator sends for this benchmark (one per file-moving protocol x streams;
    with spec.optimize the largest settings its bounds allow: the most streams with the most files that fit)."""
    _, spec = load_manifest(doc)
    set_spec = agent_files.spec_from_request(spec.file_set.request())
    file_specs = tuple(FileSpec(n, s) for n, s in set_spec.files)
    store = Path("/data/incoming/test") if spec.destination == "store" else None
    settings = [(s, spec.concurrency) for s in spec.streams]
    if (o := spec.optimize) is not None:
        settings = [(s, min(o.concurrency_max, o.connections_max // s)) for s in range(1, o.streams_max + 1)
                    if o.connections_max // s >= 1]
    return [TransferJob(test_id="t", protocol=p, source=Endpoint("192.0.2.1", 1), files=file_specs,
                        file_set=set_spec.name, concurrency=c, streams=s, timeout=60.0, destination_dir=store)
            for p in spec.protocols if p in FILE_MOVERS for s, c in settings]


def refusal(job: TransferJob, room: int, monkeypatch) -> str | None:
    """What the destination agent says about `job` when `room` bytes are left in its pod (None: it runs it)."""
    monkeypatch.setattr(agent_memory, "available_bytes", lambda *a, **k: room)
    monkeypatch.setattr(agent_memory, "memory_backed", lambda *a, **k: True)  # /data is a Memory emptyDir
    return agent_runner.memory_shortfall(job, mover_class(job.protocol)(None), Path("/data/incoming"))


def room_at_test_time(limit: int, job: TransferJob) -> int:
    """The pod's cgroup room while the destination runs `job`: the limit less the served copy of the same set
    (tmpfs pages are charged to the pod) and the agent's own processes."""
    served = sum(f.size for f in job.files)
    return limit - served - int(values()["agent"]["processMemoryBytes"])


@pytest.mark.parametrize(("where", "doc"), [pytest.param(*b, id=b[0]) for b in BENCHMARKS if any(
    p in FILE_MOVERS for p in b[1]["spec"].get("protocols", ["builtin"]))])
def test_every_test_of_the_examples_fits_a_default_agent(defaults, where, doc, monkeypatch):
    _, agent = agent_pod(defaults)
    limit = int(agent["resources"]["limits"]["memory"])
    budget = int(next(e["value"] for e in agent["env"] if e["name"] == "TPCMESH_AGENT_BUDGET_BYTES"))
    jobs = jobs_of(doc)
    assert jobs
    for job in jobs:
        what = f"{where}: {job.protocol} x {job.streams} streams, {len(job.files)} files in flight " \
               f"{job.concurrency}"
        set_bytes = sum(f.size for f in job.files)
        assert 2 * set_bytes <= budget, f"{what}: the file set and a received copy exceed the budget {budget}"
        short = refusal(job, room_at_test_time(limit, job), monkeypatch)
        assert short is None, f"{what}: the agent would refuse it with the chart's limit {limit}: {short}"


def test_the_old_limit_refused_the_papers_eight_stream_xrootd_tests(defaults, monkeypatch):
    """The check above can fail: with the former limit (data volume + 2 GiB) the agent refuses these tests."""
    doc = next(d for w, d in BENCHMARKS if w == "paper-benchmark.yaml")
    pod, _ = agent_pod(defaults)
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    old_limit = int(data["emptyDir"]["sizeLimit"]) + 2 * 2**30
    refused = {(j.protocol, j.streams) for j in jobs_of(doc)
               if refusal(j, room_at_test_time(old_limit, j), monkeypatch)}
    assert refused == {("xrootd-https", 8)}


def test_the_limit_follows_the_sizing_values():
    """One stream: 16 MiB per file in flight; no xrootd-https: no buffers at all; an explicit limit is kept."""
    base = ["--set", "agent.sizing.fileSet.count=4", "--set", "agent.sizing.fileSet.size=100000000",
            "--set", "agent.sizing.concurrency=2", "--set", "agent.headroomBytes=0",
            "--set", "agent.processMemoryBytes=1000"]

    def limit(*extra: str) -> int:
        _, agent = agent_pod(render(*base, *extra))
        return int(agent["resources"]["limits"]["memory"])

    data = 2 * 4 * 100_000_000
    assert limit("--set", "agent.sizing.streams=1") == data + 2 * 16 * 2**20 + 1000
    # 100 MB files hold 6 blocks of 16 MiB: never more than that per file, however many streams
    assert limit("--set", "agent.sizing.streams=8") == data + 2 * 6 * 16 * 2**20 + 1000
    assert limit("--set", "agent.sizing.streams=8", "--set", "agent.protocols={builtin,gridftp}") == data + 1000
    _, agent = agent_pod(render(*base, "--set", "agent.resources.limits.memory=64Gi"))
    assert agent["resources"]["limits"]["memory"] == "64Gi"

"""tpcmesh on `tpcmesh-local cluster`, installed the way a site admin does it, and the cluster demo.

    install(cluster, database_url)      # namespace, database Secret, DTN labels, `helm install` of charts/tpcmesh
    wait_ready(cluster)                 # an agent on every labelled node, the operator and the dashboard Ready
    demo(cluster, database_url, say)    # both, then the quick benchmark until its first run ends; the grid's URL

Values changed from the chart's defaults: only the pull policy (Never: the images were built here and imported
into every node) and the database (external: a PostgreSQL on the lab's host address, local/postgres.py; the bundled
StatefulSet's image is on a registry this machine cannot reach). Benchmarks need no `results:`: the chart's
operator delivers to the release's dashboard.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from .cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tpcmesh"
QUICK_BENCHMARK = REPO / "manifests" / "examples" / "quick-benchmark.yaml"
NAMESPACE = "tpcmesh"
RELEASE = "tpcmesh"
DATABASE_SECRET = "tpcmesh-database"
FAST_NETWORK_LABEL = "tpcmesh.io/fast-network"
GROUP, VERSION = "tpcmesh.io", "v1alpha1"
DASHBOARD_PORT = 8000  # the dashboard container's port (pod addresses are routed from the host)


class InstallError(RuntimeError):
    pass


def install(cluster: Cluster, database_url: str, namespace: str = NAMESPACE, release: str = RELEASE,
            chart: Path = CHART, values: Sequence[str] = ()) -> None:
    """Create the namespace and the database Secret, label every node as a DTN, `helm install` the chart (another
    checkout's with ``chart``, more ``--set`` options with ``values``)."""
    from kubernetes import client

    if not (chart / "Chart.yaml").exists():
        raise InstallError(f"the chart is not at {chart}: run from a checkout of the tpcmesh repository")
    api = cluster.client()
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=DATABASE_SECRET), string_data={"DATABASE_URL": database_url}))
    for node in cluster.nodes:
        core.patch_node(node.name, {"metadata": {"labels": {FAST_NETWORK_LABEL: "true"}}})
    # every lab node runs on this machine's cores (this checkout's chart only: an older one may refuse the value)
    shared = ["--set", "agent.hostCpuShared=true"] if chart == CHART else []
    out = cluster.helm("install", release, str(chart), "--namespace", namespace, *install_values(), *values,
                       *shared, check=False)
    if out.returncode != 0:
        raise InstallError(f"helm install failed: {out.stderr.strip()}")


def install_values() -> list[str]:
    """The `--set` options this machine's cluster needs (see the module's docstring); an upgrade passes them again."""
    return ["--set", "image.pullPolicy=Never", "--set", "database.mode=external",
            "--set", f"database.external.existingSecret={DATABASE_SECRET}"]


def ready_pods(cluster: Cluster, component: str, namespace: str = NAMESPACE) -> list[Any]:
    from kubernetes import client

    pods = client.CoreV1Api(cluster.client()).list_namespaced_pod(
        namespace, label_selector=f"app.kubernetes.io/component={component}").items
    return [p for p in pods if p.status and any(c.type == "Ready" and c.status == "True"
                                                for c in p.status.conditions or [])]


def wait_ready(cluster: Cluster, namespace: str = NAMESPACE, timeout: float = 600,
               say: Callable[[str], None] = lambda _: None) -> None:
    """Wait for an agent on every node, the operator and the dashboard; InstallError with the pods' states if not."""
    want = {"agent": len(cluster.nodes), "operator": 1, "dashboard": 1}
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        have = {c: len(ready_pods(cluster, c, namespace)) for c in want}
        line = ", ".join(f"{c} {have[c]}/{n}" for c, n in want.items())
        if line != last:
            say(f"  Ready: {line}")
            last = line
        if all(have[c] >= n for c, n in want.items()):
            return
        time.sleep(2)
    raise InstallError(f"not every tpcmesh pod became Ready in {timeout:.0f} s ({last}):\n"
                       f"{cluster.describe_pods(namespace)}")


def quick_benchmark() -> dict[str, Any]:
    """manifests/examples/quick-benchmark.yaml, as the README tells users to apply it."""
    doc: dict[str, Any] = yaml.safe_load(QUICK_BENCHMARK.read_text())
    return doc


def wait_first_run(cluster: Cluster, benchmark: str, namespace: str = NAMESPACE, timeout: float = 1800,
                   say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The benchmark's first TransferRun, once it finished and delivered everything; progress through ``say``."""
    from kubernetes import client

    objs = client.CustomObjectsApi(cluster.client())
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        listed: Any = objs.list_namespaced_custom_object(GROUP, VERSION, namespace, "transferruns")
        runs = [r for r in listed["items"] if (r["spec"].get("benchmarkRef") or {}).get("name") == benchmark]
        if runs:
            run = min(runs, key=lambda r: r["metadata"]["creationTimestamp"])
            status = run.get("status") or {}
            line = (f"  {run['metadata']['name']}: {status.get('phase', 'Pending')} {status.get('progress', '')}, "
                    f"{status.get('failed', 0)} failed")
            if line != last:
                say(line)
                last = line
            if status.get("phase") in ("Succeeded", "Failed") and not status.get("outbox"):
                return dict(run)
        time.sleep(3)
    raise InstallError(f"the first run of {benchmark} did not finish in {timeout:.0f} s ({last.strip()})")


def grid_url(cluster: Cluster, benchmark: str, namespace: str = NAMESPACE) -> str:
    pods = ready_pods(cluster, "dashboard", namespace)
    if not pods:
        raise InstallError("no Ready dashboard pod")
    return f"http://{pods[0].status.pod_ip}:{DASHBOARD_PORT}/grid/{namespace}/{benchmark}/"


def demo(cluster: Cluster, database_url: str, say: Callable[[str], None] = print) -> str:
    """Install, apply the quick benchmark, wait for its first run; returns the grid's URL."""
    from kubernetes import client

    say(f"Installing the chart ({CHART.relative_to(REPO)}) as release {RELEASE} in namespace {NAMESPACE}")
    install(cluster, database_url)
    wait_ready(cluster, say=say)
    tb = quick_benchmark()
    name = tb["metadata"]["name"]
    say(f"Applying {QUICK_BENCHMARK.relative_to(REPO)} (TransferBenchmark {NAMESPACE}/{name})")
    client.CustomObjectsApi(cluster.client()).create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "transferbenchmarks", tb)
    run = wait_first_run(cluster, name, say=say)
    status = run["status"]
    say(f"Run {run['metadata']['name']} {status['phase']} ({status.get('progress', '')}, {status.get('failed', 0)} "
        f"failed); every measurement delivered to the dashboard")
    return grid_url(cluster, name)

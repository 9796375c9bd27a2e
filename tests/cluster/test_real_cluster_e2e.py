"""What a site admin does first, on real pods: `helm install` the chart on a 3-node cluster (tpcmesh-local cluster:
kubelet + containerd per node, hostNetwork agents on the nodes' own addresses, WAN delays between them), label the
DTNs, apply a benchmark, read the grid.

Values changed from the chart's defaults: the pull policy (Never: every image was built and imported here), the
database (external mode, a PostgreSQL the test starts on the lab's host address: the bundled StatefulSet's
docker.io image cannot be pulled here) and disk mode on (agent.disk: a hostPath, each node's own directory on the
real disk behind it). Everything else - images, node selector, RBAC, CSR flow, probes - is the
chart's own.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client
from tpcmesh_lab import clusterinstall
from tpcmesh_lab.clusterinstall import ready_pods

from tests.support.paths import ARTIFACTS, REPO
from tests.support.realrelease import FULLNAME, NS, RELEASE, wait_for

# The first test pays the package's cluster (images imported into every node's containerd): minutes on a loaded
# 2-core machine, beyond the suite's default 300 s.
pytestmark = [pytest.mark.cluster, pytest.mark.netns, pytest.mark.timeout(1200)]

CHART = REPO / "charts" / "tpcmesh"
G, V = "tpcmesh.io", "v1alpha1"
PROTOCOLS = ["builtin", "iperf3", "xrootd-https", "gridftp"]
STREAMS = [1, 8]


def save_artifacts(real_cluster, core: client.CoreV1Api) -> None:
    """`kubectl get pods -A -o wide` of the running cluster, as text."""
    rows = [("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "IP", "NODE")]
    for p in core.list_pod_for_all_namespaces().items:
        cs = p.status.container_statuses or []
        rows.append((p.metadata.namespace, p.metadata.name, f"{sum(c.ready for c in cs)}/{len(cs)}", p.status.phase,
                     str(sum(c.restart_count for c in cs)), p.status.pod_ip or "", p.spec.node_name or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "real-cluster-pods.txt").write_text(
        "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows) + "\n")


def test_helm_install_on_real_nodes_measures_every_pair(real_cluster, installed, database):
    core = installed
    objs = client.CustomObjectsApi(real_cluster.client())
    nodes = {n.name: n for n in real_cluster.nodes}

    # Every labelled node runs its agent as a real container on the node's own address; the agents got their
    # host certificates through the CSR flow (their init container waits for the signed certificate).
    agents = wait_for("a Ready agent on every node", lambda: (
        p := ready_pods(real_cluster, "agent", NS)) and len(p) == len(nodes) and p,
        timeout=420, detail=lambda: real_cluster.describe_pods(NS))
    for p in agents:
        assert p.status.host_ip == nodes[p.spec.node_name].address == p.status.pod_ip
        assert all(c.container_id.startswith("containerd://") for c in p.status.container_statuses)
    csrs = client.CertificatesV1Api(real_cluster.client()).list_certificate_signing_request().items
    signed = {c.spec.username for c in csrs if c.status.certificate and c.spec.signer_name == "tpcmesh.io/agent"}
    assert signed == {f"system:serviceaccount:{NS}:{FULLNAME}-agent"}, signed
    for component in ("operator", "dashboard"):
        wait_for(f"the {component} Ready", lambda c=component: ready_pods(real_cluster, c, NS),
                 timeout=300, detail=lambda: real_cluster.describe_pods(NS))

    # A small benchmark, every mover the issue names, 1 and 8 streams, reporting to the chart's dashboard.
    tb = clusterinstall.quick_benchmark()
    tb["metadata"]["name"] = "e2e"
    tb["spec"].update(protocols=PROTOCOLS, streams=STREAMS, concurrency=2, fileSet={"count": 2, "size": "8MB"},
                      latency={"enabled": True, "count": 3}, loopback={"enabled": False}, iperf3={"durationSeconds": 2},
                      timeoutSeconds=120, retries=1,
                      results={"url": f"http://{FULLNAME}-dashboard.{NS}.svc:80",
                               "tokenSecret": {"name": f"{FULLNAME}-results-token", "key": "token"}})
    objs.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", tb)

    def finished_run():
        runs = objs.list_namespaced_custom_object(G, V, NS, "transferruns")["items"]
        done = [r for r in runs if (r.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
        return done[0] if done else None

    def phases() -> str:
        runs = objs.list_namespaced_custom_object(G, V, NS, "transferruns")["items"]
        return json.dumps([r.get("status", {}).get("phase") for r in runs]) + "\n" + real_cluster.describe_pods(NS)

    run = wait_for("the benchmark's first run to finish", finished_run, timeout=900, detail=phases)
    status = run["status"]
    pairs = len(nodes) * (len(nodes) - 1)
    assert status["phase"] == "Succeeded" and status.get("failed", 0) == 0, json.dumps(status)[:3000]
    wait_for("every measurement delivered (empty outbox)", lambda: not objs.get_namespaced_custom_object(
        G, V, NS, "transferruns", run["metadata"]["name"])["status"].get("outbox"), timeout=120)

    # The measurements are in PostgreSQL: every directed pair, every protocol and stream setting, and the RTT.
    _, psql = database
    rows = subprocess.run([*psql, "-c", "SELECT s.name, d.name, m.protocol, m.streams, m.status, m.throughput_gbps, "
                                        "m.auth FROM results_measurement m JOIN results_node s ON s.id = m.source_id "
                                        "JOIN results_node d ON d.id = m.destination_id"],
                          check=True, capture_output=True, text=True).stdout.split()
    stored = [r.split("|")[:6] for r in rows]
    got = {(s, d, p, int(n)) for s, d, p, n, st, _ in stored if st == "succeeded" and p != "rtt"}
    # Token mode is the chart's default: the HTTP-based copies ran with the operator's tokens (XRootD's token plugin
    # and the built-in mover validated them against the issuer behind the operator's Service).
    auth = {r.split("|")[2]: r.split("|")[6] for r in rows}
    assert auth["xrootd-https"] == auth["builtin"] == "token", auth
    assert core.read_namespaced_secret(f"{FULLNAME}-token-keys", NS).data["keyring.json"]
    want = {(a, b, p, n) for a in nodes for b in nodes if a != b for p in PROTOCOLS for n in STREAMS}
    assert want <= got, sorted(want - got)
    assert {(s, d) for s, d, p, *_ in stored if p == "rtt"} == {(a, b) for a in nodes for b in nodes if a != b}
    assert len(want) == pairs * len(PROTOCOLS) * len(STREAMS)

    # The dashboard pod serves a grid whose cells are those measurements: fetched through its Service from a node
    # (kube-proxy's rules live in the nodes' namespaces).
    svc = core.read_namespaced_service(f"{FULLNAME}-dashboard", NS).spec.cluster_ip
    node = real_cluster.nodes[0]
    for protocol in PROTOCOLS:
        for streams in STREAMS:
            grid = fetch_json(node.netns, f"http://{svc}/api/v1/grid/?benchmark={NS}/e2e&protocol={protocol}"
                                          f"&streams={streams}")
            cells = {(c["source"], c["destination"]): c for c in grid["cells"]}
            for s, d, p, n, st, gbps in stored:
                if p == protocol and int(n) == streams and st == "succeeded":
                    assert cells[(s, d)]["value"] == pytest.approx(float(gbps), rel=1e-6), (s, d, p, n)
            assert len(cells) >= pairs, (protocol, streams, sorted(cells))
    screenshot_grid(real_cluster, core)
    save_artifacts(real_cluster, core)

    # `helm test`: the chart's test pod reaches the dashboard through its Service name (cluster DNS).
    out = real_cluster.helm("test", RELEASE, "--namespace", NS, "--timeout", "180s", check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dual_stack_nodes_measure_between_real_agent_pods_over_ipv6(real_cluster, installed, database):
    """The nodes' kubelets run with --node-ip <IPv4>,<IPv6>: each hostNetwork agent pod has both in status.podIPs,
    the chart hands them to the agent (agent.dualStack, the default), whose CSR-issued host certificate names both,
    and a benchmark over IPv6 measures every pair between the real pods."""
    import base64
    import ssl

    import httpx

    core = installed
    objs = client.CustomObjectsApi(real_cluster.client())
    nodes = {n.name: n for n in real_cluster.nodes}
    assert all(n.address6 for n in nodes.values()), "the real_cluster fixture's nodes are dual stack"
    agents = wait_for("a Ready agent on every node", lambda: (
        p := ready_pods(real_cluster, "agent", NS)) and len(p) == len(nodes) and p,
        timeout=420, detail=lambda: real_cluster.describe_pods(NS))
    for p in agents:
        assert [ip.ip for ip in p.status.pod_ips] == nodes[p.spec.node_name].addresses
        assert p.metadata.annotations["tpcmesh.io/dual-stack"] == "true"

    # HTTPS on the IPv6 address verifies: the certificate from the CSR flow names it
    ca = core.read_namespaced_config_map(f"{FULLNAME}-ca-bundle", NS).data["ca.crt"]
    token = base64.b64decode(core.read_namespaced_secret(f"{FULLNAME}-agent-token", NS).data["token"]).decode()
    ctx = ssl.create_default_context(cadata=ca)
    with httpx.Client(verify=ctx, timeout=20, headers={"Authorization": f"Bearer {token}"}) as http:
        for name, node in nodes.items():
            info = http.get(f"https://[{node.address6}]:9443/api/v1/info").raise_for_status().json()
            assert (info["node"], info["address"], info["address6"]) == (name, node.address, node.address6), info
            assert info["protocols"]["gridftp"]["running"] is True, info["protocols"]["gridftp"]

    protocols = ["builtin", "gridftp"]
    tb = {"apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "ipv6"},
          "spec": {"schedule": "@every 24h", "protocols": protocols, "streams": [1], "addressFamilies": ["ipv6"],
                   "concurrency": 2, "fileSet": {"count": 2, "size": "8MB"}, "latency": {"enabled": True, "count": 2},
                   "loopback": {"enabled": False}, "timeoutSeconds": 120, "retries": 0}}
    with measured_run(objs, real_cluster, tb) as (first, status):
        assert not status.get("familySkipped"), status["familySkipped"]
        _, psql = database
        out = subprocess.run([*psql, "-c", "SELECT s.name, d.name, m.protocol, m.address_family, m.status "
                                           "FROM results_measurement m JOIN results_run r ON r.id = m.run_id "
                                           "JOIN results_node s ON s.id = m.source_id JOIN results_node d ON "
                                           f"d.id = m.destination_id WHERE r.name = '{first}'"],
                             check=True, capture_output=True, text=True).stdout
        rows = {tuple(line.split("|")) for line in out.splitlines() if line}
        want = {(a, b, p, "ipv6", "succeeded") for a in nodes for b in nodes if a != b for p in [*protocols, "rtt"]}
        assert rows == want, sorted(rows ^ want)


def fetch_json(netns: str, url: str) -> dict:
    """GET ``url`` from inside a node's network namespace (where Service addresses work)."""
    code = f"import json,sys,urllib.request; print(urllib.request.urlopen({url!r}, timeout=20).read().decode())"
    r = subprocess.run(["ip", "netns", "exec", netns, "python3", "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def screenshot_grid(real_cluster, core: client.CoreV1Api) -> None:
    """artifacts/real-cluster-grid.png: the grid page of the dashboard pod (its pod address is routed from here)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        return
    pod = ready_pods(real_cluster, "dashboard", NS)[0]
    out = ARTIFACTS / "real-cluster-grid.png"
    with_dir = Path(real_cluster.state) / "chromium"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={with_dir}", "--window-size=1400,1000", f"--screenshot={out}",
                    f"http://{pod.status.pod_ip}:8000/grid/{NS}/e2e/?protocol=builtin"],
                   capture_output=True, timeout=120)
    assert out.exists() and out.stat().st_size > 10_000, "the grid screenshot was not taken"


def run_status(objs, name: str) -> dict:
    return objs.get_namespaced_custom_object(G, V, NS, "transferruns", name).get("status") or {}


def wait_run(objs, name: str, real_cluster, timeout: float = 600) -> dict:
    return wait_for(f"run {name} to finish", lambda: (s := run_status(objs, name)).get("phase") in (
        "Succeeded", "Failed") and s, timeout=timeout, detail=lambda: json.dumps(run_status(objs, name))[:2000]
        + "\n" + real_cluster.describe_pods(NS))


@contextlib.contextmanager
def measured_run(objs, real_cluster, benchmark: dict) -> Iterator[tuple[str, dict]]:
    """Create ``benchmark``, wait for its first run to succeed with nothing failed and every record delivered,
    yield (the run's name, its status); the benchmark is deleted after."""
    name = benchmark["metadata"]["name"]
    objs.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", benchmark)
    try:
        first = wait_for(f"the {name} benchmark's first run", lambda: [
            r["metadata"]["name"] for r in objs.list_namespaced_custom_object(G, V, NS, "transferruns")["items"]
            if r["metadata"]["name"].startswith(f"{name}-")], timeout=60)[0]
        status = wait_run(objs, first, real_cluster)
        assert status["phase"] == "Succeeded" and status.get("failed", 0) == 0, json.dumps(status)[:3000]
        wait_for("every record delivered", lambda: not run_status(objs, first).get("outbox"), timeout=120)
        yield first, status
    finally:
        objs.delete_namespaced_custom_object(G, V, NS, "transferbenchmarks", name)


def stored_records(psql: list[str], run: str) -> list[list[str]]:
    out = subprocess.run([*psql, "-c", "SELECT m.id, s.name, d.name, m.protocol, m.status, coalesce(m.error, '') "
                                       "FROM results_measurement m JOIN results_run r ON r.id = m.run_id "
                                       "JOIN results_node s ON s.id = m.source_id "
                                       f"JOIN results_node d ON d.id = m.destination_id WHERE r.name = '{run}'"],
                         check=True, capture_output=True, text=True).stdout
    return [line.split("|") for line in out.splitlines() if line]


def test_the_pods_run_the_versions_the_chart_states(real_cluster, installed):
    """The agent and operator containers run Debian 13's XRootD, GridFTP, iperf3 and gfal2 at the versions
    Chart.yaml's tpcmesh.io/image-* annotations (and the READMEs) state: asked inside the running pods."""
    import yaml
    from tpcmesh_lab.controlplane import binary

    stated = yaml.safe_load((CHART / "Chart.yaml").read_text())["annotations"]

    def run_in(component: str, *argv: str) -> str:
        [pod] = ready_pods(real_cluster, component, NS)[:1]
        r = subprocess.run([str(binary("kubectl")), "-n", NS, "exec", pod.metadata.name, "-c", component, "--", *argv],
                           env=real_cluster.env(), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout + r.stderr

    assert run_in("agent", "xrootd", "-v").strip() == f"v{stated['tpcmesh.io/image-xrootd']}"
    assert run_in("operator", "xrdcp", "--version").strip() == f"v{stated['tpcmesh.io/image-xrootd']}"
    assert f"iperf {stated['tpcmesh.io/image-iperf3']}" in run_in("agent", "iperf3", "--version")
    assert f"{stated['tpcmesh.io/image-debian'].split()[0]}." in run_in("agent", "cat", "/etc/debian_version")
    versions = dict(line.split() for line in run_in("operator", "dpkg-query", "-W", "-f", "${Package} ${Version}\n",
                                                     "gfal2-plugin-gridftp", "python3").splitlines())
    assert versions["gfal2-plugin-gridftp"].startswith(stated["tpcmesh.io/image-gfal2"] + "-"), versions
    gridftp = run_in("agent", "dpkg-query", "-W", "-f", "${Version}", "globus-gridftp-server-progs")
    assert gridftp.startswith(stated["tpcmesh.io/image-globus-gridftp-server"] + "-"), gridftp


def test_agent_and_operator_pods_deleted_mid_run(real_cluster, installed, database):
    """An agent pod deleted mid-run: the run records the failures of that node's pairs with the reason, and the next
    run measures them again. The operator pod deleted mid-run: the new one resumes the run, starts no test twice,
    loses nothing."""
    core = installed
    objs = client.CustomObjectsApi(real_cluster.client())
    _, psql = database
    nodes = [n.name for n in real_cluster.nodes]
    victim = nodes[-1]
    tb = {"apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "faults"},
          "spec": {"schedule": "@every 24h", "protocols": ["iperf3"], "streams": [1], "iperf3": {"durationSeconds": 4},
                   "latency": {"enabled": True, "count": 2}, "loopback": {"enabled": False}, "timeoutSeconds": 60,
                   "retries": 0}}  # no spec.results: the chart's operator delivers to the release's dashboard
    objs.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", tb)
    first = wait_for("the faults benchmark's first run", lambda: [
        r["metadata"]["name"] for r in objs.list_namespaced_custom_object(G, V, NS, "transferruns")["items"]
        if r["metadata"]["name"].startswith("faults-")], timeout=60)[0]
    wait_for("the first test done", lambda: run_status(objs, first).get("done", 0) >= 1, timeout=120)
    agent = next(p for p in core.list_namespaced_pod(NS, label_selector="app.kubernetes.io/component=agent").items
                 if p.spec.node_name == victim)
    core.delete_namespaced_pod(agent.metadata.name, NS, grace_period_seconds=0)
    status = wait_run(objs, first, real_cluster)
    assert status.get("failed", 0) >= 1, json.dumps(status)[:2000]
    wait_for("every record of the run delivered", lambda: not run_status(objs, first).get("outbox"), timeout=120)
    failed = [r for r in stored_records(psql, first) if r[4] != "succeeded"]
    assert failed and all(victim in (r[1], r[2]) and r[5] for r in failed), failed
    wait_for("the agent back on every node", lambda: len(ready_pods(real_cluster, "agent", NS))
             == len(nodes), timeout=300, detail=lambda: real_cluster.describe_pods(NS))

    # The next run measures every pair again; the operator pod is deleted while it runs.
    objs.create_namespaced_custom_object(G, V, NS, "transferruns", {
        "apiVersion": f"{G}/{V}", "kind": "TransferRun", "metadata": {"name": "faults-again"},
        "spec": {"benchmarkRef": {"name": "faults"}}})
    wait_for("two tests of the next run done", lambda: run_status(objs, "faults-again").get("done", 0) >= 2,
             timeout=180)
    operator = ready_pods(real_cluster, "operator", NS)[0]
    core.delete_namespaced_pod(operator.metadata.name, NS)
    status = wait_run(objs, "faults-again", real_cluster)
    assert status["phase"] == "Succeeded" and status.get("failed", 0) == 0, json.dumps(status)[:2000]
    wait_for("every record delivered", lambda: not run_status(objs, "faults-again").get("outbox"), timeout=120)
    records = stored_records(psql, "faults-again")
    pairs = {(a, b) for a in nodes for b in nodes if a != b}
    assert sorted((r[1], r[2]) for r in records if r[3] == "iperf3") == sorted(pairs), records
    assert all(r[4] == "succeeded" for r in records), records
    # No test started twice: each of the run's transfers appears once in the agents' logs.
    started = []
    for p in core.list_namespaced_pod(NS, label_selector="app.kubernetes.io/component=agent").items:
        log = core.read_namespaced_pod_log(p.metadata.name, NS, container="agent")
        started += [line.split("Started transfer ", 1)[1].split(":")[0] for line in log.splitlines()
                    if "Started transfer " in line]
    ids = [r[0] for r in records if r[3] == "iperf3"]
    assert all(started.count(i) == 1 for i in ids), {i: started.count(i) for i in ids}


    # A node in maintenance (its annotation, as an admin sets it with kubectl) is left out of the next run, which
    # says so in its status; the annotation removed, the node is back.
    until = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_node(victim, {"metadata": {"annotations": {"tpcmesh.io/maintenance-until": until,
                                                          "tpcmesh.io/maintenance-reason": "NIC swap"}}})
    try:
        objs.create_namespaced_custom_object(G, V, NS, "transferruns", {
            "apiVersion": f"{G}/{V}", "kind": "TransferRun", "metadata": {"name": "faults-maintenance"},
            "spec": {"benchmarkRef": {"name": "faults"}}})
        status = wait_run(objs, "faults-maintenance", real_cluster)
        assert status["phase"] == "Succeeded" and status.get("inMaintenance") == victim, json.dumps(status)[:2000]
        assert status["maintenance"] == [{"node": victim, "reason": "NIC swap", "until": until,
                                          "origin": "annotation"}]
        wait_for("every record delivered", lambda: not run_status(objs, "faults-maintenance").get("outbox"),
                 timeout=120)
        kept = stored_records(psql, "faults-maintenance")
        others = [n for n in nodes if n != victim]
        assert sorted((r[1], r[2]) for r in kept if r[3] == "iperf3") == sorted(
            (a, b) for a in others for b in others if a != b), kept
    finally:
        core.patch_node(victim, {"metadata": {"annotations": {"tpcmesh.io/maintenance-until": None,
                                                              "tpcmesh.io/maintenance-reason": None}}})


def test_disk_mode_measures_disk_to_disk_on_each_nodes_hostpath(real_cluster, installed, database, disks):
    """The chart's disk mode (agent.disk, a hostPath per node): a benchmark with `storage: [disk]` measures every
    pair disk to disk with the built-in mover, each node's fio ceilings are in the run's status, the sets are on
    the nodes' disk paths and what was received is gone."""
    objs = client.CustomObjectsApi(real_cluster.client())
    nodes = [n.name for n in real_cluster.nodes]
    tb = {"apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "disk"},
          "spec": {"schedule": "@every 24h", "protocols": ["builtin"], "streams": [2], "storage": ["disk"],
                   "concurrency": 2, "fileSet": {"count": 2, "size": "8MB"}, "latency": {"enabled": False},
                   "loopback": {"enabled": False}, "timeoutSeconds": 120, "retries": 0}}
    with measured_run(objs, real_cluster, tb) as (first, status):
        assert status["diskFilesets"] == dict.fromkeys(nodes, "ready")
        for name in nodes:
            ceilings = status["ceilings"][name]
            assert ceilings["readGbps"] > 0 and ceilings["writeGbps"] > 0, status["ceilings"]
            assert (disks[name] / "sets" / "2x8000000").is_dir() and not list(disks[name].glob("incoming/*"))
        _, psql = database
        records = stored_records(psql, first)
        assert sorted((r[1], r[2], r[3], r[4]) for r in records) == sorted(
            (a, b, "builtin", "succeeded") for a in nodes for b in nodes if a != b), records


def test_helm_uninstall_leaves_nothing(real_cluster, installed):
    """The admin deletes the benchmarks first (a run keeps the operator's finalizer until what it measured is
    delivered: nothing is lost), then uninstalls: no pod, no namespace, nothing in /dev/shm is left."""
    core = installed
    objs = client.CustomObjectsApi(real_cluster.client())
    shm_before = set(Path("/dev/shm").iterdir())
    for plural in ("transferbenchmarks", "transferruns"):
        for o in objs.list_namespaced_custom_object(G, V, NS, plural)["items"]:
            try:
                objs.delete_namespaced_custom_object(G, V, NS, plural, o["metadata"]["name"])
            except client.ApiException as e:
                if e.status != 404:  # a benchmark's runs go with it (owner references)
                    raise
    wait_for("the benchmarks and their runs gone", lambda: not any(
        objs.list_namespaced_custom_object(G, V, NS, p)["items"] for p in ("transferbenchmarks", "transferruns")),
        timeout=120)
    out = real_cluster.helm("uninstall", RELEASE, "--namespace", NS, "--wait", "--timeout", "180s", check=False)
    assert out.returncode == 0, out.stderr
    wait_for("no pods left in the release namespace", lambda: not core.list_namespaced_pod(NS).items,
             timeout=180, detail=lambda: real_cluster.describe_pods(NS))
    core.delete_namespace(NS)
    wait_for("the namespace gone", lambda: NS not in {n.metadata.name for n in core.list_namespace().items},
             timeout=180)
    # an agent's data directory (tpcmesh-agent...); those of agents that tests running beside this one start on
    # loopback (tpcmesh-agent-127-...) and other tests' servers and control planes are not the cluster's
    left = {p for p in Path("/dev/shm").iterdir() if p.name.startswith("tpcmesh-agent") and "-127-" not in p.name}
    assert not left - shm_before

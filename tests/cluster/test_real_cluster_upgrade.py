"""A site upgrades: the chart and images of an earlier commit (OLD, built from a clone at that commit by its own
hack/build-images.sh, cached in ~/.cache/tpcmesh/upgrade/OLD) on the real 3-node cluster, a benchmark's first run
measured, a second run started, and while it is in flight `helm upgrade` to the working tree. Then: the CRDs are the
working tree's (the pre-upgrade hook Job applied them), each dashboard migration ran once (two dashboard pods, the
setup lock), the agents rolled one node at a time, the in-flight run ended with every transfer measured or its
failure recorded, nothing measured before the upgrade is lost or booked twice (counted on the dashboard's API), and
the grid shows the old run's cells next to the new run's.

Cost in `make test`, beside the package's cluster: about 4 minutes (the old images imported into the three nodes
unpacked, 18 s; the install, two runs and the rolling upgrade). The old images are built once (239 s on a cold cache,
a hash check after), in the background from the moment the suite is collected (tests/cluster/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
import yaml
from kubernetes import client
from tpcmesh_lab import clusterinstall
from tpcmesh_lab.clusterinstall import ready_pods

from tests.cluster.test_real_cluster_e2e import fetch_json
from tests.support import oldrelease
from tests.support.paths import REPO
from tests.support.realrelease import cluster_database, wait_for

pytestmark = [
    pytest.mark.cluster, pytest.mark.netns, pytest.mark.timeout(2400),
]

# Merge of wt-trixie (2026-11-27): the chart's layout and the Debian 13 images of today, but before dashboard
# migrations 0013-0014, the TransferRun's Healthy column, the CRD hook Job and the migration lock.
OLD = "37034b4"
NS, RELEASE = "tpcmesh-upgrade", "upg"
FULLNAME = f"{RELEASE}-tpcmesh"
G, V = "tpcmesh.io", "v1alpha1"
BENCH = "upg"
# two dashboard pods start together on the upgrade: the migration race the lock prevents
VALUES = ["--set", "dashboard.replicas=2"]
NEW_MIGRATIONS = ("0013_host", "0014_diagnosis")  # in the working tree, not in OLD
REPEATS = 4


@pytest.fixture(scope="module")
def database(real_cluster):
    """A database of its own: the old release migrates it from empty."""
    with cluster_database(real_cluster) as db:
        yield db


@pytest.fixture(scope="module")
def old_release(real_cluster):
    started = time.monotonic()
    release = oldrelease.built(OLD)
    built = time.monotonic()
    real_cluster.import_images(release.images)
    print(f"\nold release {OLD}: build/cache check {built - started:.0f} s, import {time.monotonic() - built:.0f} s")
    return release


def _status(objs, name: str) -> dict:
    return objs.get_namespaced_custom_object(G, V, NS, "transferruns", name).get("status") or {}


def _measurements(node, svc: str, run_uid: str) -> list[dict]:
    page = fetch_json(node.netns, f"http://{svc}/api/v1/measurements/?run={run_uid}&limit=1000")
    assert page["count"] <= 1000, page["count"]
    return page["results"]


class AgentWatch(threading.Thread):
    """Ready agent pods and their image tags, every half second, while the upgrade rolls them."""

    def __init__(self, real_cluster) -> None:
        super().__init__(daemon=True)
        self.cluster, self.samples, self.stop = real_cluster, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                pods = ready_pods(self.cluster, "agent", NS)
                self.samples.append((time.monotonic(), sorted(p.spec.containers[0].image.rsplit(":", 1)[1]
                                                              for p in pods)))
            except Exception as e:  # noqa: BLE001 - an apiserver hiccup is a missing sample, not a failure
                self.samples.append((time.monotonic(), f"error: {e}"))
            time.sleep(0.5)


def test_helm_upgrade_from_an_earlier_commit_while_a_run_is_in_flight(real_cluster, database, old_release):
    url, psql = database
    api = real_cluster.client()
    objs, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    ext, apps = client.ApiextensionsV1Api(api), client.AppsV1Api(api)
    nodes = [n.name for n in real_cluster.nodes]
    pairs = len(nodes) * (len(nodes) - 1)
    timings: dict[str, float] = {}
    t0 = time.monotonic()

    # A cluster that runs OLD: its CRDs (as its `helm install` would have created them), its chart and images.
    from tpcmesh_operator import crds

    crds.apply(api, crds.load(old_release.chart / "crds"))
    columns = lambda: [c.name for c in ext.read_custom_resource_definition(  # noqa: E731
        "transferruns.tpcmesh.io").spec.versions[0].additional_printer_columns]
    assert "Healthy" not in columns()
    clusterinstall.install(real_cluster, url, NS, RELEASE, chart=old_release.chart,
                           values=["--set", f"image.tag={OLD}", *VALUES])
    try:
        clusterinstall.wait_ready(real_cluster, NS)
        timings["install"] = time.monotonic() - t0

        # The first run: builtin and iperf3 (iperf3's cells stay the old run's: the second run measures builtin only)
        # (a schedule that does not tick again in the test: the second run is made by hand, as an admin does)
        spec = {"schedule": "@every 24h", "protocols": ["builtin", "iperf3"], "streams": [1], "concurrency": 2,
                "fileSet": {"count": 2, "size": "8MB"}, "latency": {"enabled": False},
                "loopback": {"enabled": False}, "iperf3": {"durationSeconds": 2}, "timeoutSeconds": 120,
                "retries": 1}
        objs.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", {
            "apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": BENCH}, "spec": spec})
        first = clusterinstall.wait_first_run(real_cluster, BENCH, NS, timeout=900)
        assert first["status"]["phase"] == "Succeeded", json.dumps(first["status"])[:2000]
        timings["first run"] = time.monotonic() - t0
        # the second run, started by hand at once: builtin only, repeated, long enough to be cut by the upgrade
        objs.patch_namespaced_custom_object(G, V, NS, "transferbenchmarks", BENCH, {"spec": {
            "protocols": ["builtin"], "repeats": REPEATS, "fileSet": {"count": 4, "size": "32MB"}}})
        second_name = f"{BENCH}-during-upgrade"
        objs.create_namespaced_custom_object(G, V, NS, "transferruns", {
            "apiVersion": f"{G}/{V}", "kind": "TransferRun", "metadata": {"name": second_name},
            "spec": {"benchmarkRef": {"name": BENCH}}})
        second = wait_for("the second run running", lambda: _status(objs, second_name).get("phase") == "Running"
                          and objs.get_namespaced_custom_object(G, V, NS, "transferruns", second_name), timeout=120)
        # a run made by hand freezes the benchmark's spec of when it started in its status
        assert second["status"]["benchmarkSpec"]["protocols"] == ["builtin"], second["status"]
        timings["second run started"] = time.monotonic() - t0

        svc = core.read_namespaced_service(f"{FULLNAME}-dashboard", NS).spec.cluster_ip
        node = real_cluster.nodes[0]
        before = _measurements(node, svc, first["metadata"]["uid"])
        assert len(before) == pairs * 2, len(before)

        # The upgrade, while the second run is in flight
        assert _status(objs, second_name).get("phase") == "Running"
        watch = AgentWatch(real_cluster)
        watch.start()
        out = real_cluster.helm("upgrade", RELEASE, str(clusterinstall.CHART), "--namespace", NS,
                                *clusterinstall.install_values(), *VALUES, "--wait", "--timeout", "900s",
                                check=False, timeout=1000)
        assert out.returncode == 0, out.stderr
        # helm's --wait lets a DaemonSet be maxUnavailable short: watch on until every agent is new and Ready
        new_tag = yaml.safe_load((clusterinstall.CHART / "Chart.yaml").read_text())["appVersion"]
        wait_for("every agent Ready on the new image", lambda: watch.samples[-1][1] == [new_tag] * len(nodes),
                 timeout=300, detail=lambda: real_cluster.describe_pods(NS))
        watch.stop.set()
        watch.join()
        timings["upgrade"] = time.monotonic() - t0
        phase_after = _status(objs, second_name).get("phase")

        # CRDs: the working tree's, applied by the hook Job (then deleted with its account)
        for path in sorted((REPO / "manifests" / "crds").glob("*.yaml")):
            want = yaml.safe_load(path.read_text())
            served = real_cluster.plain(ext.read_custom_resource_definition, want["metadata"]["name"])
            assert served["spec"]["versions"] == want["spec"]["versions"], path.name
        assert "Healthy" in columns()
        hook = [j.metadata.name for j in client.BatchV1Api(api).list_namespaced_job(NS).items]
        assert f"{FULLNAME}-crds" not in hook, hook
        with pytest.raises(client.ApiException):
            core.read_namespaced_service_account(f"{FULLNAME}-crds", NS)

        # Migrations: each once in the database; one new dashboard pod applied them, the other found none
        rows = subprocess.run([*psql, "-c", "SELECT name, count(*) FROM django_migrations WHERE app = 'results' "
                                            "GROUP BY name HAVING count(*) > 1 OR name IN ('0013_host', "
                                            "'0014_diagnosis')"], check=True, capture_output=True,
                              text=True).stdout.split()
        assert sorted(rows) == sorted(f"{m}|1" for m in NEW_MIGRATIONS), rows
        dashboards = [p for p in core.list_namespaced_pod(NS, label_selector="app.kubernetes.io/component="
                                                                              "dashboard").items
                      if p.spec.containers[0].image.endswith(f":{new_tag}")]
        logs = [core.read_namespaced_pod_log(p.metadata.name, NS, container="migrate") for p in dashboards]
        assert sum("Applying results.0013_host... OK" in log for log in logs) <= 1, logs

        # Agents: one node at a time (never fewer than all but one Ready), all on the new images at the end
        ds = apps.read_namespaced_daemon_set(f"{FULLNAME}-agent", NS)
        assert ds.spec.update_strategy.rolling_update.max_unavailable == 1
        counts = [len(s) for _, s in watch.samples if isinstance(s, list)]
        assert counts and min(counts) >= len(nodes) - 1, counts
        tags = [s for _, s in watch.samples if isinstance(s, list)]
        assert tags[0] == [OLD] * len(nodes) and tags[-1] == [new_tag] * len(nodes), (tags[0], tags[-1])

        # The in-flight run ends: every planned transfer measured or its failure recorded, none twice
        status = wait_for(f"run {second_name} to finish and deliver", lambda: (s := _status(objs, second_name)).get(
            "phase") in ("Succeeded", "Failed") and not s.get("outbox") and s, timeout=1200,
            detail=lambda: json.dumps(_status(objs, second_name))[:2000] + real_cluster.describe_pods(NS))
        timings["second run"] = time.monotonic() - t0
        during = _measurements(node, svc, second["metadata"]["uid"])
        keys = [(m["source"], m["destination"], m["protocol"], m["streams"], m["repeat"]) for m in during]
        assert len(keys) == len(set(keys)), "a test booked twice"
        assert len(during) == pairs * REPEATS, (len(during), status)
        failed = [m for m in during if m["status"] != "succeeded"]
        assert all(m["error"] for m in failed), failed
        print(f"\nrun {second_name}: {phase_after} when the upgrade ended, {status['phase']} at the end; "
              f"{len(during) - len(failed)} succeeded, {len(failed)} failed (recorded) of {len(during)}")

        # Nothing measured before the upgrade lost or booked twice
        after = _measurements(node, svc, first["metadata"]["uid"])
        assert sorted(m["id"] for m in after) == sorted(m["id"] for m in before)
        assert [m["throughput_gbps"] for m in sorted(after, key=lambda m: m["id"])] == \
            [m["throughput_gbps"] for m in sorted(before, key=lambda m: m["id"])]

        # The grid: iperf3's cells are the old run's, builtin's the new run's
        old_iperf3 = {(m["source"], m["destination"]): m["throughput_gbps"] for m in before
                      if m["protocol"] == "iperf3"}
        for protocol in ("iperf3", "builtin"):
            grid = fetch_json(node.netns, f"http://{svc}/api/v1/grid/?benchmark={NS}/{BENCH}&protocol={protocol}"
                                          f"&streams=1")
            cells = {(c["source"], c["destination"]): c for c in grid["cells"] if c["source"] != c["destination"]}
            assert len(cells) == pairs, (protocol, cells)
            if protocol == "iperf3":  # measured before the upgrade only
                assert {k: c["value"] for k, c in cells.items()} == pytest.approx(old_iperf3, rel=1e-6)
    finally:
        print("\ntimings (s since the install began): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
        real_cluster.helm("uninstall", RELEASE, "--namespace", NS, "--wait", "--timeout", "180s", check=False)
        # this release's agents' CSRs (other modules count the signed ones of theirs)
        certs = client.CertificatesV1Api(api)
        for csr in certs.list_certificate_signing_request().items:
            if csr.spec.username == f"system:serviceaccount:{NS}:{FULLNAME}-agent":
                certs.delete_certificate_signing_request(csr.metadata.name)

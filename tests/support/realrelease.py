"""The chart installed once on the real cluster for the package's tests (tests/cluster/conftest.py makes these
fixtures package-scoped): a PostgreSQL on the lab's host address, each node's disk directory behind one hostPath,
and `helm install` with the values this machine needs. test_real_cluster_e2e.py measures with it,
test_network_policy.py turns the chart's NetworkPolicies on and off on it, and the e2e's last test uninstalls it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from tpcmesh_lab import clusterinstall
from tpcmesh_lab.postgres import for_cluster

NS = "tpcmesh"
RELEASE = "tpcmesh"
FULLNAME = "tpcmesh"  # the release name contains "tpcmesh": resources are named tpcmesh-<component>
AGENT_USER = 10001  # the chart's agent.podSecurityContext.runAsUser


def wait_for(what: str, fn, timeout: float, detail=lambda: "", interval: float = 2.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except client.ApiException as e:
            last = f"API error {e.status}: {e.reason}"
        if last and not isinstance(last, str):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last}\n{detail()}")


@contextlib.contextmanager
def cluster_database(real_cluster) -> Iterator[tuple[str, list[str]]]:
    """A new PostgreSQL on the lab's host address, password-protected for the nodes' range and the pods' (the
    suite's cluster enforces NetworkPolicies, so pods reach it from their own addresses, unmasqueraded): its URL
    and a psql command line."""
    db = for_cluster(real_cluster.lab.host_address, real_cluster.lab.subnet,
                     also=[str(real_cluster.plan.pod_supernet)])
    try:
        yield db.url, db.server.psql()
    finally:
        db.close()


@pytest.fixture(scope="package")
def database(real_cluster):
    with cluster_database(real_cluster) as db:
        yield db


def node_disks(real_cluster) -> tuple[Path, dict[str, Path]]:
    """Disk mode's hostPath: one path for the chart (as on real DTNs) behind which each node has a disk directory
    of its own on the real disk: bind-mounted in the node's mount namespace, owned by the agent's user as a site
    prepares it."""
    shared = Path(real_cluster.state) / "disk"
    shared.mkdir()
    own = {}
    for node in real_cluster.nodes:
        own[node.name] = Path(real_cluster.state) / "disks" / node.name
        own[node.name].mkdir(parents=True)
        os.chown(own[node.name], AGENT_USER, AGENT_USER)
        subprocess.run(node.enter(["mount", "--bind", str(own[node.name]), str(shared)]), check=True, timeout=30)
    return shared, own


@pytest.fixture(scope="package")
def disks(real_cluster) -> dict[str, Path]:
    return node_disks(real_cluster)[1]


@pytest.fixture(scope="package")
def installed(real_cluster, database, disks) -> Iterator[client.CoreV1Api]:
    url, _ = database
    # what `tpcmesh-local cluster demo` runs, with the chart's disk mode on (agent.disk: a hostPath)
    clusterinstall.install(real_cluster, url, NS, RELEASE, values=[
        "--set", "agent.disk.enabled=true", "--set", f"agent.disk.hostPath={Path(real_cluster.state) / 'disk'}",
        "--set", "agent.disk.reserveBytes=100000000"])
    try:
        yield client.CoreV1Api(real_cluster.client())
    finally:
        real_cluster.helm("uninstall", RELEASE, "--namespace", NS, "--wait", "--timeout", "180s", check=False)

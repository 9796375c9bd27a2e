"""The `real_cluster` fixture (tests/cluster/conftest.py makes it package-scoped: the cluster goes before the
other packages' labs run): `tpcmesh-local cluster` (tpcmesh_lab.cluster) for the session, three
nodes by default, each a kubelet with its own containerd in a network namespace of the WAN lab, with the support
images (pause, CoreDNS, busybox) and tpcmesh's own images (`make images`, built here through the same script and
cached) imported on every node. Logs and node states go to artifacts/real-cluster/ at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tpcmesh_lab.cluster import Cluster, ClusterOptions, missing_parts, support_images, tpcmesh_images

from tests.support.paths import ARTIFACTS, REPO

IMAGES = ("agent", "operator", "dashboard")


def build_images() -> list[Path]:
    """hack/build-images.sh (what `make images` runs); a second call with nothing changed is a hash check."""
    r = subprocess.run([str(REPO / "hack" / "build-images.sh"), *IMAGES], capture_output=True, text=True,
                       timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"hack/build-images.sh failed:\n{r.stderr[-4000:]}")
    archives = tpcmesh_images()
    assert {a.name for a in archives} >= {f"tpcmesh-{c}.tar" for c in IMAGES}, archives
    return archives


@pytest.fixture(scope="package")
def real_cluster() -> Iterator[Cluster]:
    # NetworkPolicies enforced (kube-network-policies on every node, no masquerading between pods), as at a careful
    # site: the chart's policies are tested on this cluster (test_network_policy.py)
    missing = missing_parts(network_policies=True)
    if missing:
        pytest.skip("a real cluster needs: " + "; ".join(missing))
    images = support_images(network_policies=True) + build_images()
    state = Path(tempfile.mkdtemp(prefix="tpcmesh-cluster-", dir="/var/tmp"))
    cluster = Cluster(ClusterOptions(nodes=3, state_dir=state, images=images, network_policies=True))
    try:
        cluster.up()
        yield cluster
    finally:
        logs = ARTIFACTS / "real-cluster"
        try:
            shutil.rmtree(logs, ignore_errors=True)
            logs.mkdir(parents=True, exist_ok=True)
            for log in state.rglob("*.log"):
                if "containerd/" not in str(log) and log.stat().st_size < 50e6:
                    dest = logs / str(log.relative_to(state)).replace(os.sep, "_")
                    shutil.copy(log, dest)
        except OSError:
            pass
        cluster.close()
        shutil.rmtree(state, ignore_errors=True)

"""manifests/install.yaml and manifests/rbac/ are the chart rendered (up to date), and apply on the real cluster."""

from __future__ import annotations

import sys

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from tests.cluster.operator_support import apply_crds
from tests.support.controlplane import binary
from tests.support.paths import REPO

pytestmark = pytest.mark.cluster

sys.path.insert(0, str(REPO / "hack"))
import render_manifests  # noqa: E402


@pytest.fixture(scope="module")
def helm() -> str:
    h = binary("helm")
    if h is None:
        pytest.skip("helm is not built; run `make control-plane`")
    return str(h)


def test_install_yaml_and_rbac_are_up_to_date(helm, tmp_path):
    fresh = render_manifests.write_all(helm, tmp_path)
    for path in fresh:
        committed = REPO / "manifests" / path.relative_to(tmp_path)
        assert committed.exists(), f"{committed.relative_to(REPO)} is missing; run `make manifests`"
        assert committed.read_text() == path.read_text(), \
            f"{committed.relative_to(REPO)} is out of date with charts/tpcmesh; run `make manifests`"


def test_install_yaml_applies_with_server_side_dry_run(control_plane):
    """As install.yaml's header says: the CRDs (manifests/crds/) established first, then every object."""
    docs = [d for d in yaml.safe_load_all((REPO / "manifests" / "install.yaml").read_text()) if d]
    header = (REPO / "manifests" / "install.yaml").read_text().split("\n---", 1)[0]
    assert "kubectl apply --server-side -f crds/" in header and "condition=established" in header
    api = control_plane.client()
    apply_crds(api)
    core = client.CoreV1Api(api)
    try:  # the header tells users to create the namespace (and Secrets) first
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="tpcmesh")))
    except ApiException as e:
        assert e.status == 409
    dyn = dynamic.DynamicClient(api)
    failures = []
    for doc in docs:
        res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        name = doc["metadata"]["name"]
        try:
            if res.namespaced:
                res.server_side_apply(body=doc, name=name, namespace=doc["metadata"]["namespace"],
                                      field_manager="tpcmesh-test", dry_run="All")
            else:
                res.server_side_apply(body=doc, name=name, field_manager="tpcmesh-test", dry_run="All")
        except ApiException as e:
            failures.append(f"{doc['kind']}/{name}: {e.status} {e.body}")
    assert not failures, "\n".join(failures)
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "CustomResourceDefinition", "DaemonSet", "Deployment", "StatefulSet"} <= kinds
    assert not any(d["kind"] == "Secret" for d in docs), "install.yaml must not carry generated secrets"

"""The test control plane itself: real authentication, real RBAC, fake Nodes that stay Ready, kubelet played."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.cluster


def test_rbac_is_enforced_for_service_accounts(control_plane):
    core = client.CoreV1Api(control_plane.client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="cp-rbac")))
    sa = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody"))
    core.create_namespaced_service_account("cp-rbac", sa)
    as_sa = client.CoreV1Api(control_plane.client(control_plane.kubeconfig_for("nobody", "cp-rbac")))
    with pytest.raises(ApiException) as e:
        as_sa.list_namespaced_pod("cp-rbac")
    assert e.value.status == 403
    assert "system:serviceaccount:cp-rbac:nobody" in e.value.body
    rbac = client.RbacAuthorizationV1Api(control_plane.client())
    rbac.create_namespaced_role("cp-rbac", {"metadata": {"name": "pods-reader"},
                                            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    rbac.create_namespaced_role_binding("cp-rbac", {
        "metadata": {"name": "pods-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": "cp-rbac"}]})
    deadline = time.monotonic() + 10
    while True:
        try:
            assert as_sa.list_namespaced_pod("cp-rbac").items == []
            break
        except ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_daemonset_lands_on_labelled_fake_nodes_and_kubelet_is_played(control_plane):
    control_plane.start_controller_manager()
    control_plane.start_scheduler()
    for i, fast in ((1, True), (2, False)):
        labels = {"cp-test/fast": "true"} if fast else {}
        control_plane.create_node(f"cp-node-{i}", f"127.0.10.{i}", labels)
    core = client.CoreV1Api(control_plane.client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="cp-ds")))
    apps = client.AppsV1Api(control_plane.client())
    apps.create_namespaced_daemon_set("cp-ds", {
        "metadata": {"name": "probe"},
        "spec": {"selector": {"matchLabels": {"app": "probe"}},
                 "template": {"metadata": {"labels": {"app": "probe"}},
                              "spec": {"hostNetwork": True, "nodeSelector": {"cp-test/fast": "true"},
                                       "automountServiceAccountToken": False,
                                       "containers": [{"name": "c", "image": "example.invalid/probe:1"}]}}}})
    deadline = time.monotonic() + 60
    pods = []
    while time.monotonic() < deadline:
        pods = [p for p in core.list_namespaced_pod("cp-ds").items if p.spec.node_name]
        if pods:
            break
        time.sleep(0.5)
    assert [p.spec.node_name for p in pods] == ["cp-node-1"]
    played = control_plane.play_kubelet("cp-ds")
    assert [(p.status.phase, p.status.pod_ip) for p in played] == [("Running", "127.0.10.1")]
    while time.monotonic() < deadline:
        ds = apps.read_namespaced_daemon_set("probe", "cp-ds")
        if ds.status.number_ready == 1:
            break
        time.sleep(0.5)
    assert ds.status.desired_number_scheduled == 1 and ds.status.number_ready == 1
    core.delete_namespace("cp-ds")
    control_plane.delete_nodes()

"""The CRD hook (README "Upgrading"): Helm never upgrades crds/, so the chart's pre-install/pre-upgrade hook Job applies
them with `tpcmesh-apply-crds` as a ServiceAccount of its own. Here, on the real apiserver without kubelets: the
hook's objects as rendered (ConfigMap, ServiceAccount, ClusterRole, binding) are created, the Job's own command runs
with that account's credentials on the files the Job mounts, and a cluster holding an older TransferBenchmark CRD (one
field fewer: the apiserver prunes it) then accepts the field. The account may touch those CRDs and nothing else.
The real-cluster upgrade test (test_real_cluster_upgrade.py) runs the Job itself."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.cluster.test_chart import _can, render

pytestmark = pytest.mark.cluster

NS = "crds-hook"
G, V = "tpcmesh.io", "v1alpha1"
TB_CRD = "transferbenchmarks.tpcmesh.io"
NEW_FIELD = "repeats"  # a TransferBenchmark field the "old" CRD below lacks


def _apply(ext, body: dict, manager: str) -> None:
    ext.patch_custom_resource_definition(body["metadata"]["name"], body, field_manager=manager, force=True,
                                         _content_type="application/apply-patch+yaml")


def _wait_served(objs, body: dict) -> dict:
    """Create the benchmark once the apiserver serves the CRD's current schema (it takes a moment after a change)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return objs.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", body)
        except client.ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _served_with(objs, body: dict, schema_in_force, tries: int = 100) -> dict:
    """Create ``body`` until the apiserver serves the schema just applied (``schema_in_force(spec)`` of the stored
    object): it may serve the previous one for a moment after a CRD changes, longer on a busy control plane that
    other tests have used (seen on a clean-clone run)."""
    name = body["metadata"]["name"]
    for _ in range(tries):
        made = _wait_served(objs, body)
        if schema_in_force(made["spec"]):
            return made
        objs.delete_namespaced_custom_object(G, V, NS, "transferbenchmarks", name)
        time.sleep(0.2)
    return made


def test_hook_applies_the_charts_crds_as_its_own_least_privileged_account(control_plane, tmp_path):
    control_plane.ensure_namespace(NS)
    docs = [d for d in render(None, NS)
            if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "crds"]
    kinds = {d["kind"]: d for d in docs}
    assert sorted(kinds) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Job", "ServiceAccount"], sorted(kinds)
    for d in docs:
        hook = d["metadata"]["annotations"]
        assert hook["helm.sh/hook"] == "pre-install,pre-upgrade", d["kind"]
        assert hook["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded", d["kind"]
    weights = {k: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for k, d in kinds.items()}
    assert max(w for k, w in weights.items() if k != "Job") < weights["Job"], weights  # its account exists first

    api = control_plane.client()
    ext = client.ApiextensionsV1Api(api)
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    objs = client.CustomObjectsApi(api)
    sa, role, binding = kinds["ServiceAccount"], kinds["ClusterRole"], kinds["ClusterRoleBinding"]
    name = sa["metadata"]["name"]
    for d in (sa, role, binding):
        d["metadata"].pop("annotations")
    core.create_namespaced_service_account(NS, sa)
    rbac.create_cluster_role(role)
    rbac.create_cluster_role_binding(binding)
    job = kinds["Job"]["spec"]["template"]["spec"]
    [container] = job["containers"]
    [mount] = container["volumeMounts"]
    assert job["serviceAccountName"] == name and job["volumes"][0]["configMap"]["name"] == kinds["ConfigMap"][
        "metadata"]["name"]
    # the files the Job sees: the ConfigMap's keys under its mount
    crd_dir = tmp_path / "crds"
    crd_dir.mkdir()
    for key, text in kinds["ConfigMap"]["data"].items():
        (crd_dir / key).write_text(text)
    current = yaml.safe_load((crd_dir / f"{TB_CRD.split('.')[0]}.yaml").read_text())
    try:
        # A cluster installed by an older chart: its TransferBenchmark CRD lacks the field (as Helm created it).
        old = copy.deepcopy(current)
        del old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][NEW_FIELD]
        _apply(ext, old, "helm")
        tb = {"apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": "hooked"},
              "spec": {"schedule": "@every 24h", "suspend": True, "protocols": ["builtin"], NEW_FIELD: 3}}
        made = _served_with(objs, tb, lambda spec: NEW_FIELD not in spec)
        assert NEW_FIELD not in made["spec"], "the old CRD should prune the new field"
        objs.delete_namespaced_custom_object(G, V, NS, "transferbenchmarks", "hooked")

        # The Job's command, as its account, on the mounted files
        kubeconfig = control_plane.kubeconfig_for(name, NS)
        argv = [a.replace(mount["mountPath"], str(crd_dir)) for a in container["command"]]
        assert argv[0] == "tpcmesh-apply-crds"
        r = subprocess.run([str(Path(sys.executable).parent / argv[0]), *argv[1:]], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"customresourcedefinition/{TB_CRD} applied" in r.stderr and "3 CRDs Established" in r.stderr, r.stderr

        made = _served_with(objs, {**tb, "metadata": {"name": "hooked-new"}}, lambda spec: spec.get(NEW_FIELD) == 3)
        assert made["spec"].get(NEW_FIELD) == 3, made["spec"]
        served = ext.read_custom_resource_definition(TB_CRD)
        managers = {m.manager for m in served.metadata.managed_fields}
        assert "tpcmesh-crds" in managers, managers

        # Least privilege: these CRDs only; no deleting them, no other CRD, nothing namespaced.
        hook = control_plane.client(kubeconfig)
        for crd in role["rules"][0]["resourceNames"]:
            assert _can(hook, "patch", "customresourcedefinitions", "apiextensions.k8s.io", name=crd)
        assert sorted(role["rules"][0]["resourceNames"]) == sorted(
            yaml.safe_load(t)["metadata"]["name"] for t in kinds["ConfigMap"]["data"].values())
        assert not _can(hook, "patch", "customresourcedefinitions", "apiextensions.k8s.io",
                        name="certificates.cert-manager.io")
        assert not _can(hook, "delete", "customresourcedefinitions", "apiextensions.k8s.io", name=TB_CRD)
        assert not _can(hook, "list", "customresourcedefinitions", "apiextensions.k8s.io")
        assert not _can(hook, "get", "secrets", "", NS)
        assert not _can(hook, "create", "transferbenchmarks", G, NS)
    finally:
        _apply(ext, current, "tpcmesh-crds")  # the shared control plane keeps the current CRDs
        for n in ("hooked", "hooked-new"):
            try:
                objs.delete_namespaced_custom_object(G, V, NS, "transferbenchmarks", n)
            except client.ApiException:
                pass
        rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        rbac.delete_cluster_role(role["metadata"]["name"])
        core.delete_namespaced_service_account(name, NS)


def test_a_file_that_is_not_a_crd_is_refused_by_name(tmp_path):
    from tpcmesh_operator import crds

    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sneaky}\n")
    with pytest.raises(crds.CrdError, match=r"a.yaml: 'ConfigMap' 'sneaky' is not an apiextensions.k8s.io/v1 "):
        crds.load(tmp_path)
    with pytest.raises(crds.CrdError, match="no \\*.yaml files"):
        crds.load(tmp_path / "missing")
    assert crds.main([str(tmp_path)]) == 1

"""Helpers of the operator's cluster tests: apply the CRDs (idempotent) and wait until they are served."""

from __future__ import annotations

import time

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.paths import REPO

CRDS = [REPO / "manifests/crds/transferbenchmarks.yaml", REPO / "manifests/crds/transferruns.yaml"]


def apply_crds(api_client) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    for path in CRDS:
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as e:
            if e.status != 409:
                raise
            current = ext.read_custom_resource_definition(name)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, body)
        deadline = time.monotonic() + 30
        while True:
            crd = ext.read_custom_resource_definition(name)
            conds = {c.type: c.status for c in (crd.status.conditions or [])}
            if conds.get("Established") == "True":
                break
            assert time.monotonic() < deadline, f"CRD {name} not established: {conds}"
            time.sleep(0.2)
    time.sleep(1.0)  # discovery and the CEL compiler catch up


def ensure_namespace(api_client, name: str) -> None:
    """The namespace and its default ServiceAccount (no controller-manager needed to admit pods)."""
    core = client.CoreV1Api(api_client)
    for create in (lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name))),
                   lambda: core.create_namespaced_service_account(
                       name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))):
        try:
            create()
        except ApiException as e:
            if e.status != 409:
                raise

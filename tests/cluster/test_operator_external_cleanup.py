"""Deleting a TransferBenchmark with external source endpoints, with the operator (KopfRunner) on a real
kube-apiserver and a real external XRootD (its own CA and token issuer): its directory on the endpoint goes with it
(the Secret read by the operator), another benchmark's stays; a benchmark without external sources is deleted as
before; a cleanup that fails is retried with the ExternalCleanup condition, then reported by Events, and the
benchmark is deleted all the same."""

from __future__ import annotations

import ssl

import httpx
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.operator_support import OPERATOR_ARGS, G, V, apply_crds, ensure_namespace, operator_env, wait_for
from tests.support.external_xrootd import external_xrootd

pytestmark = pytest.mark.cluster
PATH = "/store/tpcmesh"
SPEC = {"schedule": "@every 1h", "suspend": True, "protocols": ["xrootd-https"], "streams": [1],
        "latency": {"enabled": False}, "loopback": {"enabled": False}}
FINALIZER = "tpcmesh.io/operator"


@pytest.fixture(scope="module")
def site(tpcmesh_pki):
    with external_xrootd(tpcmesh_pki) as x:
        yield x


def _put(site, path: str, token: str) -> None:
    with httpx.Client(verify=ssl.create_default_context(cafile=str(site.site_pki.ca_file))) as c:
        r = c.put(site.audience + path, content=b"x" * 10, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code in (200, 201), r.text


def test_deleting_a_benchmark_removes_its_files_from_the_endpoint(control_plane, tpcmesh_pki, site,
                                                                  monkeypatch) -> None:
    from kopf.testing import KopfRunner

    ns = "op-external"
    api = control_plane.client()
    apply_crds(api)
    ensure_namespace(api, ns)
    operator_env(monkeypatch, control_plane, tpcmesh_pki.ca_file, tpcmesh_pki.ca_file, ns,
                 CLEANUP_RETRY_SECONDS="0.5")
    objs = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    token = site.token(f"storage.read:{PATH}", f"storage.create:{PATH}", f"storage.modify:{PATH}")
    core.create_namespaced_secret(ns, {"metadata": {"name": "site-x"}, "stringData": {
        "token": token, "ca.crt": site.site_pki.ca_file.read_text()}})
    endpoint = {"name": "site-x", "url": site.url, "path": PATH, "credentials": "site-x", "role": "source"}
    down = {**endpoint, "url": "davs://127.0.0.1:9"}  # nothing listens on the discard port

    def tb(name: str, **extra) -> dict:
        return {"apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": name},
                "spec": {**SPEC, **extra}}

    def get(name: str) -> dict | None:
        try:
            return objs.get_namespaced_custom_object(G, V, ns, "transferbenchmarks", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def events(name: str, reason: str) -> list[str]:
        return [e.message for e in core.list_namespaced_event(ns).items
                if e.reason == reason and e.involved_object.name == name]

    # what the runs uploaded (put here by hand: no agents needed to test the deletion)
    _put(site, f"{PATH}/{ns}.ext/sets/2x1000/file-0", token)
    _put(site, f"{PATH}/{ns}.ext/sets/2x1000/file-1", token)
    _put(site, f"{PATH}/{ns}.extra/keep", token)  # another benchmark's, with a name that starts the same

    with KopfRunner([*OPERATOR_ARGS, "--namespace", ns], timeout=120) as runner:
        objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", tb("plain"))
        objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", tb("ext", externalEndpoints=[endpoint]))
        objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", tb("ext-down",
                                                                               externalEndpoints=[down]))
        wait_for("the operator to take the benchmarks", lambda: all(
            (get(n) or {}).get("status", {}).get("conditions") for n in ("plain", "ext", "ext-down")), 30)
        assert FINALIZER in get("ext")["metadata"]["finalizers"]  # (every benchmark has it: kopf's timer)

        objs.delete_namespaced_custom_object(G, V, ns, "transferbenchmarks", "plain")
        objs.delete_namespaced_custom_object(G, V, ns, "transferbenchmarks", "ext")
        wait_for("both benchmarks to be gone", lambda: get("plain") is None and get("ext") is None, 30)
        assert site.files() == [f"{PATH.lstrip('/')}/{ns}.extra/keep"]
        assert events("ext", "ExternalCleanedUp") == [f"Removed {PATH}/{ns}.ext from external endpoint site-x"]

        objs.delete_namespaced_custom_object(G, V, ns, "transferbenchmarks", "ext-down")
        seen: list[str] = []

        def condition() -> bool:
            body = get("ext-down") or {}
            seen.extend(c["message"] for c in (body.get("status") or {}).get("conditions") or []
                        if c["type"] == "ExternalCleanup" and c["status"] == "False")
            return bool(seen)

        wait_for("the ExternalCleanup condition while it retries", condition, 30, interval=0.05)
        wait_for("the benchmark to be deleted after its attempts", lambda: get("ext-down") is None, 60)
        failed = events("ext-down", "ExternalCleanupFailed")
        assert len(failed) == 3, failed  # every attempt says what is left where
        assert all(f"from {PATH}/{ns}.ext-down on external endpoint site-x" in m and "unreachable" in m
                   for m in failed), failed
        assert "unreachable" in seen[0]
    assert runner.exit_code == 0, runner.output

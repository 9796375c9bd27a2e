"""spec.lossProbe through the operator's kopf handlers (kopf.testing.KopfRunner) on a real kube-apiserver, with
REAL agents behind fake Nodes and Ready Pods (operator_support.py): the timer gives each agent the others as
peers on the port the pods announce (tpcmesh.io/ports) and reports in status.lossProbe; turning the probe off, and
deleting a probing benchmark, leave the agents without peers. (Collection into the dashboard:
tests/integration/operator/test_operator_lossprobe.py.)"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.cluster import operator_support
from tests.cluster.operator_support import OPERATOR_ARGS, G, V, apply_crds, operator_env, wait_for

pytestmark = pytest.mark.cluster

LOSS_PORT = 18874  # not the well-known 863: the suite may run without root


@pytest.fixture
def agent_pods(control_plane, agent_factory, tmp_path):
    return operator_support.agent_pods(control_plane, agent_factory, tmp_path)


def peers(h) -> set[tuple[str, str, int]]:
    return {(p["name"], p["address"], p["port"]) for p in h.get("/api/v1/loss").json()["config"]["peers"]}


def test_the_operator_configures_the_agents_probes_and_releases_them(control_plane, agent_pods, tpcmesh_pki,
                                                                      monkeypatch) -> None:
    from kopf.testing import KopfRunner

    ns = "op-loss"
    api = control_plane.client()
    apply_crds(api)
    handles = agent_pods(ns, 3, pod_annotations={"tpcmesh.io/ports": json.dumps({"loss": LOSS_PORT})},
                         loss_port=LOSS_PORT)
    operator_env(monkeypatch, control_plane, agent_pods.token_file, tpcmesh_pki.ca_file, ns)
    objs = client.CustomObjectsApi(api)
    everyone = {(h.node, h.address, LOSS_PORT) for h in handles}

    def probing_all():
        return all(peers(h) == everyone - {(h.node, h.address, LOSS_PORT)} for h in handles) or None

    def probing_none():
        return all(peers(h) == set() for h in handles) or None

    def loss_status(name: str):
        return (objs.get_namespaced_custom_object(G, V, ns, "transferbenchmarks", name).get("status") or {}).get(
            "lossProbe")

    spec = {"suspend": True, "protocols": ["builtin"], "lossProbe": {"enabled": True, "ratePps": 2}}
    with KopfRunner([*OPERATOR_ARGS, "--namespace", ns], timeout=120) as runner:
        for name in ("mesh", "gone"):
            objs.create_namespaced_custom_object(G, V, ns, "transferbenchmarks", {
                "apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": name}, "spec": spec})
        wait_for("every agent probing the others", probing_all, timeout=30)
        status = wait_for("status.lossProbe", lambda: (lambda s: s if s and s.get("agents") == 3 else None)(
            loss_status("mesh")), timeout=60)
        # suspended: no run, the probe still on
        assert not objs.list_namespaced_custom_object(G, V, ns, "transferruns")["items"]

        # one of two identical benchmarks deleted: the other keeps the probe
        objs.delete_namespaced_custom_object(G, V, ns, "transferbenchmarks", "gone")
        wait_for("gone's deletion", lambda: not any(
            b["metadata"]["name"] == "gone"
            for b in objs.list_namespaced_custom_object(G, V, ns, "transferbenchmarks")["items"]) or None)
        assert probing_all()

        objs.patch_namespaced_custom_object(G, V, ns, "transferbenchmarks", "mesh",
                                            {"spec": {"lossProbe": {"enabled": False}}})
        wait_for("no agent probing", probing_none, timeout=30)
        wait_for("status.lossProbe after the release", lambda: (lambda s: s if s and s["agents"] == 0 else None)(
            loss_status("mesh")), timeout=30)

        objs.patch_namespaced_custom_object(G, V, ns, "transferbenchmarks", "mesh",
                                            {"spec": {"lossProbe": {"enabled": True}}})
        wait_for("every agent probing again", probing_all, timeout=30)
        objs.delete_namespaced_custom_object(G, V, ns, "transferbenchmarks", "mesh")
        wait_for("no agent probing after the deletion", probing_none, timeout=30)
    assert runner.exception is None, runner.stdout
    assert "no results endpoint" in " ".join(status["problems"])

"""The ingest batch (the contract's ingestBatch) for some of a run's outbox entries. Pure code.

Measurements go as they are; an outbox entry with a `kind` is no measurement but a node's figure, sent in the
batch's `nodes`: `loopback` its loopback ceiling, `ceilings` its disk path's read and write ceilings (disk mode).
The nodes are the run's frozen agents, described from their labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..plan.spec import BenchmarkSpec, to_dict
from .agents import Agent
from .ports import RunInfo

NODE_FIGURES = {"loopback": ("loopback_gbps",), "ceilings": ("disk_read_gbps", "disk_write_gbps")}


def node_description(agent: Agent) -> dict[str, Any]:
    """A node as the dashboard stores it: address, labels, site (tpcmesh.io/site, else the zone), NIC speed."""
    nic = agent.labels.get("tpcmesh.io/nic-speed-gbps")
    return {
        "name": agent.node, "address": agent.address, "labels": dict(agent.labels),
        "site": agent.labels.get("tpcmesh.io/site") or agent.labels.get("topology.kubernetes.io/zone"),
        "nic_speed_gbps": float(nic) if nic and nic.replace(".", "", 1).isdigit() else None,
    }


def ingest_batch(run: RunInfo, status: Mapping[str, Any], spec: BenchmarkSpec, agents: Sequence[Agent],
                 entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The batch for `entries` of the run whose status is `status`, as the run's cluster (when it has one)."""
    figures: dict[str, dict[str, Any]] = {}
    for e in entries:
        for key in NODE_FIGURES.get(e.get("kind") or "", ()):
            figures.setdefault(e["source"], {})[key] = e[key]
    cluster = {"cluster": run.cluster} if run.cluster else {}
    return {
        **cluster,
        "benchmark": {"namespace": run.benchmark_namespace, "name": run.benchmark_name, "uid": run.benchmark_uid,
                      "spec": to_dict(spec), "thresholds": dict(spec.thresholds)},
        "run": {"uid": run.run_uid, "name": run.run_name, "scheduled_at": run.scheduled_at,
                "started_at": status.get("startTime"), "finished_at": status.get("completionTime"),
                "state": status.get("phase", "Running"),
                "counts": {k: status.get(k, 0) for k in ("planned", "done", "succeeded", "failed")}},
        "nodes": [{**node_description(a), **figures.get(a.node, {})} for a in agents],
        "measurements": [e for e in entries if not e.get("kind")],
    }

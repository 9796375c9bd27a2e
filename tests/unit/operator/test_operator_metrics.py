"""The operator's per-pair and per-node series leave with their nodes; a run's duration counts from its start,
also when an operator restarted in between (the executor runs with in-process agents, tests/unit/operator/instant)."""

from __future__ import annotations

import datetime as dt
import json
import uuid

from prometheus_client import REGISTRY
from tpcmesh_operator import metrics
from tpcmesh_operator.plan.spec import parse_spec
from tpcmesh_operator.run.agents import Agent
from tpcmesh_operator.run.executor import ExecutorOptions, RunExecutor, RunInfo, StaticDirectory
from tpcmesh_operator.run.status import initial_status

from tests.unit.operator.instant import EtcdSizedStore, InstantAgents


def throughput(s: str, d: str) -> float | None:
    return REGISTRY.get_sample_value("tpcmesh_operator_last_throughput_bits_per_second",
                                     {"source": s, "destination": d, "protocol": "gridftp", "streams": "8"})


def test_series_of_a_node_that_left_the_mesh_go_unless_another_benchmark_measures_it() -> None:
    for s, d in (("m-a", "m-b"), ("m-b", "m-c"), ("m-c", "m-a")):
        metrics.set_series(metrics.LAST_THROUGHPUT, (s, d, "gridftp", "8"), (s, d), "ns/one", 1e9)
    metrics.set_series(metrics.LAST_THROUGHPUT, ("m-b", "m-c", "gridftp", "8"), ("m-b", "m-c"), "ns/two", 2e9)
    metrics.set_series(metrics.LOOPBACK, ("m-c", "iperf3"), ("m-c",), "ns/one", 5e9)
    metrics.mesh_changed("ns/one", ["m-a", "m-b"])  # m-c left benchmark one's mesh
    assert throughput("m-a", "m-b") == 1e9
    assert throughput("m-c", "m-a") is None
    assert throughput("m-b", "m-c") == 2e9  # benchmark two still measures it
    assert REGISTRY.get_sample_value("tpcmesh_operator_loopback_bits_per_second",
                                     {"node": "m-c", "protocol": "iperf3"}) is None
    metrics.mesh_changed("ns/two", ["m-a", "m-b"])
    assert throughput("m-b", "m-c") is None


async def test_a_resumed_run_counts_its_duration_from_its_start() -> None:
    mesh = [Agent(f"dur-{i}", f"10.9.0.{i}") for i in range(2)]
    status = initial_status(mesh)
    status["startTime"] = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    store = EtcdSizedStore()
    store.encoded = json.dumps(status)  # an operator started this run two hours ago, then restarted
    before = REGISTRY.get_sample_value("tpcmesh_operator_run_duration_seconds_sum") or 0.0
    spec = parse_spec({"protocols": ["iperf3"], "streams": [1], "latency": False})
    st = await RunExecutor(spec, RunInfo("ns", "dur", "dur-1", str(uuid.uuid4())), StaticDirectory(mesh),
                           InstantAgents(), None, store, options=ExecutorOptions()).execute()
    assert st["phase"] == "Succeeded" and st["done"] == 4
    took = REGISTRY.get_sample_value("tpcmesh_operator_run_duration_seconds_sum") - before
    assert 2 * 3600 <= took < 2 * 3600 + 600

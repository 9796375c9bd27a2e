"""Prometheus metrics of the operator (`tpcmesh_operator_*`, base units, bounded labels: node, protocol, streams).

The per-pair and per-node gauges (`set_series`) remember which benchmarks set each series; when a benchmark's mesh
no longer has a node (`mesh_changed`, at each run's start), its series of that node go, unless another benchmark
still measures it."""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client import Counter, Gauge, Histogram

RUNS = Counter("tpcmesh_operator_runs_total", "Finished TransferRuns by outcome", ["outcome"])
RUN_DURATION = Histogram(
    "tpcmesh_operator_run_duration_seconds", "Wall time of a TransferRun's tests",
    buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 43200),
)
PAIRS = Gauge("tpcmesh_operator_pairs", "Tests of the latest run by status", ["status"])
TESTS = Counter("tpcmesh_operator_tests_total", "Finished tests by protocol and status", ["protocol", "status"])
LAST_THROUGHPUT = Gauge(
    "tpcmesh_operator_last_throughput_bits_per_second",
    "Latest measured throughput of a pair (the 003 paper's definition), bit/s",
    ["source", "destination", "protocol", "streams"],
)
LOOPBACK = Gauge("tpcmesh_operator_loopback_bits_per_second", "Latest loopback ceiling of a node (against itself)",
                 ["node", "protocol"])
LAST_RTT = Gauge("tpcmesh_operator_last_rtt_seconds", "Latest median RTT of a pair", ["source", "destination"])
UNDELIVERED = Gauge("tpcmesh_operator_undelivered_measurements", "Measurements not yet acknowledged by the dashboard")
REJECTED = Counter("tpcmesh_operator_rejected_measurements_total",
                   "Measurements the dashboard refused (kept in status.rejected and logged in full)", ["protocol"])
_undelivered: dict[str, int] = {}


def set_undelivered(run: str, count: int) -> None:
    if count:
        _undelivered[run] = count
    else:
        _undelivered.pop(run, None)
    UNDELIVERED.set(sum(_undelivered.values()))


# (gauge, label values) -> (the nodes they name, the benchmarks that set them)
_series: dict[tuple[Gauge, tuple[str, ...]], tuple[frozenset[str], set[str]]] = {}


def set_series(gauge: Gauge, labels: tuple[str, ...], nodes: Collection[str], benchmark: str, value: float) -> None:
    """Set a per-pair or per-node gauge, noting the benchmark and the nodes it is about."""
    gauge.labels(*labels).set(value)
    _series.setdefault((gauge, labels), (frozenset(nodes), set()))[1].add(benchmark)


def mesh_changed(benchmark: str, mesh: Collection[str]) -> None:
    """The benchmark now measures these nodes: drop its series about any other node (once no benchmark has it)."""
    nodes = frozenset(mesh)
    for key, (about, owners) in list(_series.items()):
        if benchmark in owners and not about <= nodes:
            owners.discard(benchmark)
            if not owners:
                gauge, labels = key
                gauge.remove(*labels)
                del _series[key]

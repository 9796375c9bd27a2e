"""The contract's `measurement` rows the executor records (manifests/schemas/measurement.v1.schema.json): from an
agent's transferRecord, for a test that produced no record, and for an RTT probe. Pure: no I/O."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from ..plan.optimizer import Tuning, fallback
from ..plan.planner import RTT, Test
from ..plan.spec import BenchmarkSpec

_MEASUREMENT_FIELDS = (
    "protocol", "streams", "concurrency", "file_size", "file_count", "total_bytes", "throughput_gbps",
    "aggregate_gbps", "peak_gbps", "status", "error", "checksum", "destination_kind", "auth", "started_at",
    "finished_at", "files", "tcp", "congestion_control", "implementation", "host", "storage",
)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def measurement_from_record(
    record: Mapping[str, Any], source: str, destination: str, rtt: Mapping[str, Any] | None = None,
    repeat: int | None = None,
    family: str = "ipv4",
) -> dict[str, Any]:
    """Contract `measurement` = the agent's `transferRecord` + the pair's node names + its RTT (+ which repeat of
    its setting it is, when the benchmark repeats settings; + the address family the operator sent the test over,
    when not IPv4: absent means IPv4, as before IPv6)."""
    m: dict[str, Any] = {"id": record["test_id"], "source": source, "destination": destination}
    for k in _MEASUREMENT_FIELDS:
        if k in record:
            m[k] = record[k]
    _add_family(m, family)
    _add_rtt(m, rtt)
    if repeat is not None:
        m["repeat"] = repeat
    return m


def add_storage(m: dict[str, Any], test: Test) -> None:
    """A disk-mode test's `storage` ({source, destination}) on its row, where the agent's record has none (a test
    that failed before the agent had one): the dashboard keys the grid cell by it."""
    if test.setting.on_disk:
        m.setdefault("storage", test.setting.storage_request())


def _add_family(m: dict[str, Any], family: str) -> None:
    if family != "ipv4":
        m["address_family"] = family


def failed_measurement(
    mid: str, test: Test, spec: BenchmarkSpec, error: str, started_at: str, rtt: Mapping[str, Any] | None = None,
    status: str = "failed", tuning: Tuning | None = None,
) -> dict[str, Any]:
    """A test that produced no agent record (agent vanished, unreachable, file set missing, cancelled before the
    agent had one): a failed (or cancelled) row, of the setting the test was to run (`tuning`: spec.optimize's)."""
    streams, concurrency = planned_setting(spec, test, tuning)
    m: dict[str, Any] = {
        "id": mid, "source": test.source, "destination": test.destination, "protocol": test.setting.protocol,
        "streams": streams, "status": status, "error": error,
        "started_at": started_at, "finished_at": now_iso(),
    }
    if test.setting.congestion:
        m["congestion_control"] = test.setting.congestion
    _add_family(m, test.setting.family)
    add_storage(m, test)
    if test.setting.protocol != RTT:
        if spec.repeats > 1:
            m["repeat"] = test.setting.repeat
        m["concurrency"] = concurrency
        m["file_size"] = spec.file_set.size
        m["file_count"] = spec.file_set.count
        m["destination_kind"] = spec.destination
    _add_rtt(m, rtt)
    return m


def planned_setting(spec: BenchmarkSpec, test: Test, tuning: Tuning | None = None) -> tuple[int | None, int]:
    """(streams, files at once) a test runs: its link's tuning, else its setting's streams and spec.concurrency;
    an optimized test without a tuning (an external endpoint's, or one that failed before it was tuned) runs the
    spec's own setting (optimizer.fallback)."""
    if tuning is not None:
        return tuning.streams, tuning.concurrency
    if test.setting.optimized and spec.optimize is not None:
        f = fallback(spec, spec.optimize)
        return f.streams, f.concurrency
    return test.setting.streams, spec.concurrency


def rtt_measurement(mid: str, test: Test, probe: Mapping[str, Any], started_at: str,
                    trace: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The probe test's row: the RTT probe decides its status; the path (when traced) rides along as `path`."""
    ok = not probe.get("error") and probe.get("median_ms") is not None
    m: dict[str, Any] = {
        "id": mid, "source": test.source, "destination": test.destination, "protocol": RTT,
        "status": "succeeded" if ok else "failed", "error": probe.get("error"),
        "started_at": started_at, "finished_at": now_iso(),
    }
    _add_family(m, test.setting.family)
    _add_rtt(m, probe if ok else None)
    if trace is not None:
        m["path"] = contract_path(trace)
    return m


def contract_path(trace: Mapping[str, Any]) -> dict[str, Any]:
    """The contract's `path` from the agent's path probe: hop addresses only (the status budget counts every
    byte; per-hop RTTs are in the agent's answer, not kept)."""
    hops = [h.get("address") if isinstance(h, Mapping) else None for h in trace.get("hops") or []][:64]
    error = trace.get("error")
    return {"hops": hops, "pmtu": trace.get("pmtu"), "interface_mtu": trace.get("interface_mtu"),
            "reached": bool(trace.get("reached")), "error": str(error)[:500] if error else None}


def _add_rtt(m: dict[str, Any], rtt: Mapping[str, Any] | None) -> None:
    """The pair's RTT on a measurement: median, min and max on the RTT row itself; the median on the others."""
    if rtt:
        m["rtt_ms"] = rtt.get("median_ms")
        for k in ("min_ms", "max_ms"):
            if k in rtt:
                m[f"rtt_{k}"] = rtt[k]

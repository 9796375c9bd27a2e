"""What the kopf handlers do (main.py only registers them). Thin: parse, call the domain, write status.

- `reconcile_benchmark`: TransferBenchmark create/update/resume -> observedGeneration, nextRunTime, Ready.
- `tick_benchmark`: the timer -> create the due TransferRun (deterministic name, owned by the benchmark, frozen
  spec; AlreadyExists after a restart is success), apply concurrencyPolicy, prune by history limits, summarise
  the last run (lastRun, Degraded).
TransferRuns are driven by rundriver.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from . import kube, schedule
from .rundriver import STOP_ANNOTATION
from .runs import TERMINAL, set_condition
from .spec import BenchmarkSpec, SpecError, parse_spec, to_dict

log = logging.getLogger(__name__)

BENCHMARK_LABEL = "tpcmesh.io/benchmark"
SCHEDULED_ANNOTATION = "tpcmesh.io/scheduled-at"


def _time(s: str | None) -> dt.datetime | None:
    if not s:
        return None
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _conditions(status: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"conditions": [dict(c) for c in (status or {}).get("conditions") or []]}


def reconcile_benchmark(spec: Mapping[str, Any], meta: Mapping[str, Any], status: Mapping[str, Any] | None,
                        now: dt.datetime) -> dict[str, Any]:
    """The status patch for a TransferBenchmark's current spec (pure)."""
    out = _conditions(status)
    out["observedGeneration"] = meta.get("generation")
    try:
        s = parse_spec(spec)
    except SpecError as e:
        set_condition(out, "Ready", False, "InvalidSpec", str(e))
        out["nextRunTime"] = None
        return out
    if s.suspend:
        set_condition(out, "Ready", True, "Suspended", "Suspended: no new runs")
        out["nextRunTime"] = None
        return out
    sch = schedule.parse_schedule(s.schedule)
    anchor = _time(meta.get("creationTimestamp")) or now
    nxt = schedule.next_run(sch, now, anchor, _time((status or {}).get("lastScheduleTime")))
    out["nextRunTime"] = _iso(nxt)
    set_condition(out, "Ready", True, "Scheduled", f"Next run at {_iso(nxt)}")
    return out


def build_run(name: str, benchmark: str, spec: BenchmarkSpec, scheduled: dt.datetime | None) -> dict[str, Any]:
    """A TransferRun manifest with a frozen copy of the benchmark's spec (owner set by the caller)."""
    run: dict[str, Any] = {
        "apiVersion": f"{kube.GROUP}/{kube.VERSION}",
        "kind": "TransferRun",
        "metadata": {"name": name, "labels": {BENCHMARK_LABEL: benchmark, "app.kubernetes.io/part-of": "tpcmesh"}},
        "spec": {"benchmarkRef": {"name": benchmark}, "benchmark": to_dict(spec)},
    }
    if scheduled is not None:
        run["spec"]["scheduledTime"] = _iso(scheduled)
        run["metadata"]["annotations"] = {SCHEDULED_ANNOTATION: _iso(scheduled)}
    return run


def runs_to_prune(runs: Sequence[Mapping[str, Any]], keep_ok: int, keep_failed: int) -> list[str]:
    """Names of finished runs beyond the history limits, oldest first (pure)."""
    def finished(phase: str) -> list[Mapping[str, Any]]:
        rs = [r for r in runs if (r.get("status") or {}).get("phase") == phase
              and not (r.get("status") or {}).get("outbox")]
        return sorted(rs, key=lambda r: r["metadata"]["creationTimestamp"], reverse=True)
    return [r["metadata"]["name"] for r in finished("Succeeded")[keep_ok:] + finished("Failed")[keep_failed:]]


async def _list_runs(namespace: str, benchmark: str) -> list[dict[str, Any]]:
    res: Any = await asyncio.to_thread(kube.custom().list_namespaced_custom_object, kube.GROUP, kube.VERSION, namespace,
                                  kube.RUNS, label_selector=f"{BENCHMARK_LABEL}={benchmark}")
    return list(res.get("items") or [])


async def tick_benchmark(
    name: str, namespace: str, body: Mapping[str, Any], now: dt.datetime,
    adopt: Callable[[dict[str, Any]], None], event: Callable[[str, str, str], None],
) -> dict[str, Any]:
    """One timer tick of a TransferBenchmark; returns its status patch."""
    status = body.get("status") or {}
    patch = reconcile_benchmark(body.get("spec") or {}, body["metadata"], status, now)
    runs = await _list_runs(namespace, name)
    active = [r for r in runs if (r.get("status") or {}).get("phase") not in TERMINAL]
    done = [r for r in runs if (r.get("status") or {}).get("phase") in TERMINAL]
    if done:
        last = max(done, key=lambda r: (r["status"].get("completionTime") or "", r["metadata"]["name"]))
        ls = last["status"]
        patch["lastRunTime"] = ls.get("completionTime")
        patch["lastRunName"] = last["metadata"]["name"]
        patch["lastRun"] = {"name": last["metadata"]["name"], "phase": ls.get("phase"),
                            "succeeded": ls.get("succeeded", 0), "failed": ls.get("failed", 0),
                            "planned": ls.get("planned", 0), "undelivered": ls.get("undelivered", 0),
                            "rejected": ls.get("rejectedCount", 0)}
        bad = ls.get("phase") == "Failed" or ls.get("failed", 0) > 0
        refused = ls.get("rejectedCount", 0)
        reason = "TestsFailed" if bad else "MeasurementsRejected" if refused else "AllTestsSucceeded"
        message = f"Last run {last['metadata']['name']}: {ls.get('message', '')}"
        if refused:
            message += f"; the dashboard refused {refused} measurement(s) (its status.rejected)"
        set_condition(patch, "Degraded", bad or refused > 0, reason, message)
    patch["active"] = sorted(r["metadata"]["name"] for r in active)
    try:
        spec = parse_spec(body.get("spec") or {})
    except SpecError:
        return patch
    if not spec.suspend:
        sch = schedule.parse_schedule(spec.schedule)
        anchor = _time(body["metadata"].get("creationTimestamp")) or now
        tick = schedule.due(sch, now, anchor, _time(status.get("lastScheduleTime")))
        if tick is not None:
            run_name = schedule.run_name(name, tick)
            others = [r for r in active if r["metadata"]["name"] != run_name]
            if others and spec.concurrency_policy == "Forbid":
                event("Normal", "SkippedRun", f"Skipped the run due at {_iso(tick)}: "
                                              f"{others[0]['metadata']['name']} is still running (Forbid)")
            else:
                for r in others:  # Replace: stop the old run, keep it (and its outbox) until pruned
                    note = f"Replaced by {run_name} (concurrencyPolicy Replace)"
                    await asyncio.to_thread(kube.custom().patch_namespaced_custom_object, kube.GROUP, kube.VERSION,
                                            namespace, kube.RUNS, r["metadata"]["name"],
                                            {"metadata": {"annotations": {STOP_ANNOTATION: note}}})
                    event("Normal", "ReplacedRun", f"Stopped {r['metadata']['name']} to start {run_name} (Replace)")
                manifest = build_run(run_name, name, spec, tick)
                adopt(manifest)
                try:
                    await asyncio.to_thread(kube.custom().create_namespaced_custom_object, kube.GROUP, kube.VERSION,
                                            namespace, kube.RUNS, manifest)
                    event("Normal", "CreatedRun", f"Created TransferRun {run_name} for {_iso(tick)}")
                except ApiException as e:
                    if e.status != 409:
                        raise
                patch["active"] = sorted({*patch["active"], run_name})
            patch["lastScheduleTime"] = _iso(tick)
            patch["nextRunTime"] = _iso(sch.next_tick(now, anchor))
    for victim in runs_to_prune(runs, spec.successful_runs_history_limit, spec.failed_runs_history_limit):
        try:
            await asyncio.to_thread(kube.custom().delete_namespaced_custom_object, kube.GROUP, kube.VERSION,
                                    namespace, kube.RUNS, victim)
        except ApiException as e:
            if e.status != 404:
                raise
    return patch

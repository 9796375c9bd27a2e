"""What the kopf handlers do (main.py only registers them). Thin: parse, call the domain, write status.

- `reconcile_benchmark`: TransferBenchmark create/update/resume -> observedGeneration, nextRunTime, Ready.
- `tick_benchmark`: the timer -> `plan_tick` (pure: the due TransferRun with a deterministic name and a frozen spec,
  concurrencyPolicy against the benchmark's own runs and any other run on its agents, history limits, the last run's
  summary: lastRun, Degraded), then its API calls (AlreadyExists after a restart is success).
TransferRuns are driven by run/driver.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from . import kube
from .plan import schedule
from .plan.spec import BenchmarkSpec, SpecError, parse_spec, to_dict
from .run.driver import STOP_ANNOTATION
from .run.status import TERMINAL, set_condition

log = logging.getLogger(__name__)

BENCHMARK_LABEL = "tpcmesh.io/benchmark"
SCHEDULED_ANNOTATION = "tpcmesh.io/scheduled-at"
# Another run that has not chosen its agents yet may take any: a due tick waits this long for it to choose (two
# benchmarks due at the same instant on disjoint nodes both run), then counts it as on all and skips
FREEZE_GRACE = dt.timedelta(seconds=60)


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


def _summary(patch: dict[str, Any], own: Sequence[Mapping[str, Any]]) -> None:
    """lastRun and Degraded from the benchmark's latest finished run (pure)."""
    done = [r for r in own if (r.get("status") or {}).get("phase") in TERMINAL]
    if not done:
        return
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


def _age(r: Mapping[str, Any], now: dt.datetime) -> dt.timedelta:
    created = _time((r.get("metadata") or {}).get("creationTimestamp"))
    return now - created if created else FREEZE_GRACE


def _active(r: Mapping[str, Any]) -> bool:
    return (r.get("status") or {}).get("phase") not in TERMINAL


def _own(r: Mapping[str, Any], benchmark: str, namespace: str | None = None) -> bool:
    meta = r.get("metadata") or {}
    return (meta.get("labels") or {}).get(BENCHMARK_LABEL) == benchmark and (
        namespace is None or meta.get("namespace", namespace) == namespace)


@dataclass
class TickPlan:
    """What one timer tick of a TransferBenchmark does (`plan_tick`, pure); `tick_benchmark` carries it out."""

    patch: dict[str, Any]  # the benchmark's status
    create: dict[str, Any] | None = None  # the TransferRun to create (before its owner is set)
    stop: list[str] = field(default_factory=list)  # runs to stop (Replace), by annotation
    prune: list[str] = field(default_factory=list)  # finished runs beyond the history limits
    events: list[tuple[str, str, str]] = field(default_factory=list)
    needs_others: bool = False  # a run is due: decide again with every other run (all watched namespaces)
    needs_agents: bool = False  # decide again with the benchmark's agents (other runs are active)


def plan_tick(name: str, body: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], now: dt.datetime,
              agents: frozenset[str] | None = None, *, others_listed: bool = True) -> TickPlan:
    """One tick (pure). `runs`: the benchmark's own TransferRuns, and, when `others_listed`, every other one the
    operator watches (in any namespace: the agents are the cluster's). Most ticks are not due and need only the
    benchmark's own runs (status summary, pruning); a due tick asks for the others with `needs_others`. A due run is
    skipped while one of the benchmark's own runs is active (Forbid) or while another run (by hand, or another
    benchmark's) is active on any of the benchmark's agents (`agents`, the nodes it would measure now; asked for with
    `needs_agents`); with Replace the benchmark's own active runs are stopped instead. The tick waits for a run that
    has not frozen its agents yet (FREEZE_GRACE), then counts it as on all."""
    status = body.get("status") or {}
    plan = TickPlan(reconcile_benchmark(body.get("spec") or {}, body["metadata"], status, now))
    namespace = body["metadata"].get("namespace")
    own = [r for r in runs if _own(r, name, namespace)]
    _summary(plan.patch, own)
    plan.patch["active"] = sorted(r["metadata"]["name"] for r in own if _active(r))
    try:
        spec = parse_spec(body.get("spec") or {})
    except SpecError:
        return plan
    plan.prune = runs_to_prune(own, spec.successful_runs_history_limit, spec.failed_runs_history_limit)
    if spec.suspend:
        return plan
    sch = schedule.parse_schedule(spec.schedule)
    anchor = _time(body["metadata"].get("creationTimestamp")) or now
    tick = schedule.due(sch, now, anchor, _time(status.get("lastScheduleTime")))
    if tick is None:
        return plan
    if not others_listed:
        return TickPlan(plan.patch, needs_others=True)
    run_name = schedule.run_name(name, tick)
    mine = [r["metadata"]["name"] for r in own if _active(r) and r["metadata"]["name"] != run_name]
    others = [r for r in runs if _active(r) and not _own(r, name, namespace)]
    if others and agents is None:
        return TickPlan(plan.patch, needs_agents=True)
    unfrozen = [r for r in others if not (r.get("status") or {}).get("agents")]
    busy = [r["metadata"]["name"] for r in others if r not in unfrozen and (agents or frozenset()) & {
        a["node"] for a in r["status"]["agents"]}]
    busy += [r["metadata"]["name"] for r in unfrozen if _age(r, now) >= FREEZE_GRACE]
    if not busy and not (mine and spec.concurrency_policy == "Forbid") and unfrozen:
        return plan  # a run just created may use any agent: decide at a later tick, once it has chosen them
    if mine and spec.concurrency_policy == "Forbid":
        plan.events.append(("Normal", "SkippedRun", f"Skipped the run due at {_iso(tick)}: {mine[0]} is still "
                                                    "running (Forbid)"))
    elif busy:
        plan.events.append(("Normal", "SkippedRun", f"Skipped the run due at {_iso(tick)}: TransferRun {busy[0]} "
                                                    "is running on its agents"))
    else:
        plan.stop = mine  # Replace (Forbid has none): stop them, keep them (and their outboxes) until pruned
        plan.events += [("Normal", "ReplacedRun", f"Stopped {r} to start {run_name} (Replace)") for r in mine]
        plan.create = build_run(run_name, name, spec, tick)
        plan.patch["active"] = sorted({*plan.patch["active"], run_name})
    plan.patch["lastScheduleTime"] = _iso(tick)
    plan.patch["nextRunTime"] = _iso(sch.next_tick(now, anchor))
    return plan


async def _list_runs(namespace: str | None, label_selector: str = "") -> list[dict[str, Any]]:
    """TransferRuns of one namespace, or of the cluster (namespace None: an operator watching every namespace)."""
    api = kube.custom()
    if namespace is None:
        res: Any = await asyncio.to_thread(api.list_cluster_custom_object, kube.GROUP, kube.VERSION, kube.RUNS,
                                           label_selector=label_selector)
    else:
        res = await asyncio.to_thread(api.list_namespaced_custom_object, kube.GROUP, kube.VERSION, namespace,
                                      kube.RUNS, label_selector=label_selector)
    return list(res.get("items") or [])


async def tick_benchmark(
    name: str, namespace: str, body: Mapping[str, Any], now: dt.datetime,
    adopt: Callable[[dict[str, Any]], None], event: Callable[[str, str, str], None],
    agents: Callable[[BenchmarkSpec], Awaitable[frozenset[str]]], watched: Sequence[str] = (),
) -> dict[str, Any]:
    """One timer tick of a TransferBenchmark (plan_tick, then its API calls); returns its status patch.
    `agents(spec)`: the nodes the benchmark would measure now; `watched`: the operator's namespaces (none: all)."""
    runs = await _list_runs(namespace, f"{BENCHMARK_LABEL}={name}")
    plan = plan_tick(name, body, runs, now, others_listed=False)
    if plan.needs_others:  # a run is due (rare): is any other run active on the same agents, in any namespace?
        scopes: Sequence[str | None] = watched or [None]
        every = [r for ns in scopes for r in await _list_runs(ns)]
        runs = [*runs, *(r for r in every if not _own(r, name, namespace))]
        plan = plan_tick(name, body, runs, now)
    if plan.needs_agents:
        plan = plan_tick(name, body, runs, now, await agents(parse_spec(body.get("spec") or {})))
    for run in plan.stop:
        note = f"Replaced by {plan.create['metadata']['name'] if plan.create else '?'} (concurrencyPolicy Replace)"
        await asyncio.to_thread(kube.custom().patch_namespaced_custom_object, kube.GROUP, kube.VERSION, namespace,
                                kube.RUNS, run, {"metadata": {"annotations": {STOP_ANNOTATION: note}}})
    if plan.create is not None:
        adopt(plan.create)
        try:
            await asyncio.to_thread(kube.custom().create_namespaced_custom_object, kube.GROUP, kube.VERSION,
                                    namespace, kube.RUNS, plan.create)
            plan.events.append(("Normal", "CreatedRun", f"Created TransferRun {plan.create['metadata']['name']} "
                                                        f"for {plan.create['spec']['scheduledTime']}"))
        except ApiException as e:
            if e.status != 409:  # created before a restart: the same tick, the same name
                raise
    for ev in plan.events:
        event(*ev)
    for victim in plan.prune:
        try:
            await asyncio.to_thread(kube.custom().delete_namespaced_custom_object, kube.GROUP, kube.VERSION,
                                    namespace, kube.RUNS, victim)
        except ApiException as e:
            if e.status != 404:
                raise
    return plan.patch

"""What the TransferRun handlers do (main.py only registers them): the daemon that executes a run and delivers its
outbox, and the last delivery when a run is deleted.

- `drive_run` (the daemon): the run executor with the TransferRun status as its store, then delivery with backoff
  until the dashboard has everything. It stops the run when asked to (annotation `tpcmesh.io/stop-requested`, which
  concurrencyPolicy Replace sets; or the run's deletion): running tests are cancelled on their agents and booked.
  On deletion it hands the executor (its outbox) over to `deliver_deleted_run` and exits. When the operator itself
  stops, the run is left as it is (its tests go on; a restarted operator resumes it).
- `deliver_deleted_run` (the deletion handler): the last delivery, for up to `Settings.deletion_delivery_seconds`,
  of what the daemon handed over (or, if no daemon runs here, e.g. the run was deleted while the operator was down,
  of the stored outbox); what could not be delivered is logged in full. kopf keeps its finalizer until then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from .. import kube
from ..cluster import cluster_name_async
from ..config import Settings
from ..credentials.tokens import incluster
from ..plan.spec import BenchmarkSpec, SpecError, parse_spec, to_dict
from .agents import AgentsClient
from .delivery import ResultsClient
from .executor import ExecutorOptions, RunExecutor, RunInfo, StaticDirectory
from .measurements import now_iso
from .status import TERMINAL, set_condition

log = logging.getLogger(__name__)

STOP_ANNOTATION = "tpcmesh.io/stop-requested"  # value: why (a person, or "Replaced by <run>")
EventFn = Callable[[str, str, str], None]

# uid -> the executor a daemon in this process hands over when its run is deleted (None: the daemon ended without)
_driving: dict[str, asyncio.Future[RunExecutor | None]] = {}


class Stopped:
    """Why the daemon must stop, from kopf's flag (main.py adapts it): `deleted()` or the operator is exiting."""

    def __init__(self, flag: Any, deleted: Callable[[], bool]) -> None:
        self.flag = flag
        self.deleted = deleted

    def __bool__(self) -> bool:
        return bool(self.flag)

    async def wait(self, seconds: float) -> None:
        await self.flag.wait(seconds)


def _as_started(frozen: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """A run that started under an operator without `loopback` planned no loopback round: resumed by this one, it
    must plan the same rounds (its currentRound counts them), so the missing field means off, not the default."""
    if "agents" in status and "loopback" not in frozen:
        return {**frozen, "loopback": {"enabled": False}}
    return dict(frozen)


async def _frozen_spec(namespace: str, body: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The spec to run: spec.benchmark, else the one frozen in status, else the referenced benchmark's now."""
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    if spec.get("benchmark") is not None:
        return _as_started(spec["benchmark"], status), "spec.benchmark"
    frozen = status.get("benchmarkSpec")
    if frozen is not None:
        return _as_started(frozen, status), "status.benchmarkSpec"
    ref = (spec.get("benchmarkRef") or {}).get("name")
    if not ref:
        raise SpecError("spec.benchmarkRef.name", "required when spec.benchmark is absent")
    try:
        tb: Any = await asyncio.to_thread(kube.custom().get_namespaced_custom_object, kube.GROUP, kube.VERSION,
                                          namespace, kube.BENCHMARKS, ref)
    except ApiException as e:
        raise SpecError("spec.benchmarkRef.name", f"TransferBenchmark {namespace}/{ref}: {e.reason}") from None
    return dict(tb.get("spec") or {}), "benchmarkRef"


@dataclass
class _Run:
    spec: BenchmarkSpec
    info: RunInfo
    store: kube.KubeStatusStore
    results: ResultsClient | None


async def _prepare(name: str, namespace: str, uid: str, body: Mapping[str, Any], settings: Settings,
                   event: EventFn) -> _Run | None:
    """Spec, identity, status store and results client of a run; None (status Failed, an Event) if its spec is
    invalid."""
    status = dict(body.get("status") or {})
    try:
        raw, where = await _frozen_spec(namespace, body)
        spec = parse_spec(raw, "spec.benchmark" if where == "spec.benchmark" else "spec")
    except SpecError as e:
        failed = {"phase": "Failed", "message": str(e), "completionTime": now_iso(),
                  "conditions": [dict(c) for c in status.get("conditions") or []]}
        set_condition(failed, "Failed", True, "InvalidSpec", str(e))
        set_condition(failed, "Succeeded", False, "InvalidSpec", str(e))
        await kube.KubeStatusStore(namespace, name).save(failed)
        event("Warning", "InvalidSpec", f"TransferRun {name} cannot run: {e}")
        return None
    bench = ((body.get("spec") or {}).get("benchmarkRef") or {}).get("name") or name
    refs = body["metadata"].get("ownerReferences") or []
    owner: Mapping[str, Any] = next((o for o in refs if o.get("kind") == "TransferBenchmark"), {})
    info = RunInfo(benchmark_namespace=namespace, benchmark_name=bench, run_name=name, run_uid=uid,
                   benchmark_uid=owner.get("uid"), scheduled_at=(body.get("spec") or {}).get("scheduledTime"),
                   cluster=await cluster_name_async(settings))
    store = kube.KubeStatusStore(namespace, name, extra={"benchmarkSpec": to_dict(spec)})
    return _Run(spec, info, store, await results_client(spec, namespace, settings, event))


async def results_client(spec: BenchmarkSpec, namespace: str, settings: Settings,
                         event: EventFn) -> ResultsClient | None:
    """The benchmark's spec.results, else the operator's default endpoint (the chart's dashboard), else None."""
    if not spec.results:
        if not settings.results_url:
            return None

        async def from_file() -> str | None:  # a rotated Secret reaches the mounted file without a restart
            return settings.results_token()
        return ResultsClient(settings.results_url, settings.results_token(), token_source=from_file)
    token = None
    source = None
    if (ref := spec.results.token_secret) is not None:
        def source() -> Awaitable[str | None]:  # re-read after a 401 and after a failed attempt
            return kube.read_secret_key(namespace, ref.name, ref.key)
        try:
            token = await source()
        except LookupError as e:
            event("Warning", "ResultsTokenMissing", f"{e}: measurements stay in the status until it exists")
    return ResultsClient(spec.results.url, token, token_source=source)


def _stop_request(body: Mapping[str, Any]) -> str | None:
    return ((body.get("metadata") or {}).get("annotations") or {}).get(STOP_ANNOTATION)


async def _watch(run: asyncio.Task[Any], body: Mapping[str, Any], stopped: Stopped) -> str | None:
    """Wait for the run to end or a reason to stop it: None (it ended), "requested", "deleted" or "exiting"."""
    while not run.done():
        if stopped:
            return "deleted" if stopped.deleted() else "exiting"
        if _stop_request(body):
            return "requested"
        waiter = asyncio.ensure_future(stopped.wait(1.0))
        await asyncio.wait({run, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
    return None


async def drive_run(name: str, namespace: str, uid: str, body: Mapping[str, Any], settings: Settings,
                    event: EventFn, stopped: Stopped) -> None:
    """The TransferRun daemon. `body` is kopf's live view of the run (annotations are read as they change)."""
    status = dict(body.get("status") or {})
    if status.get("phase") in TERMINAL and not status.get("outbox"):
        return
    prepared = await _prepare(name, namespace, uid, body, settings, event)
    if prepared is None:
        return
    spec, results = prepared.spec, prepared.results
    directory = kube.agent_directory(spec, namespace, settings)
    options = ExecutorOptions(poll_interval=settings.poll_interval, unreachable_grace=settings.unreachable_grace,
                              delivery_max_seconds=settings.delivery_max_seconds,
                              status_budget_bytes=settings.status_budget_bytes)
    handover: asyncio.Future[RunExecutor | None] = asyncio.get_running_loop().create_future()
    _driving[uid] = handover
    try:
        async with AgentsClient(settings.agent_token(), settings.ca()) as agents_client:
            ex = RunExecutor(spec, prepared.info, directory, agents_client, results, prepared.store,
                             options=options, on_event=event, token_issuer=incluster.current(),
                             external_credentials=kube.KubeSecretCredentials(namespace))
            run = asyncio.create_task(ex.execute())
            why = await _watch(run, body, stopped)
            if why == "exiting":  # the operator stops: leave the run as saved, a restarted operator resumes it
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)
                return
            if why == "deleted":
                ex.request_stop("Deleted", f"TransferRun {name} was deleted")
            elif why == "requested":
                ex.request_stop("StopRequested", str(_stop_request(body)))
            await run
            delay = 5.0
            while ex.status.get("outbox") and results is not None and not stopped:
                await stopped.wait(delay)
                if stopped:
                    break
                delay = min(delay * 2, 300.0)
                if not await ex.deliver(settings.delivery_max_seconds):
                    event("Normal", "Delivered", f"Delivered every measurement of {name} to the dashboard")
            if stopped and stopped.deleted():
                handover.set_result(ex)  # the deletion handler delivers and closes the results client
    finally:
        if not handover.done():
            handover.set_result(None)
            _driving.pop(uid, None)
            if results is not None:
                await results.aclose()


async def _last_delivery(ex: RunExecutor, settings: Settings, event: EventFn) -> None:
    """The run is being deleted: deliver what waits for a bounded time, then log in full what could not be."""
    left = len(ex.status.get("outbox") or [])
    if left and ex.results_client is not None:
        left = await ex.deliver(settings.deletion_delivery_seconds)
    if left:
        ex.report_undelivered("the TransferRun was deleted")
    elif ex.status.get("delivered"):
        event("Normal", "Delivered", f"Delivered every measurement of {ex.run.run_name} before its deletion")


async def deliver_deleted_run(name: str, namespace: str, uid: str, body: Mapping[str, Any], settings: Settings,
                              event: EventFn) -> None:
    """A run is being deleted: deliver its outbox for a bounded time, then log in full what could not be."""
    ex: RunExecutor | None = None
    if (handover := _driving.get(uid)) is not None:
        try:  # the daemon cancels the run's tests and books them first
            ex = await asyncio.wait_for(asyncio.shield(handover), settings.deletion_delivery_seconds + 60.0)
        except TimeoutError:
            log.warning("The daemon of TransferRun %s/%s did not stop in time; delivering its stored outbox",
                        namespace, name)
        finally:
            _driving.pop(uid, None)
    if ex is None:
        if not (body.get("status") or {}).get("outbox"):
            return
        prepared = await _prepare(name, namespace, uid, body, settings, event)
        if prepared is None:
            return
        ex = RunExecutor(prepared.spec, prepared.info, StaticDirectory([]), None,  # type: ignore[arg-type]  # no tests
                         prepared.results, prepared.store, on_event=event)
        await ex.load()
    try:
        await _last_delivery(ex, settings, event)
    finally:
        if ex.results_client is not None:
            await ex.results_client.aclose()  # type: ignore[attr-defined]

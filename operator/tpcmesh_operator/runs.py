"""The run executor: one TransferRun from a frozen spec to delivered measurements. Kubernetes-free.

Interface (shared with the local mode `tpcmesh-local`, which must not re-implement any of this):

    executor = RunExecutor(
        spec,            # spec.BenchmarkSpec (frozen copy; parse_spec(manifest["spec"]))
        run,             # RunInfo(benchmark_namespace, benchmark_name, benchmark_uid, run_name, run_uid, scheduled_at)
        directory,       # AgentDirectory: `async agents() -> list[agents.Agent]` (the Ready agents NOW; asked again
                         #   before every round, an agent missing from it has vanished). StaticDirectory(list) is one.
        agents_client,   # agents.AgentsClient(token, ca_file) (or anything with the same five async calls)
        results_client,  # results.ResultsClient(url, token) or None (then measurements stay in status["outbox"])
        store,           # StatusStore: `async load() -> dict | None`, `async save(dict)`. MemoryStatusStore,
                         #   JsonFileStatusStore(path) here; kube.KubeStatusStore (TransferRun status) in a cluster.
        options=ExecutorOptions(poll_interval=1.0, ...),
        on_progress=callback,   # Progress(done, failed, total, round, rounds, gbps, running) after every change
        on_event=callback,      # (type "Normal"|"Warning", reason, message): Kubernetes Events / log lines
        token_issuer=issuer,    # a tokens.minting.Minter (the built-in or an external issuer) or None: mints each
                                #   HTTP-TPC pull's read and create tokens (spec.auth token, the default when given)
        external_credentials=secrets,   # external_io.CredentialSource: spec.externalEndpoints' Secrets
                                        #   (kube.KubeSecretCredentials in a cluster; external_tests.py, external_io.py)
    )
    status = await executor.execute()   # plan, prepare file sets, probe RTT, run rounds, deliver; returns the status
    left = await executor.deliver(max_seconds)   # retry delivery of what is still in the outbox
    executor.request_stop(reason, message)   # (from another task) cancel running tests, book them, finish as Failed
    await executor.load()   # without execute(): the stored status, for a delivery-only executor

The ports above (protocols, the cluster-free stores and directory, RunInfo, ExecutorOptions, Progress) live in
runports.py and are re-exported here. The status dict is the whole state (JSON, camelCase keys, stored as the
TransferRun status; its bookkeeping is runstatus.py, its byte budget statusbudget.py, both pure): `phase`, `agents`
(frozen at the start so a resumed run plans the same rounds), `planned`, `done`, `succeeded`, `failed` (integer
counts), `currentRound` (every test of the rounds before it is finished), `totalRounds`, `tests` (key -> {status, id,
gbps, error} for the finished tests of the current round only), `recentFailures` (the latest failed tests with their
reasons, for people), `maintenance`/`inMaintenance` (nodes and pairs left out: maintenance.py), `rttMs` (each
pair's median RTT, a row per source agent, for the measurements that follow), `externals` (each external source
endpoint: "ready" once the set is uploaded and checked there, else why not),
`filesets`, `outbox` (measurements not yet acknowledged), `delivered`, `rejected` (the latest measurements the
dashboard refused, with its reason; outbox.py) and `rejectedCount`, `conditions`, times.
SIZE: nothing grows with the finished tests but the counts; `agents` is O(N), `rttMs` ~7 bytes a pair (~70 kB for
100 agents), the outbox O(measurements the dashboard has not acknowledged); see test_operator_run_status.py. The
status is one Kubernetes object: a test starts only when its measurement fits in `status_budget_bytes` next to what
waits (`Room`); otherwise tests wait, with the DeliveryBacklog condition, while the outbox is delivered (a resumed
run delivers first). See test_operator_status_budget.py.
RESUME: a new executor on the same store starts at `currentRound`, skips the tests of that round already in `tests`,
and re-posts running ones with the same test_id (the agent answers 200 with the same record), so no finished pair is
redone and no test runs twice.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from . import maintenance, metrics
from .agents import Agent, AgentBusy, AgentRejected, AgentUnavailable
from .batch import ingest_batch
from .external_io import (
    Access,
    CredentialSource,
    ExternalError,
    access,
    endpoint_client,
    missing_files,
    verify_upload,
)
from .external_tests import (
    bench_dir,
    external_node,
    name_endpoint,
    pull_from_external,
    push_to_external,
    set_files,
)
from .externals import PathEscapes
from .hosttelemetry import add_source_host
from .measurements import failed_measurement, measurement_from_record, now_iso, rtt_measurement
from .optimizer import LinkTuner, Tuning
from .outbox import describe, migrate, settle
from .outbox import encoded_size as status_size_bytes
from .planner import RTT, Plan, Setting, Test, plan
from .probing import probe_pair
from .protocols import TOKEN_PROTOCOLS, TPC_PROTOCOLS
from .results import MAX_BATCH, BatchTooLarge, DeliveryFailed, Outcome, deliver_with_backoff, post_bisecting
from .runports import (  # re-exported: the executor's interface is runs.py's (its docstring)
    AgentDirectory,
    AgentsAPI,
    EventCallback,
    ExecutorOptions,
    JsonFileStatusStore,
    MemoryStatusStore,
    Progress,
    ProgressCallback,
    ResultsAPI,
    RunInfo,
    StaticDirectory,
    StatusStore,
)
from .runstatus import (
    TERMINAL,
    book_test,
    finish_round,
    get_rtt,
    initial_status,
    migrate_status,
    put_rtt,
    set_condition,
    test_id,
)
from .spec import BenchmarkSpec
from .statusbudget import Room, min_test_bytes
from .tokens.claims import ClaimsError
from .tokens.external import ExternalIssuerError
from .tokens.minting import Minter, pull_tokens

log = logging.getLogger(__name__)

FINAL = ("succeeded", "failed", "cancelled")  # an agent's test that has its record
Request = dict[str, Any] | str  # a test's POST /api/v1/transfers body, or why there is none


# ---------------------------------------------------------------- the executor


class RunExecutor:
    def __init__(
        self,
        spec: BenchmarkSpec,
        run: RunInfo,
        directory: AgentDirectory,
        agents_client: AgentsAPI,
        results_client: ResultsAPI | None,
        store: StatusStore,
        *,
        options: ExecutorOptions | None = None,
        on_progress: ProgressCallback | None = None,
        on_event: EventCallback | None = None,
        token_issuer: Minter | None = None,
        external_credentials: CredentialSource | None = None,
        external_ca_file: str | None = None,
    ) -> None:
        self.spec = spec
        self.external_credentials = external_credentials  # reads spec.externalEndpoints' Secrets
        self.external_ca_file = external_ca_file  # what the operator trusts reaching them (None: the system's)
        self._access: dict[str, Access | str] = {}  # external endpoint -> how to reach it, or why it cannot be
        self._set_manifest: dict[str, Any] | None = None  # the file set as an agent answered (names, checksums)
        self.token_issuer = token_issuer
        self.auth = spec.auth or ("token" if token_issuer is not None else "x509")
        self.run = run
        self.directory = directory
        self.agents_client = agents_client
        self.results_client = results_client
        self.store = store
        self.options = options or ExecutorOptions()
        self.on_progress = on_progress
        self.on_event = on_event
        self.status: dict[str, Any] = {}
        self.plan: Plan | None = None
        self._lock = asyncio.Lock()
        self._live: dict[str, float] = {}
        self._frozen: dict[str, Agent] = {}
        self._current: dict[str, Agent] = {}
        self._last_save = 0.0
        self._flush_lock = asyncio.Lock()
        self._flush_after = 0.0  # during the run, after a failed delivery, wait (backoff) before trying again
        self._flush_backoff = 5.0
        self._batch_size = MAX_BATCH
        self._stopping = asyncio.Event()
        self._stop_reason = ("", "")
        self._room = Room(self.options.status_budget_bytes, min_test_bytes(spec))
        self._tuner = None if spec.optimize is None else LinkTuner(
            spec, getattr(results_client, "advice", None), self._bench_key, run.cluster,
            on_unavailable=lambda why: self._event(
                "Warning", "AdviceUnavailable", f"Run {run.run_name}: spec.optimize: no advice from the dashboard "
                f"({why}); links without it run the spec's setting"))

    @property
    def _bench_key(self) -> str:
        return f"{self.run.benchmark_namespace}/{self.run.benchmark_name}"

    @property
    def _names(self) -> tuple[str, ...]:
        return self.plan.agents if self.plan else ()

    # -- public

    async def load(self) -> dict[str, Any]:
        """Load the status from the store (an older format migrated) and the agents frozen in it. `execute` does
        this first; alone, it prepares a delivery-only executor (`deliver`) for a run that is not executed here."""
        self.status = await self.store.load() or {}
        if "agents" in self.status:
            self._frozen = {a["node"]: Agent.from_dict(a) for a in self.status["agents"]}
        migrate(self.status)
        self._room.measure(self.status)
        return self.status

    def request_stop(self, reason: str, message: str) -> None:
        """Stop the run (it was replaced or deleted): no new test starts, the running ones are cancelled on their
        agents and booked with what the agents measured, and the run finishes as Failed with `reason`.
        `execute()` returns once that is saved; the outbox is kept for `deliver()`."""
        if not self._stopping.is_set():
            self._stop_reason = (reason, message)
            self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up at once when the run is stopped."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            pass

    async def execute(self) -> dict[str, Any]:
        st = await self.load()
        if st.get("phase") in TERMINAL:
            await self.deliver(self.options.delivery_max_seconds)
            return self.status
        resumed = "agents" in st
        if not resumed:
            agents = await self.directory.agents()
            windows = await self._maintenance(agents)
            out_nodes, _ = maintenance.excluded(windows, [a.node for a in agents])
            st.update(initial_status([a for a in agents if a.node not in out_nodes]))
            if windows:
                st["maintenance"] = [w.to_dict() for w in windows]
                st["inMaintenance"] = ", ".join(sorted({w.node or "↔".join(w.pair or ()) for w in windows}))
            self._frozen = {a["node"]: Agent.from_dict(a) for a in st["agents"]}
        _, out_pairs = maintenance.excluded(map(maintenance.Window.from_dict, st.get("maintenance") or []),
                                            self._frozen)
        # in a thread: a siteExclusive plan solves an LP (seconds at many sites) and the loop serves every run,
        # the probes and kopf's handlers meanwhile
        self.plan = await asyncio.to_thread(plan, {n: a.labels for n, a in self._frozen.items()}, self.spec,
                                            exclude_pairs=out_pairs,
                                            families={n: a.families for n, a in self._frozen.items()})
        p = self.plan
        if resumed and st.get("totalRounds", p.num_rounds) != p.num_rounds:
            # currentRound counts the rounds planned at the start: another plan would redo or skip some
            return await self._finish("PlanChanged", f"the run was planned in {st['totalRounds']} rounds and now "
                                                     f"plans {p.num_rounds}: its spec or the operator changed; start "
                                                     "a new run")
        migrate_status(st, p.agents)
        st["planned"] = p.num_tests + len(p.skipped) * len(p.settings)
        st["totalRounds"] = p.num_rounds
        self._recount()
        left_out = f"; left out, in maintenance: {st['inMaintenance']}" if st.get("inMaintenance") else ""
        if p.family_skipped:  # not failures: a node without IPv6 is no fault of the pair; said, never dropped
            st["familySkipped"] = p.skipped_summary()
            left_out += f"; skipped: {st['familySkipped']}"
        set_condition(st, "Progressing", True, "Resumed" if resumed else "Started",
                      f"{st['planned']} tests of {len(self._frozen)} agents in {p.num_rounds} rounds{left_out}")
        await self._save(force=True)
        self._event("Normal", "Resumed" if resumed else "Started",
                    f"{'Resumed' if resumed else 'Started'} run {self.run.run_name}: {st['planned']} tests, "
                    f"{len(self._frozen)} agents, {p.num_rounds} rounds{left_out}")
        if len(self._frozen) < 2 and not p.skipped and not p.external_rounds:
            return await self._finish("NotEnoughAgents", f"{len(self._frozen)} Ready agent(s): a mesh needs two")
        metrics.mesh_changed(self._bench_key, p.agents)  # series of nodes that left the mesh go
        if resumed:  # what waits for the dashboard first: a status near its size limit must not grow on resume
            await self._flush_once()
        if int(st.get("currentRound", 0)) == 0:  # pairs left out are booked with round 0 (its keys say which)
            for s, d, reason in p.skipped:
                for setting in p.settings:
                    t = Test(-1, setting, s, d)
                    if t.key not in st["tests"]:
                        await self._with_room(functools.partial(
                            self._record_failure, t, test_id(self.run.run_uid, t.key, 0), reason, now_iso()))
        await self._prepare_filesets()
        await self._prepare_externals()
        for i in range(int(st.get("currentRound", 0)), p.num_rounds):
            if self.stopping:
                break
            st["currentRound"] = i
            self._current = {a.node: a for a in await self._directory_safe()}
            self._room.measure(st, outbox=False)
            pending = [t for t in p.round(i) if t.key not in st["tests"]]
            if pending:
                await asyncio.gather(*(self._with_room(functools.partial(self._run_test, t)) for t in pending))
            async with self._lock:
                finish_round(st, i)
                await self._save(force=True)
            self._progress()
            await self._flush_once()
        if self.stopping:
            return await self._finish(*self._stop_reason)
        return await self._finish(None, "")

    async def deliver(self, max_seconds: float) -> int:
        """Retry delivery of the outbox with backoff for up to max_seconds. Returns how many are left."""
        if self.results_client is None or not self.status.get("outbox"):
            return len(self.status.get("outbox") or [])
        deadline = time.monotonic() + max_seconds
        async with self._flush_lock:
            while self.status.get("outbox"):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                client = self.results_client

                async def post(b: dict[str, Any], left: float = left, client: Any = client) -> Any:
                    return await deliver_with_backoff(client, b, left)

                try:
                    await self._post_next_batch(post)
                except DeliveryFailed as e:
                    self._delivery_failed(e)
                    break
        self._progress()
        return len(self.status.get("outbox") or [])

    # -- steps

    async def _finish(self, reason: str | None, message: str) -> dict[str, Any]:
        st = self.status
        self._recount()
        if reason is None:
            ok = st["succeeded"] > 0 or st["planned"] == 0
            reason = "Completed" if st["failed"] == 0 else ("CompletedWithFailures" if ok else "AllTestsFailed")
            message = f"{st['succeeded']} of {st['planned']} tests succeeded, {st['failed']} failed"
        else:
            ok = False
            message = f"{message}: {st['done']} of {st['planned']} tests done"
        st["phase"] = "Succeeded" if ok else "Failed"
        st["completionTime"] = now_iso()
        st["message"] = message
        set_condition(st, "Progressing", False, reason, message)
        set_condition(st, "Succeeded", ok, reason, message)
        set_condition(st, "Failed", not ok, reason, message)
        metrics.RUNS.labels(outcome=st["phase"].lower()).inc()
        if st.get("startTime"):  # the whole run, also across operator restarts
            started = dt.datetime.fromisoformat(st["startTime"].replace("Z", "+00:00"))
            metrics.RUN_DURATION.observe((dt.datetime.now(dt.UTC) - started).total_seconds())
        metrics.PAIRS.labels(status="succeeded").set(st["succeeded"])
        metrics.PAIRS.labels(status="failed").set(st["failed"])
        await self._save(force=True)
        self._event("Normal" if ok else "Warning", reason, f"Run {self.run.run_name} finished: {message}")
        self._progress()
        await self.deliver(self.options.delivery_max_seconds)
        return self.status

    async def _with_room(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run one test (`work()`) once there is room in the status for its measurement; while there is none, deliver.
        Without a results endpoint nothing can make room: the run stops (OutboxFull) rather than lose anything."""
        need = self._room.need()
        while not self._room.reserve(need):
            if self.stopping:
                break
            if self.results_client is None:
                self.request_stop("OutboxFull", "the status holds as many measurements as it can and the run has no "
                                                "results endpoint (spec.results) to deliver them to")
                break
            await self._backlog(True)
            if self._flush_lock.locked():  # another test of the round is delivering
                await self._pause(self.options.poll_interval)
            else:
                await self.deliver(self.options.backlog_retry_seconds)
        if self.stopping:
            return
        await self._backlog(False)
        try:
            await work()
        finally:
            self._room.release(need)

    async def _backlog(self, waiting: bool) -> None:
        """The DeliveryBacklog condition: True while new tests wait for the dashboard to take measurements."""
        now = next((c["status"] == "True" for c in self.status.get("conditions") or []
                    if c["type"] == "DeliveryBacklog"), False)
        if now == waiting:
            return
        async with self._lock:
            n = len(self.status.get("outbox") or [])
            if waiting:
                msg = (f"{n} measurements ({self._room.outbox_bytes // 1000} kB) wait for the dashboard; new tests "
                       f"start when it has taken them (status budget {self._room.budget // 1000} kB)")
                set_condition(self.status, "DeliveryBacklog", True, "StatusFull", msg)
                self._event("Warning", "DeliveryBacklog", f"Run {self.run.run_name}: {msg}")
            else:
                msg = f"{n} measurements wait for the dashboard"
                set_condition(self.status, "DeliveryBacklog", False, "Flowing", msg)
                self._event("Normal", "DeliveryResumed", f"Run {self.run.run_name}: new tests start again ({msg})")
            await self._save(force=True)

    async def _maintenance(self, agents: Sequence[Agent]) -> list[maintenance.Window]:
        """The windows in force: the nodes' annotations, and the dashboard's when it answers (a run does not wait
        for a dashboard that is away: the annotations still count, and the status says the list was not read)."""
        now = maintenance.now_utc()
        windows: list[maintenance.Window] = []
        for a in agents:
            found = maintenance.from_annotations(a.node, a.annotations, now)
            if isinstance(found, str):
                self._event("Warning", "BadMaintenanceAnnotation", found)
            elif found is not None:
                windows.append(found)
        fetch = getattr(self.results_client, "active_maintenance", None)
        if fetch is not None:
            try:
                windows += maintenance.from_dashboard(await asyncio.wait_for(fetch(self.run.cluster), 30), now)
            except (DeliveryFailed, TimeoutError) as e:
                self._event("Warning", "MaintenanceUnknown", f"the dashboard's maintenance windows were not read "
                                                            f"({e}); only node annotations count for this run")
        return windows

    async def _prepare_filesets(self) -> None:
        lb = self.spec.loopback
        if not any(p in TPC_PROTOCOLS for p in self.spec.protocols) and not (lb.enabled and lb.protocol in
                                                                              TPC_PROTOCOLS):
            return
        st = self.status
        todo = [a for n, a in self._frozen.items() if st["filesets"].get(n) != "ready"]

        async def one(agent: Agent) -> None:
            try:
                answer = await self.agents_client.prepare_fileset(
                    agent, self.spec.file_set.request(), timeout=self.options.fileset_timeout
                )
                st["filesets"][agent.node] = "ready"
                self._set_manifest = self._set_manifest or answer
            except (AgentUnavailable, AgentRejected) as e:
                st["filesets"][agent.node] = e.message
                self._event("Warning", "FileSetFailed", f"File set {self.spec.file_set.name} failed on {agent.node}: "
                                                        f"{e.message}")

        if not todo and self.plan is not None and self.plan.externals and self._set_manifest is None:
            todo = [a for a in self._frozen.values() if st["filesets"].get(a.node) == "ready"][:1]  # resumed: names
        if todo:
            work: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*(one(a) for a in todo)))
            stop: asyncio.Future[Any] = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not work.done():  # stopped while the agents write their files: they finish them on their own
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
            await self._save(force=True)

    async def _prepare_externals(self) -> None:
        """Each external endpoint of the plan: its credentials read, and, for a source, the set uploaded once (the
        status remembers it: `externals`, endpoint -> "ready" or why not)."""
        if self.plan is None or not self.plan.externals:
            return
        uploads = self.status.setdefault("externals", {})
        for ep in self.spec.external_endpoints:
            if ep.name not in self.plan.externals:
                continue
            try:
                acc = await access(ep, self.external_credentials)
            except ExternalError as e:
                self._access[ep.name] = str(e)
                self._event("Warning", "ExternalEndpointFailed", str(e))
                continue
            self._access[ep.name] = acc
            if ep.is_destination:
                try:
                    async with endpoint_client(acc, self.external_ca_file) as client:
                        await client.make_dirs(self._external_dir(ep, "incoming"))
                except ExternalError as e:
                    self._access[ep.name] = str(e)
                    self._event("Warning", "ExternalEndpointFailed", str(e))
                    if not ep.is_source:
                        continue
            if ep.is_source and uploads.get(ep.name) != "ready" and not self.stopping:
                uploads[ep.name] = await self._upload(acc)
                await self._save(force=True)

    def _external_dir(self, ep: Any, *parts: str) -> str:
        return str(ep.path_of(bench_dir(self.run.benchmark_namespace, self.run.benchmark_name), *parts))

    async def _upload(self, acc: Access) -> str:
        """The set into `<path>/<benchmark>/sets/<set>/` unless it is there already (sizes and adler32 checked
        before and after): a third-party copy from an agent that holds it. "ready", or why not (an Event too)."""
        ep = acc.endpoint
        directory = self._external_dir(ep, "sets", self.spec.file_set.name)
        files = set_files(self._set_manifest)
        holder = next((a for n, a in self._frozen.items() if self.status["filesets"].get(n) == "ready"), None)
        try:
            if not files or holder is None:
                raise ExternalError(f"{acc.describe()}: no agent holds the file set {self.spec.file_set.name} to "
                                    "upload it from")
            async with endpoint_client(acc, self.external_ca_file) as client:
                if await missing_files(client, directory, files):
                    await client.make_dirs(directory)
                    tid = test_id(self.run.run_uid, f"upload/{ep.name}", 0)
                    request = await asyncio.to_thread(push_to_external, self.spec, None, tid, acc, directory, holder,
                                                      self.token_issuer, self.auth, streams=max(self.spec.streams),
                                                      remove=False)
                    upload = Test(-1, Setting(ep.protocol, 1), holder.node, ep.name)
                    record, error, _ = await self._transfer(upload, holder, request, tid)
                    if record is None or record.get("status") != "succeeded":
                        raise ExternalError(name_endpoint(acc.describe(), "uploading the test files from "
                                            f"{holder.node} failed: {(record or {}).get('error') or error}"))
                    await verify_upload(client, directory, files)
        except ExternalError as e:
            self._event("Warning", "ExternalUploadFailed", str(e))
            return str(e)
        self._event("Normal", "ExternalFilesReady", f"{acc.describe()}: the {len(files)} test files are at "
                                                    f"{directory} (sizes and adler32 checked)")
        return "ready"

    async def _run_external(self, test: Test, started: str) -> None:
        """A test between an agent and an external endpoint (external_tests.py says who is asked what)."""
        assert self.plan is not None
        source_external = self.plan.is_external(test.source)
        ext, node = (test.source, test.destination) if source_external else (test.destination, test.source)
        tid0 = test_id(self.run.run_uid, test.key, 0)
        acc = self._access.get(ext)
        agent = self._current.get(node)
        uploaded = self.status.get("externals", {}).get(ext)
        if not isinstance(acc, Access):
            why = acc or f"external endpoint {ext}: not prepared"
        elif agent is None:
            why = f"agent {node} vanished (no longer Ready)"
        elif self.status["filesets"].get(node) != "ready":
            why = f"file set {self.spec.file_set.name} not ready on {node}: {self.status['filesets'].get(node)}"
        elif source_external and uploaded != "ready":
            why = name_endpoint(acc.describe(), "its test files are not there: "
                                                + str(uploaded).removeprefix(acc.describe() + ": "))
        else:
            why = ""
        if why:
            await self._record_failure(test, tid0, why, started)
            return
        assert isinstance(acc, Access) and agent is not None
        ep = acc.endpoint
        if source_external:
            directory = self._external_dir(ep, "sets")
            record, error, tid = await self._attempts(test, agent, lambda tid: asyncio.to_thread(
                pull_from_external, self.spec, test, tid, acc, directory, agent, self.token_issuer, self.auth))
        else:
            directory = self._external_dir(ep, "incoming")
            record, error, tid = await self._attempts(test, agent, lambda tid: asyncio.to_thread(
                push_to_external, self.spec, test, tid, acc, directory, agent, self.token_issuer, self.auth))
        if record is None:
            await self._record_failure(test, tid, name_endpoint(acc.describe(), error), started, None,
                                       "cancelled" if self.stopping else "failed")
            return
        m = measurement_from_record(record, test.source, test.destination, None)
        if ep.scheme == "gsiftp" and not source_external:  # the agent cannot delete over gsiftp: the operator does
            left = await self._remove_copies(acc, record)
            if left and m.get("status") == "succeeded":
                m["status"] = "failed"
                m["error"] = "the copies were made but could not be removed: " + "; ".join(left)
        if m.get("error"):
            m["error"] = name_endpoint(acc.describe(), str(m["error"]))
        m["auth"] = self._mode_of(test)
        await self._record(test, m)

    async def _remove_copies(self, acc: Access, record: Mapping[str, Any]) -> list[str]:
        """Remove what a push into a gsiftp endpoint left in its incoming directory (each file of the record); the
        problems."""
        problems: list[str] = []
        try:
            async with endpoint_client(acc, self.external_ca_file) as client:
                for f in record.get("files") or []:
                    try:
                        await client.delete(self._external_dir(acc.endpoint, "incoming", str(f["name"])))
                    except (ExternalError, PathEscapes) as e:
                        problems.append(str(e))
        except ExternalError as e:
            problems.append(str(e))
        return problems

    async def _run_test(self, test: Test) -> None:
        if self.stopping:
            return
        started = now_iso()
        key = test.key
        if self.plan is not None and (self.plan.is_external(test.source) or self.plan.is_external(test.destination)):
            await self._run_external(test, started)
            return
        rtt = get_rtt(self.status, self._names, test.source, test.destination)
        gone = [n for n in (test.source, test.destination) if n not in self._current]
        if gone:
            await self._record_failure(test, test_id(self.run.run_uid, key, 0),
                                       f"agent {gone[0]} vanished (no longer Ready)", started, rtt)
            return
        src, dst = self._current[test.source], self._current[test.destination]
        tuning = None
        if test.setting.optimized and self._tuner is not None:
            tuning = await self._tuner.tuning(test.source, test.destination, test.setting.protocol)
            self.status["optimizer"] = self._tuner.summary()
        if test.setting.protocol == RTT:
            m, probe = await probe_pair(self.agents_client, src, dst, test, test_id(self.run.run_uid, key, 0),
                                        started, self.spec.latency_count, self.spec.path)
            ok = m["status"] == "succeeded"
            # the pair's RTT for the transfers that follow, over this probe's family: a failed probe leaves none
            # (not the other family's, probed earlier in the run)
            put_rtt(self.status, self._names, test.source, test.destination, probe["median_ms"] if ok else None)
            if ok:
                metrics.set_series(metrics.LAST_RTT, (test.source, test.destination), (test.source, test.destination),
                                   self._bench_key, (probe["median_ms"] or 0) / 1000)
            await self._record(test, m)
            return
        if test.setting.protocol in TPC_PROTOCOLS:
            for node in (test.source, test.destination):
                fs = self.status["filesets"].get(node)
                if fs != "ready":
                    await self._record_failure(test, test_id(self.run.run_uid, key, 0),
                                               f"file set {self.spec.file_set.name} not ready on {node}: {fs}",
                                               started, rtt, tuning=tuning)
                    return
        record, error, tid = await self._attempts(test, dst, lambda tid: self._request(test, src, dst, tid, tuning))
        if record is not None:
            m = measurement_from_record(record, test.source, test.destination, rtt,
                                        test.setting.repeat if self.spec.repeats > 1 else None, test.setting.family)
            await add_source_host(self.agents_client, src, dst.host(test.setting.family), m)
            if self._mode_of(test):
                m["auth"] = self._mode_of(test)
            await self._record(test, m)
        else:
            await self._record_failure(test, tid, error, started, rtt, "cancelled" if self.stopping else "failed",
                                       tuning=tuning)

    async def _attempts(self, test: Test, agent: Agent, build: Callable[[str], Request | Awaitable[Request]]
                        ) -> tuple[dict[str, Any] | None, str, str]:
        """Run a test on `agent` (the request `build(test_id)` makes, or why there is none) with the spec's
        retries: (final record or None, error, the last attempt's test id)."""
        record: dict[str, Any] | None = None
        error = ""
        tid = ""
        for attempt in range(self.spec.retries + 1):
            tid = test_id(self.run.run_uid, test.key, attempt)
            try:
                built = build(tid)
                request = await built if inspect.isawaitable(built) else built
            except (ExternalIssuerError, ClaimsError) as e:  # no token for it: the issuer's answer is the reason
                return None, str(e), tid
            if isinstance(request, str):
                return None, request, tid
            record, error, final = await self._transfer(test, agent, request, tid)
            if record is not None and record.get("status") == "succeeded":
                break
            if final or self.stopping:
                break
            if attempt < self.spec.retries:
                self._event("Normal", "Retrying", f"Retrying {test.key} (attempt {attempt + 2}): {error}")
        return record, error, tid

    async def _request(self, test: Test, src: Agent, dst: Agent, tid: str,
                       tuning: Tuning | None = None) -> dict[str, Any] | str:
        """The POST /api/v1/transfers body of a test between two agents, sent to the destination (or why none);
        `tuning`: the link's streams x files (spec.optimize)."""
        proto = test.setting.protocol
        request: dict[str, Any] = {
            "test_id": tid, "protocol": proto,
            "source": {"host": src.host(test.setting.family), "port": src.port(proto)},
            "file_set": self.spec.file_set.request(),
            "concurrency": tuning.concurrency if tuning else self.spec.concurrency,
            "streams": tuning.streams if tuning else test.setting.streams,
            "timeout_seconds": self.spec.timeout_seconds,
            # an agent's own ceiling: its files are read and discarded, never written over themselves
            "destination": "sink" if test.setting.loopback else self.spec.destination,
        }
        if proto == "iperf3":
            request["duration_seconds"] = self.spec.iperf3_seconds
        if proto in TOKEN_PROTOCOLS and self.auth == "token":
            if self.token_issuer is None:
                return ("spec.auth is token but this operator runs no token issuer: enable it (chart value "
                        "tokens.mode: builtin, with certificates) or set spec.auth: x509")
            # in a thread: an external issuer answers over the network (its refusal: _attempts)
            request["tokens"] = dict(await asyncio.to_thread(pull_tokens, self.token_issuer, src, dst, proto,
                                                             self.spec.timeout_seconds))
        if test.setting.congestion:
            request["congestion_control"] = test.setting.congestion
        return request

    async def _transfer(self, test: Test, dst: Agent, request: Mapping[str, Any],
                        tid: str) -> tuple[dict | None, str, bool]:
        """One attempt: `request` posted to the agent `dst` that runs it, followed to its end. Returns (final record
        or None, error, final: no point retrying)."""
        o = self.options
        deadline = time.monotonic() + self.spec.timeout_seconds + o.timeout_grace
        unreachable_since: float | None = None
        started = False
        try:
            while True:
                if self.stopping:
                    message = f"cancelled: {self._stop_reason[1]}"
                    rec = await self._cancel(dst, tid) if started else None
                    return (rec if rec and rec.get("status") in FINAL else None), message, True
                if time.monotonic() > deadline:
                    await self._cancel(dst, tid)
                    return None, f"timed out after {self.spec.timeout_seconds} s", False
                try:
                    if not started:
                        rec = await self.agents_client.start_transfer(dst, request)
                        started = True
                    else:
                        rec = await self.agents_client.get_transfer(dst, tid)
                    unreachable_since = None
                except AgentBusy:
                    await self._pause(o.poll_interval)
                    continue
                except AgentRejected as e:
                    if started and e.status == 404:
                        return None, f"agent {dst.node} lost test {tid} (restarted?)", False
                    return None, e.message, e.status not in (404, 408, 429)
                except AgentUnavailable as e:
                    now = time.monotonic()
                    unreachable_since = unreachable_since or now
                    if now - unreachable_since >= o.unreachable_grace:
                        live = {a.node for a in await self._directory_safe()}
                        if dst.node not in live:
                            return None, f"agent {dst.node} vanished during the test", True
                        return None, f"agent {dst.node} unreachable for {o.unreachable_grace:g} s: {e.message}", True
                    await self._pause(o.poll_interval)
                    continue
                if rec.get("status") in FINAL:
                    return rec, rec.get("error") or "", False
                gbps = (rec.get("progress") or {}).get("gbps")
                self._live[test.key] = float(gbps or 0.0)
                self._progress()
                await self._pause(o.poll_interval)
        finally:
            self._live.pop(test.key, None)

    async def _cancel(self, agent: Agent, tid: str) -> dict | None:
        """DELETE the test on its agent; the agent's final record of it, if it answered with one."""
        try:
            return await self.agents_client.cancel_transfer(agent, tid)
        except AgentUnavailable as e:
            log.warning("Cancelling test %s on %s failed: %s", tid, agent.node, e.message)
            return None

    # -- bookkeeping

    async def _record_failure(self, test: Test, tid: str, error: str, started: str,
                              rtt: Mapping[str, Any] | None = None, status: str = "failed",
                              tuning: Tuning | None = None) -> None:
        m = failed_measurement(tid, test, self.spec, error, started, rtt, status, tuning)
        if self._mode_of(test):  # a failure shows in its mode's grid cell (the dashboard keys cells by mode)
            m["auth"] = self._mode_of(test)
        await self._record(test, m)

    def _mode_of(self, test: Test) -> str | None:
        """The auth mode a test runs in: the run's for the HTTP-based copies and any test with an external
        endpoint; None for the protocols without modes."""
        external = self.plan is not None and (self.plan.is_external(test.source)
                                              or self.plan.is_external(test.destination))
        return self.auth if external or test.setting.protocol in TOKEN_PROTOCOLS else None

    async def _record(self, test: Test, m: dict[str, Any]) -> None:
        async with self._lock:
            st = self.status
            gbps = m.get("throughput_gbps")
            waiting = len(st.get("outbox") or [])
            if not book_test(st, test.key, m):
                log.warning("Test %s of %s was already booked; ignored a second result", test.key, self.run.run_name)
                return
            self._room.booked(st["outbox"][-1] if len(st["outbox"]) > waiting else None)
            self._recount()
            metrics.TESTS.labels(protocol=test.setting.protocol, status=m["status"]).inc()
            if gbps is not None and test.setting.loopback:
                metrics.set_series(metrics.LOOPBACK, (test.source, test.setting.protocol), (test.source,),
                                   self._bench_key, gbps * 1e9)
            elif gbps is not None and test.setting.protocol != RTT:
                metrics.set_series(metrics.LAST_THROUGHPUT, (test.source, test.destination, test.setting.protocol,
                                                             str(m.get("streams") or test.setting.streams)),
                                   (test.source, test.destination), self._bench_key, gbps * 1e9)
            if m["status"] != "succeeded":
                self._event("Warning", "TestFailed", f"Test {test.key} failed: {m.get('error')}")
            await self._save()
        self._progress()

    def _recount(self) -> None:
        st = self.status
        st["undelivered"] = len(st.get("outbox") or [])
        metrics.set_undelivered(self.run.run_uid, st["undelivered"])

    async def _save(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and self.options.save_every and now - self._last_save < self.options.save_every:
            return
        self._last_save = now
        st = self.status
        st["undelivered"] = len(st.get("outbox") or [])
        st["progress"] = f"{st.get('done', 0)}/{st.get('planned', 0)}"
        st["round"] = f"{st.get('currentRound', 0)}/{st.get('totalRounds', 0)}"
        await self.store.save(st)

    async def _directory_safe(self) -> Sequence[Agent]:
        try:
            return await self.directory.agents()
        except Exception as e:  # a flaky API server must not fail every test: keep the last view
            log.warning("Listing agents failed, keeping the last view: %s", e)
            return list(self._current.values()) or list(self._frozen.values())

    # -- delivery

    def _batch(self, entries: list[Mapping[str, Any]]) -> dict[str, Any]:
        """The ingest batch for some outbox entries (batch.ingest_batch), with the external endpoints it measured."""
        batch = ingest_batch(self.run, self.status, self.spec, list(self._frozen.values()), entries)
        batch["nodes"] += [external_node(ep) for ep in self.spec.external_endpoints
                           if self.plan is not None and ep.name in self.plan.externals]
        return batch

    async def _post_next_batch(self, post: Callable[[dict[str, Any]], Any]) -> None:
        """Post the head of the outbox (bisecting around measurements the dashboard refuses) and settle what it
        acknowledged or refused; a 413 halves the batch size for the next attempts."""
        ms = list(self.status["outbox"][:self._batch_size])
        outcome = Outcome()
        try:
            await post_bisecting(post, self._batch, ms, outcome)
        except BatchTooLarge as e:
            if len(ms) == 1:
                raise DeliveryFailed(f"{e} (a single measurement)") from e
            self._batch_size = max(1, len(ms) // 2)
            log.warning("Dashboard refused a batch of %d measurements of %s as too large; trying %d at a time",
                        len(ms), self.run.run_name, self._batch_size)
        finally:
            if outcome:
                await self._settle(outcome)

    async def _settle(self, outcome: Outcome) -> None:
        for m, reason in outcome.rejected:
            metrics.REJECTED.labels(protocol=str(m.get("protocol"))).inc()
            log.warning("Dashboard refused measurement %s of run %s: %s; set aside in status.rejected, the record: %s",
                        describe(m), self.run.run_name, reason, json.dumps(m, separators=(",", ":")))
        if outcome.rejected:
            self._event("Warning", "MeasurementsRejected",
                        f"Dashboard refused {len(outcome.rejected)} measurement(s), set aside in status.rejected: "
                        + "; ".join(f"{describe(m)}: {r}" for m, r in outcome.rejected[:3])[:900])
        async with self._lock:
            settle(self.status, outcome, now_iso())
            self._room.measure(self.status)
            self._recount()
            if not self.status["outbox"]:
                set_condition(self.status, "Delivered", True, "Acknowledged",
                              f"{self.status['delivered']} measurements acknowledged by the dashboard"
                              + (f", {self.status['rejectedCount']} refused (status.rejected)"
                                 if self.status.get("rejectedCount") else ""))
            self.status.pop("deliveryError", None)
            await self._save(force=True)

    async def _flush_once(self) -> None:
        """During the run: one attempt per batch, no waiting; an outage just leaves them in the outbox."""
        if self.results_client is None or self._flush_lock.locked() or time.monotonic() < self._flush_after:
            return
        async with self._flush_lock:
            while self.status.get("outbox"):
                try:
                    await self._post_next_batch(self.results_client.post_batch)
                except DeliveryFailed as e:
                    self._delivery_failed(e)
                    self._flush_after = time.monotonic() + self._flush_backoff
                    self._flush_backoff = min(self._flush_backoff * 2, 300.0)
                    return
            self._flush_backoff = 5.0

    def _delivery_failed(self, e: Exception) -> None:
        n = len(self.status.get("outbox") or [])
        self.status["deliveryError"] = str(e)[:1000]
        set_condition(self.status, "Delivered", False, "DashboardUnavailable", f"{n} measurements waiting: {e}"[:1000])
        log.warning("Delivery of %d measurements failed, keeping them: %s", n, e)

    def report_undelivered(self, why: str) -> None:
        """The outbox is about to be lost (`why`): every measurement in it is logged in full at WARNING, and an
        Event says how many."""
        waiting = self.status.get("outbox") or []
        for m in waiting:
            log.warning("Measurement %s of run %s was not delivered (%s); the record: %s", describe(m),
                        self.run.run_name, why, json.dumps(m, separators=(",", ":")))
        if waiting:
            self._event("Warning", "Undelivered", f"{len(waiting)} measurement(s) of {self.run.run_name} were not "
                                                  f"delivered ({why}); the operator's log holds each record")

    # -- reporting

    def _event(self, type_: str, reason: str, message: str) -> None:
        (log.info if type_ == "Normal" else log.warning)("%s", message)
        if self.on_event:
            try:
                self.on_event(type_, reason, message)
            except Exception:  # reporting must never break a run
                log.exception("Event callback failed")

    def _progress(self) -> None:
        if not self.on_progress:
            return
        st = self.status
        try:
            self.on_progress(Progress(
                done=st.get("done", 0), failed=st.get("failed", 0), total=st.get("planned", 0),
                round=st.get("currentRound", 0), rounds=st.get("totalRounds", 0), gbps=sum(self._live.values()),
                running=sorted(self._live), undelivered=len(st.get("outbox") or []),
            ))
        except Exception:
            log.exception("Progress callback failed")


__all__ = [
    "AgentDirectory", "ExecutorOptions", "JsonFileStatusStore", "MemoryStatusStore", "Progress", "RunExecutor",
    "RunInfo", "Setting", "StaticDirectory", "StatusStore", "book_test", "failed_measurement", "finish_round",
    "get_rtt", "initial_status", "measurement_from_record", "put_rtt", "rtt_measurement", "status_size_bytes",
    "test_id",
]

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
        token_issuer=issuer,    # a credentials.tokens.minting.Minter (built-in or external issuer) or None: mints
                                #   each HTTP-TPC pull's read and create tokens (spec.auth token, the default if given)
        external_credentials=secrets,   # external.access.CredentialSource: spec.externalEndpoints' Secrets
                                        #   (kube.KubeSecretCredentials in a cluster)
    )
    status = await executor.execute()   # plan, prepare file sets, probe RTT, run rounds, deliver; returns the status
    left = await executor.deliver(max_seconds)   # retry delivery of what is still in the outbox
    executor.request_stop(reason, message)   # (from another task) cancel running tests, book them, finish as Failed
    await executor.load()   # without execute(): the stored status, for a delivery-only executor

The ports above (protocols, the cluster-free stores and directory, RunInfo, ExecutorOptions, Progress) live in
ports.py and are re-exported here. The executor plans, prepares and books; its parts share one RunBook (book.py:
the status, its lock and store, the stop request, Events, progress): Transfers (transfers.py) drives a test on its
agent with retries, OutboxDelivery (outboxdelivery.py) takes the outbox to the dashboard and makes room in the
status, ExternalRunner (external/runner.py) runs the external endpoints' part.

The status dict is the whole state (JSON, camelCase keys, stored as the TransferRun status; its bookkeeping is
status.py, its byte budget statusbudget.py, both pure): `phase`, `agents` (frozen at the start so a resumed run
plans the same rounds), `planned`, `done`, `succeeded`, `failed` (integer counts), `currentRound` (every test of the
rounds before it is finished), `totalRounds`, `tests` (key -> {status, id, gbps, error} for the finished tests of
the current round only), `recentFailures` (the latest failed tests with their reasons, for people),
`maintenance`/`inMaintenance` (nodes and pairs left out: plan/maintenance.py), `rttMs` (each pair's median RTT, a
row per source agent, for the measurements that follow), `externals` (each external source endpoint: "ready" once
the set is uploaded and checked there, else why not), `filesets`, `outbox` (measurements not yet acknowledged),
`delivered`, `rejected` (the latest measurements the dashboard refused, with its reason; run/outbox.py) and
`rejectedCount`, `conditions`, times. SIZE: nothing grows with the finished tests but the counts; `agents` is O(N),
`rttMs` ~7 bytes a pair (~70 kB for 100 agents), the outbox O(measurements the dashboard has not acknowledged); see
test_operator_run_status.py. The status is one Kubernetes object: a test starts only when its measurement fits in
`status_budget_bytes` next to what waits (`Room`); otherwise tests wait, with the DeliveryBacklog condition, while
the outbox is delivered (a resumed run delivers first). See test_operator_status_budget.py.
RESUME: a new executor on the same store starts at `currentRound`, skips the tests of that round already in
`tests`, and re-posts running ones with the same test_id (the agent answers 200 with the same record), so no
finished pair is redone and no test runs twice.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .. import metrics
from ..credentials.tokens.minting import Minter, pull_tokens
from ..external.access import CredentialSource
from ..external.runner import ExternalRunner
from ..plan import maintenance
from ..plan.optimizer import LinkTuner, Tuning
from ..plan.planner import RTT, Plan, Setting, Test, ceilings_request, plan
from ..plan.spec import BenchmarkSpec
from ..protocols import TOKEN_PROTOCOLS, TPC_PROTOCOLS
from . import meshhealth
from .agents import Agent, AgentError, AgentRejected, AgentUnavailable
from .batch import ingest_batch
from .book import RunBook
from .delivery import DeliveryFailed
from .hosttelemetry import add_source_host
from .measurements import add_storage, failed_measurement, measurement_from_record, now_iso, rtt_measurement
from .outbox import encoded_size as status_size_bytes
from .outbox import migrate
from .outboxdelivery import OutboxDelivery
from .ports import (  # re-exported: the executor's interface is run/executor.py's (its docstring)
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
from .probing import probe_pair
from .status import (
    MAX_ERROR_CHARS,
    TERMINAL,
    book_test,
    ceilings_entry,
    finish_round,
    get_rtt,
    initial_status,
    migrate_status,
    put_rtt,
    set_condition,
    test_id,
)
from .statusbudget import Room, min_test_bytes
from .transfers import Transfers

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- the executor


class RunExecutor:
    """The run from plan to finish. Its parts share one RunBook (the status, its lock and store, the stop request,
    Events and progress): Transfers drives a test on its agent, OutboxDelivery takes the outbox to the dashboard
    and keeps the status within its byte budget, ExternalRunner runs the external endpoints' tests."""

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
        self.token_issuer = token_issuer
        self.auth = spec.auth or ("token" if token_issuer is not None else "x509")
        self.run = run
        self.directory = directory
        self.agents_client = agents_client
        self.options = options or ExecutorOptions()
        self.plan: Plan | None = None
        self._set_manifest: dict[str, Any] | None = None  # the file set as an agent answered (names, checksums)
        self._frozen: dict[str, Agent] = {}
        self._current: dict[str, Agent] = {}
        self.book = RunBook(run, store, self.options.save_every, on_progress, on_event)
        self._room = Room(self.options.status_budget_bytes, min_test_bytes(spec))
        self.transfers = Transfers(self.book, spec, agents_client, self.options, self._ready_nodes)
        self.delivery = OutboxDelivery(self.book, results_client, self._batch, self._room, self.options)
        self.externals = ExternalRunner(self.book, spec, self.transfers, external_credentials, external_ca_file,
                                        token_issuer, self.auth)
        self._tuner = None if spec.optimize is None else LinkTuner(
            spec, getattr(results_client, "advice", None), self._bench_key, run.cluster,
            on_unavailable=lambda why: self.book.event(
                "Warning", "AdviceUnavailable", f"Run {run.run_name}: spec.optimize: no advice from the dashboard "
                f"({why}); links without it run the spec's setting"))

    @property
    def status(self) -> dict[str, Any]:
        return self.book.status

    @status.setter
    def status(self, status: dict[str, Any]) -> None:
        self.book.status = status

    @property
    def results_client(self) -> ResultsAPI | None:
        """Where the outbox goes (None: it stays in the status); may be replaced while the run goes on."""
        return self.delivery.results_client

    @results_client.setter
    def results_client(self, client: ResultsAPI | None) -> None:
        self.delivery.results_client = client

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
        self.book.status = await self.book.store.load() or {}
        if "agents" in self.status:
            self._frozen = {a["node"]: Agent.from_dict(a) for a in self.status["agents"]}
        migrate(self.status)
        self._room.measure(self.status)
        return self.status

    def request_stop(self, reason: str, message: str) -> None:
        """Stop the run (it was replaced or deleted): no new test starts, the running ones are cancelled on their
        agents and booked with what the agents measured, and the run finishes as Failed with `reason`.
        `execute()` returns once that is saved; the outbox is kept for `deliver()`."""
        self.book.request_stop(reason, message)

    @property
    def stopping(self) -> bool:
        return self.book.stopping

    async def deliver(self, max_seconds: float) -> int:
        """Retry delivery of the outbox with backoff for up to max_seconds. Returns how many are left."""
        return await self.delivery.deliver(max_seconds)

    def report_undelivered(self, why: str) -> None:
        """The outbox is about to be lost (`why`): every measurement in it is logged in full at WARNING, and an
        Event says how many."""
        self.delivery.report_undelivered(why)

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
        self.book.recount()
        left_out = f"; left out, in maintenance: {st['inMaintenance']}" if st.get("inMaintenance") else ""
        if p.family_skipped:  # not failures: a node without IPv6 is no fault of the pair; said, never dropped
            st["familySkipped"] = p.skipped_summary()
            left_out += f"; skipped: {st['familySkipped']}"
        set_condition(st, "Progressing", True, "Resumed" if resumed else "Started",
                      f"{st['planned']} tests of {len(self._frozen)} agents in {p.num_rounds} rounds{left_out}")
        await self.book.save(force=True)
        self.book.event("Normal", "Resumed" if resumed else "Started",
                    f"{'Resumed' if resumed else 'Started'} run {self.run.run_name}: {st['planned']} tests, "
                    f"{len(self._frozen)} agents, {p.num_rounds} rounds{left_out}")
        if len(self._frozen) < 2 and not p.skipped and not p.external_rounds:
            return await self._finish("NotEnoughAgents", f"{len(self._frozen)} Ready agent(s): a mesh needs two")
        metrics.mesh_changed(self._bench_key, p.agents)  # series of nodes that left the mesh go
        if resumed:  # what waits for the dashboard first: a status near its size limit must not grow on resume
            await self.delivery.flush_once()
        if int(st.get("currentRound", 0)) == 0:  # pairs left out are booked with round 0 (its keys say which)
            for s, d, reason in p.skipped:
                for setting in p.settings:
                    t = Test(-1, setting, s, d)
                    if t.key not in st["tests"]:
                        await self.delivery.with_room(functools.partial(
                            self._record_failure, t, test_id(self.run.run_uid, t.key, 0), reason, now_iso()))
        await self._prepare_filesets()
        if int(st.get("currentRound", 0)) == 0 and p.ceiling_agents:
            await self._measure_ceilings()
        if self.plan is not None and self.plan.externals:
            await self.externals.prepare(self.plan, self._frozen, self._set_manifest)
        for i in range(int(st.get("currentRound", 0)), p.num_rounds):
            if self.stopping:
                break
            st["currentRound"] = i
            self._current = {a.node: a for a in await self._directory_safe()}
            self._room.measure(st, outbox=False)
            pending = [t for t in p.round(i) if t.key not in st["tests"]]
            if pending:
                await asyncio.gather(*(self.delivery.with_room(functools.partial(self._run_test, t)) for t in pending))
            async with self.book.lock:
                finish_round(st, i)
                await self.book.save(force=True)
            self.book.progress()
            await self.delivery.flush_once()
        if self.stopping:
            return await self._finish(*self.book.stop_reason)
        return await self._finish(None, "")

    # -- steps

    async def _finish(self, reason: str | None, message: str) -> dict[str, Any]:
        st = self.status
        self.book.recount()
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
        await self.book.save(force=True)
        self.book.event("Normal" if ok else "Warning", reason, f"Run {self.run.run_name} finished: {message}")
        self.book.progress()
        await self.deliver(self.options.delivery_max_seconds)
        await meshhealth.judge(self.results_client, self.run, self.status)
        await self.book.save(force=True)
        return self.status

    async def _maintenance(self, agents: Sequence[Agent]) -> list[maintenance.Window]:
        """The windows in force: the nodes' annotations, and the dashboard's when it answers (a run does not wait
        for a dashboard that is away: the annotations still count, and the status says the list was not read)."""
        now = maintenance.now_utc()
        windows: list[maintenance.Window] = []
        for a in agents:
            found = maintenance.from_annotations(a.node, a.annotations, now)
            if isinstance(found, str):
                self.book.event("Warning", "BadMaintenanceAnnotation", found)
            elif found is not None:
                windows.append(found)
        fetch = getattr(self.results_client, "active_maintenance", None)
        if fetch is not None:
            try:
                windows += maintenance.from_dashboard(await asyncio.wait_for(fetch(self.run.cluster), 30), now)
            except (DeliveryFailed, TimeoutError) as e:
                self.book.event("Warning", "MaintenanceUnknown", f"the dashboard's maintenance windows were not read "
                                                            f"({e}); only node annotations count for this run")
        return windows

    async def _prepare_filesets(self) -> None:
        lb = self.spec.loopback
        if not any(p in TPC_PROTOCOLS for p in self.spec.protocols) and not (lb.enabled and lb.protocol in
                                                                              TPC_PROTOCOLS):
            return
        st = self.status
        disk = st.setdefault("diskFilesets", {}) if self.spec.uses_disk else None  # spec.storage disk: node -> state
        todo = [a for n, a in self._frozen.items()
                if st["filesets"].get(n) != "ready" or (disk is not None and disk.get(n) != "ready")]

        # mesh: the run's agents, the only host certificates the agents' GridFTP servers then admit (the agent's
        # daemons/gridmap.py)
        request = {**self.spec.file_set.request(), "mesh": sorted(self._frozen)}

        async def one(agent: Agent) -> None:
            if st["filesets"].get(agent.node) != "ready":
                try:
                    answer = await self.agents_client.prepare_fileset(agent, request,
                                                                      timeout=self.options.fileset_timeout)
                    st["filesets"][agent.node] = "ready"
                    self._set_manifest = self._set_manifest or answer
                except (AgentUnavailable, AgentRejected) as e:
                    st["filesets"][agent.node] = e.message
                    self.book.event("Warning", "FileSetFailed",
                                    f"File set {self.spec.file_set.name} failed on {agent.node}: {e.message}")
            if disk is not None and disk.get(agent.node) != "ready":  # after the memory set: one write at a time
                disk[agent.node] = await self._prepare_disk_set(agent) or "ready"

        if not todo and self.plan is not None and self.plan.externals and self._set_manifest is None:
            todo = [a for a in self._frozen.values() if st["filesets"].get(a.node) == "ready"][:1]  # resumed: names
        if todo:
            work: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*(one(a) for a in todo)))
            stop: asyncio.Future[Any] = asyncio.ensure_future(self.book.stopped())
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not work.done():  # stopped while the agents write their files: they finish them on their own
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
            await self.book.save(force=True)

    async def _prepare_disk_set(self, agent: Agent) -> str | None:
        """POST the file set with storage disk to ``agent``: written, checksummed and left cold (flushed, out of the
        page cache) on its disk path; again before each test that reads it, so every test starts from the device.
        Why not (the agent's 422 names the node and the path), or None."""
        try:
            await self.agents_client.prepare_fileset(agent, {**self.spec.file_set.request(), "storage": "disk"},
                                                     timeout=self.options.fileset_timeout)
        except (AgentUnavailable, AgentRejected) as e:
            self.book.event("Warning", "FileSetFailed",
                            f"Disk file set {self.spec.file_set.name} failed on {agent.node}: {e.message}")
            return e.message
        return None

    async def _measure_ceilings(self) -> None:
        """spec.storage disk: each agent's disk read and write ceilings (fio on its disk path), all agents at once
        (each on its own disk) before round 0, as the loopback round measures each agent alone. A node that cannot
        (no usable disk path, no room, fio failed) is named in an Event and status.ceilings; the run goes on."""
        assert self.plan is not None
        st = self.status
        done = st.setdefault("ceilings", {})
        todo = [self._frozen[n] for n in (self.plan.agents[i] for i in self.plan.ceiling_agents) if n not in done]
        request = ceilings_request(self.spec)

        async def one(agent: Agent) -> None:
            try:
                answer = await self.agents_client.storage_ceilings(agent, request,
                                                                   timeout=2 * request["runtime_seconds"] + 60)
                entry = ceilings_entry(test_id(self.run.run_uid, f"ceilings:{agent.node}", 0), agent.node, answer)
            except (AgentError, KeyError, TypeError, ValueError) as e:  # refused, failed, or no figures in the answer
                why = e.message if isinstance(e, AgentError) else f"no ceilings in the agent's answer ({e!r})"
                async with self.book.lock:
                    done[agent.node] = why[:MAX_ERROR_CHARS]
                self.book.event("Warning", "StorageCeilingsFailed",
                                f"Storage ceilings of {agent.node} were not measured: {why}")
                return
            async with self.book.lock:
                done[agent.node] = {"readGbps": entry["disk_read_gbps"], "writeGbps": entry["disk_write_gbps"]}
                st.setdefault("outbox", []).append(entry)
                st["undelivered"] = len(st["outbox"])
                self._room.booked(entry)
                await self.book.save()

        if todo and not self.stopping:
            await asyncio.gather(*(one(a) for a in todo))
            await self.book.save(force=True)

    async def _run_test(self, test: Test) -> None:
        if self.stopping:
            return
        started = now_iso()
        key = test.key
        if self.plan is not None and (self.plan.is_external(test.source) or self.plan.is_external(test.destination)):
            await self.externals.run(test, started, self.plan, self._current, self._record,
                                     self._record_failure)
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
        if test.setting.source_on_disk:  # the source's disk set, made cold again for this test
            disk = (self.status.get("diskFilesets") or {}).get(test.source)
            why = disk if disk != "ready" else await self._prepare_disk_set(src)
            if why:
                await self._record_failure(test, test_id(self.run.run_uid, key, 0), f"disk file set "
                                           f"{self.spec.file_set.name} not ready on {test.source}: {why}", started,
                                           rtt, tuning=tuning)
                return
        record, error, tid = await self.transfers.attempts(
            test, dst, lambda tid: self._request(test, src, dst, tid, tuning))
        if record is not None:
            m = measurement_from_record(record, test.source, test.destination, rtt,
                                        test.setting.repeat if self.spec.repeats > 1 else None, test.setting.family)
            add_storage(m, test)
            await add_source_host(self.agents_client, src, dst.host(test.setting.family), m)
            if self._mode_of(test):
                m["auth"] = self._mode_of(test)
            await self._record(test, m)
        else:
            await self._record_failure(test, tid, error, started, rtt, "cancelled" if self.stopping else "failed",
                                       tuning=tuning)

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
            # in a thread: an external issuer answers over the network (its refusal: Transfers.attempts)
            request["tokens"] = dict(await asyncio.to_thread(pull_tokens, self.token_issuer, src, dst, proto,
                                                             self.spec.timeout_seconds))
        if test.setting.congestion:
            request["congestion_control"] = test.setting.congestion
        if test.setting.on_disk:
            request["storage"] = test.setting.storage_request()
        return request

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
        async with self.book.lock:
            st = self.status
            gbps = m.get("throughput_gbps")
            waiting = len(st.get("outbox") or [])
            if not book_test(st, test.key, m):
                log.warning("Test %s of %s was already booked; ignored a second result", test.key, self.run.run_name)
                return
            self._room.booked(st["outbox"][-1] if len(st["outbox"]) > waiting else None)
            self.book.recount()
            metrics.TESTS.labels(protocol=test.setting.protocol, status=m["status"]).inc()
            if gbps is not None and test.setting.loopback:
                metrics.set_series(metrics.LOOPBACK, (test.source, test.setting.protocol), (test.source,),
                                   self._bench_key, gbps * 1e9)
            elif gbps is not None and test.setting.protocol != RTT and not test.setting.on_disk:
                # the network's figure (memory to memory): a disk test's would overwrite it under the same labels
                metrics.set_series(metrics.LAST_THROUGHPUT, (test.source, test.destination, test.setting.protocol,
                                                             str(m.get("streams") or test.setting.streams)),
                                   (test.source, test.destination), self._bench_key, gbps * 1e9)
            if m["status"] != "succeeded":
                self.book.event("Warning", "TestFailed", f"Test {test.key} failed: {m.get('error')}")
            await self.book.save()
        self.book.progress()

    async def _ready_nodes(self) -> set[str]:
        return {a.node for a in await self._directory_safe()}

    async def _directory_safe(self) -> Sequence[Agent]:
        try:
            return await self.directory.agents()
        except Exception as e:  # a flaky API server must not fail every test: keep the last view
            log.warning("Listing agents failed, keeping the last view: %s", e)
            return list(self._current.values()) or list(self._frozen.values())

    # -- delivery (the outbox's batches: OutboxDelivery posts them)

    def _batch(self, entries: list[Mapping[str, Any]]) -> dict[str, Any]:
        """The ingest batch for some outbox entries (batch.ingest_batch), with the external endpoints it measured."""
        batch = ingest_batch(self.run, self.status, self.spec, list(self._frozen.values()), entries)
        batch["nodes"] += self.externals.nodes(self.plan)
        return batch

__all__ = [
    "AgentDirectory", "ExecutorOptions", "JsonFileStatusStore", "MemoryStatusStore", "Progress", "RunExecutor",
    "RunInfo", "Setting", "StaticDirectory", "StatusStore", "book_test", "failed_measurement", "finish_round",
    "get_rtt", "initial_status", "measurement_from_record", "put_rtt", "rtt_measurement", "status_size_bytes",
    "test_id",
]

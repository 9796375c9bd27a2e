"""The loss probe kept running (spec.lossProbe; the planning is plan/lossprobe.py): one pass per benchmark and
timer tick, and a last one when a benchmark stops probing.

A pass of benchmark B over its Ready agents:
- configures: the configuration each agent should have is merged from every benchmark with the probe on that
  selects it (their agents are listed too, to know who selects whom); it is PUT only when the agent reports a
  different one (an agent that restarted has lost its configuration: the next pass gives it back);
- collects, from the agents B is the collector of (plan/lossprobe.collector_of): the oldest summaries, posted to
  B's dashboard (spec.results, else the operator's; the same bearer token as the measurements), and acknowledged
  to the agent only once the dashboard's 2xx accounts for every one of them. Summaries the dashboard refuses
  (400/422 naming them by index) are logged in full with its reason and acknowledged (set aside, as a run's
  refused measurements are); any other failure keeps them at the agent for the next pass.
Nothing here is lost: an agent keeps what is not acknowledged (bounded, see agent/README.md), and the dashboard
takes a summary twice without harm (it is keyed by node, peer, family and period).

`release` is the pass of a benchmark whose probe was turned off or that is being deleted: its agents get the
configuration of the other benchmarks that probe them, or none (no peers); what it was collecting is collected
one last time first.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import kube
from ..cluster import cluster_name_async
from ..config import Settings
from ..plan import lossprobe as plan
from ..plan.spec import BenchmarkSpec, SpecError, parse_spec
from .agents import Agent, AgentError, AgentsClient
from .batch import node_description
from .delivery import LOSS_MAX_BATCH, BatchRejected, BatchTooLarge, DeliveryFailed
from .driver import EventFn, results_client

log = logging.getLogger(__name__)

MAX_BATCHES = 20  # per agent and pass: 20,000 summaries (100 peers' 3 h 20 min), the rest in the next pass
CONCURRENCY = 16  # agents handled at once
MAX_PROBLEMS = 20  # listed in status.lossProbe.problems


@dataclass(frozen=True)
class Benchmark:
    """A TransferBenchmark as the loss probe needs it: its identity and its (raw) spec."""

    namespace: str
    name: str
    spec: Mapping[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class LossAgents(Protocol):
    """The agents' control API as a pass uses it (run/agents.py's AgentsClient)."""

    async def loss_status(self, agent: Agent) -> dict[str, Any]: ...
    async def configure_loss(self, agent: Agent, config: Mapping[str, Any]) -> dict[str, Any]: ...
    async def loss_summaries(self, agent: Agent, limit: int) -> dict[str, Any]: ...
    async def ack_loss(self, agent: Agent, through: int) -> dict[str, Any]: ...


class LossResults(Protocol):
    """The dashboard as a pass uses it (run/delivery.py's ResultsClient)."""

    async def post_loss(self, cluster: str, summaries: Sequence[Mapping[str, Any]],
                        mesh: Mapping[str, Any] | None = None) -> dict[str, Any]: ...


AgentsOf = Callable[[Benchmark, BenchmarkSpec], Awaitable[Sequence[Agent]]]


@dataclass
class PassReport:
    agents: int = 0
    configured: int = 0
    collected: int = 0
    refused: int = 0
    problems: list[str] = field(default_factory=list)

    def status(self, now: dt.datetime) -> dict[str, Any]:
        """status.lossProbe of the benchmark."""
        return {"agents": self.agents, "configured": self.configured, "collected": self.collected,
                "refused": self.refused, "lastPassTime": now.isoformat().replace("+00:00", "Z"),
                "problems": self.problems[:MAX_PROBLEMS]}


def member(agent: Agent) -> plan.Member:
    return plan.Member(agent.node, {f: agent.host(f) for f in agent.families}, agent.port("loss"))


def _identity(agent: Agent) -> tuple[str, str]:
    return agent.node, agent.address


async def _meshes(benchmarks: Iterable[Benchmark], agents_of: AgentsOf
                  ) -> dict[tuple[str, str], tuple[plan.LossProbe, list[Agent]]]:
    """Each probing benchmark's probe and Ready agents (one listing per distinct selection); a benchmark whose
    spec does not parse is left out (its own pass says why)."""
    out: dict[tuple[str, str], tuple[plan.LossProbe, list[Agent]]] = {}
    listed: dict[tuple[Any, ...], list[Agent]] = {}
    for b in sorted(benchmarks, key=lambda b: b.key):
        try:
            spec = parse_spec(b.spec)
        except SpecError:
            continue
        if not spec.loss_probe.enabled:
            continue
        selection = (b.namespace, tuple(sorted(spec.agent_selector.items())), tuple(sorted(spec.node_selector.items())))
        if selection not in listed:
            listed[selection] = list(await agents_of(b, spec))
        out[b.key] = (spec.loss_probe, listed[selection])
    return out


async def run_pass(me: Benchmark, probing: Iterable[Benchmark], agents_of: AgentsOf, agents: LossAgents,
                   results: LossResults | None, cluster: str, *, release: bool = False,
                   concurrency: int = CONCURRENCY) -> PassReport:
    """One pass of `me` (module docstring). `probing`: every benchmark with the probe on (`me` among them unless
    `release`). `results`: where `me` delivers (None: it collects nothing, and says so)."""
    report = PassReport()
    try:
        spec = parse_spec(me.spec)
    except SpecError as e:
        report.problems.append(f"invalid spec: {e}")
        return report
    others = [b for b in probing if b.key != me.key]
    meshes = await _meshes([*others, *([] if release else [me])], agents_of)
    mine = list(await agents_of(me, spec)) if release or me.key not in meshes else meshes[me.key][1]
    report.agents = 0 if release else len(mine)
    if results is None and not release:
        report.problems.append("no results endpoint (spec.results, or the operator's default): summaries stay at "
                               "the agents")
    gate = asyncio.Semaphore(concurrency)
    identities = {k: {_identity(a) for a in found} for k, (_, found) in meshes.items()}
    members = {k: [member(a) for a in found] for k, (_, found) in meshes.items()}

    async def one(agent: Agent) -> None:
        covering = sorted(k for k, ids in identities.items() if _identity(agent) in ids)
        collector = plan.collector_of([*covering, *([me.key] if release else [])])
        wanted = plan.merge([(meshes[k][0], plan.peers_of(member(agent), members[k])) for k in covering])
        async with gate:
            try:
                if release and collector == me.key and results is not None:
                    await _collect(agent, agents, results, cluster, report)
                running = await _configure(agent, agents, wanted, report)
                if running and not release and collector == me.key and results is not None:
                    await _collect(agent, agents, results, cluster, report)
            except (AgentError, DeliveryFailed) as e:
                report.problems.append(f"{agent.node}: {e}")
                log.warning("Loss probe of %s on node %s: %s", me, agent.node, e)

    await asyncio.gather(*(one(a) for a in mine))
    if results is not None and not release and mine:
        await _send_members(me, mine, results, cluster, report)
    report.problems.sort()
    return report


async def _send_members(me: Benchmark, mine: Sequence[Agent], results: LossResults, cluster: str,
                        report: PassReport) -> None:
    """The probe mesh's members to the dashboard, attached to the benchmark: its loss grid lists them before any
    transfer ran (a benchmark may probe and never transfer). Each pass: members come and go."""
    mesh = {"benchmark": {"namespace": me.namespace, "name": me.name},
            "nodes": [node_description(a) for a in mine]}
    try:
        await results.post_loss(cluster, [], mesh)
    except (DeliveryFailed, BatchRejected, BatchTooLarge) as e:
        report.problems.append(f"the mesh's members were not sent to the dashboard: {e}")


async def _configure(agent: Agent, agents: LossAgents, wanted: Mapping[str, Any], report: PassReport) -> bool:
    """PUT `wanted` unless the agent has it already; False when the agent's loss probe is not running."""
    status = await agents.loss_status(agent)
    if not status.get("running"):
        report.problems.append(f"{agent.node}: the agent's loss probe is not running: {status.get('error')}")
        return False
    if plan.same_config(status.get("config"), wanted):
        return True
    await agents.configure_loss(agent, wanted)
    report.configured += 1
    log.info("Configured the loss probe of node %s: %d peers, %d external reflectors, %g packets/s", agent.node,
             len(wanted["peers"]), len(wanted["external_reflectors"]), wanted["rate_pps"])
    return True


async def _collect(agent: Agent, agents: LossAgents, results: LossResults, cluster: str, report: PassReport) -> None:
    """Move the agent's summaries to the dashboard, one batch at a time: each acknowledged to the agent only
    after the dashboard's answer accounts for it."""
    for _ in range(MAX_BATCHES):
        batch = (await agents.loss_summaries(agent, LOSS_MAX_BATCH)).get("summaries") or []
        if not batch:
            return
        records = [{k: v for k, v in s.items() if k != "id"} for s in batch]
        delivered, refused = await deliver(results, cluster, records, agent.node)
        await agents.ack_loss(agent, int(batch[-1]["id"]))
        report.collected += delivered
        report.refused += refused
        if len(batch) < LOSS_MAX_BATCH:
            return


async def deliver(results: LossResults, cluster: str, records: Sequence[Mapping[str, Any]], node: str
                  ) -> tuple[int, int]:
    """Post the summaries; those the dashboard refuses by index are logged in full with its reason and left out,
    and the rest posted again (the dashboard is idempotent); a 413 halves the batch. (delivered, refused), or
    DeliveryFailed (temporary: a refusal that names no summary, a single summary too large, or any other answer
    than 2xx, 400, 413 or 422)."""
    pending = list(records)
    refused = 0
    while pending:
        try:
            await results.post_loss(cluster, pending)
        except BatchTooLarge:  # an ingress's body limit: halves (what the first took is harmless to send again)
            if len(pending) == 1:
                raise
            mid = len(pending) // 2
            first = await deliver(results, cluster, pending[:mid], node)
            second = await deliver(results, cluster, pending[mid:], node)
            return first[0] + second[0], refused + first[1] + second[1]
        except BatchRejected as e:
            reasons: dict[int, list[str]] = {}
            for err in e.errors:
                i = err.get("index")
                if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(pending):
                    reasons.setdefault(i, []).append(f"{err.get('field')}: {err.get('message')}")
            if not reasons:
                raise DeliveryFailed(f"{e} (names no summary: kept at the agent for a later pass)") from e
            for i, why in sorted(reasons.items()):
                s = pending[i]
                log.warning("Dashboard refused the loss summary of %s -> %s (%s) from %s: %s; set aside, the "
                            "record: %s", s.get("node", node), s.get("peer"), s.get("family"),
                            s.get("period_start"), "; ".join(why), json.dumps(s, separators=(",", ":")))
            refused += len(reasons)
            pending = [s for i, s in enumerate(pending) if i not in reasons]
            continue
        return len(pending), refused
    return 0, refused


_passes: dict[tuple[str, str], asyncio.Lock] = {}


async def kube_pass(me: Benchmark, probing: Iterable[Benchmark], settings: Settings, event: EventFn, *,
                    release: bool = False) -> dict[str, Any]:
    """A pass in the cluster (the kopf handlers' call): agents from the API server, the operator's agent token and
    CA, `me`'s results endpoint, the operator's cluster name. Returns status.lossProbe."""
    async def agents_of(b: Benchmark, spec: BenchmarkSpec) -> Sequence[Agent]:
        return await kube.agent_directory(spec, b.namespace, settings).agents()

    try:
        spec = parse_spec(me.spec)
    except SpecError as e:
        return PassReport(problems=[f"invalid spec: {e}"]).status(dt.datetime.now(dt.UTC))
    # one pass of a benchmark at a time: a release waits for the timer's pass in flight, so it has the last word
    async with _passes.setdefault(me.key, asyncio.Lock()):
        return await _kube_pass(me, spec, probing, settings, event, agents_of, release)


async def _kube_pass(me: Benchmark, spec: BenchmarkSpec, probing: Iterable[Benchmark], settings: Settings,
                     event: EventFn, agents_of: AgentsOf, release: bool) -> dict[str, Any]:
    results = await results_client(spec, me.namespace, settings, event)
    try:
        async with AgentsClient(settings.agent_token(), settings.ca()) as agents:
            report = await run_pass(me, probing, agents_of, agents, results, await cluster_name_async(settings),
                                    release=release)
    finally:
        if results is not None:
            await results.aclose()
    return report.status(dt.datetime.now(dt.UTC))

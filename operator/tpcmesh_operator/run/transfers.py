"""A test on the agent that runs it: its request posted, followed to its end, retried as the spec allows, cancelled
when the run stops. What the request holds is the caller's (``build``); this module only drives the agent."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from ..credentials.tokens.claims import ClaimsError
from ..credentials.tokens.external import ExternalIssuerError
from ..plan.planner import Test
from ..plan.spec import BenchmarkSpec
from .agents import Agent, AgentBusy, AgentRejected, AgentUnavailable
from .book import RunBook
from .ports import AgentsAPI, ExecutorOptions
from .status import test_id

log = logging.getLogger(__name__)

FINAL = ("succeeded", "failed", "cancelled")  # an agent's test that has its record
Request = dict[str, Any] | str  # a test's POST /api/v1/transfers body, or why there is none
Outcome = tuple[dict[str, Any] | None, str, str]  # (final record or None, error, the last attempt's test id)


class Transfers:
    def __init__(self, book: RunBook, spec: BenchmarkSpec, agents_client: AgentsAPI, options: ExecutorOptions,
                 ready_nodes: Callable[[], Awaitable[Collection[str]]]) -> None:
        self.book = book
        self.spec = spec
        self.agents_client = agents_client
        self.options = options
        self._ready_nodes = ready_nodes  # the Ready agents now: tells a vanished agent from an unreachable one

    async def attempts(self, test: Test, agent: Agent, build: Callable[[str], Request | Awaitable[Request]]
                       ) -> Outcome:
        """Run a test on `agent` (the request `build(test_id)` makes, or why there is none) with the spec's
        retries: (final record or None, error, the last attempt's test id)."""
        record: dict[str, Any] | None = None
        error = ""
        tid = ""
        for attempt in range(self.spec.retries + 1):
            tid = test_id(self.book.run.run_uid, test.key, attempt)
            try:
                built = build(tid)
                request = await built if inspect.isawaitable(built) else built
            except (ExternalIssuerError, ClaimsError) as e:  # no token for it: the issuer's answer is the reason
                return None, str(e), tid
            if isinstance(request, str):
                return None, request, tid
            record, error, final = await self.transfer(test, agent, request, tid)
            if record is not None and record.get("status") == "succeeded":
                break
            if final or self.book.stopping:
                break
            if attempt < self.spec.retries:
                self.book.event("Normal", "Retrying", f"Retrying {test.key} (attempt {attempt + 2}): {error}")
        return record, error, tid

    async def transfer(self, test: Test, dst: Agent, request: Mapping[str, Any],
                       tid: str) -> tuple[dict | None, str, bool]:
        """One attempt: `request` posted to the agent `dst` that runs it, followed to its end. Returns (final record
        or None, error, final: no point retrying)."""
        o = self.options
        book = self.book
        deadline = time.monotonic() + self.spec.timeout_seconds + o.timeout_grace
        unreachable_since: float | None = None
        started = False
        try:
            while True:
                if book.stopping:
                    message = f"cancelled: {book.stop_reason[1]}"
                    rec = await self.cancel(dst, tid) if started else None
                    return (rec if rec and rec.get("status") in FINAL else None), message, True
                if time.monotonic() > deadline:
                    await self.cancel(dst, tid)
                    return None, f"timed out after {self.spec.timeout_seconds} s", False
                try:
                    asked = time.monotonic()
                    if not started:
                        rec = await self.agents_client.start_transfer(dst, request)
                        started, held = True, False  # the POST answers at once; the GET after it waits
                    else:
                        # the agent holds the answer until the test ends (at most a poll interval): the run goes on
                        # at once instead of up to a poll interval later
                        rec = await self.agents_client.get_transfer(dst, tid, wait=o.poll_interval)
                        held = True
                    unreachable_since = None
                except AgentBusy:
                    await book.pause(o.poll_interval)
                    continue
                except AgentRejected as e:
                    if started and e.status == 404:
                        return None, f"agent {dst.node} lost test {tid} (restarted?)", False
                    return None, e.message, e.status not in (404, 408, 429)
                except AgentUnavailable as e:
                    now = time.monotonic()
                    unreachable_since = unreachable_since or now
                    if now - unreachable_since >= o.unreachable_grace:
                        if dst.node not in await self._ready_nodes():
                            return None, f"agent {dst.node} vanished during the test", True
                        return None, f"agent {dst.node} unreachable for {o.unreachable_grace:g} s: {e.message}", True
                    await book.pause(o.poll_interval)
                    continue
                if rec.get("status") in FINAL:
                    return rec, rec.get("error") or "", False
                gbps = (rec.get("progress") or {}).get("gbps")
                book.live[test.key] = float(gbps or 0.0)
                book.progress()
                if held:  # what the GET did not wait (an agent from before ?wait answers at once)
                    await book.pause(o.poll_interval - (time.monotonic() - asked))
        finally:
            book.live.pop(test.key, None)

    async def cancel(self, agent: Agent, tid: str) -> dict | None:
        """DELETE the test on its agent; the agent's final record of it, if it answered with one."""
        try:
            return await self.agents_client.cancel_transfer(agent, tid)
        except AgentUnavailable as e:
            log.warning("Cancelling test %s on %s failed: %s", tid, agent.node, e.message)
            return None

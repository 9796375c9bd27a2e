"""The run's outbox on its way to the dashboard: batches posted (bisecting around refused measurements, halving on
a 413), acknowledgements settled, backoff while the dashboard is away, and the room a new test needs in the status
(a test starts only when its measurement fits; while it does not, delivering is what makes room). Nothing leaves
the outbox unacknowledged: what cannot be delivered stays, and what is about to be lost is logged in full."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .. import metrics
from .book import RunBook
from .delivery import MAX_BATCH, BatchTooLarge, DeliveryFailed, Outcome, deliver_with_backoff, post_bisecting
from .measurements import now_iso
from .outbox import describe, settle
from .ports import ExecutorOptions, ResultsAPI
from .status import set_condition
from .statusbudget import Room

log = logging.getLogger(__name__)

BatchOf = Callable[[list[Mapping[str, Any]]], dict[str, Any]]  # outbox entries -> the contract's ingestBatch


class OutboxDelivery:
    def __init__(self, book: RunBook, results_client: ResultsAPI | None, batch_of: BatchOf, room: Room,
                 options: ExecutorOptions) -> None:
        self.book = book
        self.results_client = results_client
        self.batch_of = batch_of
        self.room = room
        self.options = options
        self._lock = asyncio.Lock()  # one delivery at a time
        self._flush_after = 0.0  # during the run, after a failed delivery, wait (backoff) before trying again
        self._flush_backoff = 5.0
        self._batch_size = MAX_BATCH

    async def deliver(self, max_seconds: float) -> int:
        """Retry delivery of the outbox with backoff for up to max_seconds. Returns how many are left."""
        status = self.book.status
        if self.results_client is None or not status.get("outbox"):
            return len(status.get("outbox") or [])
        deadline = time.monotonic() + max_seconds
        async with self._lock:
            while status.get("outbox"):
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
        self.book.progress()
        return len(status.get("outbox") or [])

    async def flush_once(self) -> None:
        """During the run: one attempt per batch, no waiting; an outage just leaves them in the outbox."""
        if self.results_client is None or self._lock.locked() or time.monotonic() < self._flush_after:
            return
        async with self._lock:
            while self.book.status.get("outbox"):
                try:
                    await self._post_next_batch(self.results_client.post_batch)
                except DeliveryFailed as e:
                    self._delivery_failed(e)
                    self._flush_after = time.monotonic() + self._flush_backoff
                    self._flush_backoff = min(self._flush_backoff * 2, 300.0)
                    return
            self._flush_backoff = 5.0

    async def with_room(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run one test (`work()`) once there is room in the status for its measurement; while there is none, deliver.
        Without a results endpoint nothing can make room: the run stops (OutboxFull) rather than lose anything."""
        book = self.book
        need = self.room.need()
        while not self.room.reserve(need):
            if book.stopping:
                break
            if self.results_client is None:
                book.request_stop("OutboxFull", "the status holds as many measurements as it can and the run has no "
                                                "results endpoint (spec.results) to deliver them to")
                break
            await self._backlog(True)
            if self._lock.locked():  # another test of the round is delivering
                await book.pause(self.options.poll_interval)
            else:
                await self.deliver(self.options.backlog_retry_seconds)
        if book.stopping:
            return
        await self._backlog(False)
        try:
            await work()
        finally:
            self.room.release(need)

    def report_undelivered(self, why: str) -> None:
        """The outbox is about to be lost (`why`): every measurement in it is logged in full at WARNING, and an
        Event says how many."""
        waiting = self.book.status.get("outbox") or []
        run_name = self.book.run.run_name
        for m in waiting:
            log.warning("Measurement %s of run %s was not delivered (%s); the record: %s", describe(m),
                        run_name, why, json.dumps(m, separators=(",", ":")))
        if waiting:
            self.book.event("Warning", "Undelivered", f"{len(waiting)} measurement(s) of {run_name} were not "
                                                      f"delivered ({why}); the operator's log holds each record")

    async def _backlog(self, waiting: bool) -> None:
        """The DeliveryBacklog condition: True while new tests wait for the dashboard to take measurements."""
        book = self.book
        now = next((c["status"] == "True" for c in book.status.get("conditions") or []
                    if c["type"] == "DeliveryBacklog"), False)
        if now == waiting:
            return
        async with book.lock:
            n = len(book.status.get("outbox") or [])
            if waiting:
                msg = (f"{n} measurements ({self.room.outbox_bytes // 1000} kB) wait for the dashboard; new tests "
                       f"start when it has taken them (status budget {self.room.budget // 1000} kB)")
                set_condition(book.status, "DeliveryBacklog", True, "StatusFull", msg)
                book.event("Warning", "DeliveryBacklog", f"Run {book.run.run_name}: {msg}")
            else:
                msg = f"{n} measurements wait for the dashboard"
                set_condition(book.status, "DeliveryBacklog", False, "Flowing", msg)
                book.event("Normal", "DeliveryResumed", f"Run {book.run.run_name}: new tests start again ({msg})")
            await book.save(force=True)

    async def _post_next_batch(self, post: Callable[[dict[str, Any]], Any]) -> None:
        """Post the head of the outbox (bisecting around measurements the dashboard refuses) and settle what it
        acknowledged or refused; a 413 halves the batch size for the next attempts."""
        ms = list(self.book.status["outbox"][:self._batch_size])
        outcome = Outcome()
        try:
            await post_bisecting(post, self.batch_of, ms, outcome)
        except BatchTooLarge as e:
            if len(ms) == 1:
                raise DeliveryFailed(f"{e} (a single measurement)") from e
            self._batch_size = max(1, len(ms) // 2)
            log.warning("Dashboard refused a batch of %d measurements of %s as too large; trying %d at a time",
                        len(ms), self.book.run.run_name, self._batch_size)
        finally:
            if outcome:
                await self._settle(outcome)

    async def _settle(self, outcome: Outcome) -> None:
        book = self.book
        for m, reason in outcome.rejected:
            metrics.REJECTED.labels(protocol=str(m.get("protocol"))).inc()
            log.warning("Dashboard refused measurement %s of run %s: %s; set aside in status.rejected, the record: %s",
                        describe(m), book.run.run_name, reason, json.dumps(m, separators=(",", ":")))
        if outcome.rejected:
            book.event("Warning", "MeasurementsRejected",
                       f"Dashboard refused {len(outcome.rejected)} measurement(s), set aside in status.rejected: "
                       + "; ".join(f"{describe(m)}: {r}" for m, r in outcome.rejected[:3])[:900])
        async with book.lock:
            st = book.status
            settle(st, outcome, now_iso())
            self.room.measure(st)
            book.recount()
            if not st["outbox"]:
                set_condition(st, "Delivered", True, "Acknowledged",
                              f"{st['delivered']} measurements acknowledged by the dashboard"
                              + (f", {st['rejectedCount']} refused (status.rejected)" if st.get("rejectedCount")
                                 else ""))
            st.pop("deliveryError", None)
            await book.save(force=True)

    def _delivery_failed(self, e: Exception) -> None:
        st = self.book.status
        n = len(st.get("outbox") or [])
        st["deliveryError"] = str(e)[:1000]
        set_condition(st, "Delivered", False, "DashboardUnavailable", f"{n} measurements waiting: {e}"[:1000])
        log.warning("Delivery of %d measurements failed, keeping them: %s", n, e)


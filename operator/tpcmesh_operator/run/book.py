"""A run's book: the status every part of the executor writes (one lock, one store), the stop request they all
obey, and how the run reports (Events, progress). Shared by the executor, the agents' transfers
(``transfers.py``), the delivery of the outbox (``outboxdelivery.py``) and the external endpoints' tests
(``external/runner.py``), so that none of them holds a second copy of the state."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .. import metrics
from .ports import EventCallback, Progress, ProgressCallback, RunInfo, StatusStore

log = logging.getLogger(__name__)


class RunBook:
    def __init__(self, run: RunInfo, store: StatusStore, save_every: float, on_progress: ProgressCallback | None,
                 on_event: EventCallback | None) -> None:
        self.run = run
        self.store = store
        self.status: dict[str, Any] = {}
        self.lock = asyncio.Lock()  # every change of `status` that spans an await holds it
        self.live: dict[str, float] = {}  # test key -> its current Gbit/s, for the progress line
        self._save_every = save_every
        self._last_save = 0.0
        self._on_progress = on_progress
        self._on_event = on_event
        self._stopping = asyncio.Event()
        self.stop_reason = ("", "")

    # -- stopping

    def request_stop(self, reason: str, message: str) -> None:
        if not self._stopping.is_set():
            self.stop_reason = (reason, message)
            self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def stopped(self) -> None:
        await self._stopping.wait()

    async def pause(self, seconds: float) -> None:
        """Sleep, but wake up at once when the run is stopped."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            pass

    # -- the status

    def recount(self) -> None:
        st = self.status
        st["undelivered"] = len(st.get("outbox") or [])
        metrics.set_undelivered(self.run.run_uid, st["undelivered"])

    async def save(self, force: bool = False) -> None:
        """Store the status; without `force` at most every `save_every` seconds (a busy round writes often)."""
        now = time.monotonic()
        if not force and self._save_every and now - self._last_save < self._save_every:
            return
        self._last_save = now
        st = self.status
        st["undelivered"] = len(st.get("outbox") or [])
        st["progress"] = f"{st.get('done', 0)}/{st.get('planned', 0)}"
        st["round"] = f"{st.get('currentRound', 0)}/{st.get('totalRounds', 0)}"
        await self.store.save(st)

    # -- reporting

    def event(self, type_: str, reason: str, message: str) -> None:
        (log.info if type_ == "Normal" else log.warning)("%s", message)
        if self._on_event:
            try:
                self._on_event(type_, reason, message)
            except Exception:  # reporting must never break a run
                log.exception("Event callback failed")

    def progress(self) -> None:
        if not self._on_progress:
            return
        st = self.status
        try:
            self._on_progress(Progress(
                done=st.get("done", 0), failed=st.get("failed", 0), total=st.get("planned", 0),
                round=st.get("currentRound", 0), rounds=st.get("totalRounds", 0), gbps=sum(self.live.values()),
                running=sorted(self.live), undelivered=len(st.get("outbox") or []),
            ))
        except Exception:
            log.exception("Progress callback failed")

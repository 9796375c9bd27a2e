"""spec.optimize: each link's streams x files for a run, from the dashboard's advice (GET /api/v1/advice/).

The rule itself lives in the dashboard (results/stats/advice.py `next_settings`, a hill climb replayed from the
link's history, FTS3-style); the operator asks it once per link (source -> destination, protocol) and run, when the
link's first test of the run starts, and every repeat and address family of the link in that run uses the answer.

Fallbacks, each counted in the run's status (`optimizer`) and said once per run in an Event:
- the dashboard knows neither the link's nodes nor the benchmark (404): the link's first run, so it starts where
  the climb starts, 1 stream x 1 file (`start`);
- no dashboard (spec without results, local mode without one), or it cannot answer (down, 5xx, a bad answer):
  the spec's own setting, its most streams x spec.concurrency, clamped to the bounds (`fallback`). A run never
  waits for the advice.
External endpoints are not tuned: their tests run the fallback setting (another site's storage is not ours to
explore against).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .spec import BenchmarkSpec, Optimize

log = logging.getLogger(__name__)

ADVICE_TIMEOUT = 30.0  # seconds: a slow dashboard must not hold a round


@dataclass(frozen=True)
class Tuning:
    """One link's setting for a run, and where it came from."""

    streams: int
    concurrency: int
    action: str  # the advice's (explore, confirm, decide, exploit, revisit), or start / fallback
    reason: str = ""


class AdviceUnavailable(Exception):
    """The dashboard did not answer with advice (the message says why)."""


class AdviceNotFound(AdviceUnavailable):
    """The dashboard has no history of the link (404: a node or the benchmark is new to it)."""


AdviceSource = Callable[..., Awaitable[Mapping[str, Any]]]


def fallback(spec: BenchmarkSpec, bounds: Optimize) -> Tuning:
    """The spec's own setting within the bounds: its most streams, spec.concurrency files."""
    streams = min(max(spec.streams), bounds.streams_max)
    concurrency = min(spec.concurrency, bounds.concurrency_max)
    while streams * concurrency > bounds.connections_max and streams > 1:
        streams //= 2
    concurrency = max(1, min(concurrency, bounds.connections_max // streams))
    return Tuning(streams, concurrency, "fallback")


def from_answer(answer: Mapping[str, Any], bounds: Optimize) -> Tuning:
    """The advice answer's `next`, checked against the bounds we asked for (a dashboard of another version must
    not send a setting the agents would refuse or the user did not allow)."""
    nxt = answer.get("next")
    if not isinstance(nxt, Mapping):
        raise AdviceUnavailable(f"the advice has no `next` setting: {str(answer)[:200]}")
    streams, concurrency = nxt.get("streams"), nxt.get("concurrency")
    if not (isinstance(streams, int) and isinstance(concurrency, int) and 1 <= streams <= bounds.streams_max
            and 1 <= concurrency <= bounds.concurrency_max and streams * concurrency <= bounds.connections_max):
        raise AdviceUnavailable(f"the advice's next setting {streams!r} streams x {concurrency!r} files is outside "
                                f"spec.optimizeBounds")
    return Tuning(streams, concurrency, str(nxt.get("action") or "advised"), str(nxt.get("reason") or ""))


class LinkTuner:
    """Per run: each link's Tuning, asked once (concurrent first tests of one link share the question)."""

    def __init__(self, spec: BenchmarkSpec, ask: AdviceSource | None, benchmark: str, cluster: str | None,
                 on_unavailable: Callable[[str], None] | None = None) -> None:
        assert spec.optimize is not None
        self.spec = spec
        self.bounds = spec.optimize
        self._ask = ask
        self._benchmark = benchmark
        self._cluster = cluster
        self._on_unavailable = on_unavailable
        self._links: dict[tuple[str, str, str], asyncio.Task[Tuning]] = {}
        self.actions: Counter[str] = Counter()
        self.unavailable = ""  # the first reason the advice could not be had, for the status

    def fallback(self) -> Tuning:
        return fallback(self.spec, self.bounds)

    async def tuning(self, source: str, destination: str, protocol: str) -> Tuning:
        key = (source, destination, protocol)
        if key not in self._links:
            self._links[key] = asyncio.ensure_future(self._advise(source, destination, protocol))
        return await asyncio.shield(self._links[key])

    async def _advise(self, source: str, destination: str, protocol: str) -> Tuning:
        try:
            if self._ask is None:
                raise AdviceUnavailable("no dashboard to ask (spec.results or the operator's results URL)")
            answer = await asyncio.wait_for(self._ask(
                source, destination, protocol, benchmark=self._benchmark, cluster=self._cluster,
                bounds=self.bounds.query()), ADVICE_TIMEOUT)
            found = from_answer(answer, self.bounds)
        except AdviceNotFound:
            found = Tuning(1, 1, "start", "the link's first run: the climb starts at 1 stream x 1 file")
        except (AdviceUnavailable, TimeoutError) as e:
            why = str(e) or f"no answer within {ADVICE_TIMEOUT:g} s"
            found = Tuning(**{**self.fallback().__dict__, "reason": why})
            if not self.unavailable:
                self.unavailable = why
                if self._on_unavailable is not None:
                    self._on_unavailable(why)
        self.actions[found.action] += 1
        log.info("Link %s -> %s (%s): %d streams x %d files (%s)", source, destination, protocol, found.streams,
                 found.concurrency, found.action)
        return found

    def summary(self) -> str:
        """For the run's status: how the links were tuned, e.g. `6 links: exploit 4, explore 2`."""
        n = sum(self.actions.values())
        if not n:
            return ""
        parts = ", ".join(f"{a} {c}" for a, c in sorted(self.actions.items(), key=lambda x: (-x[1], x[0])))
        text = f"{n} link{'s' if n != 1 else ''}: {parts}"
        if self.unavailable:
            text += f"; the spec's setting where the advice was not had: {self.unavailable}"
        return text[:1000]

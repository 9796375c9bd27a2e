"""spec.optimize's operator side (plan/optimizer.py): the advice's answer checked against the bounds, the spec's own
setting as the fallback, one question per link and run. The rule itself is the dashboard's (tests/unit/dashboard/
test_advice.py); the executor asking the real dashboard is tests/integration/operator/test_operator_optimize.py."""

from __future__ import annotations

import asyncio

import pytest
from tpcmesh_operator.plan.optimizer import AdviceNotFound, AdviceUnavailable, LinkTuner, Tuning, fallback, from_answer
from tpcmesh_operator.plan.spec import parse_spec


def spec(**bounds):
    return parse_spec({"protocols": ["builtin"], "streams": [8, 1], "optimize": True,
                       **({"optimizeBounds": bounds} if bounds else {})})


def test_the_fallback_is_the_specs_setting_within_the_bounds() -> None:
    s = spec()
    assert fallback(s, s.optimize) == Tuning(8, 11, "fallback")
    s = spec(streamsMax=4, connectionsMax=16)  # 4 x 11 > 16: fewer streams until it fits
    assert fallback(s, s.optimize) == Tuning(1, 11, "fallback")
    s = spec(connectionsMax=4)  # even 1 stream x 11 files is too many: fewer files
    assert fallback(s, s.optimize) == Tuning(1, 4, "fallback")


@pytest.mark.parametrize("nxt", [
    {"streams": 32, "concurrency": 1},  # above streamsMax
    {"streams": 1, "concurrency": 12},  # above concurrencyMax (the set's 11 files)
    {"streams": 16, "concurrency": 11},  # 176 connections > connectionsMax 64
    {"streams": "4", "concurrency": 2},
    None,
])
def test_an_answer_outside_the_bounds_is_not_run(nxt) -> None:
    with pytest.raises(AdviceUnavailable):
        from_answer({"next": nxt}, spec(connectionsMax=64).optimize)


def test_one_question_per_link_and_run_and_the_fallbacks_are_counted() -> None:
    asked: list[tuple] = []
    said: list[str] = []

    async def ask(source, destination, protocol, *, benchmark, cluster, bounds):
        asked.append((source, destination, protocol, benchmark, cluster, bounds["streams_max"]))
        await asyncio.sleep(0.01)
        if destination == "new":
            raise AdviceNotFound("node 'new' not found")
        if destination == "down":
            raise AdviceUnavailable("GET ... failed: ConnectError")
        return {"next": {"streams": 4, "concurrency": 2, "action": "exploit", "reason": "settled"}}

    async def main() -> list[Tuning]:
        tuner = LinkTuner(spec(), ask, "ns/bench", "east", on_unavailable=said.append)
        got = await asyncio.gather(*(tuner.tuning("a", d, "builtin") for d in ("b", "b", "new", "down", "down")))
        assert tuner.summary() == ("3 links: exploit 1, fallback 1, start 1; the spec's setting where the advice "
                                   "was not had: GET ... failed: ConnectError")
        return got

    got = asyncio.run(main())
    assert [(t.streams, t.concurrency, t.action) for t in got] == [
        (4, 2, "exploit"), (4, 2, "exploit"), (1, 1, "start"), (8, 11, "fallback"), (8, 11, "fallback")]
    assert sorted(asked) == [("a", d, "builtin", "ns/bench", "east", 16) for d in ("b", "down", "new")]
    assert said == ["GET ... failed: ConnectError"]  # an Event once per run, not per link


def test_without_a_dashboard_every_link_runs_the_specs_setting() -> None:
    async def main() -> Tuning:
        return await LinkTuner(spec(), None, "ns/bench", None).tuning("a", "b", "builtin")
    t = asyncio.run(main())
    assert (t.streams, t.concurrency, t.action) == (8, 11, "fallback") and "no dashboard" in t.reason

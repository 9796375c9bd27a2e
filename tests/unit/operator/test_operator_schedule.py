"""Scheduling like CronJob: cron, interval, restarts, one catch-up, idempotent run names."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import yaml
from tpcmesh_operator.plan.schedule import due, next_run, parse_interval, parse_schedule, run_name

from tests.support.paths import REPO

T0 = dt.datetime(2026, 1, 1, 0, 0, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)


def test_intervals() -> None:
    assert parse_interval("12h") == 12 * H
    assert parse_interval("@every 1h30m") == dt.timedelta(minutes=90)
    assert parse_interval("2d") == dt.timedelta(days=2)
    assert parse_interval("*/5 * * * *") is None
    for bad in ("@every", "@every soon", "@every 10s", "30m1h"):
        with pytest.raises(ValueError):
            parse_interval(bad)


def test_bad_schedules_name_the_problem() -> None:
    for bad in ("", "every day", "61 * * * *", "* * *", "*/10 * * * * *"):
        with pytest.raises(ValueError, match="schedule|interval"):
            parse_schedule(bad)


def test_interval_first_run_at_creation_then_every_period() -> None:
    s = parse_schedule("@every 12h")
    assert due(s, T0, T0, None) == T0
    assert due(s, T0 + H, T0, T0) is None
    assert next_run(s, T0 + H, T0, T0) == T0 + 12 * H
    assert due(s, T0 + 12 * H, T0, T0) == T0 + 12 * H


def test_cron() -> None:
    s = parse_schedule("0 */6 * * *")
    created = T0 + dt.timedelta(minutes=10)
    assert due(s, created, created, None) is None
    assert next_run(s, created, created, None) == T0 + 6 * H
    assert due(s, T0 + 6 * H + dt.timedelta(seconds=5), created, None) == T0 + 6 * H
    assert due(s, T0 + 7 * H, created, T0 + 6 * H) is None


def test_restart_does_not_double_start() -> None:
    s = parse_schedule("@every 1h")
    first = due(s, T0 + dt.timedelta(minutes=1), T0, None)
    # operator restarts before recording lastScheduleTime: the same tick is due again, with the same run name
    again = due(s, T0 + dt.timedelta(minutes=2), T0, None)
    assert first == again == T0
    assert run_name("bench", first) == run_name("bench", again)
    # once recorded, nothing until the next tick
    assert due(s, T0 + dt.timedelta(minutes=3), T0, first) is None


def test_at_most_one_catch_up_after_downtime() -> None:
    s = parse_schedule("@every 1h")
    # down from 00:30 to 05:10: ticks at 01..05 were missed; only the latest (05:00) runs
    tick = due(s, T0 + dt.timedelta(hours=5, minutes=10), T0, T0)
    assert tick == T0 + 5 * H
    assert due(s, T0 + dt.timedelta(hours=5, minutes=11), T0, tick) is None
    # a starting deadline skips a catch-up that is too late
    assert due(s, T0 + dt.timedelta(hours=5, minutes=10), T0, T0, starting_deadline=dt.timedelta(minutes=5)) is None


def test_run_names_are_distinct_per_tick_and_valid() -> None:
    names = {run_name("paper-benchmark", T0 + i * H) for i in range(24)}
    assert len(names) == 24
    assert all(len(n) <= 63 and n.replace("-", "").isalnum() for n in names)
    assert len(run_name("x" * 200, T0)) <= 63


SCHEDULES = {  # schedule -> accepted (the parser and the CRD's CEL rules agree)
    "@every 12h": True, "12h": True, "1h30m": True, "90s": True, "@every 1m": True, "2d": True, "1w2d": True,
    "0h90s": True, "1m0s": True, "@every 60s": True, "0 */12 * * *": True, "*/5 * * * *": True, "@daily": True,
    "@hourly": True, "0 0 1 1 *": True,
    "@every 10s": False, "59s": False, "0m": False, "0h30s": False, "30m1h": False, "1h1h": False, "": False,
    "@every": False, "* * * * * *": False, "0 0 * * * *": False, "* * * *": False, "every day": False,
    "@reboot": False,
}


@pytest.mark.parametrize("text,ok", SCHEDULES.items(), ids=lambda x: repr(x))
def test_parser_accepts_minute_resolution_only(text, ok) -> None:
    if ok:
        parse_schedule(text)
    else:
        with pytest.raises(ValueError):
            parse_schedule(text)


def cel_schedule_rules() -> list[tuple[str, str]]:
    crd = yaml.safe_load((REPO / "manifests/crds/transferbenchmarks.yaml").read_text())
    field = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["schedule"]
    return [(r["rule"], r["message"]) for r in field["x-kubernetes-validations"]]


def cel(rule: str, value: str) -> bool:
    """The CRD's schedule rules (self.matches, !, &&, ||, parentheses) evaluated with Python's re (RE2-compatible
    patterns here): the same decisions the API server makes, checked against the parser on every example."""
    patterns: list[str] = []

    def keep(m: re.Match) -> str:
        patterns.append(m.group(1))
        return f" _m({len(patterns) - 1}) "

    expr = re.sub(r"self\.matches\('((?:[^'\\]|\\.)*)'\)", keep, rule)
    expr = expr.replace("||", " or ").replace("&&", " and ").replace("!", " not ")
    return bool(eval(expr, {"_m": lambda i: re.search(patterns[i], value) is not None}))


@pytest.mark.parametrize("text,ok", SCHEDULES.items(), ids=lambda x: repr(x))
def test_the_crd_rules_agree_with_the_parser(text, ok) -> None:
    assert all(cel(rule, text) for rule, _ in cel_schedule_rules()) == ok

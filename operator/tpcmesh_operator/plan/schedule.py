"""When runs are due. Pure code, like the CronJob controller.

A schedule is a 5-field cron expression (via croniter; also `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`)
or an interval of at least a minute (`@every 12h`, `12h`, `1h30m`, `90s`, `2d`: units w d h m s, largest first, each
at most once). Runs are named by the minute, so finer schedules (croniter's 6th field, seconds) are refused; the
CRD's CEL rules check the same. Interval ticks are anchored at the benchmark's creation time (the first run starts
right away); cron ticks are the expression's times at or after the anchor.

`due()` returns the one scheduled time to start now, or None: the LATEST tick at or before `now` that is later than
the last scheduled run. Ticks missed while the operator was down collapse into that one catch-up run (older
ones are skipped, like CronJob). The run's name is derived from its scheduled time (`run_name`), so creating it
is idempotent: an operator restarted between creating the run and recording it finds `AlreadyExists`, never a
second run.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from croniter import croniter

_PART = re.compile(r"(\d+)([smhdw])")
_ANY_PARTS = re.compile(r"(\d+[smhdw])+")
_ORDERED = re.compile(r"(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
CRON_KEYWORDS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def parse_interval(text: str) -> dt.timedelta | None:
    """'12h', '@every 1h30m' -> timedelta; None if it is not an interval."""
    t = text.strip()
    if t.startswith("@every"):
        t = t[len("@every"):].strip()
        if not t:
            raise ValueError("'@every' needs a duration such as '@every 12h'")
    elif not _ANY_PARTS.fullmatch(t):
        return None
    if not _ANY_PARTS.fullmatch(t):
        raise ValueError(f"invalid interval {text!r}: expected a duration such as '12h', '30m' or '1h30m'")
    if not _ORDERED.fullmatch(t):
        raise ValueError(f"invalid interval {text!r}: give the units largest first, each once (w d h m s), "
                         "e.g. '1h30m'")
    seconds = sum(int(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(t))
    if seconds < 60:
        raise ValueError(f"interval {text!r} is shorter than one minute (runs are named by the minute)")
    return dt.timedelta(seconds=seconds)


@dataclass(frozen=True)
class Schedule:
    text: str
    interval: dt.timedelta | None = None  # None: cron

    def latest_tick(self, now: dt.datetime, anchor: dt.datetime) -> dt.datetime | None:
        """The latest tick t with anchor <= t <= now, or None."""
        now, anchor = _utc(now), _utc(anchor)
        if now < anchor:
            return None
        if self.interval is not None:
            k = (now - anchor) // self.interval
            return anchor + k * self.interval
        prev = croniter(self.text, now + dt.timedelta(seconds=1)).get_prev(dt.datetime)
        prev = _utc(prev)
        return prev if prev >= anchor else None

    def next_tick(self, after: dt.datetime, anchor: dt.datetime) -> dt.datetime:
        """The first tick strictly after `after` (and at or after the anchor)."""
        after, anchor = _utc(after), _utc(anchor)
        if self.interval is not None:
            if after < anchor:
                return anchor
            k = (after - anchor) // self.interval + 1
            return anchor + k * self.interval
        start = max(after, anchor - dt.timedelta(seconds=1))
        return _utc(croniter(self.text, start).get_next(dt.datetime))


def parse_schedule(text: str) -> Schedule:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty schedule: give a cron expression ('0 */12 * * *') or an interval ('@every 12h')")
    interval = parse_interval(text)
    if interval is not None:
        return Schedule(text.strip(), interval)
    fields = text.split()
    if text.strip() not in CRON_KEYWORDS and len(fields) != 5:
        raise ValueError(f"invalid schedule {text!r}: a cron expression has 5 fields (minute hour day-of-month month "
                         f"day-of-week), not {len(fields)}; runs are named by the minute, so there is no seconds field")
    if not croniter.is_valid(text.strip()):
        raise ValueError(f"invalid schedule {text!r}: not a cron expression nor an interval like '@every 12h'")
    return Schedule(text.strip(), None)


def due(
    schedule: Schedule,
    now: dt.datetime,
    anchor: dt.datetime,
    last_scheduled: dt.datetime | None,
    starting_deadline: dt.timedelta | None = None,
) -> dt.datetime | None:
    """The scheduled time of the run to start now, or None. At most one (the latest missed tick)."""
    tick = schedule.latest_tick(now, anchor)
    if tick is None:
        return None
    if last_scheduled is not None and tick <= _utc(last_scheduled):
        return None
    if starting_deadline is not None and _utc(now) - tick > starting_deadline:
        return None
    return tick


def next_run(
    schedule: Schedule, now: dt.datetime, anchor: dt.datetime, last_scheduled: dt.datetime | None
) -> dt.datetime:
    """When the next run will start (for status.nextRunTime and the timer's sleep)."""
    d = due(schedule, now, anchor, last_scheduled)
    if d is not None:
        return d
    return schedule.next_tick(now, anchor)


def run_name(benchmark: str, scheduled: dt.datetime) -> str:
    """Deterministic TransferRun name for a scheduled time (minutes since the epoch, like CronJob's Jobs)."""
    minutes = int(_utc(scheduled).timestamp()) // 60
    return f"{benchmark[:52]}-{minutes}"


def _utc(t: dt.datetime) -> dt.datetime:
    if t.tzinfo is None:
        return t.replace(tzinfo=dt.UTC)
    return t.astimezone(dt.UTC)

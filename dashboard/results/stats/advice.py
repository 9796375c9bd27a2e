"""Advice per link (one pair, one direction, one protocol): which streams x concurrency gives the best throughput,
where more stops helping, and which setting to run next when a benchmark asks for `optimize: true`. Pure.

`advise(history)`: per setting, the median of its newest runs with a 95 % bootstrap interval (level.py); the
best setting (highest median among those with MIN_RUNS runs) and the knee: the cheapest setting (fewest
streams x files) within KNEE_MARGIN of the best. Beyond the knee, more streams or files add less than the margin.

`next_settings(history, bounds)`: a hill climb with confirmation, in the spirit of FTS3's optimizer (which moves
a link's number of active transfers up or down by a step as long as throughput improves), on two axes:

1. Climb (replayed from the history, so the rule keeps no state): start at the lowest setting in the bounds; a
   neighbour (streams x2 or /2, files +-step, clamped to the bounds, at most connections_max streams x files)
   replaces the current setting when it is *better*: both have MIN_RUNS runs, its median is more than MIN_GAIN
   higher and a one-sided Mann-Whitney test (scipy) says its runs are higher (p < ALPHA). Each move raises the
   median, so the climb ends.
2. Then, for the setting reached: fewer than MIN_RUNS runs -> run it again (*confirm*); a neighbour never run ->
   run it (*explore*, upward first); a neighbour whose median is higher but not yet better -> run whichever of
   the two has fewer runs (*decide*), until the test says better or both have DECIDE_RUNS runs: then the gain is
   below the noise and climbing stops there. A neighbour whose median gains less than MIN_GAIN is not better.
3. Otherwise *exploit* the setting, except every EXPLORE_EVERY-th run, which *revisits* the neighbour with the
   fewest runs, then the one measured longest ago (one odd run may have hidden a gain; a link may have changed).

It finds the optimum of a link whose throughput rises then falls along each axis (synthetic.py's links: within
80 runs from no history, ~25 typically, `make bench-advice`); on a link with two peaks it may stop on the lower
one, and from a new history it starts low, as FTS3 does. A failed run counts as 0 Gbit/s (Observation.of), so a
setting that fails is left, as FTS3 backs off on failures; old runs are left out: each setting's level is its
newest LEVEL_RUNS runs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .level import LEVEL_RUNS, Level, recent_level

KNEE_MARGIN = 0.05  # the knee: the cheapest setting within 5 % of the best
MIN_RUNS = 3  # runs before a setting's level counts (the bootstrap interval needs 3)
DECIDE_RUNS = 10  # runs of each side after which a gain the test cannot see is below the noise
MIN_GAIN = 0.02  # a neighbour must beat the current median by more than 2 %
ALPHA = 0.05  # one-sided Mann-Whitney: 3 runs all above 3 others give p = 0.05 exactly, not enough; 4 above 3 do
EXPLORE_EVERY = 10  # a settled link still revisits a neighbour on every 10th run


@dataclass(frozen=True, order=True)
class Setting:
    streams: int
    concurrency: int  # files at once

    @property
    def cost(self) -> tuple[int, int, int]:
        """What "smaller" means: fewer connections (streams x files), then fewer files, then fewer streams."""
        return self.streams * self.concurrency, self.concurrency, self.streams

    def __str__(self) -> str:
        return f"{self.streams} stream{'s' if self.streams != 1 else ''} × {self.concurrency} file" + (
            "s" if self.concurrency != 1 else "")


@dataclass(frozen=True)
class Observation:
    """One run of the link (oldest first in a history): what it delivered."""

    setting: Setting
    gbps: float

    @classmethod
    def of(cls, streams: int | None, concurrency: int | None, gbps: float | None,
           status: str = "succeeded") -> Observation | None:
        """From a stored measurement. A failed run counts as 0 Gbit/s: a setting that fails is never the better one
        (and is not explored again and again for want of a success); a cancelled run, or a success without a
        throughput, says nothing (None). No stream or file count (iperf3, older records) counts as 1."""
        setting = Setting(streams or 1, concurrency or 1)
        if status == "failed":
            return cls(setting, 0.0)
        if status != "succeeded" or gbps is None:
            return None
        return cls(setting, gbps)


@dataclass(frozen=True)
class Bounds:
    """Where next_settings may go; every field is checked, errors name the field (as the API's parameters)."""

    streams_min: int = 1
    streams_max: int = 16
    concurrency_min: int = 1
    concurrency_max: int = 16
    concurrency_step: int = 1
    connections_max: int = 1024  # streams x files; the agent's default limit (max_streams_x_concurrency)

    def __post_init__(self) -> None:
        for name, lo, hi in (("streams_min", 1, 100), ("streams_max", 1, 100), ("concurrency_min", 1, 1000),
                             ("concurrency_max", 1, 1000), ("concurrency_step", 1, 1000),
                             ("connections_max", 1, 100_000)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise BoundsError(name, f"must be an integer from {lo} to {hi}, not {value!r}")
        if self.streams_max < self.streams_min:
            raise BoundsError("streams_max", f"{self.streams_max} is below streams_min {self.streams_min}")
        if self.concurrency_max < self.concurrency_min:
            raise BoundsError("concurrency_max",
                              f"{self.concurrency_max} is below concurrency_min {self.concurrency_min}")
        if self.streams_min * self.concurrency_min > self.connections_max:
            raise BoundsError("connections_max", f"{self.connections_max} is below the lowest setting's "
                              f"{self.streams_min * self.concurrency_min} connections")

    @property
    def start(self) -> Setting:
        return Setting(self.streams_min, self.concurrency_min)

    def contains(self, s: Setting) -> bool:
        return (self.streams_min <= s.streams <= self.streams_max
                and self.concurrency_min <= s.concurrency <= self.concurrency_max
                and s.streams * s.concurrency <= self.connections_max)

    def neighbours(self, s: Setting) -> list[Setting]:
        """Streams x2, files +step, streams /2, files -step (upward first), clamped to the bounds; none with more
        than connections_max connections."""
        candidates = [
            Setting(min(s.streams * 2, self.streams_max), s.concurrency),
            Setting(s.streams, min(s.concurrency + self.concurrency_step, self.concurrency_max)),
            Setting(max(s.streams // 2, self.streams_min), s.concurrency),
            Setting(s.streams, max(s.concurrency - self.concurrency_step, self.concurrency_min)),
        ]
        return [c for c in dict.fromkeys(candidates) if c != s and self.contains(c)]

    def grid(self) -> list[Setting]:
        """Every setting the climb can reach from start."""
        seen, todo = {self.start}, [self.start]
        while todo:
            for n in self.neighbours(todo.pop()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return sorted(seen)


class BoundsError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Runs:
    """Each setting's newest LEVEL_RUNS throughputs (oldest first) and their median."""

    values: dict[Setting, tuple[float, ...]]
    medians: dict[Setting, float]

    def count(self, s: Setting) -> int:
        return len(self.values.get(s, ()))


def collect(history: Iterable[Observation]) -> Runs:
    by: dict[Setting, list[float]] = {}
    for o in history:
        if not np.isfinite(o.gbps) or o.gbps < 0:
            raise ValueError(f"throughput must be a finite number >= 0, not {o.gbps!r} ({o.setting})")
        by.setdefault(o.setting, []).append(float(o.gbps))
    values = {s: tuple(v[-LEVEL_RUNS:]) for s, v in by.items()}
    return Runs(values, {s: float(np.median(v)) for s, v in values.items()})


# ---- advice ----


@dataclass(frozen=True)
class SettingLevel:
    setting: Setting
    runs: int
    median: float
    level: Level | None  # with its interval; None below MIN_RUNS runs


@dataclass(frozen=True)
class Advice:
    settings: list[SettingLevel]  # cheapest first
    best: Setting | None
    knee: Setting | None
    reason: str
    margin: float = KNEE_MARGIN


def advise(history: Sequence[Observation], margin: float = KNEE_MARGIN) -> Advice:
    """The levels of every setting in ``history`` (one link's successful runs, oldest first), its best and knee."""
    runs = collect(history)
    levels = [SettingLevel(s, len(x), runs.medians[s], recent_level(x) if len(x) >= MIN_RUNS else None)
              for s, x in sorted(runs.values.items(), key=lambda item: item[0].cost)]
    counted = [lv for lv in levels if lv.level is not None]
    if not counted:
        why = ("no runs yet" if not levels
               else f"no setting has the {MIN_RUNS} runs needed for a level yet ({len(levels)} tried)")
        return Advice(levels, None, None, why, margin)
    best = max(counted, key=lambda lv: lv.median)
    knee = next(lv for lv in counted if lv.median >= (1 - margin) * best.median)
    reason = f"{best.setting} gives the most, {best.median:.3g} Gbit/s (median of its newest {best.runs} runs)"
    if len(counted) == 1:
        reason += "; it is the only setting with enough runs to compare"
    elif knee.setting == best.setting:
        reason += f"; every cheaper setting is more than {margin:.0%} below it, so it is also the knee"
    else:
        reason += (f"; {knee.setting} is within {margin:.0%} of it ({knee.median:.3g} Gbit/s): beyond "
                   f"{knee.setting}, more streams or files add less than {margin:.0%}")
    return Advice(levels, best.setting, knee.setting, reason, margin)


# ---- the next run's setting ----


@dataclass(frozen=True)
class Next:
    setting: Setting
    action: str  # one of ACTIONS
    reason: str
    current: Setting  # where the climb stands (what is exploited once settled)


ACTIONS = ("start", "confirm", "explore", "decide", "exploit", "revisit")


def _better(runs: Runs, candidate: Setting, current: Setting) -> str:
    """'unknown' (never run), 'no' (gain below MIN_GAIN or below the noise), 'yes', or 'undecided'."""
    theirs, ours = runs.count(candidate), runs.count(current)
    if theirs == 0:
        return "unknown"
    if runs.medians[candidate] <= (1 + MIN_GAIN) * runs.medians[current]:
        return "no"
    if theirs >= MIN_RUNS and ours >= MIN_RUNS:
        if _higher(runs.values[candidate], runs.values[current]):
            return "yes"
        if theirs >= DECIDE_RUNS and ours >= DECIDE_RUNS:
            return "no"
    return "undecided"


@functools.lru_cache(maxsize=4096)
def _higher(candidate: tuple[float, ...], current: tuple[float, ...]) -> bool:
    """The one-sided Mann-Whitney test; cached, as the climb is replayed on every call with mostly the same runs."""
    return bool(stats.mannwhitneyu(candidate, current, alternative="greater").pvalue < ALPHA)


def climb(runs: Runs, bounds: Bounds) -> Setting:
    """Step 1 of the rule: from the lowest setting, move to the best clearly better neighbour while there is one."""
    current = bounds.start
    while runs.count(current) >= MIN_RUNS:
        better = [n for n in bounds.neighbours(current) if _better(runs, n, current) == "yes"]
        if not better:
            break
        current = max(better, key=lambda n: runs.medians[n])
    return current


def next_settings(history: Sequence[Observation], bounds: Bounds = Bounds()) -> Next:
    """The setting for the next run of one link (its successful runs, oldest first), by the module's rule."""
    within = [o for o in history if bounds.contains(o.setting)]
    runs = collect(within)
    current = climb(runs, bounds)
    have = runs.count(current)
    if have == 0:
        return Next(current, "start", f"no run of {current} yet: the climb starts at the lowest setting", current)
    if have < MIN_RUNS:
        return Next(current, "confirm", f"{current} has {have} of the {MIN_RUNS} runs its level needs", current)
    for n in bounds.neighbours(current):
        verdict = _better(runs, n, current)
        if verdict == "unknown":
            return Next(n, "explore", f"neighbour {n} of {current} was never run", current)
        if verdict == "undecided":
            theirs = runs.count(n)
            pick = n if theirs <= have or have >= DECIDE_RUNS else current
            gain = runs.medians[n] / runs.medians[current] - 1
            return Next(pick, "decide", f"{n} looks {gain:.0%} better than {current} but {theirs} and {have} runs "
                        "do not show it beyond the noise yet", current)
    if len(within) % EXPLORE_EVERY == EXPLORE_EVERY - 1:
        last_run = {o.setting: i for i, o in enumerate(within)}
        n = min(bounds.neighbours(current), key=lambda s: (runs.count(s), last_run.get(s, -1)), default=current)
        return Next(n, "revisit", f"every {EXPLORE_EVERY}th run looks again at a neighbour of {current}: {n} has "
                    "the fewest runs (one odd run may have hidden a gain), then the oldest", current)
    return Next(current, "exploit", f"no neighbour of {current} gives more than {MIN_GAIN:.0%} beyond the noise",
                current)

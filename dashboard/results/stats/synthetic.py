"""Synthetic histories with known steps, outliers and trends, and the figures of changes.py on them: what the
acceptance test holds and `make bench-changes` writes to BENCHMARKS.md. Seeded: the same figures every run.
And synthetic links (throughput as a function of streams x files, with a known optimum and knee) on which the
advice's rule (advice.py) is run run after run: how many runs until it settles on the optimum.

Noise model: multiplicative log-normal run-to-run noise (CV NOISE_CV), and OUTLIER_RATE of the runs dropped to
20-60 % of their level (a transfer disturbed once)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .advice import Bounds, Next, Observation, Setting, next_settings
from .changes import Tracker

NOISE_CV = 0.05
OUTLIER_RATE = 0.02
DETECT_WITHIN = 3  # runs after the step


def history(rng: np.random.Generator, runs: int, steps: list[tuple[int, float]] = (), trend: float = 0.0,
            level: float = 10.0) -> np.ndarray:
    """``runs`` values around ``level``: each (run, ratio) in ``steps`` multiplies what follows; ``trend`` is a
    relative change per run."""
    x = level * np.exp(trend * np.arange(runs))
    for at, ratio in steps:
        x[at:] *= ratio
    return noisy(rng, x)


def noisy(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """``x`` as measured: run-to-run noise and outliers (the module's noise model)."""
    x = x * np.exp(rng.normal(0.0, NOISE_CV, len(x)))
    hit = rng.random(len(x)) < OUTLIER_RATE
    x[hit] *= rng.uniform(0.2, 0.6, int(hit.sum()))
    return x


@dataclass
class Figures:
    steps: int
    found: int
    delays: list[int]
    noise_runs: int
    false_changes: int
    trend_runs: int
    trend_changes: int

    @property
    def detection_rate(self) -> float:
        return self.found / self.steps

    @property
    def false_per_100_runs(self) -> float:
        return 100 * self.false_changes / self.noise_runs

    @property
    def median_delay(self) -> float:
        return float(np.median(self.delays)) if self.delays else float("nan")


def _first_report(values: np.ndarray, at: int, upto: int) -> int | None:
    """The run at which a tracker fed ``values`` up to ``upto`` first reports a change near ``at``."""
    tracker = Tracker()
    for t, v in enumerate(values[:upto + 1]):
        for c in tracker.add(float(v)):
            if abs(c.index - at) <= 2:
                return t
    return None


def measure(step_trials: int = 200, noise_histories: int = 20, seed: int = 2026) -> Figures:
    """Steps of exactly 20 % (x0.8 and x1.2, alternately) after 25 quiet runs: found within DETECT_WITHIN runs?
    Quiet histories of 110 runs: how many changes are reported at all? And a slow trend (-1 %/run, 60 runs)."""
    rng = np.random.default_rng(seed)
    at, found, delays = 25, 0, []
    for i in range(step_trials):
        x = history(rng, at + DETECT_WITHIN + 1, [(at, 0.8 if i % 2 == 0 else 1.2)])
        t = _first_report(x, at, at + DETECT_WITHIN)
        if t is not None:
            found += 1
            delays.append(t - at)
    false = 0
    for _ in range(noise_histories):
        tracker = Tracker()
        false += sum(len(tracker.add(float(v))) for v in history(rng, 110, []))
    trend_changes = 0
    for _ in range(5):
        tracker = Tracker()
        trend_changes += sum(len(tracker.add(float(v))) for v in history(rng, 60, [], trend=-0.01))
    return Figures(step_trials, found, delays, noise_histories * 110, false, 5 * 60, trend_changes)


# ---- synthetic links for the advice ----


@dataclass(frozen=True)
class Link:
    """A link whose throughput peaks at ``best`` and falls off on both sides of it along each axis, by a factor
    exp(-k u^2) where u counts moves away from the peak (doublings of streams, steps of files in ``bounds``)
    and k is ``rise`` below the peak, ``fall`` above it: too few streams leave the window unfilled, too many
    lose to congestion; too few files leave the link idle between files, too many thrash the disks."""

    name: str
    peak_gbps: float
    best: Setting
    bounds: Bounds
    streams_rise: float
    streams_fall: float
    files_rise: float
    files_fall: float

    def expected(self, s: Setting) -> float:
        u_streams = np.log2(s.streams / self.best.streams)
        u_files = (s.concurrency - self.best.concurrency) / self.bounds.concurrency_step
        k_streams = self.streams_rise if u_streams < 0 else self.streams_fall
        k_files = self.files_rise if u_files < 0 else self.files_fall
        return float(self.peak_gbps * np.exp(-k_streams * u_streams ** 2 - k_files * u_files ** 2))

    def optimum(self) -> Setting:
        """The best setting the rule can reach (within the bounds, on its grid)."""
        return max(self.bounds.grid(), key=self.expected)

    def near_optimal(self, margin: float) -> set[Setting]:
        top = self.expected(self.optimum())
        return {s for s in self.bounds.grid() if self.expected(s) >= (1 - margin) * top}

    def knee(self, margin: float) -> Setting:
        """The cheapest setting within ``margin`` of the optimum."""
        return min(self.near_optimal(margin), key=lambda s: s.cost)

    def measure(self, rng: np.random.Generator, s: Setting) -> float:
        return float(noisy(rng, np.array([self.expected(s)]))[0])


LINKS = (
    # a short link: two streams fill it, four files keep it busy
    Link("lan", 20.0, Setting(2, 4), Bounds(1, 16, 1, 16, 1), 0.5, 0.3, 0.6, 0.2),
    # a long fat link: sixteen streams to fill the window, few files
    Link("wan", 10.0, Setting(16, 2), Bounds(1, 64, 1, 8, 1), 0.3, 0.4, 0.5, 0.3),
    # disk-bound ends: one stream per file, many files at once (steps of 2)
    Link("disks", 8.0, Setting(1, 12), Bounds(1, 8, 2, 32, 2), 0.5, 0.5, 0.15, 0.2),
    # a middle link with its peak inside on both axes, files in steps of 4
    Link("mid", 40.0, Setting(4, 16), Bounds(1, 32, 4, 64, 4), 0.3, 0.2, 0.2, 0.15),
)
# Flat on top: half the streams give 97.5 % of the peak, a quarter 90 %: the knee (5 %) is 4 streams x 3 files,
# one doubling below the optimum, and a climb may stop at either (the gain between them is below the noise).
PLATEAU = Link("plateau", 12.0, Setting(8, 3), Bounds(1, 32, 1, 8, 1), 0.0253, 0.1, 0.4, 0.3)

ADVICE_RUNS = 120  # runs of the rule simulated per link
# Converged: a good setting reached within CONVERGE_WITHIN runs, held in >= HOLD of the runs after, which ran a
# good setting in >= EXPLOIT of them (the rest explore: at least one run in EXPLORE_EVERY).
CONVERGE_WITHIN = 80
HOLD = 0.95
EXPLOIT = 0.8


@dataclass
class Climb:
    """One link optimised run after run by a rule: what it chose, and when it stood on a good setting."""

    link: Link
    runs: list[Next]
    good: set[Setting]

    @property
    def reached_at(self) -> int | None:
        """The first run whose current setting (what the rule exploits) is good; None if none was."""
        return next((i for i, n in enumerate(self.runs) if n.current in self.good), None)

    @property
    def held(self) -> float:
        """From reached_at on, the share of runs whose current setting stayed good (new runs can reopen a step)."""
        at = self.reached_at
        return 0.0 if at is None else sum(n.current in self.good for n in self.runs[at:]) / (len(self.runs) - at)

    @property
    def ran_good(self) -> float:
        """From reached_at on, the share of runs that ran a good setting (the rest explored or decided)."""
        at = self.reached_at
        return 0.0 if at is None else sum(n.setting in self.good for n in self.runs[at:]) / (len(self.runs) - at)


    def shortfall(self) -> str | None:
        """Why this climb does not count as converged (None: it does)."""
        at = self.reached_at
        if at is None:
            return f"{self.link.name}: never reached {sorted(map(str, self.good))} in {len(self.runs)} runs"
        if at > CONVERGE_WITHIN:
            return f"{self.link.name}: reached a good setting only at run {at} (> {CONVERGE_WITHIN})"
        if self.held < HOLD or self.runs[-1].current not in self.good:
            return f"{self.link.name}: left the good settings again ({self.held:.0%} of the runs held them)"
        if self.ran_good < EXPLOIT:
            return f"{self.link.name}: ran a good setting in only {self.ran_good:.0%} of the runs after reaching it"
        return None


def optimise(link: Link, seed: int, runs: int = ADVICE_RUNS, margin: float = 0.0,
             rule: Callable[[list[Observation], Bounds], Next] = next_settings) -> Climb:
    """Run ``rule`` on ``link`` for ``runs`` runs; good settings: within ``margin`` of the optimum (0: only it)."""
    rng = np.random.default_rng(seed)
    history: list[Observation] = []
    decisions: list[Next] = []
    for _ in range(runs):
        step = rule(history, link.bounds)
        if not link.bounds.contains(step.setting):
            raise AssertionError(f"{link.name}: the rule chose {step.setting}, outside its bounds")
        decisions.append(step)
        history.append(Observation(step.setting, link.measure(rng, step.setting)))
    return Climb(link, decisions, link.near_optimal(margin))


FOLLOW_AFTER = 100  # runs on the link before its optimum moves


def follow(link: Link, moved: Link, seed: int, runs: int = ADVICE_RUNS) -> int | None:
    """``link`` for FOLLOW_AFTER runs, then ``moved`` (same bounds, another optimum) for ``runs``: after how many
    runs of the moved link the rule stands on its optimum (None: not within ``runs``)."""
    rng = np.random.default_rng(seed)
    history: list[Observation] = []
    for i in range(FOLLOW_AFTER + runs):
        now = link if i < FOLLOW_AFTER else moved
        step = next_settings(history, now.bounds)
        if i >= FOLLOW_AFTER and step.current == moved.optimum():
            return i - FOLLOW_AFTER
        history.append(Observation(step.setting, now.measure(rng, step.setting)))
    return None

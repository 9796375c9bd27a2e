"""Synthetic histories with known steps, outliers and trends, and the figures of changes.py on them: what the
acceptance test holds and `make bench-changes` writes to BENCHMARKS.md. Seeded: the same figures every run.

Noise model: multiplicative log-normal run-to-run noise (CV NOISE_CV), and OUTLIER_RATE of the runs dropped to
20-60 % of their level (a transfer disturbed once)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    x = x * np.exp(rng.normal(0.0, NOISE_CV, runs))
    hit = rng.random(runs) < OUTLIER_RATE
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

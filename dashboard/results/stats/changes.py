"""Step changes in a pair's history (throughput or RTT), not single outliers and not threshold crossings.

Method: binary segmentation (the `ruptures` package) of the log of the values with the L1 cost (segment medians,
so a lone outlier moves no segment), segments of at least MIN_RUNS runs, and a penalty that scales with the
series' own noise: BETA x sigma x ln(n), sigma = the MAD of successive differences / sqrt 2 (robust to the steps
themselves). A found break is a change only if the medians on its two sides differ by at least MIN_RATIO (a
statistically clear 3 % shift is not news) and a straight line does not fit its two segments about as well (a slow
drift is not a step: _drift). On logs, a 20 % drop weighs the same at 1 and at 100 Gbit/s.

Trends: a drift of -1 %/run still gives a few changes per 100 runs (about 3; binary segmentation alone cut it into
10 per 100 runs); a slide is not flagged as a trend of its own (no trend alarm yet).

`detect(values)` looks at one window of a history (oldest first) and returns its changes; `Tracker` runs it on
the newest WINDOW runs each time a run arrives and remembers what it reported, as the dashboard does on ingest.
BETA was chosen on synthetic.py's histories (`make bench-changes` prints the figures).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import ruptures
from scipy import stats

MIN_RUNS = 3  # a change needs this many runs on each side: one or two odd runs are outliers
BETA = 1.5
MIN_RATIO = 1.1  # medians on the two sides differ by >= 10 %
WINDOW = 40  # runs looked at on each arrival
MIN_SIGMA = 0.01  # log units: a perfectly flat history still has a finite penalty
MERGE_RUNS = 2  # a break found again within this many runs of a known one is that one
DRIFT_WEIGHT = 0.5  # a step must beat a straight line by this share of a break's penalty (synthetic.py's trade-off)
MIN_HISTORY = 2 * MIN_RUNS  # fewer runs than this hold no change: detect() returns none


@dataclass(frozen=True)
class Change:
    index: int  # the first run after the step (0 = the window's oldest)
    before: float  # median of the segment before
    after: float  # median of the segment after

    @property
    def ratio(self) -> float:
        return self.after / self.before


def noise(logs: np.ndarray) -> float:
    """Robust scale of the run-to-run noise of a log series."""
    if len(logs) < 3:
        return MIN_SIGMA
    d = np.diff(logs)
    return max(1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2), MIN_SIGMA)


def detect(values: Sequence[float], beta: float = BETA) -> list[Change]:
    """The step changes in ``values`` (positive numbers, oldest first); none for fewer than 2 x MIN_RUNS runs."""
    x = np.asarray(values, dtype=float)
    if len(x) < MIN_HISTORY:
        return []
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("detect() needs positive, finite values (Gbit/s or ms)")
    logs = np.log(x)
    penalty = beta * noise(logs) * math.log(len(logs))
    breaks = ruptures.Binseg(model="l1", min_size=MIN_RUNS, jump=1).fit(logs.reshape(-1, 1)).predict(pen=penalty)
    edges = [0, *breaks]
    for i in range(1, len(edges) - 1):
        edges[i] = _refine(logs, edges[i - 1], edges[i], edges[i + 1])
    breaks = edges[1:]
    out = []
    for i, at in enumerate(breaks[:-1]):
        before = float(np.median(x[edges[i]:at]))
        after = float(np.median(x[at:edges[i + 2]]))
        if max(before, after) / min(before, after) >= MIN_RATIO and not _drift(logs[edges[i]:edges[i + 2]],
                                                                                 at - edges[i], DRIFT_WEIGHT * penalty):
            out.append(Change(at, before, after))
    return out


def _drift(logs: np.ndarray, at: int, penalty: float) -> bool:
    """True when a straight line through the two segments around a break (Theil-Sen, scipy: robust to the
    outliers) fits them about as well as the step does: the step's L1 cost must beat the line's by ``penalty``
    (DRIFT_WEIGHT of what a break pays against no break). A slow drift, which binary segmentation cuts into
    steps, is then no step; a real step leaves a line with large errors on both sides of it. The whole penalty
    would drop more of the drift's pieces but miss 20 % steps seen 3 runs after them (93.5 % found, below 95 %)."""
    line = stats.theilslopes(logs)
    fitted = line.intercept + line.slope * np.arange(len(logs))
    return _l1(logs[:at]) + _l1(logs[at:]) + penalty > float(np.abs(logs - fitted).sum())


def _l1(x: np.ndarray) -> float:
    return float(np.abs(x - np.median(x)).sum()) if len(x) else 0.0


def _refine(logs: np.ndarray, lo: int, at: int, hi: int) -> int:
    """The best place for a break found at ``at`` between ``lo`` and ``hi``, within MERGE_RUNS of it. Binseg's
    segments have MIN_RUNS runs, so a step seen only two runs after it is placed a run early (its newest segment
    borrows an old run); here each side needs only 2."""
    candidates = range(max(lo + 2, at - MERGE_RUNS), min(hi - 2, at + MERGE_RUNS) + 1)
    return min(candidates, key=lambda k: (_l1(logs[lo:k]) + _l1(logs[k:hi]), abs(k - at)), default=at)


def levels(values: Sequence[float], changes: Sequence[Change]) -> list[tuple[int, int, float]]:
    """(first, last, median) of each stretch between ``changes`` (found in ``values``): what a plot draws."""
    x = np.asarray(values, dtype=float)
    edges = [0, *(c.index for c in changes), len(x)]
    return [(a, b - 1, float(np.median(x[a:b]))) for a, b in zip(edges, edges[1:], strict=False) if b > a]


@dataclass
class Tracker:
    """Online use: feed runs one by one; each call returns the changes seen for the first time, indexed from the
    history's first run. A break found again near a known one (the window moved, MERGE_RUNS) is not new."""

    window: int = WINDOW
    beta: float = BETA
    values: list[float] = field(default_factory=list)
    known: dict[int, int] = field(default_factory=dict)  # change index -> run at which it was first reported

    def add(self, value: float) -> list[Change]:
        self.values.append(value)
        start = max(0, len(self.values) - self.window)
        new = []
        for c in detect(self.values[start:], self.beta):
            at = start + c.index
            if any(abs(at - k) <= MERGE_RUNS for k in self.known):
                continue
            self.known[at] = len(self.values) - 1
            new.append(Change(at, c.before, c.after))
        return new

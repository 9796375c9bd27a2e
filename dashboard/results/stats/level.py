"""A pair's recent level with a confidence interval, pure: the median of the runs since the last step change
(at most LEVEL_RUNS of them), with a bootstrap interval of the median (scipy.stats.bootstrap, percentile method,
seeded so a page shows the same interval each time)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL_RUNS = 20
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Level:
    median: float
    low: float
    high: float
    runs: int


def recent_level(values: Sequence[float], since: int = 0) -> Level | None:
    """The level of ``values[since:]`` (its newest LEVEL_RUNS); None with fewer than 3 runs to say it from."""
    x = np.asarray(values[since:], dtype=float)[-LEVEL_RUNS:]
    if len(x) < 3:
        return None
    if np.ptp(x) == 0:
        return Level(float(x[0]), float(x[0]), float(x[0]), len(x))
    ci = stats.bootstrap((x,), np.median, confidence_level=CONFIDENCE, n_resamples=2000, method="percentile",
                         random_state=np.random.default_rng(0)).confidence_interval
    # a resampled median lies within the data; scipy's percentile interpolation can overshoot it by an ulp
    return Level(float(np.median(x)), float(max(ci.low, x.min())), float(min(ci.high, x.max())), len(x))

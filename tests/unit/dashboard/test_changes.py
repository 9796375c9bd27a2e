"""Change detection (results/stats): steps found, outliers and threshold crossings not; the acceptance figures."""

from __future__ import annotations

import numpy as np
import pytest
from results.stats import synthetic
from results.stats.changes import Tracker, detect


def test_a_step_is_found_where_it_happened_with_both_levels():
    rng = np.random.default_rng(1)
    x = synthetic.history(rng, 30, [(18, 0.6)])
    (change,) = detect(x)
    assert change.index == 18
    assert change.before == pytest.approx(10, rel=0.05) and change.ratio == pytest.approx(0.6, rel=0.06)


def test_outliers_and_a_threshold_crossing_are_not_changes():
    rng = np.random.default_rng(2)
    x = synthetic.history(rng, 40, [])
    x[[7, 21, 22]] *= 0.2  # one run, then two in a row, collapse: outliers, not a new level
    assert detect(x) == []
    # hovering around a warning threshold of 10 Gbit/s: a 4 % shift crosses it, and is not a change
    assert detect(synthetic.history(rng, 40, [(20, 0.96)], level=10.2)) == []


def test_the_tracker_reports_a_change_once_as_the_window_moves():
    rng = np.random.default_rng(3)
    tracker = Tracker(window=20)
    reported = [(t, c.index) for t, v in enumerate(synthetic.history(rng, 60, [(25, 1.5)]))
                for c in tracker.add(float(v))]
    assert len(reported) == 1, reported  # once, however often the window still holds it
    (t, index), = reported
    # placed at the step's first run (not a run early, as binseg's 3-run segments alone would place it when only
    # two runs of the new level exist), seen on the second run of the new level at the earliest, within 3 runs
    assert index == 25 and index + 1 <= t <= 25 + 3, (t, index)


def test_bad_values_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="positive, finite"):
        detect([1.0, 2.0, 0.0, 1.0, 2.0, 3.0])
    assert detect([5.0, 5.0, 5.0]) == []  # too short to say anything


def test_acceptance_figures_on_synthetic_histories():
    """Steps of 20 % found within 3 runs in >= 95 % of the histories; < 1 false change per 100 runs of noise
    (the figures `make bench-changes` writes to BENCHMARKS.md, same seed)."""
    f = synthetic.measure()
    assert f.detection_rate >= 0.95, f
    assert f.false_per_100_runs < 1, f
    assert max(f.delays) <= synthetic.DETECT_WITHIN
    # a slow drift (-1 %/run) is not a series of steps: binary segmentation alone made 10 per 100 runs of it
    assert 100 * f.trend_changes / f.trend_runs < 5, f


def test_a_step_on_top_of_a_drift_is_still_a_step():
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(20):
        tracker = Tracker()
        x = synthetic.history(rng, 40, [(30, 0.75)], trend=-0.005)
        reports = [(t, c) for t, v in enumerate(x) for c in tracker.add(float(v))]
        found += any(abs(c.index - 30) <= 2 and t <= 30 + synthetic.DETECT_WITHIN for t, c in reports)
    assert found >= 19


def test_the_recent_level_is_the_median_since_the_last_step_with_its_interval():
    from results.stats.level import recent_level

    rng = np.random.default_rng(4)
    x = synthetic.history(rng, 40, [(25, 0.5)])
    (change,) = detect(x)
    level = recent_level(x, since=change.index)
    assert level is not None and level.runs == 15
    assert level.low <= level.median <= level.high and level.median == pytest.approx(5, rel=0.05)
    assert level.high - level.low < 0.1 * level.median  # 5 % noise, 15 runs: a narrow interval
    wide = recent_level(synthetic.history(np.random.default_rng(4), 6, []) * rng.uniform(0.5, 1.5, 6))
    assert wide is not None and wide.high - wide.low > level.high - level.low
    assert recent_level([1.0, 2.0]) is None
    assert recent_level([3.0, 3.0, 3.0]) == type(level)(3.0, 3.0, 3.0, 3)


@pytest.mark.parametrize("values", [[1.7123965217126613, 2.613815226489588, 5.839490105947239],
                                    [2.5445725880482493, 6.573648110632584, 8.148020914877591]])
def test_the_interval_of_three_repeats_never_leaves_the_values(values):
    """scipy's percentile interval overshoots the data by an ulp for these (found by search; CI saw one): the
    grid promises low <= median <= high within the repeats, so the interval is clamped to them."""
    from results.stats.level import recent_level
    level = recent_level(values)
    assert level is not None
    assert min(values) <= level.low <= level.median <= level.high <= max(values)

"""stats.daily: a day's figures, and days combined. Count and mean combine exactly; the median of several days is
the weighted median of the days' medians, and both it and the true median of all the values lie between the
smallest and the largest daily median (the bound the module states), checked on many random spans with odd and
even day sizes and ties."""

from __future__ import annotations

import random
import statistics
from datetime import UTC, datetime, timedelta

import pytest
from results.stats import daily

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def day(values: list[float], failures: int = 0) -> dict:
    items = [(T0 + timedelta(minutes=k), v, "succeeded") for k, v in enumerate(values)]
    items += [(T0 + timedelta(minutes=100 + k), None, "failed") for k in range(failures)]
    return daily.summarise(items)


def test_a_days_figures_are_postgresqls_percentile_cont():
    d = day([4.0, 1.0, 3.0, 2.0], failures=1)
    # percentile_cont: position q * (n - 1) in the sorted values, interpolated
    assert (d["count"], d["failures"], d["succeeded"]) == (5, 1, 4)
    assert (d["mean"], d["median"], d["p10"], d["p90"]) == pytest.approx((2.5, 2.5, 1.3, 3.7))
    assert d["last_status"] == "failed"
    assert daily.percentile([7.0], 0.9) == 7.0


def test_combined_days_mean_is_exact_and_median_within_the_daily_medians():
    rng = random.Random(29)
    off = 0
    for _ in range(2000):
        days = [[round(rng.uniform(0, 10), rng.choice((0, 1, 3))) for _ in range(rng.randint(1, 8))]
                for _ in range(rng.randint(1, 6))]
        figures = [day(values, failures=rng.randint(0, 2)) for values in days]
        span = daily.combine(figures)
        everything = [v for values in days for v in values]
        assert span["count"] == sum(f["count"] for f in figures)
        assert span["succeeded"] == len(everything)
        assert span["mean"] == pytest.approx(statistics.fmean(everything))
        lo, hi = min(f["median"] for f in figures), max(f["median"] for f in figures)
        true = statistics.median(everything)
        assert lo - 1e-9 <= true <= hi + 1e-9, (days, true)
        assert lo <= span["median"] <= hi
        assert abs(span["median"] - true) <= hi - lo + 1e-9
        off += span["median"] != pytest.approx(true)
        if len(days) == 1:
            assert span["median"] == pytest.approx(true)  # one day: exact
    assert off > 0  # several days are an approximation indeed (the bound is what is promised)

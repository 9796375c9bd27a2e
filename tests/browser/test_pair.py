"""The pair page in headless Debian chromium (#26): the Why table first with the binding limit and its fix, the
history plot one protocol at a time (the select switches the drawn series; times on the axis under 3 days, dates
beyond), the advice tables folded until opened. A screenshot goes to the artifacts dir."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from results import analysis
from results.models import Benchmark

from tests.browser.test_grid import browser, ingest, page  # noqa: F401 - the fixtures
from tests.integration.dashboard.test_pair_page import NODES, far_pair
from tests.support.dashboard import batch, measurement
from tests.support.paths import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.integration]
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
TIME = re.compile(r"^\d{2}-\d{2} \d{2}:\d{2}$")


@pytest.fixture
def diagnosed(transactional_db):
    """near → far: far_pair twice within an hour, and a built-in mover run 5 days before (its series spans days)."""
    now = datetime.now(UTC)
    nodes = [{"name": n} for n in NODES]
    ingest(batch([measurement("near", "far", protocol="builtin", streams=1, gbps=0.3, finished=now - timedelta(days=5))]
                 + far_pair(now - timedelta(hours=2)), run="p1", nodes=nodes))
    ingest(batch(far_pair(now - timedelta(hours=1)), run="p2", nodes=nodes))
    analysis.evaluate(Benchmark.objects.get(namespace="mesh", name="nightly"))


def drawn(pg) -> tuple[list[str], list[str]]:
    """The history plot's dataset labels and its time axis' tick labels."""
    return tuple(pg.evaluate("() => { const c = Chart.getChart('history'); "
                             "return [c.data.datasets.map(d => d.label), c.scales.x.ticks.map(t => t.label)]; }"))


def test_pair_page_why_protocol_select_and_folded_advice(page, live_server, diagnosed):  # noqa: F811
    page.goto(f"{live_server.url}/pair/near/far/")
    page.wait_for_function("() => window.Chart && Chart.getChart('history')")

    # the answer first: the built-in mover's newest transfer waits on far's receive window, and the fix says what
    why = page.locator("#why tr", has_text="builtin ×1 near → far")
    assert why.locator("td.limit").inner_text() == "receive-window"
    assert why.locator("td.efficiency").inner_text() == "13 %"
    fix = why.locator("td.fix").inner_text()
    assert "tcp_rmem" in fix and "far" in fix
    assert "missing:" in page.locator("#why tr", has_text="xrootd-https ×1 near → far").locator("td.fix").inner_text()
    assert page.locator("h2").first.inner_text() == "Why"

    # one protocol at a time: the built-in mover first (5 days of it: dates on the axis), then iperf3 (an hour: times)
    assert page.locator("#protocol").input_value() == "builtin"
    labels, ticks = drawn(page)
    assert labels == ["builtin ×1 near → far", "RTT near → far"], labels
    assert ticks and all(DATE.match(t) for t in ticks), ticks
    page.select_option("#protocol", "iperf3")
    labels, ticks = drawn(page)
    assert labels == ["iperf3 ×8 near → far", "RTT near → far"], labels
    assert ticks and all(TIME.match(t) for t in ticks), ticks
    painted = page.evaluate(
        """() => { const c = document.getElementById('history');
                   const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                   let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""")
    assert painted > 2000, f"history canvas looks empty ({painted} painted pixels)"

    # the advice tables: folded until asked for
    folds = page.locator("details.advice")
    assert folds.count() >= 1
    assert page.evaluate("() => [...document.querySelectorAll('details.advice')].map(d => d.open)") == \
        [False] * folds.count()
    table = folds.first.locator("table.advice")
    assert not table.is_visible()
    folds.first.locator("summary").click()
    assert table.is_visible()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "pair.png"), full_page=True)

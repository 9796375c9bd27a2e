"""The loss mesh's pages in headless Debian chromium (#27): the grid's loss view (colours of known pairs, the
hover), the one-way view's grey untrusted cell with its reason, and the pair page's loss plot drawn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from results.loss import ingest as loss_ingest

from tests.browser.test_grid import CRITICAL, NONE, OK, browser, cell, cell_colours, ingest, page  # noqa: F401
from tests.support.dashboard import batch, loss_summary, measurement
from tests.support.paths import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.fixture
def probed(transactional_db):
    """n1, n2, n3 in a benchmark; n1 → n2 loses 2 % for ten minutes, n2 → n3's reflector clock is not synced."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    ingest(batch([measurement("n1", "n2"), measurement("n2", "n3"), measurement("n3", "n1")]))
    summaries = []
    for m in range(1, 11):
        start = now - timedelta(minutes=m)
        summaries += [loss_summary("n1", "n2", start, lost=12), loss_summary("n2", "n1", start),
                      loss_summary("n2", "n3", start, trusted=False), loss_summary("n3", "n2", start)]
    body = {"summaries": summaries}
    loss_ingest.ingest(body, loss_ingest.check(body))


def test_loss_view_one_way_view_and_pair_plot(page, live_server, probed):  # noqa: F811
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.goto(f"{live_server.url}/grid/mesh/nightly/")
    page.locator("a.loss-view", has_text="loss (%)").click()
    page.wait_for_url("**view=loss**")
    assert cell_colours(page, "n1", "n2") == (CRITICAL, OK)  # 2 % out, 0 back
    assert cell_colours(page, "n1", "n3") == (NONE, NONE)  # never probed
    cell(page, "n1", "n2").hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    assert "n1 → n2: 2.00 %" in tip.inner_text() and "n2 → n1: 0.00 %" in tip.inner_text()
    page.screenshot(path=str(ARTIFACTS / "loss-grid.png"), full_page=True)

    page.locator("a.loss-view", has_text="one-way delay").click()
    page.wait_for_url("**view=one-way**")
    assert cell_colours(page, "n2", "n3") == (NONE, OK)  # untrusted n2 → n3: no number; n3 → n2 5 ms
    cell(page, "n2", "n3").hover()
    text = tip.inner_text()
    assert "n2 → n3: –" in text and "untrusted: the reflector's clock is not synchronised" in text

    cell(page, "n1", "n2").click()
    page.wait_for_url("**/pair/n1/n2/**")
    page.wait_for_function("() => window.Chart && Chart.getChart('loss')")
    datasets = page.evaluate("() => Chart.getChart('loss').data.datasets.map(d => [d.label, d.data.length])")
    assert ["n1 → n2", 10] in datasets and ["n2 → n1", 10] in datasets and ["RTT n1 → n2", 10] in datasets
    painted = page.evaluate(
        """() => { const c = document.getElementById('loss');
                   const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                   let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""")
    assert painted > 1000, f"loss canvas looks empty ({painted} painted pixels)"
    page.locator("#loss").screenshot(path=str(ARTIFACTS / "pair-loss.png"))

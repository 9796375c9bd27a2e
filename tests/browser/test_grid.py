"""The grid in headless Debian chromium (Playwright): colours of known cells, hover, click through to the pair
page and its drawn plot, the comparison page, and a 100×100 mesh. Screenshots go to the artifacts dir."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.dashboard import batch, host_end, ingest, measurement
from tests.support.paths import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.integration]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
OK, WARNING, CRITICAL, FAILED, NONE = "#2e9e44", "#f2b33d", "#d83a34", "#7b1fa2", "#c9c9c9"
WARNING_STALE, OK_STALE = "#f8dca6", "#a8d8b2"
MAINTENANCE = "#4a7fc1"


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} missing: apt-get install chromium (hack/debian-packages.txt)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own database calls (seeding, flushing)
    # are synchronous and safe here, so lift Django's async-context guard for these tests only.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            yield b
            b.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture
def seeded(transactional_db):
    now = datetime.now(UTC)
    h = timedelta(hours=1)
    ms = []
    for i in range(6):  # a history for the pair plot
        ms.append(measurement("n1", "n2", streams=8, gbps=40 + i, finished=now - (6 - i) * 12 * h, files=4))
        ms.append(measurement("n2", "n1", streams=8, gbps=5 + i * 0.1, finished=now - (6 - i) * 12 * h))
        probe = measurement("n1", "n2", protocol="rtt", rtt_ms=30 + i, finished=now - (6 - i) * 12 * h)
        # the route gains a hop (and a 1400-byte link) from the fourth run on
        probe["path"] = ({"hops": ["198.18.0.2"], "pmtu": 1500, "interface_mtu": 1500, "reached": True} if i < 3 else
                         {"hops": ["198.18.0.9", "198.18.0.2"], "pmtu": 1400, "interface_mtu": 1500, "reached": True})
        ms.append(probe)
    ms += [
        measurement("n1", "n3", streams=8, gbps=15, finished=now - 5 * 24 * h),  # stale warning
        measurement("n3", "n1", streams=8, gbps=None, status="failed", error="TLS handshake failed", finished=now),
        measurement("n2", "n3", streams=8, gbps=25, finished=now - h),
        measurement("n1", "n2", streams=1, gbps=20, finished=now - h, files=2),  # a second setting
    ]
    nodes = [{"name": "n1", "site": "s1", "loopback_gbps": 50}, {"name": "n2", "site": "s2"},
             {"name": "n3", "site": "s3"}, {"name": "n4", "site": "s4"}]
    ingest(batch(ms, nodes=nodes))
    # n4 only measured with another protocol: a row and column without data in this grid
    ingest(batch([measurement("n4", "n1", protocol="gridftp", streams=8, finished=now)]))
    return now


def cell_colours(page, src: str, dst: str) -> tuple[str, str]:
    return tuple(page.evaluate(
        """([src, dst]) => {
          const names = Array.from(document.querySelectorAll('#grid thead th.ch')).map(th => th.dataset.n);
          const row = document.querySelector(`#grid tbody th.rh[data-n="${src}"]`).parentElement;
          const td = row.cells[names.indexOf(dst) + 1];
          const cs = getComputedStyle(td);
          return [cs.getPropertyValue('--a').trim(), cs.getPropertyValue('--b').trim()];
        }""",
        [src, dst],
    ))


def cell(page, src: str, dst: str):
    names = page.eval_on_selector_all("#grid thead th.ch", "ths => ths.map(th => th.dataset.n)")
    return page.locator(f'#grid tbody th.rh[data-n="{src}"]').locator("xpath=..").locator("td").nth(names.index(dst))


def test_grid_colours_hover_and_pair_page(page, live_server, seeded):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.goto(f"{live_server.url}/grid/mesh/nightly/?protocol=xrootd-https")
    assert cell_colours(page, "n1", "n2") == (OK, CRITICAL)  # 45 out, 5.5 back
    assert cell_colours(page, "n1", "n3") == (WARNING_STALE, FAILED)
    assert cell_colours(page, "n2", "n3") == (WARNING, NONE)
    assert cell_colours(page, "n1", "n4") == (NONE, NONE)
    assert cell_colours(page, "n1", "n1") == (OK, OK)  # loopback ceiling 50
    # The drawn background really uses those colours (upper-left / lower-right halves).
    bg = cell(page, "n1", "n2").evaluate("td => getComputedStyle(td).backgroundImage")
    assert "rgb(46, 158, 68)" in bg and "rgb(216, 58, 52)" in bg

    cell(page, "n1", "n2").hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert "n1 → n2 ×8: 45.00 Gbit/s" in text and "n2 → n1 ×8: 5.50 Gbit/s" in text
    assert seeded.strftime("%Y-%m-%d") in text or "UTC" in text
    assert "UTC" in text and "h ago" in text
    cell(page, "n3", "n1").hover()
    assert "TLS handshake failed" in tip.inner_text()
    page.screenshot(path=str(ARTIFACTS / "grid.png"), full_page=True)

    cell(page, "n1", "n2").click()
    page.wait_for_url("**/pair/n1/n2/**")
    page.wait_for_function("() => window.Chart && Chart.getChart('history') && Chart.getChart('files')")
    datasets = page.evaluate("() => Chart.getChart('history').data.datasets.map(d => [d.label, d.data.length])")
    assert ["xrootd-https ×8 n1 → n2", 6] in datasets and ["RTT n1 → n2", 6] in datasets
    drawn = page.evaluate(
        """() => { const c = document.getElementById('history');
                   const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                   let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }"""
    )
    assert drawn > 2000, f"history canvas looks empty ({drawn} painted pixels)"
    # the path change: a mark on the history's time axis, and the Paths table with the reduced PMTU flagged
    marks = page.evaluate("() => [Chart.getChart('history').config.plugins.map(p => p.id), "
                          "JSON.parse(document.getElementById('pair-data').textContent).paths.length]")
    assert marks == [["pathMarks"], 1]
    assert page.locator("#paths tr").count() == 7 and page.locator("#paths tr.changed").count() == 1
    assert "PMTU 1400 < interface MTU 1500" in page.locator("#paths").inner_text()
    # The latest run's per-file times: a strip per direction and setting, each point named by its own file.
    strips = page.evaluate("""() => Chart.getChart('files').data.datasets.map(
        d => [d.label, d.data.length, d.data.map(p => p.name || null).filter(n => n).sort()[0] || null])""")
    assert ["n1 → n2 xrootd-https ×1", 2, "f000"] in strips
    assert ["n1 → n2 xrootd-https ×8", 24, "f000"] in strips  # 6 measurements × 4 files in the seeded run
    assert ["median", 2, None] in strips
    assert page.locator("#file-summary tr").count() == 3
    page.screenshot(path=str(ARTIFACTS / "pair.png"), full_page=True)

    page.goto(f"{live_server.url}/compare/mesh/nightly/")
    page.wait_for_function("() => window.Chart && Chart.getChart('rtt') && Chart.getChart('streams')")
    sets = page.evaluate("""() => Chart.getChart('rtt').data.datasets.map(
        d => [d.label, d.data.length, d.backgroundColor, d.pointStyle])""")
    # n1->n2 and n2->n1: the only pairs with an RTT measured; the two stream settings told apart.
    assert sorted((label, n) for label, n, _, _ in sets) == [("xrootd-https ×1", 1), ("xrootd-https ×8", 2)]
    assert len({colour for _, _, colour, _ in sets}) == 2 and len({shape for _, _, _, shape in sets}) == 2
    page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)


def test_grid_100_by_100_stays_lean(page, live_server, transactional_db):
    now = datetime.now(UTC)
    names = [f"dtn{i:03d}" for i in range(100)]
    ms = [measurement(s, d, streams=8, gbps=(i * 7 + j * 3) % 50, finished=now - timedelta(hours=(i + j) % 60))
          for i, s in enumerate(names) for j, d in enumerate(names) if s != d]
    for k in range(0, len(ms), 5000):
        ingest(batch(ms[k:k + 5000], run="big"))
    page.goto(f"{live_server.url}/grid/mesh/nightly/?protocol=xrootd-https")
    stats = page.evaluate(
        """() => ({cells: document.querySelectorAll('#grid td').length,
                   elements: document.getElementsByTagName('*').length,
                   loadMs: performance.getEntriesByType('navigation')[0].duration})"""
    )
    assert stats["cells"] == 100 * 100
    assert stats["elements"] < 10_600, stats  # one element per cell, no per-cell children
    (ARTIFACTS / "grid-100x100.txt").write_text(f"{stats}\n")
    cell(page, "dtn042", "dtn017").hover()
    assert "dtn042 → dtn017 ×8" in page.locator("#tip").inner_text()
    page.screenshot(path=str(ARTIFACTS / "grid-100x100.png"))


def legend(page) -> tuple[str, list[tuple[str, str]]]:
    """The legend's text and each swatch's two colours, in order."""
    text = " ".join(page.locator("#legend").inner_text().split())
    swatches = page.eval_on_selector_all(
        "#legend .sw", """sws => sws.map(sw => { const cs = getComputedStyle(sw);
                             return [cs.getPropertyValue('--a').trim(), cs.getPropertyValue('--b').trim()]; })""")
    return text, [tuple(s) for s in swatches]


def test_legend_and_latency_grid_follow_the_thresholds(page, live_server, transactional_db):
    now = datetime.now(UTC)
    ms = [measurement("n1", "n2", protocol="rtt", rtt_ms=5, finished=now),
          measurement("n2", "n1", protocol="rtt", rtt_ms=30, finished=now),
          measurement("n1", "n3", protocol="rtt", rtt_ms=70, finished=now),
          measurement("n3", "n1", protocol="rtt", rtt_ms=None, status="failed", error="no route", finished=now),
          measurement("n1", "n2", streams=8, gbps=45, finished=now),
          measurement("n2", "n1", streams=8, gbps=25, finished=now),
          measurement("n1", "n3", streams=8, gbps=15, finished=now)]
    ms[3]["rtt_ms"] = None  # a failed probe measured nothing
    ingest(batch(ms, thresholds={"goodGbps": 40, "warnGbps": 20, "goodRttMs": 10, "warnRttMs": 50}))

    page.goto(f"{live_server.url}/grid/mesh/nightly/?protocol=rtt")
    assert cell_colours(page, "n1", "n2") == (OK, WARNING)  # 5 ms, 30 ms back
    assert cell_colours(page, "n1", "n3") == (CRITICAL, FAILED)  # 70 ms, failed back
    assert cell_colours(page, "n2", "n3") == (NONE, NONE)
    text, swatches = legend(page)
    assert "ok ≤ 10 ms warning ≤ 50 ms critical > 50 ms failed no data maintenance stale" in text, text
    assert swatches[:5] == [(OK, OK), (WARNING, WARNING), (CRITICAL, CRITICAL), (FAILED, FAILED), (NONE, NONE)]
    assert swatches[5] == (MAINTENANCE, MAINTENANCE) and swatches[6] == (OK_STALE, OK_STALE)
    cell(page, "n1", "n3").hover()
    tip = page.locator("#tip").inner_text()
    assert "n1 → n3: 70.00 ms" in tip and "no route" in tip
    page.screenshot(path=str(ARTIFACTS / "grid-latency.png"), full_page=True)

    page.goto(f"{live_server.url}/grid/mesh/nightly/?protocol=xrootd-https")
    assert cell_colours(page, "n1", "n2") == (OK, WARNING)  # 45, 25 Gbit/s
    assert cell_colours(page, "n1", "n3")[0] == CRITICAL  # 15 Gbit/s
    assert "ok ≥ 40 Gbit/s warning ≥ 20 Gbit/s critical < 20 Gbit/s" in legend(page)[0]


def test_a_tuned_grid_names_each_links_setting(page, live_server, transactional_db):
    """A benchmark with optimize: true opens on "newest (tuned)": links that ran 8, 4 and 16 streams are drawn in
    one grid, and the tooltip names each half's streams × files."""
    now = datetime.now(UTC)
    body = batch([measurement("n1", "n2", streams=8, concurrency=2, gbps=45, finished=now - timedelta(hours=1)),
                  measurement("n2", "n1", streams=4, concurrency=1, gbps=5.5, finished=now - timedelta(hours=1)),
                  measurement("n1", "n3", streams=16, concurrency=4, gbps=25, finished=now - timedelta(hours=2)),
                  measurement("n1", "n3", streams=8, concurrency=4, gbps=1, finished=now - timedelta(hours=3))],
                 name="tuned")
    body["benchmark"]["spec"] = {"optimize": True}
    ingest(body)
    page.goto(f"{live_server.url}/grid/mesh/tuned/?protocol=xrootd-https")
    assert page.locator('select[name="streams"]').evaluate("s => s.options[s.selectedIndex].text") == "newest (tuned)"
    assert cell_colours(page, "n1", "n2") == (OK, CRITICAL)
    assert cell_colours(page, "n1", "n3") == (WARNING, NONE)  # its newest, 16 streams, not the older 8-stream run
    cell(page, "n1", "n2").hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert "n1 → n2 ×8 streams × 2 files: 45.00 Gbit/s" in text, text
    assert "n2 → n1 ×4 streams × 1 file: 5.50 Gbit/s" in text, text
    cell(page, "n1", "n3").hover()
    assert "n1 → n3 ×16 streams × 4 files: 25.00 Gbit/s" in tip.inner_text() and "n3 → n1: no data" in tip.inner_text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "grid-tuned.png"), full_page=True)


def _diagnosable_mesh(now: datetime) -> list[dict]:
    """builtin ×1 and iperf3 ×8 between a1, a2 and far (53 ms away, 3 MB TCP buffers, TCP waiting on its windows):
    the limit model labels a1/a2 → far receive-window (0.336 of 2.8 Gbit/s: efficiency 12 %), far → a1/a2
    send-buffer, a1 → a2 network-capacity (40 of 40: 100 %) and a2 → a1 network-capacity (34 of 40: 85 %)."""
    out = []
    for s, d in [(s, d) for s in ("a1", "a2", "far") for d in ("a1", "a2", "far") if s != d]:
        far = "far" in (s, d)
        lan = {("a1", "a2"): 40.0, ("a2", "a1"): 34.0}
        for protocol, streams, gbps in (("builtin", 1, 0.336 if far else lan[(s, d)]),
                                        ("iperf3", 8, 2.8 if far else 40.0)):
            m = measurement(s, d, protocol=protocol, streams=streams, gbps=gbps, finished=now,
                            rtt_ms=53.0 if far else 0.2)
            m["aggregate_gbps"] = m["throughput_gbps"]
            m["host"] = {"source": host_end(3_000_000 if s == "far" else 64_000_000),
                         "destination": host_end(3_000_000 if d == "far" else 64_000_000)}
            m["tcp"] = {"retransmits": 0, "sender": {
                "retransmits": 0, "data_segs_out": 400_000, "congestion": ["cubic"],
                "rwnd_limited_fraction": 0.87 if d == "far" else 0.01,
                "sndbuf_limited_fraction": 0.87 if s == "far" else 0.0}}
            out.append(m)
    return out


LIMIT = {"network-capacity": "#2e9e44", "receive-window": "#1f77b4", "send-buffer": "#17becf"}


def test_the_why_view_draws_each_cells_limit_and_efficiency(page, live_server, transactional_db):
    """The grid's why view: each half coloured by the binding limit the analysis found (after the ingest), a legend
    of the limits with their cell counts, the efficiency in the cell and the evidence and fix on hover; the
    efficiency view colours by the benchmark's spec.thresholds.efficiency, not the defaults."""
    ingest(batch(_diagnosable_mesh(datetime.now(UTC) - timedelta(hours=1)),
                 thresholds={"efficiency": {"warning": 0.9, "critical": 0.1}}))
    base = f"{live_server.url}/grid/mesh/nightly/?protocol=builtin"
    page.goto(base + "&view=why")
    assert page.locator('select[name="view"]').input_value() == "why"
    text, swatches = legend(page)
    assert text.startswith("network-capacity (2) receive-window (2) send-buffer (2) figure: efficiency"), text
    assert swatches[:3] == [(c, c) for c in LIMIT.values()]
    assert cell_colours(page, "a1", "far") == (LIMIT["receive-window"], LIMIT["send-buffer"])
    assert cell_colours(page, "a1", "a2") == (LIMIT["network-capacity"], LIMIT["network-capacity"])
    assert cell(page, "a1", "far").inner_text() == "12" and cell(page, "a1", "a2").inner_text() == "100"
    assert cell(page, "a2", "a1").inner_text() == "85" and cell(page, "far", "a1").inner_text() == "12"
    cell(page, "a1", "far").hover()
    tip = page.locator("#tip").inner_text()
    assert "a1 → far ×1: 0.34 Gbit/s" in tip, tip
    assert "limit: receive-window, efficiency 12 % of the path" in tip, tip
    assert "why: receive-window: 0.336 Gbit/s sits at" in tip and "fix: raise net.ipv4.tcp_rmem max on far" in tip
    assert "far → a1 ×1" in tip and "limit: send-buffer" in tip and "tcp_wmem" in tip
    page.screenshot(path=str(ARTIFACTS / "grid-why.png"), full_page=True)

    # by efficiency: 0.85 is a warning under the benchmark's warning 0.9 (ok by the default 0.8), 0.12 a warning
    # above its critical 0.1 (critical by the default 0.5)
    page.goto(base + "&view=efficiency")
    assert "ok ≥ 90 % of the path warning ≥ 10 % critical < 10 %" in legend(page)[0]
    assert cell_colours(page, "a1", "a2") == (OK, WARNING)  # 100 %, 85 % back
    assert cell_colours(page, "a1", "far") == (WARNING, WARNING)
    page.goto(base)  # the thresholds in Gbit/s: 0.336 is critical, and no figures
    assert cell_colours(page, "a1", "far") == (CRITICAL, CRITICAL) and cell(page, "a1", "far").inner_text() == ""


def test_the_storage_select_shows_the_disk_grid_and_its_ceilings(page, live_server, transactional_db):
    """Disk mode (#28): the page opens on memory to memory; the storage select shows the disk grid, whose diagonal
    is each node's disk read (upper left) and write (lower right) ceiling instead of its loopback."""
    now = datetime.now(UTC)
    disk = measurement("n1", "n2", streams=8, gbps=5, finished=now)
    disk["storage"] = {"source": "disk", "destination": "disk", "direct_write": True, "fallback": None}
    nodes = [{"name": "n1", "loopback_gbps": 50, "disk_read_gbps": 40, "disk_write_gbps": 2},
             {"name": "n2", "loopback_gbps": 50, "disk_read_gbps": 40, "disk_write_gbps": 40}]
    ingest(batch([measurement("n1", "n2", streams=8, gbps=45, finished=now), disk], nodes=nodes))
    page.goto(f"{live_server.url}/grid/mesh/nightly/?protocol=xrootd-https")
    assert cell_colours(page, "n1", "n2")[0] == OK  # memory: 45
    page.select_option('select[name="storage"]', "disk")
    page.click("form.controls button")
    page.wait_for_url("**storage=disk**")
    assert cell_colours(page, "n1", "n2")[0] == CRITICAL  # disk: 5
    assert cell_colours(page, "n1", "n1") == (OK, CRITICAL)  # reads 40, writes 2
    cell(page, "n1", "n1").hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    assert tip.inner_text() == "n1 ceilings: disk read 40.00 Gbit/s, disk write 2.00 Gbit/s"

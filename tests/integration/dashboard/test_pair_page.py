"""The pair page leads with the answer (#26): a Why table with each setting's newest binding limit, efficiency and
fix; the history plot's data names each series' protocol (one protocol drawn at a time) and its span (times on the
axis under 3 days); the advice tables folded. Against the real PostgreSQL, diagnosed by the analysis the ingest
runs."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.dashboard import batch, host_end, measurement, post_batch

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
NODES = ["near", "far"]


def far_pair(t: datetime) -> list[dict]:
    """near → far 53 ms away behind a 3 MB receive buffer: the built-in mover ×1 at 0.35 Gbit/s, iperf3 ×8 at 2.8
    (the path); and an xrootd-https ×1 test without telemetry, which the model cannot judge."""
    out = []
    for protocol, streams, gbps in (("builtin", 1, 0.35), ("iperf3", 8, 2.8)):
        m = measurement("near", "far", protocol=protocol, streams=streams, finished=t, gbps=gbps, rtt_ms=53.0)
        m["aggregate_gbps"] = m["throughput_gbps"]
        m["host"] = {"source": host_end(64_000_000), "destination": host_end(3_000_000)}
        m["tcp"] = {"retransmits": 0, "sender": {"retransmits": 0, "data_segs_out": 400_000, "congestion": ["cubic"],
                                                 "rwnd_limited_fraction": 0.87, "sndbuf_limited_fraction": 0.0}}
        out.append(m)
    out.append(measurement("near", "far", protocol="xrootd-https", streams=1, finished=t, gbps=0.3))
    out.append(measurement("near", "far", protocol="rtt", rtt_ms=53.0, finished=t))
    return out


def ingest(client, key, ms, run):
    post_batch(client, key, batch(ms, run=run, nodes=[{"name": n} for n in NODES]))


def why_rows(page: str) -> dict[str, dict[str, str]]:
    """The Why table: series -> {limit, efficiency, fix} as text."""
    table = re.search(r'<table class="list" id="why">(.*?)</table>', page, re.S)
    assert table, "no Why table"
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)[1:]:
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                 for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        rows[cells[0]] = {"limit": cells[3], "efficiency": cells[4], "fix": cells[5]}
    return rows


def plot_data(page: str) -> dict:
    return json.loads(re.search(r'<script id="pair-data" type="application/json">(.*?)</script>', page, re.S).group(1))


def test_the_pair_page_opens_with_each_settings_limit_efficiency_and_fix(client, write_key):
    ingest(client, write_key, far_pair(datetime.now(UTC) - timedelta(hours=1)), "w1")
    page = client.get("/pair/near/far/").content.decode()

    # the Why section comes first, before the history
    assert page.index('<h2>Why</h2>') < page.index('<h2>History</h2>')
    rows = why_rows(page)
    window = rows["builtin ×1 near → far"]
    assert window["limit"] == "receive-window"
    assert window["efficiency"] == "13 %"  # 0.35 ÷ 2.8: measured ÷ the pair's iperf3 ×8
    assert "tcp_rmem" in window["fix"] and "far" in window["fix"]
    # no telemetry: a dash and the figures that were missing, never a guess
    unknown = rows["xrootd-https ×1 near → far"]
    assert unknown["limit"].startswith("–") and "unknown" in unknown["limit"]
    assert unknown["fix"].startswith("– missing: ")
    assert "iperf3 ×8 near → far" in rows and not any(s.startswith("RTT") for s in rows)


def test_a_setting_not_diagnosed_shows_a_dash(client, write_key):
    """A failed newest run has no diagnosis: its row says so rather than show an older run's answer."""
    t = datetime.now(UTC) - timedelta(hours=2)
    ingest(client, write_key, far_pair(t), "w2")
    failed = measurement("near", "far", protocol="builtin", streams=1, gbps=None, status="failed",
                         error="connection reset", finished=t + timedelta(minutes=30))
    ingest(client, write_key, [failed], "w3")
    row = why_rows(client.get("/pair/near/far/").content.decode())["builtin ×1 near → far"]
    assert row["limit"] == "– not diagnosed (failed)" and row["fix"] == "–" and row["efficiency"] == "–"


def test_the_history_plot_draws_one_protocol_at_a_time(client, write_key):
    ingest(client, write_key, far_pair(datetime.now(UTC) - timedelta(hours=1)), "w4")
    page = client.get("/pair/near/far/").content.decode()
    plot = plot_data(page)
    # the protocols with a throughput, in the registry's order; the plot opens on the first
    assert plot["protocols"] == ["builtin", "xrootd-https", "iperf3"] and plot["protocol"] == "builtin"
    assert plot["series"]["iperf3 ×8 near → far"] == "iperf3" and set(plot["series"].values()) == set(plot["protocols"])
    select = re.search(r'<select id="protocol">(.*?)</select>', page, re.S).group(1)
    assert re.findall(r"<option[^>]*>([^<]+)</option>", select) == plot["protocols"]
    assert "<option selected>builtin</option>" in select
    # ?protocol= opens another; one the pair has no data for falls back to the first
    chosen = client.get("/pair/near/far/?protocol=iperf3").content.decode()
    assert plot_data(chosen)["protocol"] == "iperf3" and "<option selected>iperf3</option>" in chosen
    assert plot_data(client.get("/pair/near/far/?protocol=gridftp").content.decode())["protocol"] == "builtin"


def test_the_advice_tables_are_folded(client, write_key):
    t = datetime.now(UTC) - timedelta(hours=3)
    ingest(client, write_key, [measurement("near", "far", protocol="builtin", streams=s, concurrency=c, gbps=s * c,
                                           finished=t + timedelta(minutes=i))
                               for i, (s, c) in enumerate([(1, 1), (4, 1), (8, 2)] * 3)], "w5")
    page = client.get("/pair/near/far/").content.decode()
    section = page[page.index("<h2>Advice"):]
    section = section[:section.index("</section>")]
    folds = re.findall(r"<details([^>]*)><summary>([^<]*)</summary>(.*?)</details>", section, re.S)
    assert [summary for _, summary, _ in folds] == ["builtin near → far"]
    attributes, _, body = folds[0]
    assert "open" not in attributes  # closed until asked for
    assert '<table class="list advice">' in body and section.count('<table class="list advice">') == 1


def test_a_grid_cell_opens_the_pair_page_on_the_grids_protocol(client, write_key):
    ingest(client, write_key, far_pair(datetime.now(UTC) - timedelta(hours=1)), "w6")
    grid = client.get("/grid/mesh/nightly/?protocol=iperf3").content.decode()
    url = json.loads(re.search(r'"pair_url": ("[^"]*")', grid).group(1))
    assert url.endswith("&protocol=iperf3"), url
    page = client.get(url.replace("SRC", "near").replace("DST", "far")).content.decode()
    assert plot_data(page)["protocol"] == "iperf3"

"""Advice per link through the API and the pair page, against the real PostgreSQL: levels, best and knee from
stored measurements; bad parameters named; and the optimize loop as the operator will run it (ask for the next
setting, measure it on a synthetic link, ingest it) reaching the link's known optimum."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from results.stats import synthetic

from tests.support.dashboard import batch, measurement, post_batch

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
ADVICE = "/api/v1/advice/"


def ingest(client, key, ms, name="tuning"):
    post_batch(client, key, batch(ms, name=name))


@pytest.fixture
def link(client, write_key):
    """a → b over builtin: 2 streams are twice 1, 4 streams add under 1 %, 4 streams × 2 files ran twice only,
    8 streams failed once (0 Gbit/s)."""
    now = datetime.now(UTC)
    runs = [(1, 1, g) for g in (2.0, 2.1, 1.9)] + [(2, 1, g) for g in (3.9, 4.0, 4.1, 4.0)]
    runs += [(4, 1, g) for g in (4.0, 4.1, 4.05, 3.95)] + [(4, 2, 5.0), (4, 2, 5.2)]
    ms = [measurement("a", "b", protocol="builtin", streams=s, concurrency=c, gbps=g,
                      finished=now - timedelta(hours=len(runs) - i)) for i, (s, c, g) in enumerate(runs)]
    ms.append(measurement("a", "b", protocol="builtin", streams=8, gbps=None, status="failed", error="refused",
                          finished=now))
    # not the link: the other direction, another protocol, a cancelled run, the RTT, a disk-to-disk run (its disks'
    # rate, not the network's)
    disk = measurement("a", "b", protocol="builtin", streams=4, gbps=0.3, finished=now)
    disk["storage"] = {"source": "disk", "destination": "disk", "direct_write": True, "fallback": None}
    ms += [disk, measurement("b", "a", protocol="builtin", streams=1, gbps=50.0, finished=now),
           measurement("a", "b", protocol="gridftp", streams=1, gbps=50.0, finished=now),
           measurement("a", "b", protocol="builtin", streams=16, gbps=None, status="cancelled", finished=now),
           measurement("a", "b", protocol="rtt", rtt_ms=3, finished=now)]
    ingest(client, write_key, ms)


def test_advice_gives_levels_best_knee_and_the_next_setting(client, link):
    r = client.get(f"{ADVICE}?source=a&destination=b&protocol=builtin&streams_max=4&concurrency_max=2")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["runs"] == 14 and body["benchmark"] is None and body["margin"] == 0.05
    table = [(s["streams"], s["concurrency"], s["runs"], s["median_gbps"], s["best"], s["knee"])
             for s in body["settings"]]
    assert table == [(1, 1, 3, 2.0, False, False), (2, 1, 4, 4.0, False, True), (4, 1, 4, 4.025, True, False),
                     (8, 1, 1, 0.0, False, False), (4, 2, 2, 5.1, False, False)]
    # (8, 1): its failure; (4, 2): two runs, no level: neither best nor knee (8 connections both, fewer files first)
    first = body["settings"][0]
    assert first["low_gbps"] <= 2.0 <= first["high_gbps"] and body["settings"][4]["low_gbps"] is None
    assert body["best"] == {"streams": 4, "concurrency": 1} and body["knee"] == {"streams": 2, "concurrency": 1}
    assert "within 5%" in body["reason"]
    # the climb: 1 -> 2 streams is clearly better (4 runs above 3), 4 streams not (< 2 %), 2 × 2 never ran
    assert body["next"] == {"streams": 2, "concurrency": 2, "action": "explore",
                            "reason": "neighbour 2 streams × 2 files of 2 streams × 1 file was never run",
                            "current": {"streams": 2, "concurrency": 1}}
    assert body["bounds"] == {"streams_max": 4, "concurrency_max": 2, "concurrency_step": 1, "connections_max": 1024}
    # bounds that leave only the lowest setting: exploit it
    tight = client.get(f"{ADVICE}?source=a&destination=b&protocol=builtin&streams_max=1&concurrency_max=1").json()
    assert tight["next"]["action"] == "exploit" and tight["next"]["streams"] == 1
    # one benchmark's runs only; a window with none
    other = client.get(f"{ADVICE}?source=a&destination=b&protocol=builtin&benchmark=mesh/tuning").json()
    assert other["runs"] == 14 and other["benchmark"] == "mesh/tuning"
    empty = client.get(f"{ADVICE}?source=b&destination=a&protocol=gridftp").json()
    assert empty["settings"] == [] and empty["best"] is None and empty["next"]["action"] == "start"


@pytest.mark.parametrize(("query", "field"), [
    ("protocol=rtt", "protocol"), ("", "protocol"), ("protocol=builtin&streams_max=0", "streams_max"),
    ("protocol=builtin&concurrency_max=1001", "concurrency_max"), ("protocol=builtin&concurrency_step=x",
                                                                  "concurrency_step"),
    ("protocol=builtin&connections_max=0", "connections_max"), ("protocol=builtin&since=soon", "since"),
])
def test_bad_parameters_are_named(client, link, query, field):
    r = client.get(f"{ADVICE}?source=a&destination=b&{query}")
    assert r.status_code == 400, r.content
    assert [e["field"] for e in r.json()["errors"]] == [field]


def test_unknown_nodes_or_benchmark_are_404(client, link):
    assert client.get(f"{ADVICE}?source=a&destination=nope&protocol=builtin").status_code == 404
    assert client.get(f"{ADVICE}?source=a&destination=b&protocol=builtin&benchmark=mesh/nope").status_code == 404


def test_optimize_through_the_api_reaches_the_links_optimum(client, write_key):
    """The loop the operator runs for `optimize: true`: ask for the next setting within the bounds, run it (here:
    the synthetic 'lan' link of results.stats.synthetic), ingest the result; the climb stands on the link's known
    optimum within CONVERGE_WITHIN runs."""
    lan = next(link for link in synthetic.LINKS if link.name == "lan")
    b = lan.bounds
    assert (b.streams_min, b.concurrency_min) == (1, 1)  # the API's lower bounds
    query = (f"{ADVICE}?source=x&destination=y&protocol=builtin&streams_max={b.streams_max}"
             f"&concurrency_max={b.concurrency_max}&concurrency_step={b.concurrency_step}")
    rng = np.random.default_rng(3)
    start = datetime.now(UTC) - timedelta(days=1)
    ingest(client, write_key, [measurement("x", "y", protocol="rtt", rtt_ms=1, finished=start)])  # the nodes
    for run in range(synthetic.CONVERGE_WITHIN):
        step = client.get(query).json()["next"]
        if step["current"] == {"streams": 2, "concurrency": 4}:
            break
        gbps = lan.measure(rng, synthetic.Setting(step["streams"], step["concurrency"]))
        ingest(client, write_key, [measurement("x", "y", protocol="builtin", streams=step["streams"],
                                               concurrency=step["concurrency"], gbps=gbps,
                                               finished=start + timedelta(minutes=run + 1))])
    else:
        pytest.fail(f"the climb did not reach {lan.optimum()} in {synthetic.CONVERGE_WITHIN} runs")
    assert lan.optimum() == synthetic.Setting(2, 4) and run >= 10  # a climb of 4 moves, each confirmed
    page = client.get("/pair/x/y/").content.decode()
    assert re.search(r'<tr class="setting best knee"><td>2 × 4</td>', page), "the page marks the optimum"


def test_the_pair_page_shows_the_advice_table(client, link):
    page = client.get("/pair/a/b/").content.decode()
    section = page.split("<h2>Advice: streams × files</h2>")[1].split("</section>")[0]
    # each table folded under its protocol and direction (<details>, closed until asked for)
    tables = re.findall(r"<details class=\"advice\"><summary>([^<]+)</summary>\s*<table class=\"list advice\">"
                        r"(.*?)</table>\s*<p class=\"reason\">([^<]+)</p></details>", section, re.S)
    assert [html.unescape(h) for h, _, _ in tables] == ["builtin a → b", "builtin b → a", "gridftp a → b"]
    rows = re.findall(r'<tr class="setting([^"]*)"><td>([^<]+)</td><td>(\d+)</td><td>([\d.]+)</td><td>([^<]+)</td>'
                      r'<td class="marks">([^<]*)</td></tr>', tables[0][1])
    assert [(cls.split(), s, int(n), float(m), marks) for cls, s, n, m, _, marks in rows] == [
        ([], "1 × 1", 3, 2.0, ""), (["knee"], "2 × 1", 4, 4.0, "knee"), (["best"], "4 × 1", 4, 4.03, "best"),
        ([], "8 × 1", 1, 0.0, ""), ([], "4 × 2", 2, 5.1, "")]
    assert rows[4][4] == "–" and " – " in rows[0][4]  # no interval below 3 runs
    assert "beyond 2 streams × 1 file" in html.unescape(tables[0][2])

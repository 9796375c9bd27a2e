"""spec.repeats on the dashboard (PostgreSQL): a run that measures a setting K times shows, in the latest grid, the
median of the run's succeeded repeats with its bootstrap interval and K as the count; a later run without repeats
puts the plain newest value back. Both grid paths: the database's JSON and the Python cells."""

from __future__ import annotations

import json
import random
import statistics
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.dashboard import batch, measurement, post_batch

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
GRID = "/api/v1/grid/?benchmark=mesh/nightly&protocol=builtin&streams=8"


def ingest(client, key, ms, run):
    post_batch(client, key, batch(ms, run=run))


def repeat_rows(t, values, first=0):
    rows = []
    for k, v in enumerate(values, start=first):
        m = measurement("a", "b", protocol="builtin", streams=8, gbps=v, finished=t + timedelta(minutes=k),
                        status="succeeded" if v else "failed", error=None if v else "reset")
        rows.append({**m, "repeat": k})
    return rows


def cell(client, in_python=False):
    """The a -> b cell from the API (PostgreSQL: the database's JSON) or from selectors.grid's Python cells."""
    if in_python:
        from results import selectors

        cells = selectors.grid(selectors.get_benchmark("mesh/nightly"), "builtin", 8)["cells"]
    else:
        cells = client.get(GRID).json()["cells"]
    (c,) = [c for c in cells if (c["source"], c["destination"]) == ("a", "b")]
    return c


def test_the_latest_cell_is_the_median_of_the_runs_repeats_with_its_interval(client, write_key):
    t = datetime.now(UTC) - timedelta(hours=2)
    values = [9.0, 10.0, 11.0, 30.0, None]  # an outlier and a failed repeat
    ingest(client, write_key, repeat_rows(t, values[:2]), "r1")  # a run's repeats may come in several batches
    c = cell(client)
    assert (c["value"], c["count"], c["low"], c["high"]) == (9.5, 2, None, None)  # no interval from 2
    ingest(client, write_key, repeat_rows(t, values[2:], first=2), "r1")
    for c in (cell(client), cell(client, in_python=True)):
        assert c["count"] == 4 and c["value"] == statistics.median([9, 10, 11, 30]) and c["status"] == "succeeded"
        assert c["low"] <= c["value"] <= c["high"] and c["low"] >= 9 and c["high"] <= 30
    page = client.get("/pair/a/b/?benchmark=mesh/nightly").content.decode()
    table = page.split('id="repeats"', 1)[1].split("</table>", 1)[0]
    assert "<td>10.50</td>" in table and f"{c['low']:.2f} – {c['high']:.2f}" in table and "<td>4</td>" in table
    stored = client.get("/api/v1/measurements/?source=a&protocol=builtin").json()["results"]
    assert sorted(m["repeat"] for m in stored) == [0, 1, 2, 3, 4]

    later = measurement("a", "b", protocol="builtin", streams=8, gbps=5.0, finished=t + timedelta(hours=1))
    ingest(client, write_key, [later], "r2")
    for c in (cell(client), cell(client, in_python=True)):
        assert (c["value"], c["count"], c["low"], c["high"]) == (5.0, 1, None, None)


def test_a_repeat_index_out_of_range_is_refused_naming_the_field(client, write_key):
    row = {**measurement("a", "b", protocol="builtin", streams=8), "repeat": 20}
    r = client.post("/api/v1/ingest/", json.dumps(batch([row])), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 400 and "repeat" in r.content.decode()


def test_change_detection_counts_runs_not_repeats(client, write_key):
    """A run whose three repeats are all low is one odd run (an outlier), not a step of three measurements; a
    level that stays lower for runs is one change, placed at the first low run."""
    rng = random.Random(5)
    # on a whole hour: the repeats finish at t, t+1 and t+2 min, which from hh:58 on would cross into the next hour
    t0 = (datetime.now(UTC) - timedelta(days=5)).replace(minute=0, second=0, microsecond=0)
    for k in range(16):
        level = 8.0 if k == 6 else 10.0 if k >= 12 else 20.0
        t = t0 + timedelta(hours=6 * k)
        ingest(client, write_key, repeat_rows(t, [round(level * rng.uniform(0.97, 1.03), 3) for _ in range(3)]),
               f"run{k}")
        if k == 11:
            assert client.get("/api/v1/changes/?benchmark=mesh/nightly").json()["count"] == 0
    (c,) = client.get("/api/v1/changes/?benchmark=mesh/nightly").json()["results"]
    assert c["worse"] and c["ratio"] == pytest.approx(0.5, abs=0.05) and c["runs_to_detect"] <= 4
    assert c["at"].startswith((t0 + timedelta(hours=6 * 12)).strftime("%Y-%m-%dT%H"))


def test_each_family_and_mode_has_its_own_median(client, write_key):
    """A run measuring a pair's setting with repeats over IPv4 and IPv6 (or in two auth modes): each cell's value is
    the median of its own repeats, not of both (the summary keyed cells by protocol, streams and pair alone)."""
    t = datetime.now(UTC) - timedelta(hours=1)
    rows = []
    for family, auth, values in (("ipv4", "x509", [10.0, 11.0, 12.0]), ("ipv6", "x509", [20.0, 21.0, 22.0]),
                                 ("ipv4", "token", [30.0, 31.0, 32.0])):
        rows += [{**r, "address_family": family, "auth": auth} for r in repeat_rows(t, values)]
    ingest(client, write_key, rows, "r1")
    got = {(c["address_family"], c["auth"]): (c["value"], c["count"])
           for auth in ("x509", "token") for c in client.get(f"{GRID}&auth={auth}").json()["cells"]}
    assert got == {("ipv4", "x509"): (11.0, 3), ("ipv6", "x509"): (21.0, 3), ("ipv4", "token"): (31.0, 3)}
